// An outside program: includes only <loom/loom.h>, links only loom::loom,
// and builds as C++17, as a ported libtorch program does (namespace torch =
// loom; and what torch.h brings in: assert, std::sqrt, std::cout, printf).
#include <loom/loom.h>

namespace torch = loom;

// libtorch's custom-dataset pattern, with a data loader (C++17 templates).
class Squares : public torch::data::Dataset<Squares> {
 public:
  torch::data::Example<> get(size_t i) override {
    return {torch::full({2}, static_cast<double>(i)), torch::full({1}, static_cast<double>(i * i))};
  }
  std::optional<size_t> size() const override { return 10; }
};

int main() {
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      Squares().map(torch::data::transforms::Stack<>()), torch::data::DataLoaderOptions().batch_size(4).workers(1));
  double targets = 0;
  for (auto& batch : *loader) targets += batch.target.sum().item<double>();
  assert(targets == 285.0);  // 0 + 1 + 4 + ... + 81

  // libtorch's idioms: options, an rvalue view written into, a module.
  torch::Tensor w = torch::zeros({2, 3}, torch::TensorOptions().dtype(torch::kFloat32));
  w[1] = 4.0;                                     // x[i] = v writes into x
  assert(w.sum().item<float>() == 12.0f);
  torch::nn::Linear fc(3, 1);
  std::cout << "linear weight " << fc->weight.sizes() << ", sqrt(2) = " << std::sqrt(2.0) << "\n";

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
  return pending && v == 36.0f && m.cache_misses >= 1 && caught && w.sum().item<float>() == 12.0f ? 0 : 1;
}
