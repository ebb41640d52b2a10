// Choices the llvm code generator makes from a kernel's structure
// (jit/llvm/codegen.cpp), checked on the IR it emits.
#include "jit/llvm/codegen.h"

#include <gtest/gtest.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/TargetParser/Host.h>
#include <loom/loom.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "tests/internal/lower_util.h"
#include "jit/llvm/orc_jit.h"

namespace {

namespace lc = loom::jit::llvm_cpu;
using loom_test::lower_outputs;

// AVX2 without AVX-512, where emit_exp_nonpositive differs from emit_exp
// (with AVX-512 both scale by vscalef).
lc::Target avx2_target() {
  lc::Target t = lc::host_target();
  t.cpu = "x86-64-v3";
  t.features = "+avx,+avx2,+fma,+f16c,+sse4.2";
  t.vector_width = 8;
  return t;
}

// The one constant only emit_exp_nonpositive emits: its final factor 2^-64,
// as LLVM prints a float constant.
bool uses_exp_nonpositive(const std::vector<loom::Tensor>& outs) {
  loom::ir::KernelProgram p = lower_outputs(outs);
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> m = lc::emit_module(p, lc::share_functions(p), ctx, avx2_target());
  return lc::module_text(*m).find("0x3BF0000000000000") != std::string::npos;
}

// The CPU name implies its model's features; a VM may hide some (a Zen 4
// guest without AVX-512 reports "znver4"). The target must switch each hidden
// one off by name, or LLVM emits instructions the CPU faults on.
TEST(LlvmCodegen, HostTargetNamesTheFeaturesItLacks) {
  if (std::getenv("LOOM_CPU_ISA")) GTEST_SKIP() << "LOOM_CPU_ISA narrows the target on purpose";
  llvm::StringMap<bool> feats;
  llvm::sys::getHostCPUFeatures(feats);
  const std::string named = "," + lc::host_target().features + ",";
  for (auto& f : feats) {
    const std::string want = std::string(",") + (f.second ? "+" : "-") + f.first().str() + ",";
    EXPECT_NE(named.find(want), std::string::npos) << want;
  }
}

TEST(LlvmCodegen, ExpOfXMinusItsRowMaxSkipsTheOverflowSide) {
  if (lc::host_target().triple.rfind("x86_64", 0) != 0) GTEST_SKIP() << "x86-64 only: an AVX2 target";
  auto x = loom::randn({64, 256});
  auto y = loom::randn({64, 256});
  auto xd = loom::randn({64, 256}, loom::TensorOptions(loom::kFloat64));
  loom::sync();
  EXPECT_TRUE(uses_exp_nonpositive({loom::softmax(x, -1)}));
  EXPECT_TRUE(uses_exp_nonpositive({loom::log_softmax(x, -1)}));
  EXPECT_TRUE(uses_exp_nonpositive({(x - x.amax({-1}, true)).exp()}));
  // Not x minus the max of x's own row: exp keeps its overflow side.
  EXPECT_FALSE(uses_exp_nonpositive({(x - y.amax({-1}, true)).exp().sum({-1})}));
  EXPECT_FALSE(uses_exp_nonpositive({(x - x.amin({-1}, true)).exp()}));
  EXPECT_FALSE(uses_exp_nonpositive({(y - x.amax({-1}, true)).exp()}));
  EXPECT_FALSE(uses_exp_nonpositive({x.exp()}));
  // float64: the same rule, its own constant (2^-64 as a double prints alike).
  EXPECT_TRUE(uses_exp_nonpositive({loom::softmax(xd, -1)}));
}

// Which kernels run their last two loops in blocks (transpose_block).
TEST(LlvmCodegen, TransposedOperandsGetLoopBlocks) {
  auto x = loom::randn({256, 128});
  auto xd = loom::randn({256, 128}, loom::TensorOptions(loom::kFloat64));
  auto small = loom::randn({20, 20});
  loom::sync();
  auto block = [](const std::vector<loom::Tensor>& outs) {
    loom::ir::KernelProgram p = lower_outputs(outs);
    EXPECT_EQ(p.kernels.size(), 1u);
    return p.kernels.empty() ? lc::LoopBlock{} : lc::transpose_block(p, p.kernels[0]);
  };
  lc::LoopBlock b = block({x.t().contiguous()});
  EXPECT_EQ(b.rows, 256);
  EXPECT_EQ(b.cols, 16);  // one 64-byte line of float32
  EXPECT_EQ(block({xd.t() * 2}).cols, 8);
  EXPECT_EQ(block({x * 2}).rows, 0);               // contiguous
  EXPECT_EQ(block({x.sum({0}, true)}).rows, 0);    // a reduction
  EXPECT_EQ(block({small.t().contiguous()}).rows, 0);  // a few lines: in cache anyway
}

// Which reductions run many columns at once (column_lanes).
TEST(LlvmCodegen, ReductionsAcrossRowsRunColumnsAtOnce) {
  auto x = loom::randn({512, 256});
  loom::sync();
  auto lanes = [](const std::vector<loom::Tensor>& outs) {
    loom::ir::KernelProgram p = lower_outputs(outs);
    int64_t most = 0;
    for (const auto& k : p.kernels) most = std::max(most, lc::column_lanes(k, 8));
    return most;
  };
  EXPECT_EQ(lanes({x.sum({0}, true)}), 64);   // 8 vectors of 8 lanes
  EXPECT_EQ(lanes({x.amax({0}, true)}), 64);
  EXPECT_EQ(lanes({x.sum({1}, true)}), 0);    // along its rows: the usual order
  EXPECT_EQ(lanes({std::get<1>(x.max(0, true))}), 0);  // argmax: one lane
  EXPECT_EQ(lanes({x.slice(1, 0, 40).sum({0}, true)}), 0);  // fewer columns than lanes
}

}  // namespace

