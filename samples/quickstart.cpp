// quickstart: loom's lazy model on one page.
//   1. every op only records a node; nothing runs yet,
//   2. reading a value (item, to_vector, printing) runs the pending graph,
//   3. running the same step again replays the cached executable.
#include <loom/loom.h>

#include <iostream>

// Prints a float tensor's shape and values (reading them materializes it).
void show(const char* name, const loom::Tensor& t) {
  std::cout << name << " " << t.sizes() << ":";
  for (float v : t.to_vector<float>()) std::cout << " " << v;
  std::cout << "\n";
}

// One "step": pointwise ops, a reduction and an in-place write through a view.
// lr is a Scalar: a runtime argument, not part of the graph's cache key.
loom::Tensor step(const loom::Tensor& x, const loom::Tensor& w, double lr) {
  auto h = loom::tanh(x * w + 0.5);      // pointwise
  auto out = h.clone();
  out.select(1, 0).mul_(lr);             // in-place write through a view (column 0)
  return out.mean() + h.sum({1}).max();  // reductions -> a scalar
}

int main() {
  loom::manual_seed(0);
  loom::reset_metrics();

  auto x = loom::arange(12, loom::kFloat32).view({3, 4}) / 10;
  auto w = loom::randn({3, 4});
  auto h = loom::relu(x - w);
  h.select(1, 2).add_(100);              // writes column 2 of h through a view
  auto rows = h.sum({1});

  std::cout << "== recorded; rows pending: " << std::boolalpha << rows.is_pending() << "\n"
            << loom::metrics() << "\n";
  std::cout << "== explain(rows), still not run:\n" << loom::explain(rows) << "\n";

  show("h", h);                          // the first read runs the graph
  show("rows", rows);
  std::cout << "rows pending: " << rows.is_pending() << "\n\n"
            << "== after materializing\n" << loom::metrics() << "\n";

  // The same step with new data and a new lr each time: one compile, then hits.
  constexpr int kSteps = 5;
  loom::reset_metrics();
  for (int i = 0; i < kSteps; ++i) {
    auto xi = loom::randn({3, 4});
    std::cout << "step " << i << ": " << step(xi, w, 0.1 * (i + 1)).item<float>() << "\n";
  }
  auto m = loom::metrics();
  std::cout << "\n== " << kSteps << " steps: " << m.cache_misses << " cache miss, " << m.cache_hits
            << " hits\n" << m;
  return m.cache_misses == 1 && m.cache_hits == kSteps - 1 ? 0 : 1;
}
