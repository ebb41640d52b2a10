// ir::Graph: the pending nodes reachable from a sync's outputs, in a
// canonical order, with the canonical form that keys the executable cache.
//
// build_graph() is the only place that decides what a graph "is" for the
// cache: ops, dtypes, shapes, attributes, devices and input topology enter
// the canonical words; buffers, scalars, node addresses and source lines do
// not. Backends compile from a Graph; the executor binds its inputs and
// scalars on every run, hit or miss.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ir/node.h"

namespace loom::ir {

// std::allocator, except that resize() leaves new elements uninitialized:
// build_graph grows its arrays ahead of a raw write cursor, and zero-filling
// what it is about to overwrite would cost as much as writing it.
template <class T>
struct NoInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  NoInitAllocator() = default;
  template <class U>
  NoInitAllocator(const NoInitAllocator<U>&) noexcept {}  // NOLINT: rebinding
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-init: no zeroing of scalars and pointers
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
template <class T>
using NoInitVector = std::vector<T, NoInitAllocator<T>>;
// The canonical words of a graph: the executable cache stores and compares these.
using Words = NoInitVector<uint64_t>;

struct Graph {
  // Topological order: every node after its inputs. Raw pointers: the caller
  // keeps the output nodes (and so the whole graph) alive while it is used.
  NoInitVector<const Node*> nodes;
  // inputs of nodes[i] are in_idx[in_begin[i] .. in_begin[i+1]) (indices into nodes)
  NoInitVector<uint32_t> in_begin;
  NoInitVector<uint32_t> in_idx;
  // nodes[] indices of the graph's results, in the order asked for (may repeat)
  std::vector<uint32_t> outputs;
  // nodes[] indices of Input leaves: the executable's input slots, in order
  std::vector<uint32_t> input_nodes;
  // runtime scalars of all nodes, in node order; node i's start at scalar_begin[i]
  NoInitVector<RtScalar> scalars;
  NoInitVector<uint32_t> scalar_begin;

  Words canonical;   // the cache key's full text
  uint64_t hash = 0;                // XXH3 of `canonical`

  std::span<const uint32_t> inputs_of(uint32_t i) const {
    return {in_idx.data() + in_begin[i], in_idx.data() + in_begin[i + 1]};
  }
  size_t size() const { return nodes.size(); }
};

// Walks from `outputs` (stopping at Input leaves) and fills a Graph.
void build_graph(std::span<const Node* const> outputs, Graph& g);

// One line per node: "%3 = add f32[16] (%1, %2)  # main.cpp:12". For
// LOOM_LOG=graph, LOOM_DUMP_DIR and loom::explain.
std::string to_string(const Graph& g);

namespace testing {
// Nonzero: every graph hashes to this value (collision tests).
void force_hash(uint64_t value);
}

}  // namespace loom::ir
