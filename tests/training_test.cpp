// A training loop of W4's structure (shared/bench-peers/WORKLOADS.md):
// Linear, ReLU, Linear, ReLU, Linear, cross-entropy on integer labels,
// backward, SGD with momentum 0.9. Narrower than W4 (64-32-32-10, batch
// 32) so that the reference backend runs it in CTest; the program, and so
// the graph, has W4's shape. 100 steps must compile once and replay 99
// times, a learning-rate change must not compile, the loss must fall, and
// llvm must end where the reference backend ends.
#include "test_util.h"

namespace {

using loom::Tensor;
namespace nn = loom::nn;
namespace F = loom::nn::functional;

struct Mlp : nn::Module {
  Mlp(int64_t in, int64_t hidden, int64_t classes)
      : fc1(register_module("fc1", nn::Linear(in, hidden))),
        fc2(register_module("fc2", nn::Linear(hidden, hidden))),
        fc3(register_module("fc3", nn::Linear(hidden, classes))) {}
  Tensor forward(const Tensor& x) { return fc3(loom::relu(fc2(loom::relu(fc1(x))))); }
  nn::Linear fc1, fc2, fc3;
};

struct TrainingRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
  loom::Metrics metrics;
};

// `backend` "cuda" runs on the GPU (the model, data and updates there).
// `set_to_none` false: gradients zeroed in place, so the step's graph
// also writes them (as a compiled step needs).
TrainingRun train(const std::string& backend, int steps, bool set_to_none = true) {
  const bool gpu = backend == "cuda";
  const std::string previous = loom::set_backend(gpu ? "llvm" : backend);
  loom::manual_seed(0);
  Tensor x = loom::randn({32, 64});
  Tensor y = loom::randint(0, 10, {32});
  auto model = std::make_shared<Mlp>(64, 32, 10);
  if (gpu) {
    x = x.to(loom::kCUDA), y = y.to(loom::kCUDA);
    model->to(loom::kCUDA);
  }
  loom::optim::SGD opt(model->parameters(), loom::optim::SGDOptions(0.01).momentum(0.9));
  loom::reset_metrics();
  TrainingRun run;
  for (int step = 0; step < steps; ++step) {
    if (step == steps / 2)
      for (auto& group : opt.param_groups()) group.options().set_lr(0.005);
    opt.zero_grad(set_to_none);
    Tensor loss = F::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();  // one sync: forward, backward and update in one graph
    run.losses.push_back(loss.item<float>());
  }
  run.metrics = loom::metrics();
  for (const Tensor& p : model->parameters()) run.params.push_back(p.to(loom::kCPU).to_vector<float>());
  loom::set_backend(previous);
  return run;
}

TEST(Training, W4ShapedLoopCompilesOnceAndMatchesReference) {
  const TrainingRun llvm = train("llvm", 100);
  EXPECT_EQ(llvm.metrics.cache_misses, 1);
  EXPECT_EQ(llvm.metrics.cache_hits, 99);
  EXPECT_EQ(llvm.metrics.graphs_materialized, 100);
  EXPECT_LT(llvm.losses.back(), 0.7 * llvm.losses.front());  // 2.3 (chance, 10 classes) to about 1.3
  // Every update (parameters and momentum) is written in place, fc2's and
  // fc3's weights too, which backward GEMMs read after their gradient's
  // GEMM (into whose epilogue the update fuses) has run: nothing is copied
  // back after a step.
  EXPECT_EQ(llvm.metrics.bytes_copied_back, 0);

  const TrainingRun reference = train("reference", 100);
  EXPECT_EQ(reference.metrics.cache_misses, 1);
  ASSERT_EQ(reference.params.size(), llvm.params.size());
  // float32 over 100 steps: the backends round differently (fused and
  // vectorized sums), so they agree to a tolerance, not bit for bit.
  for (size_t i = 0; i < llvm.losses.size(); ++i) EXPECT_NEAR(llvm.losses[i], reference.losses[i], 2e-4) << "step " << i;
  for (size_t p = 0; p < llvm.params.size(); ++p)
    for (size_t i = 0; i < llvm.params[p].size(); ++i)
      ASSERT_NEAR(llvm.params[p][i], reference.params[p][i], 1e-4) << "parameter " << p << " element " << i;
}

