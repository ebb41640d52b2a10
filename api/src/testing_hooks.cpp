// loom::testing hooks that look inside the lazy core without running it:
// the cache key of a pending graph (bench O2, hash tests) and a weak
// reference to a tensor's node (tests that a sync frees what it ran).
#include <loom/runtime.h>

#include "api/src/record.h"
#include "ir/graph.h"

namespace loom::testing {

uint64_t graph_key(const Tensor& t, size_t* nodes) {
  auto loc = SourceLoc::current();
  detail::impl_of(t, "graph_key", loc);
  ir::NodePtr n = detail::read(t, loc);
  const ir::Node* raw = n.get();
  // Reused per thread, as sync's graph is: the benchmark measures the same
  // allocation-free steady state a sync sees.
  thread_local ir::Graph graph;
  ir::build_graph(std::span<const ir::Node* const>(&raw, 1), graph);
  if (nodes) *nodes = graph.size();
  return graph.hash;
}

std::weak_ptr<const void> node_ref(const Tensor& t) {
  auto loc = SourceLoc::current();
  return detail::impl_of(t, "node_ref", loc).storage->node();
}

}  // namespace loom::testing
