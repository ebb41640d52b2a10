// How a generated kernel should treat memory beyond plain loads and stores:
// which stores bypass the caches and which loads to prefetch (a row
// kernel's next row, a streaming pointwise kernel's inputs ahead). Pure
// decisions on the loop IR; jit/llvm/kernel_emitter.cpp emits them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/kernel.h"

namespace loom::jit::llvm_cpu {

struct MemoryHints {
  // Per access of the kernel: stores through it are non-temporal (written
  // around the caches, without first reading the line) where the address
  // is 64-byte aligned. Chosen for contiguous stores into graph outputs of
  // at least kStreamBytes that nothing else in the program reads: a normal
  // store would read every line from memory first (a third more traffic on
  // a copy), and an output that size has mostly left the caches (32 MiB of
  // L3 on the Zen 4 measured) by the time a later program reads it.
  std::vector<bool> stream;
  // Row kernels: while the phases in `prefetch_phases` run over row i, the
  // row i+1 elements of these accesses (read from memory by phase 0) are
  // prefetched into L2, so the next row's memory reads overlap this row's
  // arithmetic instead of following it. Empty: none.
  //
  // Spread (a row over one loop): every phase after the first that walks
  // the whole row is listed, and each prefetches its own consecutive part
  // of the next row, a few lines a step, sized by the emitter to the
  // phase's arithmetic (KernelEmitter::plan_prefetch) so that the requests
  // keep one pace through the row's work. Otherwise the one phase listed,
  // the first after phase 0 that walks the row, prefetches the next row
  // whole, each step the elements one row below its own. Layer norm's
  // passes (sum, squared deviations, store) with the whole next row
  // fetched in the second, its shortest: 256 lines requested in a few
  // hundred cycles, more than the core's miss queues hold, and the next
  // first pass waits for the rest. W3 [8192, 4096] on the 2-core Zen 4,
  // one process, old and new library alternating, six rounds: 5.53-5.88 ms
  // whole in the second pass, 4.97-5.14 spread over the second and third
  // (a copy of the same bytes 3.3 ms); W2 5.45-5.91 against 5.56-5.88.
  std::vector<int> prefetch_phases;
  bool prefetch_spread = false;
  std::vector<uint32_t> prefetch;
  // Pointwise kernels with a streamed store: the loads through these
  // accesses are prefetched kAheadBytes ahead of each step of the streamed
  // loop, one prefetch per cache line. The hardware prefetcher alone falls
  // behind when each line takes much arithmetic (W1) and still trails a
  // copy; measured on the 2-core Zen 4, in one process, the same kernel with
  // and without, medians of 100 (40) alternating calls: W1 2^24 5.63-6.20 ->
  // 5.23-5.63 ms, a copy-like `x + 0` of 2^26 floats (p10) 7.45-8.56 ->
  // 7.10-8.01 ms.
  std::vector<uint32_t> ahead;
};

inline constexpr int64_t kAheadBytes = 4096;

// A spread prefetch's arithmetic (KernelEmitter::prefetch_next_row): the
// listed phase `share`, of weight W_s among `weights` (KernelEmitter::
// plan_prefetch), walks its part of the next row, after the parts of the
// phases before it, at W_s / T of its own pace (T the total): its step at
// element i of a row of `len` prefetches from element (base + i num) / den
// of the next row (SpreadShare::from), lines(...) lines of it: enough that
// consecutive w-element steps leave no line out, and the last step of one
// phase meets the first of the next. {0, 1, 1}: the whole row, each step
// its own w elements.
struct SpreadShare {
  int64_t base = 0, num = 1, den = 1;
  int64_t from(int64_t i) const { return (base + i * num) / den; }
  int64_t lines(int64_t w, int64_t esize) const { return (w * esize * num + 64 * den - 1) / (64 * den); }
};
inline SpreadShare spread_share(int64_t len, const std::vector<int64_t>& weights, size_t share) {
  SpreadShare s{0, weights[share], 0};
  for (size_t k = 0; k < weights.size(); ++k) {
    if (k < share) s.base += weights[k] * len;
    s.den += weights[k];
  }
  return s;
}

inline constexpr int64_t kStreamBytes = int64_t{16} << 20;
// Inputs smaller than this stay in the caches between rows: no prefetch.
inline constexpr int64_t kPrefetchBytes = int64_t{4} << 20;

MemoryHints memory_hints(const ir::KernelProgram& p, const ir::Kernel& k);

}  // namespace loom::jit::llvm_cpu
