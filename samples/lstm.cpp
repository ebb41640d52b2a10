// lstm: a sequence model written against libtorch's C++ frontend and ported
// by changing the include and adding `namespace torch = loom;` (no other
// change, no #define): an LSTM learns to continue sine waves of random
// frequency and phase from a torch::data pipeline (a custom Dataset,
// Stack, a random sampler), with Adam and a StepLR schedule. Each epoch
// prints the training loss, the held-out loss and sequences/s; the run ends
// with what loom compiled and replayed.
//
//   lstm [--epochs N] [--hidden H] [--target MSE]
//
// Exits with status 1 if the held-out mean squared error of the next value
// ends above --target (default 0.005; predicting zero scores ~0.5).
#include <loom/loom.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace torch = loom;

namespace {

constexpr int64_t kSteps = 16;  // values a sequence shows; the model predicts each next one

// Sequences of sin(w t + phase) with w and phase drawn from a seeded engine.
class SineWaves : public torch::data::Dataset<SineWaves> {
 public:
  SineWaves(int64_t count, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> freq(0.15, 0.45), phase(0, 6.283185307179586);
    std::vector<float> values;
    for (int64_t i = 0; i < count; ++i) {
      const double w = freq(rng), p = phase(rng);
      for (int64_t t = 0; t <= kSteps; ++t) values.push_back(static_cast<float>(std::sin(w * t + p)));
    }
    waves_ = torch::tensor(values).reshape({count, kSteps + 1, 1});
  }
  // Input: the first kSteps values; target: the same shifted by one.
  torch::data::Example<> get(size_t index) override {
    torch::Tensor wave = waves_[static_cast<int64_t>(index)];
    return {wave.slice(0, 0, kSteps), wave.slice(0, 1, kSteps + 1)};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(waves_.size(0)); }
  const torch::Tensor& waves() const { return waves_; }

 private:
  torch::Tensor waves_;
};

struct SineNetImpl : torch::nn::Module {
  explicit SineNetImpl(int64_t hidden) {
    lstm = register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(1, hidden).batch_first(true)));
    head = register_module("head", torch::nn::Linear(hidden, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return head->forward(std::get<0>(lstm->forward(x))); }
  torch::nn::LSTM lstm{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(SineNet);

}  // namespace

int main(int argc, char** argv) {
  int epochs = 12;
  int64_t hidden = 24;
  double target = 0.005;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--epochs")) epochs = std::stoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--hidden")) hidden = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--target")) target = std::stod(argv[i + 1]);
  }
  torch::manual_seed(0);
  const int64_t batch = 32;
  auto train = SineWaves(1024, 1);
  SineWaves held_out(256, 2);
  auto loader = torch::data::make_data_loader(train.map(torch::data::transforms::Stack<>()),
                                              torch::data::DataLoaderOptions().batch_size(batch).drop_last(true));
  SineNet model(hidden);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
  torch::optim::StepLR scheduler(optimizer, /*step_size=*/5, /*gamma=*/0.5);
  const torch::Tensor test_x = held_out.waves().slice(1, 0, kSteps), test_y = held_out.waves().slice(1, 1, kSteps + 1);

  double mse = 1e9, compile_seconds = 0, step_seconds = 0;
  int64_t sequences = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    model->train();
    double loss_sum = 0;
    int64_t batches = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t compile_ns0 = torch::metrics().compile_ns;
    for (auto& b : *loader) {
      optimizer.zero_grad();
      torch::Tensor loss = torch::mse_loss(model->forward(b.data), b.target);
      loss.backward();
      optimizer.step();
      loss_sum += loss.item<double>();
      ++batches;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double compiling = static_cast<double>(torch::metrics().compile_ns - compile_ns0) / 1e9;
    compile_seconds += compiling, step_seconds += seconds - compiling, sequences += batches * batch;
    scheduler.step();
    {
      torch::NoGradGuard no_grad;
      model->eval();
      mse = torch::mse_loss(model->forward(test_x), test_y).item<double>();
    }
    std::printf("epoch %2d/%d  train loss %.5f  held-out MSE %.5f  %6.0f sequences/s%s\n", epoch, epochs,
                loss_sum / batches, mse, batches * batch / std::max(seconds - compiling, 1e-9),
                compiling >= 0.005 ? (" (+ " + std::to_string(compiling).substr(0, 4) + " s compiling)").c_str() : "");
  }
  const torch::Metrics m = torch::metrics();
  std::printf("\n%lld sequences of %lld steps: %.2f s compiling, then %.0f sequences/s\n",
              static_cast<long long>(sequences), static_cast<long long>(kSteps), compile_seconds,
              sequences / std::max(step_seconds, 1e-9));
  std::printf("graphs compiled: %lld, replayed: %lld\n", static_cast<long long>(m.cache_misses),
              static_cast<long long>(m.cache_hits));
  std::printf("held-out MSE %.5f (target %.4f; predicting zero: %.3f)\n", mse, target,
              test_y.pow(2).mean().item<double>());
  return mse <= target ? 0 : 1;
}
