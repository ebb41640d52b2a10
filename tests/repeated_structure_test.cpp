// Repeated structure compiles once: a loop that never reads is cut at the
// same place of its body each time, so its cut graphs replay; and a
// kernel compiled for one graph is not compiled again for another
// (the llvm backend's function cache).
#include "test_util.h"

#include <cmath>

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

// A recurrence that never reads until the end: 400 steps of three ops
// each, cut every ~150 nodes. The cuts fall at the same line of the loop
// every time: a handful of graphs compile, every later cut replays.
TEST_P(RepeatedStructureTest, ALoopThatNeverReadsReplaysItsCutGraphs) {
  loom::set_max_pending_nodes(150);
  Tensor x = loom::full({16}, 0.1);
  Tensor w = loom::full({16}, 0.5);
  loom::sync();
  loom::reset_metrics();
  double want = 0.1;
  for (int i = 0; i < 400; ++i) {
    Tensor y = x * w;
    x = loom::tanh(y + 0.25);
    want = std::tanh(want * 0.5 + 0.25);
  }
  const std::vector<float> got = x.to_vector<float>();
  EXPECT_NEAR(got[15], want, 1e-5);
  const loom::Metrics m = loom::metrics();
  EXPECT_GE(m.graph_cuts, 5);
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

LOOM_INSTANTIATE_BACKENDS(RepeatedStructureTest);

}  // namespace
