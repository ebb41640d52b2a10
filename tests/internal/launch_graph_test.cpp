// The dependencies of a replayed CUDA graph (runtime/cuda/launch_graph.h):
// what must wait, what may overlap. Pure address arithmetic, no GPU.
#include <gtest/gtest.h>

#include <loom/loom.h>

#include <algorithm>
#include <cstdio>

#include "runtime/cuda/launch_graph.h"
#include "tests/internal/lower_util.h"

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

// A training step as the cuda backend lowers it (forward, cross-entropy,
// backward, momentum SGD updating parameters and buffers): the loss's label
// side and the bias gradients need nothing the forward products compute,
// so the graph is not a chain.
TEST(LaunchGraph, TrainingStepIsNotAChain) {
  loom::manual_seed(1);
  loom::Tensor x = loom::randn({64, 96}), y = loom::randint(0, 10, {64});
  loom::Tensor w1 = loom::randn({128, 96}), b1 = loom::randn({128}), w2 = loom::randn({10, 128}), b2 = loom::randn({10});
  std::vector<loom::Tensor> params = {w1, b1, w2, b2}, moms;
  for (auto& p : params) p.set_requires_grad(true), moms.push_back(loom::zeros_like(p) + 0.5);
  loom::sync();
  loom::Tensor loss = loom::nn::functional::cross_entropy(
      loom::nn::functional::linear(loom::relu(loom::nn::functional::linear(x, w1, b1)), w2, b2), y);
  loss.backward();
  std::vector<loom::Tensor> outs;
  {
    loom::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      moms[i].mul_(0.9).add_(params[i].grad());
      params[i].sub_(moms[i] * 0.01);
      outs.push_back(params[i]), outs.push_back(moms[i]);
    }
  }
  loom::ir::LowerOptions cuda;
  cuda.gemm_kernels = cuda.narrow_products_as_rows = cuda.short_products_inline = true;
  const loom::ir::KernelProgram p = loom_test::lower_outputs(outs, cuda);
  std::vector<LaunchSite> sites;
  for (uint32_t s = 0; s < p.steps.size(); ++s) sites.push_back({s, -1});
  const std::vector<int32_t> fresh_outputs(p.buffers.size(), -1);
  const auto deps =
      launch_dependencies(launch_memory(p, fresh_outputs, sites, uintptr_t{1} << 40, 0, 0, uintptr_t{1} << 41));
  const size_t depth = longest_chain(deps);
  if (std::getenv("LOOM_TEST_PRINT") || depth > sites.size() / 2 + 1)
    for (size_t i = 0; i < deps.size(); ++i) {
      std::string line = (p.steps[i].kind == loom::ir::Step::Generated ? p.kernels[p.steps[i].index].name : "library") + " after";
      for (uint32_t d : deps[i]) line += " " + std::to_string(d);
      std::fprintf(stderr, "%zu %s\n", i, line.c_str());
    }
  // Forward, loss, the backward products and one update in a row; the
  // label side, the bias sums and the other updates beside them.
  EXPECT_LE(depth, sites.size() / 2 + 1);
  EXPECT_GE(std::count_if(deps.begin() + 1, deps.end(), [](const auto& d) { return d.empty(); }), 1)
      << "the labels' count waits for nothing";
}

}  // namespace
}  // namespace loom::runtime::cuda
