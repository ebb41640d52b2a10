// KernelEmitter's prefetches (jit/llvm/kernel_emitter.h): what
// MemoryHints (memory_hints.h) decided, as llvm.prefetch calls in a
// kernel's loops: a streaming pointwise kernel's inputs ahead, and a row
// kernel's next row, whole in one phase or spread over its later phases.
#include "jit/llvm/kernel_emitter.h"

#include <llvm/IR/IRBuilder.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "ir/lower/lowering.h"
#include "jit/llvm/ir_loops.h"

namespace loom::jit::llvm_cpu::detail {

// Prefetches, for each of `accesses`, from `distance` elements past the
// current one, the lines of the w-lane step's part (SpreadShare::lines;
// `locality` as ir_loops.h's prefetch).
void KernelEmitter::prefetch_lines(const std::vector<uint32_t>& accesses, int w, const SpreadShare& part,
                                   const std::function<Value*(const ir::Access&, int64_t esize)>& distance,
                                   int locality) {
  for (uint32_t a : accesses) {
    const ir::Access& acc = k_.accesses[a];
    const ScalarType dt = p_.buffers[acc.buffer].dtype;
    const int64_t esize = static_cast<int64_t>(element_size(dt));
    Value* at = b_.CreateGEP(memory_type(dt), base_[a], b_.CreateAdd(offset(acc), distance(acc, esize)));
    for (int64_t line = 0; line < part.lines(w, esize); ++line)
      llvm_cpu::prefetch(b_, b_.CreateConstGEP1_64(b_.getInt8Ty(), at, line * 64), false, locality);
  }
}

// A streaming pointwise kernel's inputs kAheadBytes ahead (MemoryHints::ahead).
void KernelEmitter::prefetch_ahead(int w) {
  prefetch_lines(hints_.ahead, w, SpreadShare{}, [&](const ir::Access&, int64_t esize) {
    return b_.getInt64(kAheadBytes / esize);
  }, 3);
}

// How a spread prefetch of the next row (MemoryHints::prefetch_phases) is
// shared: each listed phase in proportion to its arithmetic per element
// (op_cost of the exprs it evaluates along the row; a load, a value read
// back from the row stash, a store or a reduction step a quarter or one),
// so that the prefetches go out at one pace through the row's work. W2's
// exp-sum phase takes 82% of the next row, its store 18%; W3's squared
// deviations 36%, its store 64%. Measured on the 2-core Zen 4, loom's own
// kernels (W3 [8192, 4096] in one process with a copy of the same bytes,
// old and new library alternating): equal halves ran W3 5.1-5.3 ms against
// 5.5-6.0 with the whole next row in the second phase, but W2 6.4-6.6
// against 5.5-6.0: its short store phase sent half the row's prefetches
// in a burst. Phase 0 is never listed: it reads this row from memory, and
// prefetches beside those misses slowed both (5.6-5.9 and 6.6-7.0).
void KernelEmitter::plan_prefetch() {
  prefetch_weight_.clear();
  if (!hints_.prefetch_spread) return;
  const std::vector<bool> along = row_dependent();
  for (int p : hints_.prefetch_phases) {
    const ir::Phase& ph = k_.phases[p];
    phase_ = p;  // as the phase's loop sees the stash
    const std::vector<bool> need = phase_need(ph);
    double cost = static_cast<double>(ph.stores.size()) + (ph.kind == ir::Phase::Reduce ? 1 : 0);
    for (size_t e = 0; e < need.size(); ++e) {
      if (!need[e] || !along[e]) continue;
      const ir::Expr& x = k_.exprs[e];
      cost += x.kind == ExprKind::Op && !reloaded(static_cast<uint32_t>(e)) ? ir::lowering::op_cost(x.op) : 0.25;
    }
    prefetch_weight_.push_back(std::max<int64_t>(1, std::llround(cost * 4)));
  }
  phase_ = -1;
}

// The next row of the hinted accesses (MemoryHints::prefetch), from a
// w-lane step of the phase that is share `share` of the listed phases.
// Whole: the elements one row below this step's. Spread: the step at
// element i prefetches from element SpreadShare::from(i) of the next row,
// the phase's part at its weight's fraction of its pace (plan_prefetch).
void KernelEmitter::prefetch_next_row(int w, int share) {
  const int row_loop = k_.outer - 1;
  if (!hints_.prefetch_spread) {
    prefetch_lines(hints_.prefetch, w, SpreadShare{}, [&](const ir::Access& acc, int64_t) {
      return stride(access_index(acc), row_loop);
    }, 2);
    return;
  }
  const int inner = k_.loop.n - 1;
  const SpreadShare part = spread_share(k_.loop[inner], prefetch_weight_, static_cast<size_t>(share));
  Value* i = b_.CreateLoad(b_.getInt64Ty(), idx_[inner]);
  Value* from = b_.CreateUDiv(b_.CreateAdd(b_.getInt64(part.base), b_.CreateMul(i, b_.getInt64(part.num))),
                              b_.getInt64(part.den));  // SpreadShare::from(i)
  Value* along = b_.CreateSub(from, i);  // from this step's element to where its prefetch starts, in the row
  prefetch_lines(hints_.prefetch, w, part, [&](const ir::Access& acc, int64_t) {
    return b_.CreateAdd(along, stride(access_index(acc), row_loop));
  }, 2);
}


}  // namespace loom::jit::llvm_cpu::detail