namespace {

// Kernels alike share one function (share_functions): eight layers
// tanh(h W_i * s_i + b_i), each with its own weight, bias and scale, are
// eight GEMM kernels and one function, each kernel with its own tables back
// to its buffers and scalar slots; the same layers in double are another.
TEST(LlvmCodegen, KernelsAlikeShareOneFunction) {
  auto program = [](loom::ScalarType dtype) {
    loom::Tensor h = loom::randn({16, 24}).to(dtype);
    std::vector<loom::Tensor> w, b;
    for (int i = 0; i < 8; ++i) w.push_back(loom::randn({24, 24}).to(dtype)), b.push_back(loom::randn({24}).to(dtype));
    loom::sync();
    for (int i = 0; i < 8; ++i) h = loom::tanh(loom::matmul(h, w[i]) * (0.5 + 0.1 * i) + b[i]);
    loom::ir::LowerOptions options;
    options.gemm_kernels = true;
    return lower_outputs({h}, options);
  };
  const loom::ir::KernelProgram p = program(loom::kFloat);
  ASSERT_EQ(p.kernels.size(), 8u);
  const lc::KernelFunctions f = lc::share_functions(p);
  EXPECT_EQ(f.first.size(), 1u);
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    EXPECT_EQ(f.function[i], 0u);
    // The local tables name this kernel's own buffers, in order of first use.
    std::vector<uint32_t> own;
    for (const loom::ir::Access& a : p.kernels[i].accesses)
      if (std::find(own.begin(), own.end(), a.buffer) == own.end()) own.push_back(a.buffer);
    EXPECT_EQ(f.local[i].buffers, own) << "kernel " << i;
    ASSERT_EQ(f.local[i].scalars.size(), 1u);
    if (i > 0) EXPECT_NE(f.local[i].scalars, f.local[i - 1].scalars);
    EXPECT_EQ(f.local[i].nodes[0], p.kernels[i].root);
  }
  // Two programs' worth of layers, float and double: two functions.
  loom::ir::KernelProgram both = p;
  const loom::ir::KernelProgram d = program(loom::kDouble);
  for (loom::ir::Kernel k : d.kernels) {
    for (loom::ir::Access& a : k.accesses) a.buffer += static_cast<uint32_t>(both.buffers.size());
    both.kernels.push_back(k);
  }
  both.buffers.insert(both.buffers.end(), d.buffers.begin(), d.buffers.end());
  EXPECT_EQ(lc::share_functions(both).first.size(), 2u);
}

}  // namespace

