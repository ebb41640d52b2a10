// The dependencies of a replayed CUDA graph (runtime/cuda/launch_graph.h):
// what must wait, what may overlap. Pure address arithmetic, no GPU.
#include <gtest/gtest.h>

#include "runtime/cuda/launch_graph.h"

namespace loom::runtime::cuda {
namespace {

using Deps = std::vector<std::vector<uint32_t>>;

MemoryRange at(uintptr_t begin, uintptr_t bytes) { return {begin, begin + bytes}; }

TEST(LaunchGraph, IndependentLaunchesShareNoEdge) {
  // Two products reading the same input, writing different buffers, then a
  // launch reading both results.
  const std::vector<LaunchMemory> l = {
      {{at(0, 100)}, {at(1000, 100)}},
      {{at(0, 100)}, {at(2000, 100)}},
      {{at(1000, 100), at(2000, 100)}, {at(3000, 4)}},
  };
  EXPECT_EQ(launch_dependencies(l), (Deps{{}, {}, {0, 1}}));
  EXPECT_EQ(longest_chain(launch_dependencies(l)), 2u);
}

TEST(LaunchGraph, EveryHazardOrders) {
  // Read after write, write after read (an in-place update of what an
  // earlier launch reads), write after write.
  EXPECT_EQ(launch_dependencies({{{}, {at(0, 8)}}, {{at(4, 8)}, {}}}), (Deps{{}, {0}}));
  EXPECT_EQ(launch_dependencies({{{at(0, 8)}, {}}, {{}, {at(0, 8)}}}), (Deps{{}, {0}}));
  EXPECT_EQ(launch_dependencies({{{}, {at(0, 8)}}, {{}, {at(7, 1)}}}), (Deps{{}, {0}}));
  // Two readers of one buffer never wait for each other; touching ends do
  // not overlap; an empty range touches nothing.
  EXPECT_EQ(launch_dependencies({{{at(0, 8)}, {}}, {{at(0, 8)}, {}}}), (Deps{{}, {}}));
  EXPECT_EQ(launch_dependencies({{{}, {at(0, 8)}}, {{at(8, 8)}, {at(16, 8)}}}), (Deps{{}, {}}));
  EXPECT_EQ(launch_dependencies({{{}, {at(0, 0)}}, {{at(0, 8)}, {}}}), (Deps{{}, {}}));
}

TEST(LaunchGraph, ArenaReuseOrdersByAddress) {
  // A temporary is written and read; a later temporary reuses part of its
  // arena space: the new writer must wait for the old reader.
  const std::vector<LaunchMemory> l = {
      {{}, {at(0, 64)}},          // t1 = ...
      {{at(0, 64)}, {at(512, 4)}},  // out1 = f(t1)
      {{}, {at(32, 64)}},         // t2 = ... in t1's old space
  };
  EXPECT_EQ(launch_dependencies(l), (Deps{{}, {0}, {1}}));  // 2 after 0 through 1: no edge of its own
}

TEST(LaunchGraph, ImpliedEdgesAreLeftOut) {
  // A chain a -> b -> c where c also reads a's output: c waits for b only.
  const std::vector<LaunchMemory> l = {
      {{}, {at(0, 8)}},
      {{at(0, 8)}, {at(8, 8)}},
      {{at(0, 8), at(8, 8)}, {at(16, 8)}},
  };
  EXPECT_EQ(launch_dependencies(l), (Deps{{}, {0}, {1}}));
  EXPECT_EQ(longest_chain(launch_dependencies(l)), 3u);
}

}  // namespace
}  // namespace loom::runtime::cuda
