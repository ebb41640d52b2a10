// Lowering: how many kernels the standard workloads become, and why each
// boundary exists.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include "tests/internal/lower_util.h"
#include "tests/test_util.h"
#include "ir/graph.h"
#include "ir/lower/lower.h"

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

// A kernel holds at most kMaxKernelExprs expressions: a longer chain is
// cut into kernels under the bound, each cut a buffer whose reason names
// the bound, and kernels are not joined back past it.
TEST(Lower, LongChainsSplitAtTheKernelSizeBound) {
  auto x = loom::randn({64});
  loom::sync();
  const size_t bound = loom::ir::kMaxKernelExprs;
  auto y = x;
  for (size_t i = 0; i < 3 * bound; ++i) y = y + x;
  KernelProgram p = lower_outputs({y});
  EXPECT_GE(generated(p), 3u);
  EXPECT_LE(generated(p), 5u);
  for (const auto& k : p.kernels) EXPECT_LE(k.exprs.size(), bound + 16);  // the root's own exprs come on top
  size_t cuts = 0;
  for (const auto& b : p.boundaries) cuts += b.reason.find("kernel size bound") != std::string::npos;
  EXPECT_EQ(cuts, generated(p) - 1) << loom::ir::to_string(p);
}

// Each reduce phase evaluates its value anew, so phases that each read
// the one before emit a body growing with their square: 100 of them took
// 16 s of LLVM as one kernel. Past the bound the reduced value is stored.
TEST(Lower, ChainedRowReductionsSplitAtTheEmittedSizeBound) {
  std::vector<loom::Tensor> xs;
  for (int i = 0; i < 100; ++i) xs.push_back(loom::randn({64}));
  loom::sync();
  auto y = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) y = y - y.mean() + xs[i];
  KernelProgram p = lower_outputs({y});
  EXPECT_GE(generated(p), 3u) << loom::ir::to_string(p);
  size_t cuts = 0;
  for (const auto& b : p.boundaries) cuts += b.reason.find("kernel size bound") != std::string::npos;
  EXPECT_GE(cuts, 2u) << loom::ir::to_string(p);
  // Within the bound plus the store phase and the phase that crossed it.
  for (const auto& k : p.kernels) EXPECT_LE(loom::ir::emitted_exprs(k), 2 * loom::ir::kMaxKernelExprs);
}

// Softmaxes over alternate dims: each one's reductions can be inlined only
// once the previous one's have buffers, and each kernel reaches the bottom
// of the chain before meeting them. A kernel asking for a buffer gets it
// and is built again in the same round, so the rounds stay few (they were
// one per softmax, each rebuilding every kernel: 200 took 18 s).
TEST(Lower, ChainsOfBufferNeedsResolveInFewRounds) {
  std::vector<loom::Tensor> xs;
  for (int i = 0; i < 150; ++i) xs.push_back(loom::randn({8, 8}));
  loom::sync();
  auto y = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) y = loom::softmax(y + xs[i], static_cast<int64_t>(i % 2));
  std::string passes;
  KernelProgram p = lower_outputs({y}, {}, &passes);
  const size_t at = passes.find("(rounds: ");
  ASSERT_NE(at, std::string::npos) << passes;
  const int rounds = std::atoi(passes.c_str() + at + 9);
  EXPECT_GE(rounds, 1) << passes;
  EXPECT_LE(rounds, 7) << passes;
  EXPECT_GE(generated(p), 150u);
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

// A pointwise op on a reduction's result that is not broadcast back over
// the reduced dims (a mean's division, a loss's sum / count) is the same
// kernel: the reduced dims are its rows and it stores once per row.
TEST(Lower, PointwiseOpsOnAReductionAreItsKernel) {
  auto x = loom::randn({32, 16});
  auto c = loom::randn({32});
  loom::sync();
  for (const loom::Tensor& y : {x.sum({1}) * 2 + c, x.sum() / 7, loom::exp(x.amax({0}))}) {
    KernelProgram p = lower_outputs({y});
    ASSERT_EQ(generated(p), 1u) << loom::ir::to_string(p);
    const auto& k = p.kernels[0];
    ASSERT_EQ(k.phases.size(), 2u);
    EXPECT_TRUE(k.phases[1].per_row);
  }
}