namespace {

// A function is named by its key: the same code in two programs (the same
// layer on other buffers, in other graphs) has one symbol, so its object,
// compiled for one, loads into the other; other code, another symbol.
TEST(LlvmCodegen, FunctionsAreNamedByTheirKeyAcrossPrograms) {
  auto x = loom::randn({64, 32}), y = loom::randn({64, 32}), z = loom::randn({64, 48});
  loom::sync();
  const loom::ir::KernelProgram p1 = lower_outputs({loom::tanh(x) * 3});
  const loom::ir::KernelProgram p2 = lower_outputs({loom::tanh(y) * 3, y.sum({0}, true)});
  const loom::ir::KernelProgram p3 = lower_outputs({loom::tanh(z) * 3});
  const lc::KernelFunctions f1 = lc::share_functions(p1), f2 = lc::share_functions(p2), f3 = lc::share_functions(p3);
  ASSERT_EQ(f1.keys.size(), f1.first.size());
  ASSERT_EQ(f2.keys.size(), 2u);
  const std::string shared = lc::function_symbol(f1.keys[0]);
  EXPECT_TRUE(lc::function_symbol(f2.keys[0]) == shared || lc::function_symbol(f2.keys[1]) == shared);
  EXPECT_NE(lc::function_symbol(f2.keys[0]), lc::function_symbol(f2.keys[1]));
  EXPECT_NE(lc::function_symbol(f1.keys[0]), lc::function_symbol(f3.keys[0]));  // another shape
  EXPECT_EQ(lc::function_symbol(f1.keys[0]).rfind("loom_f", 0), 0u);
}

// With sizes as arguments (ir::SizeArgs) a function's key holds no size
// but 0 and 1: the same program at 48 and 80 rows shares its functions,
// their numbers differ only in the arguments; at one row (a size-1 loop
// decides code) it does not. Without, each size is its own function.
TEST(LlvmCodegen, SizesAsArgumentsGiveOneFunctionForEverySize) {
  auto program = [](int64_t n) {
    auto x = loom::randn({n, 32});
    auto w = loom::randn({32, 24});
    loom::sync();
    loom::ir::LowerOptions options;
    options.gemm_kernels = true;
    return lower_outputs({loom::softmax(loom::matmul(x, w), -1), loom::softmax(x.t(), -1), x.sum({0}, true)}, options);
  };
  const loom::ir::KernelProgram a = program(48), b = program(80), one = program(1);
  const lc::KernelFunctions fa = lc::share_functions(a, loom::ir::Lift::All),
                            fb = lc::share_functions(b, loom::ir::Lift::All),
                            fone = lc::share_functions(one, loom::ir::Lift::All);
  ASSERT_EQ(fa.keys.size(), fb.keys.size());
  bool lifted = false;
  for (size_t i = 0; i < fa.keys.size(); ++i) {
    EXPECT_EQ(fa.keys[i], fb.keys[i]) << "function " << i;
    const loom::ir::SizeArgs& za = fa.local[fa.first[i]].sizes;
    const loom::ir::SizeArgs& zb = fb.local[fb.first[i]].sizes;
    EXPECT_EQ(za.values.size(), zb.values.size());
    lifted = lifted || za.values != zb.values;
  }
  EXPECT_TRUE(lifted) << "some kernel's numbers differ between 48 and 80 rows";
  EXPECT_NE(fa.keys, fone.keys);
  EXPECT_NE(lc::share_functions(a).keys, lc::share_functions(b).keys);
  // The code reads the arguments: it compiles, and it has no schedule that
  // depends on them (no transpose blocks, no column lanes).
  for (size_t i = 0; i < fa.first.size(); ++i) {
    const loom::ir::LocalKernel& l = fa.local[fa.first[i]];
    if (!l.sizes.any()) continue;
    EXPECT_EQ(lc::transpose_block(l.program, l.kernel(), &l.sizes).rows, 0);
    EXPECT_EQ(lc::column_lanes(l.kernel(), 8, &l.sizes), 0);
  }
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> m = lc::emit_module(a, fa, ctx, lc::host_target());
  EXPECT_FALSE(lc::compile_to_object(*m, "").empty());
}

// Lift::Seen lifts only the numbers that changed between the compiles of
// a kernel (ir::SizeHistory): after 48 and 80 rows the row count is an
// argument and the width of 32 stays a constant, and 120 rows have the
// keys of 80.
TEST(LlvmCodegen, SeenSizesLiftOnlyWhatChanged) {
  auto program = [](int64_t n) {
    auto x = loom::randn({n, 32});
    loom::sync();
    return lower_outputs({loom::softmax(x, -1), x.sum({0}, true) * 2});
  };
  loom::ir::SizeHistory seen;
  const loom::ir::KernelProgram a = program(48), b = program(80), c = program(120);
  const lc::KernelFunctions fa = lc::share_functions(a, loom::ir::Lift::None, &seen);
  const lc::KernelFunctions fb = lc::share_functions(b, loom::ir::Lift::Seen, &seen);
  const lc::KernelFunctions fc = lc::share_functions(c, loom::ir::Lift::Seen, &seen);
  const lc::KernelFunctions all = lc::share_functions(b, loom::ir::Lift::All);
  EXPECT_EQ(fb.keys, fc.keys);
  EXPECT_NE(fa.keys, fb.keys);
  size_t lifted_seen = 0, lifted_all = 0;
  for (const auto& l : fb.local) lifted_seen += l.sizes.values.size();
  for (const auto& l : all.local) lifted_all += l.sizes.values.size();
  EXPECT_GT(lifted_seen, 0u);
  EXPECT_LT(lifted_seen, lifted_all) << "the width, unchanged, stays a constant";
}

// ir::SizeHistory's lineages: one compile's kernels of one shape at two
// widths are two lineages, not a difference (both stay static); a later
// compile follows the nearest and lifts only what differs from it, and a
// lifted number stays lifted in its lineage.
TEST(SizeHistory, LaterCompilesFollowTheNearestLineage) {
  loom::ir::SizeHistory h;
  const std::string shape = "rows x width";
  using V = std::vector<bool>;
  const uint64_t first = h.begin();
  EXPECT_EQ(h.note(shape, {48, 32}, first), V({false, false}));
  EXPECT_EQ(h.note(shape, {48, 64}, first), V({false, false})) << "another width in the same compile";
  EXPECT_EQ(h.note(shape, {48, 32}, first), V({false, false}));
  const uint64_t second = h.begin();
  EXPECT_EQ(h.note(shape, {80, 32}, second), V({true, false}));
  EXPECT_EQ(h.note(shape, {80, 64}, second), V({true, false})) << "the width is its lineage's";
  const uint64_t third = h.begin();
  EXPECT_EQ(h.note(shape, {120, 64}, third), V({true, false}));
  EXPECT_EQ(h.note(shape, {48, 64}, third), V({true, false})) << "lifted once, lifted in its lineage";
  EXPECT_EQ(h.note("another shape", {48, 64}, third), V({false, false}));
}

// A graph never compiled before (here: the same computation with one more
// op, as a model's first call that also casts its weights) takes as
// arguments, under Lift::Seen, the sizes its kernels had otherwise in an
// earlier graph: the next length needs no code.
TEST(LlvmCodegen, SeenSizesLiftAcrossGraphs) {
  auto program = [](int64_t n, bool extra) {
    auto x = loom::randn({n, 32});
    loom::sync();
    std::vector<loom::Tensor> outs = {loom::softmax(x, -1)};
    if (extra) outs.push_back(x.sum({0}, true) * 2);
    return lower_outputs(outs);
  };
  loom::ir::SizeHistory seen;
  const loom::ir::KernelProgram first = program(48, true), second = program(80, false), third = program(120, false);
  const lc::KernelFunctions f1 = lc::share_functions(first, loom::ir::Lift::Seen, &seen);
  for (const auto& l : f1.local) EXPECT_FALSE(l.sizes.any()) << "nothing seen before: static";
  const lc::KernelFunctions f2 = lc::share_functions(second, loom::ir::Lift::Seen, &seen);
  const lc::KernelFunctions f3 = lc::share_functions(third, loom::ir::Lift::Seen, &seen);
  ASSERT_FALSE(f2.local.empty());
  EXPECT_TRUE(f2.local[0].sizes.any());
  EXPECT_EQ(f2.keys, f3.keys);
}

// The parts a program's functions are compiled in cover each function once,
// and there are never more parts than functions; a subset, only it.
TEST(LlvmCodegen, CompilePartsCoverEachFunctionOnce) {
  auto x = loom::randn({64, 32});
  auto w = loom::randn({32, 32});
  loom::sync();
  loom::ir::LowerOptions options;
  options.gemm_kernels = true;
  const loom::ir::KernelProgram p =
      lower_outputs({loom::softmax(loom::matmul(x, w), -1), x.sum({0}, true), loom::tanh(x) * 3, x.t().contiguous()}, options);
  const lc::KernelFunctions f = lc::share_functions(p);
  ASSERT_GE(f.first.size(), 3u);
  std::vector<uint32_t> all(f.first.size());
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  for (size_t n : {size_t{1}, size_t{2}, f.first.size(), size_t{64}}) {
    const auto parts = lc::compile_parts(f, all, n);
    EXPECT_EQ(parts.size(), std::min(n, f.first.size()));
    std::vector<int> seen(f.first.size(), 0);
    for (const auto& part : parts) {
      EXPECT_FALSE(part.empty());
      for (uint32_t i : part) ++seen.at(i);
    }
    for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "function " << i << " with " << n << " parts";
  }
  const std::vector<uint32_t> some = {all.back(), all.front()};
  size_t covered = 0;
  for (const auto& part : lc::compile_parts(f, some, 4))
    for (uint32_t i : part) covered += i == all.back() || i == all.front();
  EXPECT_EQ(covered, 2u);
}

}  // namespace
