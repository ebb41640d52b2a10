// Lowers the pending graph behind some tensors exactly as a sync would see
// it, for the internal tests of lowering and the code generators.
#pragma once
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <cstdlib>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "api/src/record.h"
#include "ir/graph.h"
#include "ir/lower/lower.h"

namespace loom_test {

// The ops of the graph a sync of `t` would run.
inline std::set<loom::ir::Op> ops_of(const loom::Tensor& t) {
  loom::ir::NodePtr node = loom::detail::read(t, loom::SourceLoc::current());
  const loom::ir::Node* raw = node.get();
  loom::ir::Graph g;
  loom::ir::build_graph({&raw, 1}, g);
  std::set<loom::ir::Op> ops;
  for (const loom::ir::Node* n : g.nodes) ops.insert(n->op);
  return ops;
}

// With LOOM_TEST_PRINT set (or after a failure) the graph, the pass log and
// the program are printed.
inline loom::ir::KernelProgram lower_outputs(const std::vector<loom::Tensor>& outs,
                                              const loom::ir::LowerOptions& options = {},
                                              std::string* passes = nullptr) {
  std::vector<loom::ir::NodePtr> keep;
  std::vector<const loom::ir::Node*> raw;
  for (const auto& t : outs) {
    keep.push_back(loom::detail::read(t, loom::SourceLoc::current()));
    raw.push_back(keep.back().get());
  }
  loom::ir::Graph g;
  loom::ir::build_graph(raw, g);
  loom::ir::LowerLog log;
  loom::ir::KernelProgram p = loom::ir::lower(g, &log, options);
  if (passes) *passes = log.passes;
  if (::testing::Test::HasFailure() || std::getenv("LOOM_TEST_PRINT"))
    std::cerr << loom::ir::to_string(g) << log.passes << loom::ir::to_string(p);
  return p;
}

}  // namespace loom_test