// cross_entropy's forward after its log_softmax: the target's pick is a
// gather read inside the kernel that sums it (ir::ExprKind::Gather), counts
// the targets and divides; no library call, no kernel for the picked
// values, the ignore_index select or the count.
TEST(Lower, CrossEntropyPicksItsTargetsInsideTheSum) {
  auto logits = loom::randn({256, 10});
  auto t = loom::randint(0, 10, {256});
  loom::sync();
  auto loss = loom::nn::functional::cross_entropy(logits, t);
  KernelProgram p = lower_outputs({loss});
  EXPECT_EQ(p.library_calls.size(), 0u) << loom::ir::to_string(p);
  ASSERT_EQ(generated(p), 2u) << loom::ir::to_string(p);  // log_softmax rows; gather, sum, count, divide
  EXPECT_EQ(p.kernels[1].phases.size(), 3u);
  int gathers = 0;
  for (const auto& k : p.kernels)
    for (const auto& e : k.exprs) gathers += e.kind == loom::ir::ExprKind::Gather;
  EXPECT_EQ(gathers, 1);
}

// With its backward, cross-entropy's count of targets is read by the
// loss's kernel and by the gradient's, which does not wait for the loss:
// the count keeps its own kernel (it runs beside the forward on a GPU)
// rather than putting the loss on the gradient's path.
TEST(Lower, CrossEntropysCountStaysOffItsGradientsPath) {
  auto logits = loom::randn({256, 10}).requires_grad_();
  auto t = loom::randint(0, 10, {256});
  loom::sync();
  auto loss = loom::nn::functional::cross_entropy(logits, t);
  loss.backward();
  KernelProgram p = lower_outputs({loss, logits.grad()});
  // The rows' max and sum of exps; their logsumexp (read by the loss and the
  // gradient, so stored: [256] floats); count; loss; gradient, recomputed
  // from the logits. No [256, 10] value is stored but the gradient.
  EXPECT_EQ(generated(p), 5u) << loom::ir::to_string(p);
  size_t stored = 0;
  for (const auto& b : p.buffers)
    if (b.numel == 2560) ++stored;
  EXPECT_EQ(stored, 2u) << loom::ir::to_string(p);  // the logits and their gradient
  EXPECT_EQ(p.library_calls.size(), 0u);
}

// A temporary row value read by two kernels, the second of which waits for
// the first anyway (it gathers from the first's output), is computed and
// stored by the first (absorption of a temporary): two kernels, not three.
TEST(Lower, ASharedRowValueIsStoredByItsFirstReader) {
  auto x = loom::randn({32, 16}).abs() + 0.5;
  std::vector<int64_t> iv(32);
  for (int r = 0; r < 32; ++r) iv[r] = (r * 5 + 3) % 32;
  auto idx = loom::tensor(iv);
  loom::sync();
  auto m = x.sum({1}, true);
  auto y = (x * 2).sum({1}) / m.squeeze(1);
  auto z = (x + y.gather(0, idx).unsqueeze(1)) / m;
  KernelProgram p = lower_outputs({y, z});
  ASSERT_EQ(generated(p), 2u) << loom::ir::to_string(p);
  EXPECT_EQ(p.kernels[0].phases.size(), 4u);  // two sums, store y, store m
  std::vector<double> want_z(32 * 16);
  const std::vector<float> xv = x.to_vector<float>();
  for (int r = 0; r < 32; ++r) {
    double s = 0;
    for (int c = 0; c < 16; ++c) s += xv[r * 16 + c];
    for (int c = 0; c < 16; ++c) want_z[r * 16 + c] = (xv[r * 16 + c] + 2.0) / s;  // every y is 2
  }
  EXPECT_TRUE(loom_test::all_close(z, want_z, 1e-4, 1e-5));
}

