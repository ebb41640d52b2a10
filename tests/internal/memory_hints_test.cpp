// Which stores the llvm backend streams past the caches and which loads it
// prefetches (jit/llvm/memory_hints.h), and that the emitted IR carries them.
#include "jit/llvm/memory_hints.h"

#include <gtest/gtest.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <loom/loom.h>

#include <algorithm>

#include "tests/internal/lower_util.h"
#include "ir/graph.h"
#include "ir/lower/lower.h"
#include "jit/llvm/codegen.h"
#include "jit/llvm/orc_jit.h"

namespace {

using loom::ir::KernelProgram;
namespace lc = loom::jit::llvm_cpu;

using loom_test::lower_outputs;

bool any(const std::vector<bool>& v) { return std::find(v.begin(), v.end(), true) != v.end(); }

constexpr int64_t kBig = lc::kStreamBytes / 4 + 7;  // float elements: just past the threshold

TEST(MemoryHints, ALargeOutputNobodyReadsIsStreamed) {
  auto x = loom::randn({kBig});
  loom::sync();
  KernelProgram p = lower_outputs({x * 2 + 1});
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_TRUE(any(lc::memory_hints(p, p.kernels[0]).stream));
  EXPECT_TRUE(lc::memory_hints(p, p.kernels[0]).prefetch_phases.empty());  // not a row kernel
}

// A streaming pointwise kernel reads its large inputs kAheadBytes ahead
// (MemoryHints::ahead): W1's x, both operands of a large add; not a small
// input broadcast along the rows, not a row kernel, not a kernel whose
// output stays in the caches.
TEST(MemoryHints, StreamingPointwiseKernelsPrefetchTheirInputsAhead) {
  auto x = loom::randn({kBig});
  auto x2 = loom::randn({kBig});
  auto m = loom::randn({kBig / 1024 + 1, 1024});
  auto bias = loom::randn({1024});
  auto small = loom::randn({1 << 10});
  loom::sync();
  KernelProgram w1 = lower_outputs({loom::sigmoid(loom::tanh(x * 1.5 + 0.5) * x) + x * x});
  ASSERT_EQ(w1.kernels.size(), 1u);
  EXPECT_EQ(lc::memory_hints(w1, w1.kernels[0]).ahead.size(), 1u);  // x, loaded once
  KernelProgram two = lower_outputs({x + x2});
  EXPECT_EQ(lc::memory_hints(two, two.kernels[0]).ahead.size(), 2u);
  KernelProgram biased = lower_outputs({m + bias});
  ASSERT_EQ(biased.kernels.size(), 1u);
  EXPECT_EQ(lc::memory_hints(biased, biased.kernels[0]).ahead.size(), 1u);  // m only: the bias stays in L1
  KernelProgram few = lower_outputs({small * 2});
  EXPECT_TRUE(lc::memory_hints(few, few.kernels[0]).ahead.empty());
  KernelProgram rows = lower_outputs({loom::softmax(m, -1)});
  EXPECT_TRUE(lc::memory_hints(rows, rows.kernels[0]).ahead.empty());  // a row kernel: its own next-row prefetch
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> mod = lc::emit_module(w1, lc::share_functions(w1), ctx, lc::host_target());
  if (lc::host_target().triple.rfind("x86_64", 0) == 0 && lc::host_target().vector_width > 1)
    EXPECT_NE(lc::module_text(*mod).find("llvm.prefetch"), std::string::npos);
}

TEST(MemoryHints, SmallOrReReadOutputsAreNotStreamed) {
  auto small = loom::randn({1 << 10});
  auto x = loom::randn({kBig});
  loom::sync();
  KernelProgram ps = lower_outputs({small * 2 + 1});
  EXPECT_FALSE(any(lc::memory_hints(ps, ps.kernels[0]).stream));
  // y is an output and the input of the matmul's library call: it is read
  // again in the same program, so it must reach the caches.
  auto y = (x * 2).reshape({kBig, 1});
  KernelProgram pr = lower_outputs({y, y.t().matmul(y)});
  for (const auto& k : pr.kernels)
    for (size_t a = 0; a < k.accesses.size(); ++a)
      if (pr.buffers[k.accesses[a].buffer].numel == kBig) EXPECT_FALSE(lc::memory_hints(pr, k).stream[a]);
}

// The spread prefetch's arithmetic, stepped as the emitter's loops step
// (steps of 4 vectors, then of one; a scalar tail prefetches nothing): the
// phases together request every line of the next row, and each phase's
// requests stay within its part of the row.
TEST(MemoryHints, SpreadPrefetchesCoverTheNextRow) {
  for (int64_t len : {4096, 1024, 4000, 784}) {
    for (const std::vector<int64_t>& weights : std::vector<std::vector<int64_t>>{{41, 9}, {13, 23}, {1, 1, 1}, {5}}) {
      const int64_t esize = 4, w = 16, unroll = 4, lines = (len * esize + 63) / 64;
      int64_t total = 0, before = 0;
      for (int64_t x : weights) total += x;
      std::vector<bool> got(lines + 8, false);
      for (size_t share = 0; share < weights.size(); ++share) {
        const lc::SpreadShare part = lc::spread_share(len, weights, share);
        const int64_t mine = weights[share];
        const int64_t first = before * len / total * esize / 64, last = ((before + mine) * len / total * esize + 63) / 64;
        auto step = [&](int64_t i, int64_t width) {
          const int64_t from = part.from(i) * esize;
          for (int64_t l = 0; l < part.lines(width, esize); ++l) {
            const int64_t line = (from + l * 64) / 64;
            ASSERT_GE(line, first) << len << " elements, phase of weight " << mine;
            ASSERT_LE(line, last + 1) << len << " elements, phase of weight " << mine;
            got[line] = true;
          }
        };
        int64_t i = 0;
        for (; i + w * unroll <= len; i += w * unroll) step(i, w * unroll);
        for (; i + w <= len; i += w) step(i, w);
        before += mine;
      }
      // What the scalar tail's elements would have requested is left out.
      const int64_t covered = len / w * w * esize / 64;
      for (int64_t l = 0; l < covered; ++l)
        ASSERT_TRUE(got[l]) << len << " elements, " << weights.size() << " phases: line " << l << " never requested";
    }
  }
}

TEST(MemoryHints, SoftmaxPrefetchesTheNextRowWhileSumming) {
  auto x = loom::randn({1024, 4096});  // 16 MiB in and out
  loom::sync();
  KernelProgram p = lower_outputs({loom::softmax(x, -1)});
  ASSERT_EQ(p.kernels.size(), 1u);
  lc::MemoryHints h = lc::memory_hints(p, p.kernels[0]);
  // Max reads the row from memory; the exp-sum and store phases share the
  // next row's prefetch (a row over one loop: spread).
  EXPECT_EQ(h.prefetch_phases, (std::vector<int>{1, 2}));
  EXPECT_TRUE(h.prefetch_spread);
  EXPECT_EQ(h.prefetch.size(), 1u);
  EXPECT_TRUE(any(h.stream));
  // The emitted IR: non-temporal stores, the fence after them, prefetches.
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> m = lc::emit_module(p, lc::share_functions(p), ctx, lc::host_target());
  std::string ir = lc::module_text(*m);
  if (lc::host_target().triple.rfind("x86_64", 0) == 0) {
    EXPECT_NE(ir.find("!nontemporal"), std::string::npos);
    EXPECT_NE(ir.find("llvm.x86.sse.sfence"), std::string::npos);
  }
  EXPECT_NE(ir.find("llvm.prefetch"), std::string::npos);
}

}  // namespace
