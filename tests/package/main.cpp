// An outside program: includes only <loom/loom.h>, links only loom::loom.
#include <loom/loom.h>

#include <cstdio>

int main() {
  auto x = loom::arange(6, loom::kFloat32).view({2, 3});  // 0..5
  auto y = (x * 2 + 1).sum();                             // 2 * 15 + 6 = 36
  const bool pending = y.is_pending();
  const float v = y.item<float>();
  const auto m = loom::metrics();
  std::printf("sum = %g, pending before item: %d, cache misses: %lld\n", v, pending,
              static_cast<long long>(m.cache_misses));

  // A record-time error crosses the library boundary as loom::Error.
  bool caught = false;
  try {
    (void)(loom::ones({2}) + loom::ones({3}));
  } catch (const loom::Error& e) {
    caught = true;
    std::printf("caught loom::Error: %s\n", e.what());
  }
  return pending && v == 36.0f && m.cache_misses == 1 && caught ? 0 : 1;
}