// A cheap value gathered from many stored tensors and read by several
// kernels (a residual network's gradient, read by a batch norm's backward
// kernels) is stored once from 2^20 elements on: recomputed, each reader
// would read all seven tensors again. Smaller, it stays inlined (an extra
// kernel would cost more than the bytes).
TEST(Lower, AValueReadFromManyTensorsBySeveralKernelsIsStored) {
  for (const int64_t side : {1024, 256}) {
    std::vector<loom::Tensor> x;
    for (int i = 0; i < 7; ++i) x.push_back(loom::randn({side, side}));
    loom::sync();
    const auto g = (((x[0] + x[1]) * x[2] + x[3]) * x[4] + x[5]) - x[6];
    KernelProgram p = lower_outputs({g.sum({1}), (g * g).sum({0}), g.exp()});
    size_t rereading = 0;
    for (const auto& b : p.boundaries) rereading += b.reason.find("rereading") != std::string::npos;
    EXPECT_EQ(rereading, side == 1024 ? 1u : 0u) << loom::ir::to_string(p);
  }
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

// Pass "split": a reduction of too few rows becomes partials over parts of
// each row ([parts | rows..., row / parts]), stored [parts, rows], then
// their fold, which runs the original per-row store (the mean's division).
TEST(Lower, ReductionsOfFewRowsSplitIntoPartials) {
  auto x = loom::randn({1 << 16});
  auto c = loom::randn({8192, 64});
  loom::sync();
  auto split = [](const KernelProgram& p) {
    for (const auto& k : p.kernels)
      if (k.name.find("_parts") != std::string::npos) return true;
    return false;
  };
  loom::ir::LowerOptions o;
  o.split_reduction_rows = 64;
  KernelProgram p = lower_outputs({x.sum()}, o);
  ASSERT_GE(generated(p), 2u) << loom::ir::to_string(p);  // (and a copy: the test reads the result through a view)
  EXPECT_EQ(p.kernels[0].loop, (loom::ir::Dims{std::vector<int64_t>{64, 1024}.data(), 2}));
  EXPECT_EQ(p.kernels[0].outer, 1);
  EXPECT_EQ(p.kernels[1].loop, (loom::ir::Dims{std::vector<int64_t>{64}.data(), 1}));
  EXPECT_EQ(p.kernels[1].outer, 0);
  // Two rows: 32 parts each, stored [32, 2], folded along stride 2.
  KernelProgram m = lower_outputs({x.reshape({2, 1 << 15}).sum({1}, true)}, o);
  ASSERT_GE(generated(m), 2u) << loom::ir::to_string(m);
  const auto& parts = m.kernels[0];
  const auto& fold = m.kernels[1];
  EXPECT_EQ(parts.loop, (loom::ir::Dims{std::vector<int64_t>{32, 2, 1024}.data(), 3}));
  EXPECT_EQ(parts.outer, 2);
  EXPECT_EQ(fold.loop, (loom::ir::Dims{std::vector<int64_t>{2, 32}.data(), 2}));
  EXPECT_EQ(fold.outer, 1);
  const auto& partial = fold.accesses[fold.exprs[fold.phases[0].value].a];
  EXPECT_EQ(m.buffers[partial.buffer].numel, 64);
  EXPECT_EQ(partial.strides, (loom::ir::Dims{std::vector<int64_t>{1, 2}.data(), 2}));
  // var: the mean's parts and fold (into a [1] buffer), then the squared
  // deviations' parts and fold, the parts reading the mean.
  KernelProgram v = lower_outputs({x.var()}, o);
  ASSERT_GE(generated(v), 4u) << loom::ir::to_string(v);
  EXPECT_EQ(v.kernels[0].name.substr(v.kernels[0].name.size() - 6), "_parts") << loom::ir::to_string(v);
  EXPECT_EQ(v.kernels[1].name.substr(v.kernels[1].name.size() - 5), "_fold") << loom::ir::to_string(v);
  EXPECT_EQ(v.kernels[2].name.substr(v.kernels[2].name.size() - 7), "_parts1") << loom::ir::to_string(v);
  EXPECT_EQ(v.kernels[3].name.substr(v.kernels[3].name.size() - 6), "_fold1") << loom::ir::to_string(v);
  const auto folded = v.kernels[1].phases[1].stores[0].first;
  const uint32_t mean = v.kernels[1].accesses[folded].buffer;
  EXPECT_EQ(v.buffers[mean].numel, 1);
  bool reads_mean = false;
  for (const auto& a : v.kernels[2].accesses) reads_mean = reads_mean || a.buffer == mean;
  EXPECT_TRUE(reads_mean) << loom::ir::to_string(v);
  // softmax of one long row: max and sum of exp each split, then a
  // pointwise kernel over every element reading both row values.
  KernelProgram sm = lower_outputs({loom::softmax(x, 0)}, o);
  ASSERT_EQ(generated(sm), 5u) << loom::ir::to_string(sm);
  const auto& apply = sm.kernels[4];
  EXPECT_EQ(apply.name.substr(apply.name.size() - 6), "_apply") << loom::ir::to_string(sm);
  EXPECT_EQ(apply.outer, 0);
  EXPECT_EQ(apply.phases.size(), 1u);
  EXPECT_FALSE(apply.phases[0].per_row);
  // A column sum of 64 columns, 1024 rows wanted: 8 parts of 1024 rows, the
  // part first, so both kernels still read adjacent columns side by side.
  o.split_reduction_rows = 1024;
  KernelProgram q = lower_outputs({c.sum({0})}, o);
  ASSERT_GE(generated(q), 2u) << loom::ir::to_string(q);
  EXPECT_EQ(q.kernels[0].loop, (loom::ir::Dims{std::vector<int64_t>{8, 64, 1024}.data(), 3}));
  EXPECT_EQ(q.kernels[0].outer, 2);
  EXPECT_TRUE(loom::ir::rows_lie_across_memory(q.kernels[0])) << loom::ir::to_string(q);
  EXPECT_TRUE(loom::ir::rows_lie_across_memory(q.kernels[1])) << loom::ir::to_string(q);
  // An argmax: its parts store each part's max and its position in the
  // whole row; the fold takes the max of those, then the least position
  // holding it (three reduce phases in two kernels).
  o.split_reduction_rows = 64;
  KernelProgram am = lower_outputs({x.argmax()}, o);
  ASSERT_GE(generated(am), 2u) << loom::ir::to_string(am);
  EXPECT_EQ(am.kernels[0].name.substr(am.kernels[0].name.size() - 6), "_parts") << loom::ir::to_string(am);
  ASSERT_EQ(am.kernels[0].phases.size(), 3u) << loom::ir::to_string(am);
  EXPECT_EQ(am.kernels[0].phases[0].reduce_op, loom::ir::Op::ArgMax);
  EXPECT_EQ(am.kernels[0].phases[1].reduce_op, loom::ir::Op::Max);
  EXPECT_EQ(am.kernels[0].phases[2].stores.size(), 2u);
  ASSERT_EQ(am.kernels[1].phases.size(), 3u) << loom::ir::to_string(am);
  EXPECT_EQ(am.kernels[1].phases[0].reduce_op, loom::ir::Op::Max);
  EXPECT_EQ(am.kernels[1].phases[1].reduce_op, loom::ir::Op::Min);
  EXPECT_EQ(lower_outputs({x.argmin()}, o).kernels[1].phases[0].reduce_op, loom::ir::Op::Min);
  // A bfloat16 sum: float32 partials, the fold's row value rounded once.
  KernelProgram bs = lower_outputs({x.to(loom::kBFloat16).sum()}, o);
  ASSERT_GE(generated(bs), 2u) << loom::ir::to_string(bs);
  const auto& bfold = bs.kernels[1];
  EXPECT_EQ(bfold.name.substr(bfold.name.size() - 5), "_fold") << loom::ir::to_string(bs);
  EXPECT_EQ(bs.buffers[bfold.accesses[bfold.exprs[bfold.phases[0].value].a].buffer].dtype, loom::kFloat)
      << loom::ir::to_string(bs);
  // A prime length: 64 parts of 1024 and a tail of one, a part of its own.
  auto prime = loom::randn({65537});
  loom::sync();
  KernelProgram pt = lower_outputs({prime.sum()}, o);
  ASSERT_GE(generated(pt), 3u) << loom::ir::to_string(pt);
  EXPECT_EQ(pt.kernels[0].loop, (loom::ir::Dims{std::vector<int64_t>{64, 1024}.data(), 2}));
  EXPECT_EQ(pt.kernels[1].name.substr(pt.kernels[1].name.size() - 5), "_tail") << loom::ir::to_string(pt);
  EXPECT_EQ(pt.kernels[1].loop, (loom::ir::Dims{std::vector<int64_t>{1, 1}.data(), 2}));
  EXPECT_EQ(pt.kernels[2].loop, (loom::ir::Dims{std::vector<int64_t>{65}.data(), 1}));
  // Not split: enough rows, rows too short, a random input computed in the
  // kernel (its Iota), the option off.
  for (const loom::Tensor& t : {c.sum({1}), loom::randn({2000}).sum(), loom::randn({65537}).sum()})
    EXPECT_FALSE(split(lower_outputs({t}, o))) << loom::ir::to_string(lower_outputs({t}, o));
  EXPECT_FALSE(split(lower_outputs({x.sum()})));
}

// A view that maps dims one to one (transpose, unsqueeze, squeeze,
// expand) of a computed value is an index map in its consumer's kernel: the
// value needs no buffer. A view that does not (a slice, a reshape merging
// dims) still reads a buffer.
TEST(Lower, DimForDimViewsOfComputedValuesFuse) {
  auto a = loom::randn({16, 32});
  auto b = loom::randn({32, 16});
  auto c = loom::randn({16});
  loom::sync();
  auto y1 = (a * 2).t() + b;                                  // transpose
  auto y2 = (c * 3).unsqueeze(1).expand({16, 8}) + 1;         // unsqueeze, then broadcast
  auto y3 = a / a.sum({1}, true).squeeze(1).unsqueeze(1);     // a row value, squeezed and back
  for (const auto& y : {y1, y2, y3}) {
    KernelProgram p = lower_outputs({y});
    EXPECT_EQ(generated(p), 1u) << loom::ir::to_string(p);
  }
  auto sliced = (a * 2).slice(1, 8, 24) + 1;                  // an offset view: a buffer
  KernelProgram p = lower_outputs({sliced});
  EXPECT_EQ(generated(p), 2u) << loom::ir::to_string(p);
  ASSERT_FALSE(p.boundaries.empty());
  EXPECT_EQ(p.boundaries[0].reason, "read through a strided view");
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

// ---------------------------------------------------------------- GEMM kernels
// With LowerOptions::gemm_kernels, a floating-point product and its pointwise
// consumers are one kernel: the product is the kernel's Contraction, read by
// a Contract expr, and the rest is its epilogue.
namespace gemm {

const loom::ir::LowerOptions kGemm{true};

TEST(LowerGemm, LinearBiasGeluIsOneKernel) {
  auto x = loom::randn({64, 32}), w = loom::randn({32, 48}), b = loom::randn({48});
  loom::sync();
  auto y = loom::gelu(loom::matmul(x, w) + b);
  KernelProgram p = lower_outputs({y}, kGemm);
  ASSERT_EQ(generated(p), 1u) << loom::ir::to_string(p);
  EXPECT_EQ(p.library_calls.size(), 0u);
  const auto& k = p.kernels[0];
  ASSERT_TRUE(k.contraction.has_value());
  EXPECT_EQ(k.contraction->k, 32);
  EXPECT_EQ(k.loop.n, 2);
  EXPECT_EQ(k.loop[0], 64);
  EXPECT_EQ(k.loop[1], 48);
  // A walks rows (stride 32 along M, 0 along N, 1 along K); B columns.
  EXPECT_EQ(k.accesses[k.contraction->a].strides[0], 32);
  EXPECT_EQ(k.accesses[k.contraction->a].strides[1], 0);
  EXPECT_EQ(k.contraction->a_k, 1);
  EXPECT_EQ(k.accesses[k.contraction->b].strides[0], 0);
  EXPECT_EQ(k.accesses[k.contraction->b].strides[1], 1);
  EXPECT_EQ(k.contraction->b_k, 48);
}

// The weight gradient x^T . g reads x through the transpose's strides: no
// copy kernel.
TEST(LowerGemm, TransposedOperandIsOnlyStrides) {
  auto x = loom::randn({64, 32}), g = loom::randn({64, 48});
  loom::sync();
  auto gw = loom::matmul(x.t(), g);
  KernelProgram p = lower_outputs({gw}, kGemm);
  ASSERT_EQ(generated(p), 1u) << loom::ir::to_string(p);
  const auto& k = p.kernels[0];
  ASSERT_TRUE(k.contraction.has_value());
  EXPECT_EQ(k.contraction->k, 64);
  EXPECT_EQ(k.accesses[k.contraction->a].strides[0], 1);   // along M = x's columns
  EXPECT_EQ(k.contraction->a_k, 32);                       // along K = x's rows
}

// Cheap producers of an operand are the GEMM's (Contraction::a_value, an
// expr over the operand's element), so relu(x) @ (w * 0.5) is one kernel
// reading x and w; a costly producer (exp) and a producer whose value is a
// graph output are stored first.
TEST(LowerGemm, CheapOperandProducersAreFused) {
  auto x = loom::randn({64, 32}), w = loom::randn({32, 48}), w2 = loom::randn({48, 16});
  loom::sync();
  loom::ir::LowerOptions on = kGemm;
  on.operand_producers_min_work = 0;
  KernelProgram p = lower_outputs({loom::matmul(loom::relu(x), w * 0.5)}, on);
  ASSERT_EQ(generated(p), 1u) << loom::ir::to_string(p);
  const auto& c = *p.kernels[0].contraction;
  ASSERT_TRUE(c.fused_operand(0) && c.fused_operand(1)) << loom::ir::to_string(p);
  EXPECT_EQ(p.kernels[0].exprs[c.a_value].op, loom::ir::Op::Relu);
  EXPECT_EQ(p.kernels[0].exprs[c.b_value].op, loom::ir::Op::Mul);
  EXPECT_EQ(p.buffers[p.kernels[0].accesses[c.a].buffer].kind, loom::ir::BufferKind::Input);
  KernelProgram costly = lower_outputs({loom::matmul(loom::exp(x), w)}, on);
  EXPECT_EQ(generated(costly), 2u) << loom::ir::to_string(costly);
  auto r = loom::relu(x);
  KernelProgram kept = lower_outputs({loom::matmul(r, w), r}, on);
  // A ReLU of a computed value (W4's after each Linear) stays in the
  // epilogue of the kernel that computes it; so do products below the
  // size threshold, and every product by default.
  KernelProgram chain = lower_outputs({loom::matmul(loom::relu(loom::matmul(x, w)), w2)}, on);
  loom::ir::LowerOptions large = on;
  large.operand_producers_min_work = 64 * 48 * 32 + 1;
  KernelProgram small = lower_outputs({loom::matmul(loom::relu(x), w)}, large);
  KernelProgram off = lower_outputs({loom::matmul(loom::relu(x), w)}, kGemm);
  for (const KernelProgram* q : {&kept, &chain, &small, &off})
    for (const auto& k : q->kernels)
      if (k.contraction) EXPECT_FALSE(k.contraction->fused_operand(0)) << loom::ir::to_string(*q);
  EXPECT_EQ(generated(chain), 2u) << loom::ir::to_string(chain);
}

// A product two kernels read is stored once (never computed twice), and a
// product that is reduced is a kernel of its own before the reduction.
TEST(LowerGemm, SharedOrReducedProductGetsABuffer) {
  auto x = loom::randn({16, 8}), w = loom::randn({8, 24});
  loom::sync();
  auto h = loom::matmul(x, w);
  KernelProgram p = lower_outputs({loom::relu(h), h.sum({-1})}, kGemm);
  int gemms = 0;
  for (const auto& k : p.kernels) gemms += k.contraction.has_value();
  EXPECT_EQ(gemms, 1) << loom::ir::to_string(p);
  EXPECT_EQ(p.library_calls.size(), 0u);
}

// Integer products stay library calls; without the option every product does.
// With narrow_products_as_rows (the cuda backend), W4's logits product
// (256 x 10 x 1024) is a row kernel: loops (m, n | k), a sum of products,
// one store per row; a wide product stays a GEMM.
TEST(LowerGemm, NarrowProductIsARowKernel) {
  auto h = loom::randn({256, 1024}), w = loom::randn({10, 1024}), b = loom::randn({10}), w2 = loom::randn({64, 1024});
  loom::sync();
  loom::ir::LowerOptions rows = kGemm;
  rows.narrow_products_as_rows = true;
  KernelProgram p = lower_outputs({loom::matmul(h, w.t()) + b}, rows);
  ASSERT_GE(generated(p), 1u) << loom::ir::to_string(p);
  const auto& k = p.kernels[0];
  EXPECT_FALSE(k.contraction);
  EXPECT_EQ(k.outer, 2);
  EXPECT_EQ(k.loop.n, 3);
  EXPECT_EQ(k.loop[2], 1024);
  EXPECT_EQ(k.phases.size(), 2u);  // the sum over k, the store
  KernelProgram gemm = lower_outputs({loom::matmul(h, w.t()) + b}, kGemm);
  EXPECT_TRUE(gemm.kernels[0].contraction) << loom::ir::to_string(gemm);
  KernelProgram wide = lower_outputs({loom::matmul(h, w2.t())}, rows);
  EXPECT_TRUE(wide.kernels[0].contraction) << loom::ir::to_string(wide);
}

// With short_products_inline (the cuda backend), a product with K <= 16 is
// K multiply-adds inside its consumer's kernel: W4's backward product
// dz3 W3 (256 x 1024 x 10) and its ReLU mask are one pointwise kernel.
TEST(LowerGemm, ShortProductIsInlined) {
  auto dz = loom::randn({256, 10}), w = loom::randn({10, 1024}), h = loom::randn({256, 1024});
  loom::sync();
  loom::ir::LowerOptions inline_short = kGemm;
  inline_short.short_products_inline = true;
  auto masked = loom::where(h > 0, loom::matmul(dz, w), loom::zeros({}));
  KernelProgram p = lower_outputs({masked}, inline_short);
  ASSERT_EQ(generated(p), 1u) << loom::ir::to_string(p);
  EXPECT_FALSE(p.kernels[0].contraction);
  EXPECT_EQ(p.kernels[0].outer, 0);
  size_t muls = 0;
  for (const auto& e : p.kernels[0].exprs) muls += e.kind == loom::ir::ExprKind::Op && e.op == loom::ir::Op::Mul;
  EXPECT_EQ(muls, 10u);
  KernelProgram gemm = lower_outputs({masked}, kGemm);
  EXPECT_TRUE(gemm.kernels[0].contraction) << loom::ir::to_string(gemm);
}

TEST(LowerGemm, IntegerAndDefaultStayLibraryCalls) {
  auto a = loom::randint(0, 5, {8, 8}), c = loom::randn({8, 8});
  loom::sync();
  EXPECT_EQ(lower_outputs({loom::matmul(a, a)}, kGemm).library_calls.size(), 1u);
  EXPECT_EQ(lower_outputs({loom::matmul(c, c)}).library_calls.size(), 1u);
}

}  // namespace gemm

// W5's step: the activation the caller keeps and the clamp chain over it are
// one kernel (the chain joins the kernel that stores `a`), with GEMM kernels
// the whole step is two kernels.
TEST(LowerVertical, KeptActivationAndItsConsumerAreOneKernel) {
  auto s = loom::randn({1, 64}), w1 = loom::randn({64, 64}), w2 = loom::randn({64, 64});
  loom::sync();
  auto a = loom::tanh(loom::matmul(loom::tanh(loom::matmul(s, w1)), w2));
  auto t = s;
  for (int i = 0; i < 10; ++i) t = loom::clamp(t * 0.99 + a * 0.01, -1, 1);
  KernelProgram lib = lower_outputs({a, t});
  EXPECT_EQ(generated(lib), 2u) << loom::ir::to_string(lib);  // tanh, tanh + chain
  KernelProgram fused = lower_outputs({a, t}, gemm::kGemm);
  EXPECT_EQ(generated(fused), 2u) << loom::ir::to_string(fused);
  EXPECT_EQ(fused.library_calls.size(), 0u);
  EXPECT_EQ(fused.kernels[1].phases[0].stores.size(), 2u);  // a and t
}

// A consumer that reads the stored value at another position must not join.
// A bias gradient (a column sum, kept as .grad) and the optimizer's
// momentum and parameter updates over its rows are one row kernel: the
// updates are stores of the reduction's last per-row phase.
TEST(LowerVertical, UpdatesOverAReductionsRowsJoinIt) {
  auto x = loom::randn({256, 10});
  auto m = loom::randn({10}), p = loom::randn({10});
  loom::sync();
  auto g = x.sum({0});
  auto m2 = m * 0.9 + g;
  auto p2 = p - m2 * 0.1;
  KernelProgram prog = lower_outputs({g, m2, p2});
  ASSERT_EQ(generated(prog), 1u) << loom::ir::to_string(prog);
  const auto& k = prog.kernels[0];
  ASSERT_EQ(k.phases.size(), 2u);  // the sum, then one per-row phase storing all three
  EXPECT_TRUE(k.phases[1].per_row);
  EXPECT_EQ(k.phases[1].stores.size(), 3u);
}

TEST(LowerVertical, ShiftedReadDoesNotJoin) {
  auto x = loom::randn({64});
  loom::sync();
  auto y = loom::exp(x);
  auto z = y.slice(0, 1, 64) + y.slice(0, 0, 63);
  KernelProgram p = lower_outputs({y, z});
  EXPECT_EQ(generated(p), 2u) << loom::ir::to_string(p);
}
