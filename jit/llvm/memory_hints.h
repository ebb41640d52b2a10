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
  // Row kernels: while phase `prefetch_phase` runs over row i, the row i+1
  // elements of these accesses (read from memory by phase 0) are prefetched
  // into L2, so the next row's memory reads overlap this row's arithmetic
  // instead of following it. -1: none.
  int prefetch_phase = -1;
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

inline constexpr int64_t kStreamBytes = int64_t{16} << 20;
// Inputs smaller than this stay in the caches between rows: no prefetch.
inline constexpr int64_t kPrefetchBytes = int64_t{4} << 20;

MemoryHints memory_hints(const ir::KernelProgram& p, const ir::Kernel& k);

// When this file was built (part of compiled objects' disk-cache key).
std::string memory_hints_build_id();

}  // namespace loom::jit::llvm_cpu
