// Lowering: how many kernels the standard workloads become, and why each
// boundary exists.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include "tests/internal/lower_util.h"
#include "ir/graph.h"
#include "ir/lower.h"

namespace {

using loom::ir::KernelProgram;

using loom_test::lower_outputs;

size_t generated(const KernelProgram& p) { return p.kernels.size(); }

TEST(Lower, PointwiseChainIsOneKernel) {
  auto x = loom::randn({1 << 10});
  loom::sync();
  auto y = loom::sigmoid(loom::tanh(x * 1.5 + 0.5) * x) + x * x;
  KernelProgram p = lower_outputs({y});
  EXPECT_EQ(generated(p), 1u) << loom::ir::to_string(p);
  EXPECT_EQ(p.library_calls.size(), 0u);
  EXPECT_EQ(p.kernels[0].loop.n, 1);
}

TEST(Lower, SoftmaxIsOneRowKernel) {
  auto x = loom::randn({64, 128});
  loom::sync();
  auto y = loom::softmax(x, -1);
  KernelProgram p = lower_outputs({y});
  ASSERT_EQ(generated(p), 1u) << loom::ir::to_string(p);
  EXPECT_EQ(p.kernels[0].outer, 1);
  EXPECT_EQ(p.kernels[0].phases.size(), 3u);  // max, sum of exp, store
}

TEST(Lower, LayerNormIsOneRowKernel) {
  auto x = loom::randn({64, 128});
  auto gw = loom::randn({128});
  auto b = loom::randn({128});
  loom::sync();
  auto mu = x.mean({-1}, true);
  auto var = (x - mu).pow(2).mean({-1}, true);
  auto y = (x - mu) * loom::rsqrt(var + 1e-5) * gw + b;
  KernelProgram p = lower_outputs({y});
  ASSERT_EQ(generated(p), 1u) << loom::ir::to_string(p);
  EXPECT_EQ(p.kernels[0].phases.size(), 3u);  // mean, var, store
}

// The bench's layer norm keeps mu and var alive at the sync: they are
// outputs, and the normalizing kernel stores them per row (no extra pass).
TEST(Lower, LayerNormKeepingMeanAndVarIsOneRowKernel) {
  auto x = loom::randn({64, 128});
  loom::sync();
  auto mu = x.mean({-1}, true);
  auto var = (x - mu).pow(2).mean({-1}, true);
  auto y = (x - mu) * loom::rsqrt(var + 1e-5);
  KernelProgram p = lower_outputs({mu, var, y});
  ASSERT_EQ(generated(p), 1u) << loom::ir::to_string(p);
  const auto& k = p.kernels[0];
  ASSERT_EQ(k.phases.size(), 5u);  // mean, var, store y, store mu per row, store var per row
  EXPECT_TRUE(k.phases[3].per_row && k.phases[4].per_row);
}

// A row statistic that is one value for several of its consumer's rows
// (x[0]'s row sums divide both halves of x) keeps its own kernel: storing it
// from every row would write each element more than once.
TEST(Lower, ARowValueSharedBySeveralRowsIsNotAbsorbed) {
  auto x = loom::randn({2, 3, 4});
  loom::sync();
  auto head = x.select(0, 0).sum({-1}, true);
  auto z = x / head;
  KernelProgram p = lower_outputs({head, z});
  EXPECT_EQ(generated(p), 2u) << loom::ir::to_string(p);
}

TEST(Lower, ReductionOverLeadingDimIsItsOwnKernel) {
  auto x = loom::randn({32, 16});
  loom::sync();
  auto s = x.sum({0}, true);
  KernelProgram p = lower_outputs({s});
  ASSERT_EQ(generated(p), 1u);
  EXPECT_EQ(p.kernels[0].outer, 1);
  EXPECT_EQ(p.kernels[0].loop[0], 16);  // kept dim first, reduced dim inner
}

TEST(Lower, IndependentPointwiseKernelsMergeHorizontally) {
  auto a = loom::randn({256});
  auto b = loom::randn({256});
  loom::sync();
  auto y1 = a * 2 + 1;
  auto y2 = b.exp();
  KernelProgram p = lower_outputs({y1, y2});
  EXPECT_EQ(generated(p), 1u) << loom::ir::to_string(p);
}

TEST(Lower, MatmulIsALibraryCallAndTemporariesShareTheArena) {
  auto a = loom::randn({8, 8});
  auto b = loom::randn({8, 8});
  loom::sync();
  auto h = loom::relu(a.matmul(b));
  auto y = h.matmul(b) + 1;
  KernelProgram p = lower_outputs({y});
  EXPECT_EQ(p.library_calls.size(), 2u);
  EXPECT_FALSE(p.boundaries.empty());
  EXPECT_GT(p.arena_bytes, 0);
}

}  // namespace
