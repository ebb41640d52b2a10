#include "runtime/cuda/launch_graph.h"

#include <algorithm>

namespace loom::runtime::cuda {

namespace {

bool overlaps(const std::vector<MemoryRange>& xs, const std::vector<MemoryRange>& ys) {
  for (const MemoryRange& x : xs)
    for (const MemoryRange& y : ys)
      if (x.begin < x.end && y.begin < y.end && x.begin < y.end && y.begin < x.end) return true;
  return false;
}

// Read-after-write, write-after-read and write-after-write.
bool conflict(const LaunchMemory& earlier, const LaunchMemory& later) {
  return overlaps(earlier.writes, later.reads) || overlaps(earlier.writes, later.writes) ||
         overlaps(earlier.reads, later.writes);
}

}  // namespace

std::vector<LaunchMemory> launch_memory(const ir::KernelProgram& program, const std::vector<int32_t>& written_into,
                                        const std::vector<LaunchSite>& launches, uintptr_t arena, uintptr_t workspace,
                                        int64_t slot_bytes, uintptr_t err) {
  auto range = [](uintptr_t begin, int64_t bytes) { return MemoryRange{begin, begin + static_cast<uintptr_t>(bytes)}; };
  // Buffer ids as one-byte ranges below any device address.
  auto id_range = [](uint32_t id) { return MemoryRange{2 * uintptr_t{id} + 1, 2 * uintptr_t{id} + 2}; };
  auto buffer_ranges = [&](uint32_t id, std::vector<MemoryRange>& out) {
    const ir::BufferInfo& info = program.buffers[id];
    if (info.kind == ir::BufferKind::Temp) {
      out.push_back(range(arena + static_cast<uintptr_t>(info.arena_offset),
                          info.numel * static_cast<int64_t>(element_size(info.dtype))));
      return;
    }
    out.push_back(id_range(id));
    if (id < written_into.size() && written_into[id] >= 0) out.push_back(id_range(static_cast<uint32_t>(written_into[id])));
  };
  std::vector<LaunchMemory> memory(launches.size());
  bool fallible_before = false;
  for (size_t i = 0; i < launches.size(); ++i) {
    const ir::Step& step = program.steps[launches[i].step];
    const ir::StepBuffers b = ir::step_buffers(program, step);
    LaunchMemory& m = memory[i];
    for (uint32_t id : b.reads) buffer_ranges(id, m.reads);
    for (uint32_t id : b.writes) buffer_ranges(id, m.writes);
    if (launches[i].workspace >= 0)
      m.writes.push_back(range(workspace + static_cast<uintptr_t>(launches[i].workspace * slot_bytes), slot_bytes));
    if (ir::can_fail(program, step)) {
      m.writes.push_back(range(err, 16));
      fallible_before = true;
    } else if (fallible_before) {
      m.reads.push_back(range(err, 16));
    }
  }
  return memory;
}

std::vector<std::vector<uint32_t>> launch_dependencies(const std::vector<LaunchMemory>& launches) {
  const size_t n = launches.size();
  std::vector<std::vector<uint32_t>> deps(n);
  // reach[j][i]: launch j runs after launch i, directly or through others.
  std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
  for (size_t j = 0; j < n; ++j) {
    // Latest first: a conflict with an earlier launch that a later
    // dependency already waits for needs no edge of its own.
    for (size_t i = j; i-- > 0;) {
      if (reach[j][i] || !conflict(launches[i], launches[j])) continue;
      deps[j].push_back(static_cast<uint32_t>(i));
      reach[j][i] = true;
      for (size_t k = 0; k < i; ++k)
        if (reach[i][k]) reach[j][k] = true;
    }
    std::sort(deps[j].begin(), deps[j].end());
  }
  return deps;
}

size_t longest_chain(const std::vector<std::vector<uint32_t>>& deps) {
  std::vector<size_t> depth(deps.size(), 1);  // dependencies come before their dependents
  size_t longest = 0;
  for (size_t j = 0; j < deps.size(); ++j) {
    for (uint32_t i : deps[j]) depth[j] = std::max(depth[j], depth[i] + 1);
    longest = std::max(longest, depth[j]);
  }
  return longest;
}

}  // namespace loom::runtime::cuda
