// Which launches of a replayed program must wait for which.
//
// The first run of a program launches its steps one after another on
// loom's stream. Its CUDA graph (cuda_executable.cpp) keeps only the order
// that memory needs: a launch waits for the earlier launches that write
// memory it reads or writes, or read memory it writes. Launches with no
// such path between them may run at the same time: W4's ~15 small kernels
// (the loss's label side, the bias-gradient sums and their updates) need
// nothing the forward products compute and run beside them (an H100:
// 0.150-0.158 against 0.172-0.183 ms a step as a chain).
//
// Memory is given as ranges, so that the caller can make two buffers that
// may be one memory overlap: temporaries share the arena (ir/lower/fusion.cpp
// plans them by liveness) and an output may be written into a donated
// input's buffer (cuda_executable.cpp, CudaExecutable::dependencies).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ir/kernel.h"

namespace loom::runtime::cuda {

struct MemoryRange {
  uintptr_t begin = 0, end = 0;  // [begin, end); empty ranges touch nothing
};

struct LaunchMemory {
  std::vector<MemoryRange> reads, writes;
};

// What each launch of a program reads and writes, as ranges that stay right
// while the buffers' addresses change under a built graph, as long as the
// same outputs are written into the same inputs' buffers: a temporary is its
// range of the arena (at `arena`), an input its buffer id, an output its
// buffer id and, where `written_into[b]` names one, that of the input whose
// buffer it is written into (a donated output; else a fresh buffer). A
// split-K launch also writes its workspace slot; a step that can fail writes
// the error words (at `err`) and every launch after one reads them, so a
// failure keeps program order and what follows it writes nothing.
struct LaunchSite {
  uint32_t step = 0;   // the program step it belongs to
  int workspace = -1;  // its split-K workspace slot, or -1
};
std::vector<LaunchMemory> launch_memory(const ir::KernelProgram& program, const std::vector<int32_t>& written_into,
                                        const std::vector<LaunchSite>& launches, uintptr_t arena, uintptr_t workspace,
                                        int64_t slot_bytes, uintptr_t err);

// For each launch, the earlier launches it must wait for, ascending. An
// edge that another path already implies is left out.
std::vector<std::vector<uint32_t>> launch_dependencies(const std::vector<LaunchMemory>& launches);

// The most launches on one path of `deps` (each waits for the one before):
// the number of launches when the graph is a chain.
size_t longest_chain(const std::vector<std::vector<uint32_t>>& deps);

}  // namespace loom::runtime::cuda
