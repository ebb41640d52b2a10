// LOOM_LOG=fusion and loom::explain() describe the same graph in the same
// numbering: a reader takes "%7" from one to the other. Each buffer-owning
// node carries its source line and every reason it owns a buffer.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <sstream>
#include <string>
#include <vector>

#include "api/src/lazy.h"
#include "ir/graph.h"
#include "ir/lower/lower.h"
#include "runtime/lower_program.h"

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// "%3 relu Float[64,16] (file:12): reason" -> "%3 = relu Float[64,16]": the
// start of the same node's line in explain().
std::string explain_prefix(const std::string& fusion_line) {
  const size_t space = fusion_line.find(' ');
  const size_t bracket = fusion_line.find(']');
  return fusion_line.substr(0, space) + " =" + fusion_line.substr(space, bracket + 1 - space);
}

TEST(FusionLog, NumbersNodesAsExplainDoesWithLinesAndEveryReason) {
  auto x = loom::randn({64, 32});
  auto w = loom::randn({32, 16});
  loom::sync();
  auto other = x * 2.0;  // another live pending tensor: part of the same sync
  auto a = loom::matmul(x, w);
  auto b = loom::relu(a);
  auto m = b.mean();
  auto e = loom::exp(b - m);

  const std::string explained = loom::explain(e);
  std::vector<loom::ir::NodePtr> outs = loom::detail::pending_outputs(x.device());
  std::vector<const loom::ir::Node*> raw;
  for (const auto& n : outs) raw.push_back(n.get());
  loom::ir::Graph g;
  loom::ir::build_graph(raw, g);
  loom::ir::KernelProgram p = loom::ir::lower(g);
  const std::string fusion = loom::runtime::fusion_text(g, p);
  SCOPED_TRACE("explain:\n" + explained + "\nfusion:\n" + fusion);

  EXPECT_NE(explained.find("next sync"), std::string::npos);
  EXPECT_NE(explained.find(std::to_string(g.nodes.size()) + " nodes"), std::string::npos);
  size_t boundaries = 0, with_line = 0, several_reasons = 0;
  for (const std::string& l : lines_of(fusion)) {
    if (l.empty() || l[0] != '%') continue;
    ++boundaries;
    const std::string prefix = explain_prefix(l);
    const size_t at = explained.find(prefix + " ");
    ASSERT_NE(at, std::string::npos) << "explain has no node line starting '" << prefix << "'";
    // The source line fusion names is the one explain's node line names.
    const size_t open = l.find(" ("), close = l.find("): ");
    if (open != std::string::npos && close != std::string::npos) {
      ++with_line;
      const std::string loc = l.substr(open + 2, close - open - 2);
      const std::string node_line = explained.substr(at, explained.find('\n', at) - at);
      EXPECT_NE(node_line.find("# " + loc), std::string::npos) << node_line;
      EXPECT_NE(loc.find("fusion_log_test.cpp"), std::string::npos) << loc;
    }
    several_reasons += l.find("; ") != std::string::npos;
  }
  EXPECT_GE(boundaries, 3u);  // the product, the mean, the outputs
  EXPECT_GE(with_line, 3u);
  EXPECT_GE(several_reasons, 1u);  // the product's output: a library call's result and a live tensor
  EXPECT_NE(fusion.find("kernel "), std::string::npos);
  (void)other;
}

// A materialized tensor is explained as its own graph (an input leaf).
TEST(FusionLog, ExplainOfAMaterializedTensorIsItsOwnGraph) {
  auto x = loom::randn({8});
  loom::sync();
  const std::string text = loom::explain(x);
  EXPECT_EQ(text.find("next sync"), std::string::npos) << text;
  EXPECT_NE(text.find("1 nodes"), std::string::npos) << text;
}

}  // namespace
