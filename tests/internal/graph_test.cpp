// The graph walk (ir/build_graph) on hand-built nodes: stale walk marks and
// cached header words never change a graph, a shared node is placed once,
// and the hash is XXH3 bit for bit on every vector unit.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <memory>
#include <random>
#include <vector>

#include "ir/graph.h"
#include "ir/hash.h"

namespace {

using loom::ir::Graph;
using loom::ir::Node;
using loom::ir::NodePtr;
using loom::ir::Op;

std::shared_ptr<Node> node(Op op, std::vector<NodePtr> inputs, std::vector<int64_t> shape = {4}) {
  auto n = std::make_shared<Node>();
  n->op = op;
  n->dtype = loom::kFloat;
  n->shape = loom::ir::Dims(shape.data(), shape.size());
  for (auto& in : inputs) n->inputs.push_back(in);
  return n;
}

Graph build(const std::vector<NodePtr>& outs) {
  std::vector<const Node*> raw;
  for (const auto& o : outs) raw.push_back(o.get());
  Graph g;
  loom::ir::build_graph(raw, g);
  return g;
}

// x, a = x + x, b = a * x, c = b - a, d = c * 2 (scalar operand): a diamond.
struct Dag {
  NodePtr x = node(Op::Input, {});
  NodePtr a = node(Op::Add, {x, x});
  NodePtr b = node(Op::Mul, {a, x});
  NodePtr c = node(Op::Sub, {b, a});
  NodePtr d = [&] {
    auto n = node(Op::Mul, {c});
    n->scalar[0] = loom::ir::RtScalar{2, 2};
    n->num_scalars = 1;
    return n;
  }();
  std::vector<NodePtr> all() const { return {x, a, b, c, d}; }
};

TEST(GraphBuild, ASharedNodeIsPlacedOnceInPostOrder) {
  Dag dag;
  Graph g = build({dag.d, dag.b});
  ASSERT_EQ(g.size(), 5u);
  const std::vector<const Node*> want = {dag.x.get(), dag.a.get(), dag.b.get(), dag.c.get(), dag.d.get()};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(g.nodes[i], want[i]) << i;
  EXPECT_EQ(g.outputs, (std::vector<uint32_t>{4, 2}));
  EXPECT_EQ(std::vector<uint32_t>(g.inputs_of(1).begin(), g.inputs_of(1).end()), (std::vector<uint32_t>{0, 0}));
  EXPECT_EQ(std::vector<uint32_t>(g.inputs_of(3).begin(), g.inputs_of(3).end()), (std::vector<uint32_t>{2, 1}));
  EXPECT_EQ(g.inputs_of(4).size(), 1u);
  EXPECT_EQ(g.scalars.size(), 1u);
  EXPECT_EQ(g.scalar_begin[4], 0u);
  EXPECT_EQ(g.scalar_begin[5], 1u);
  EXPECT_EQ(g.input_nodes, (std::vector<uint32_t>{0}));
}

// A node's walk_mark is only a hint: whatever it holds (another graph's
// index, another node's, garbage), the graph comes out the same.
TEST(GraphBuild, StaleWalkMarksNeverChangeTheGraph) {
  Dag dag;
  const Graph clean = build({dag.d});
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    for (const auto& n : dag.all()) n->walk_mark.store(static_cast<uint32_t>(rng() % 8));
    if (trial % 3 == 0) build({dag.b, dag.c});  // marks from another graph of the same nodes
    const Graph g = build({dag.d});
    EXPECT_EQ(g.canonical, clean.canonical);
    EXPECT_EQ(g.hash, clean.hash);
    EXPECT_EQ(g.nodes, clean.nodes);
  }
}

// The header word is computed by the first walk and reused: the same words,
// and a recycled node (header_cache reset) gets its own.
TEST(GraphBuild, CachedHeaderWordsMatchFreshOnes) {
  Dag dag;
  const Graph first = build({dag.d});
  const Graph second = build({dag.d});
  EXPECT_EQ(first.canonical, second.canonical);
  Dag fresh;
  EXPECT_EQ(build({fresh.d}).canonical, first.canonical);
  auto other = node(Op::Add, {dag.x, dag.x}, {2, 2});
  EXPECT_NE(build({other}).canonical, build({dag.a}).canonical);  // another shape, another word
}

TEST(Hash, Xxh3OnEveryVectorUnitIsXxh3) {
  std::mt19937_64 rng(1);
  std::vector<unsigned char> bytes(40000);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  std::vector<size_t> sizes;
  for (size_t n = 0; n <= 512; ++n) sizes.push_back(n);
  for (size_t n : {1000, 1024, 2047, 2048, 2049, 4096, 8191, 32768, 32776, 40000}) sizes.push_back(n);
  for (size_t n : sizes) {
    for (size_t off : {0, 1, 8}) {
      if (off + n > bytes.size()) continue;
      const uint64_t want = XXH3_64bits(bytes.data() + off, n);
      EXPECT_EQ(loom::ir::xxh3_64(bytes.data() + off, n), want) << n << " at " << off;
      if (__builtin_cpu_supports("avx2"))
        EXPECT_EQ(loom::ir::detail::xxh3_64_avx2(bytes.data() + off, n), want) << n << " at " << off;
    }
  }
}

}  // namespace
