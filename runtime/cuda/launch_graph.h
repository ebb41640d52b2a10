// Which launches of a replayed program must wait for which.
//
// The first run of a program launches its steps one after another on
// loom's stream. Its CUDA graph (cuda_executable.cpp) keeps only the order
// that memory needs: a launch waits for the earlier launches that write
// memory it reads or writes, or read memory it writes. Launches with no
// such path between them may run at the same time. That is what fills the
// GPU when one product has too few tiles for all its SMs: in W4's backward
// pass the weight gradients of fc1 and fc2 each fill half an H100, and
// they do not depend on each other.
//
// Memory is compared by address range, not by buffer id: temporaries share
// the arena (ir/lower.cpp plans them by liveness) and an output may be
// written into a donated input's buffer, so two buffers may be one memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::runtime::cuda {

struct MemoryRange {
  uintptr_t begin = 0, end = 0;  // [begin, end); empty ranges touch nothing
};

struct LaunchMemory {
  std::vector<MemoryRange> reads, writes;
};

// For each launch, the earlier launches it must wait for, ascending. An
// edge that another path already implies is left out.
std::vector<std::vector<uint32_t>> launch_dependencies(const std::vector<LaunchMemory>& launches);

// The most launches on one path of `deps` (each waits for the one before):
// the number of launches when the graph is a chain.
size_t longest_chain(const std::vector<std::vector<uint32_t>>& deps);

}  // namespace loom::runtime::cuda