// Gradients zeroed in place: the step's graph also writes the gradients,
// and the loss the step returns is checked (its labels' bounds, a step that
// can fail) before any of them; still nothing is copied back.
TEST(Training, GradientsZeroedInPlaceAreUpdatedInPlaceToo) {
  const TrainingRun llvm = train("llvm", 20, /*set_to_none=*/false);
  EXPECT_EQ(llvm.metrics.bytes_copied_back, 0);
  const TrainingRun none = train("llvm", 20);
  for (size_t i = 0; i < llvm.losses.size(); ++i) EXPECT_EQ(llvm.losses[i], none.losses[i]) << "step " << i;
}

// The same loop on a GPU: one compile, every update written in place (no
// copy back: the GEMM epilogues that hold the weight updates run after
// every step that can fail), and the llvm backend's numbers.
TEST(Training, W4ShapedLoopOnCudaUpdatesInPlace) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU here: " << loom::cuda::unavailable_reason();
  const TrainingRun cuda = train("cuda", 30);
  EXPECT_EQ(cuda.metrics.cache_misses, 1);
  EXPECT_EQ(cuda.metrics.cache_hits, 29);
  EXPECT_EQ(cuda.metrics.bytes_copied_back, 0);
  const TrainingRun llvm = train("llvm", 30);
  for (size_t i = 0; i < llvm.losses.size(); ++i) EXPECT_NEAR(cuda.losses[i], llvm.losses[i], 2e-4) << "step " << i;
  for (size_t p = 0; p < llvm.params.size(); ++p)
    for (size_t i = 0; i < llvm.params[p].size(); ++i)
      ASSERT_NEAR(cuda.params[p][i], llvm.params[p][i], 1e-4) << "parameter " << p << " element " << i;
}

}  // namespace

namespace {

// Gradients accumulated over many backward calls with no sync between
// them: one graph whose lowering gives each partial sum a buffer a few at a
// time, one round each (80 calls: about 80 rounds). A cap of 64 rounds once
// left kernels missing and the run read buffers nothing wrote (a crash).
// `backend` "cuda": the model and data on the GPU.
std::vector<std::vector<float>> accumulated_gradients(const std::string& backend, int calls) {
  const bool gpu = backend == "cuda";
  const std::string previous = loom::set_backend(gpu ? "llvm" : backend);
  loom::manual_seed(0);
  auto model = nn::Sequential(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3));
  Tensor x = loom::randn({5, 4});
  Tensor y = loom::randint(0, 3, {5});
  if (gpu) {
    model->to(loom::kCUDA);
    x = x.to(loom::kCUDA), y = y.to(loom::kCUDA);
  }
  for (int i = 0; i < calls; ++i) F::cross_entropy(model->forward(x), y).backward();
  std::vector<std::vector<float>> grads;
  for (const Tensor& p : model->parameters()) grads.push_back(p.grad().to(loom::kCPU).to_vector<float>());
  loom::set_backend(previous);
  return grads;
}

void expect_same_gradients(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t p = 0; p < got.size(); ++p) {
    ASSERT_EQ(got[p].size(), want[p].size());
    for (size_t i = 0; i < got[p].size(); ++i)
      EXPECT_NEAR(got[p][i], want[p][i], 1e-4 * (1 + std::abs(want[p][i]))) << "parameter " << p << " element " << i;
  }
}

TEST(Training, GradientsAccumulatedOverManyUnsyncedBackwardCallsMatchReference) {
  expect_same_gradients(accumulated_gradients("llvm", 80), accumulated_gradients("reference", 80));
}

// The same on the GPU: hundreds of kernels, most of them sharing a few
// functions (jit/cuda share_kernels), each with its tables.
TEST(Training, GradientsAccumulatedOverManyUnsyncedBackwardCallsOnCuda) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU here: " << loom::cuda::unavailable_reason();
  expect_same_gradients(accumulated_gradients("cuda", 80), accumulated_gradients("llvm", 80));
}

}  // namespace
