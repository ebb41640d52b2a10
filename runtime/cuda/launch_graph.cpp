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
