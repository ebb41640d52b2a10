// Repeated structure compiles once: a loop that never reads is cut at the
// same place of its body each time, so its cut graphs replay; and a
// kernel compiled for one graph is not compiled again for another
// (the llvm backend's function cache).
#include "test_util.h"

#include <cmath>
#include <random>

#include "../samples/gpt_model.h"

namespace {

using loom::Tensor;
using loom_test::BackendTest;

class RepeatedStructureTest : public BackendTest {
 protected:
  void SetUp() override {
    BackendTest::SetUp();
    bound_ = loom::max_pending_nodes();
  }
  void TearDown() override {
    loom::set_max_pending_nodes(bound_);
    BackendTest::TearDown();
  }
  int64_t bound_ = 0;
};

// A recurrence that never reads until the end: 2,000 steps of three ops
// each, cut every ~150 nodes or more. The cuts fall at the same place of
// the loop every time: a handful of graphs compile, every later cut replays.
TEST_P(RepeatedStructureTest, ALoopThatNeverReadsReplaysItsCutGraphs) {
  loom::set_max_pending_nodes(150);
  Tensor x = loom::full({16}, 0.1);
  Tensor w = loom::full({16}, 0.5);
  loom::sync();
  loom::reset_metrics();
  double want = 0.1;
  for (int i = 0; i < 2000; ++i) {
    Tensor y = x * w;
    x = loom::tanh(y + 0.25);
    want = std::tanh(want * 0.5 + 0.25);
  }
  const std::vector<float> got = x.to_vector<float>();
  EXPECT_NEAR(got[15], want, 1e-5);
  const loom::Metrics m = loom::metrics();
  EXPECT_GE(m.graph_cuts, 6);
  EXPECT_LE(m.cache_misses, 4) << m.graph_cuts << " cuts";
  EXPECT_GE(m.cache_hits, m.graph_cuts - 3);
}

// The graph of a second program that shares a kernel with a first one
// compiles only its own (the first's function is taken as compiled).
TEST_P(RepeatedStructureTest, AKernelCompiledForOneGraphIsNotCompiledForAnother) {
  if (GetParam() != "llvm") GTEST_SKIP() << "the llvm backend's function cache";
  Tensor x = loom::randn({48, 40});
  loom::sync();
  const Tensor a = loom::tanh(x) * 3;
  loom::sync();  // compiles (or loads from disk) one function
  loom::reset_metrics();
  const Tensor b = loom::tanh(x) * 3;
  const Tensor c = x.sum({0}, true);
  loom::sync();  // another graph: its tanh kernel is the first graph's function
  const loom::Metrics m = loom::metrics();
  EXPECT_EQ(m.cache_misses, 1);
  EXPECT_LE(m.kernels_compiled, 1);  // the sum's function at most (none when the disk cache had it)
  EXPECT_TRUE(loom_test::all_close(b, a.to_vector<double>()));
}

// A small GPT's training step (2 layers, 64 wide, batch 16: the shapes a
// GPU port crashed on and read files every step with), batches stacked from
// slices of a stored token array at random places: after the first steps
// every step replays, and a replay reads and writes no file.
TEST_P(RepeatedStructureTest, AGptStepOnSlicedBatchesReplaysWithoutTouchingAFile) {
  gpt::Config cfg;
  loom::manual_seed(1);
  gpt::GPT model(cfg);
  loom::optim::AdamW opt(model->parameters(), loom::optim::AdamWOptions(3e-3));
  const Tensor data = loom::tensor(gpt::markov_corpus(cfg.vocab, 20000, 1));
  std::mt19937_64 rng(5);
  auto step = [&] {
    std::vector<Tensor> xs, ys;
    for (int b = 0; b < 16; ++b) {
      const int64_t i = static_cast<int64_t>(rng() % 19000);
      xs.push_back(data.slice(0, i, i + cfg.block));
      ys.push_back(data.slice(0, i + 1, i + 1 + cfg.block));
    }
    Tensor loss = loom::nn::functional::cross_entropy(model->forward(loom::stack(xs)).view({-1, cfg.vocab}),
                                                      loom::stack(ys).view({-1}));
    opt.zero_grad();
    loss.backward();
    loom::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    return loss.item<float>();
  };
  const float first = step();
  for (int i = 0; i < 3; ++i) step();  // on a GPU, the first odd-aligned offsets compile once more
  loom::reset_metrics();
  float last = 0;
  for (int i = 0; i < 8; ++i) last = step();
  const loom::Metrics m = loom::metrics();
  EXPECT_EQ(m.cache_misses, 0);
  EXPECT_EQ(m.disk_cache_hits + m.disk_cache_misses + m.disk_cache_writes + m.disk_cache_rejected, 0);
  EXPECT_TRUE(std::isfinite(first) && std::isfinite(last));
}

LOOM_INSTANTIATE_BACKENDS(RepeatedStructureTest);

}  // namespace
