// Graph building: an iterative post-order walk that assigns each node its
// canonical index and writes its canonical words in the same pass.
#include "ir/graph.h"

#include <xxhash.h>

#include "ir/hash.h"

#include <algorithm>
#include <cstring>
#include <atomic>
#include <sstream>

namespace loom::ir {

uint64_t xxh3_64(const void* data, size_t bytes) {
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
  }();
  return avx2 ? detail::xxh3_64_avx2(data, bytes) : XXH3_64bits(data, bytes);
}

namespace {

std::atomic<uint64_t> g_forced_hash{0};

static_assert(static_cast<int>(Op::kCount) <= 128, "Node::kHeaderCached is bit 7 of the op byte");

// The header word of a node: everything about it that fits in 64 bits.
uint64_t compute_header_word(const Node& n) {
  uint64_t dev = static_cast<uint64_t>(n.device.type()) << 4 | (static_cast<uint64_t>(n.device.index()) & 0xF);
  return static_cast<uint64_t>(n.op) | static_cast<uint64_t>(n.dtype) << 8 | dev << 16 |
         static_cast<uint64_t>(n.shape.n) << 24 | static_cast<uint64_t>(n.attr.n) << 32 |
         static_cast<uint64_t>(n.num_scalars) << 40 | static_cast<uint64_t>(n.inputs.size()) << 48;
}
// The same, computed once per node (Node::header_cache).
inline uint64_t header_word(const Node& n) {
  uint64_t h = n.header_cache.load(std::memory_order_relaxed);
  if (!(h & Node::kHeaderCached)) [[unlikely]] {
    h = compute_header_word(n) | Node::kHeaderCached;
    n.header_cache.store(h, std::memory_order_relaxed);
  }
  return h & ~Node::kHeaderCached;
}

// A node on the walk's stack and its next input to visit.
struct Frame {
  const Node* node;
  uint32_t next;
};

// The walk's scratch, reused per thread so a steady-state build allocates nothing.
struct Scratch {
  std::vector<Frame> stack;
  // Canonical indices of placed inputs, awaiting their consumer: a node's
  // inputs are the last inputs.size() entries when it is placed.
  NoInitVector<uint32_t> ids;
};

// Out of line on purpose: GCC re-derives a thread_local's address with a
// __tls_get_addr call after every call it makes; through a returned
// reference it is an ordinary pointer.
[[gnu::noinline]] Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Doubles `v` (keeping its contents; NoInitVector: nothing is zero-filled)
// until `need` elements fit.
template <class T>
T* grow(NoInitVector<T>& v, size_t need) {
  v.resize(std::max(need, 2 * v.size()));
  return v.data();
}

}  // namespace

// The arrays of `g` are sized to their capacity for the walk and written
// through raw cursors, with one room check per array per node (not one per
// element), then trimmed to what was written: the canonical words go
// straight into g.canonical. Which nodes were already placed is each node's
// walk_mark, checked against g.nodes (see ir/node.h): no hash table.
void build_graph(std::span<const Node* const> outputs, Graph& g) {
  Scratch& scratch = thread_scratch();
  std::vector<Frame>& stack = scratch.stack;
  g.outputs.clear();
  g.input_nodes.clear();

  size_t node_cap = std::max<size_t>(g.nodes.capacity(), 64);
  g.nodes.resize(node_cap);
  g.in_begin.resize(node_cap + 1);
  g.scalar_begin.resize(node_cap + 1);
  g.in_idx.resize(std::max<size_t>(g.in_idx.capacity(), 128));
  g.canonical.resize(std::max<size_t>(g.canonical.capacity(), 512));
  g.scalars.resize(std::max<size_t>(g.scalars.capacity(), 64));
  scratch.ids.resize(std::max<size_t>(scratch.ids.capacity(), 128));
  const Node** nodes = g.nodes.data();
  uint32_t* in_begin = g.in_begin.data();
  uint32_t* scalar_begin = g.scalar_begin.data();
  uint32_t* in_idx = g.in_idx.data();
  size_t in_cap = g.in_idx.size();
  uint64_t* w = g.canonical.data();
  uint64_t* w_end = w + g.canonical.size();
  RtScalar* sc = g.scalars.data();
  RtScalar* sc_end = sc + g.scalars.size();
  uint32_t* ids = scratch.ids.data();
  uint32_t* ids_end = ids + scratch.ids.size();
  auto push_id = [&](uint32_t id) {
    if (ids == ids_end) [[unlikely]] {
      const size_t used = static_cast<size_t>(ids - scratch.ids.data());
      ids = grow(scratch.ids, used + 1) + used;
      ids_end = scratch.ids.data() + scratch.ids.size();
    }
    *ids++ = id;
  };

  uint32_t count = 0;  // nodes placed
  uint32_t edges = 0;  // in_idx entries written
  in_begin[0] = 0;
  *w++ = kIrVersion;
  for (const Node* out : outputs) {
    const uint32_t m = out->walk_mark.load(std::memory_order_relaxed);
    if (m < count && nodes[m] == out) {  // placed already (an output twice, or inside another's graph)
      g.outputs.push_back(m);
      continue;
    }
    stack.clear();
    stack.push_back(Frame{out, 0});
    while (true) {
      Frame& f = stack.back();
      const Node& n = *f.node;
      const uint32_t k = static_cast<uint32_t>(n.inputs.size());
      if (f.next < k) {
        const Node* child = n.inputs[f.next++].get();
        const uint32_t cm = child->walk_mark.load(std::memory_order_relaxed);
        if (cm < count && nodes[cm] == child)
          push_id(cm);  // placed before (a DAG has no back edges)
        else
          stack.push_back(Frame{child, 0});
        continue;
      }
      // All inputs placed: this node gets the next index.
      if (count == node_cap) [[unlikely]] {
        node_cap *= 2;
        nodes = grow(g.nodes, node_cap);
        in_begin = grow(g.in_begin, node_cap + 1);
        scalar_begin = grow(g.scalar_begin, node_cap + 1);
      }
      const uint32_t id = count++;
      nodes[id] = &n;
      n.walk_mark.store(id, std::memory_order_relaxed);
      const uint64_t header = header_word(n);
      const uint32_t n_shape = static_cast<uint32_t>(header >> 24 & 0xFF), n_attr = static_cast<uint32_t>(header >> 32 & 0xFF);
      const size_t words = 1 + n_shape + n_attr + k;
      // Room for every shape slot (copied whole, below) and the end marker.
      if (static_cast<size_t>(w_end - w) < words + kMaxDims + 1) [[unlikely]] {
        const size_t used = static_cast<size_t>(w - g.canonical.data());
        w = grow(g.canonical, used + words + kMaxDims + 1) + used;
        w_end = g.canonical.data() + g.canonical.size();
      }
      if (static_cast<size_t>(sc_end - sc) < n.num_scalars) [[unlikely]] {
        const size_t used = static_cast<size_t>(sc - g.scalars.data());
        sc = grow(g.scalars, used + n.num_scalars) + used;
        sc_end = g.scalars.data() + g.scalars.size();
      }
      if (edges + k > in_cap) [[unlikely]] {
        in_idx = grow(g.in_idx, edges + k);
        in_cap = g.in_idx.size();
      }
      *w++ = header;
      // All kMaxDims slots in one fixed-size copy (unused ones are zero, and
      // the next words overwrite them): a loop over the dims cost twice as much.
      static_assert(sizeof(n.shape.v) == kMaxDims * sizeof(uint64_t));
      std::memcpy(w, n.shape.v.data(), sizeof(n.shape.v));
      w += n_shape;
      for (uint32_t a = 0; a < n_attr; ++a) *w++ = static_cast<uint64_t>(n.attr[a]);
      ids -= k;
      for (uint32_t j = 0; j < k; ++j) {
        w[j] = ids[j];
        in_idx[edges + j] = ids[j];
      }
      w += k;
      edges += k;
      in_begin[id + 1] = edges;
      scalar_begin[id] = static_cast<uint32_t>(sc - g.scalars.data());
      for (uint8_t s = 0; s < n.num_scalars; ++s) *sc++ = n.scalar[s];
      if (n.op == Op::Input) g.input_nodes.push_back(id);
      stack.pop_back();
      if (stack.empty()) {
        g.outputs.push_back(id);
        break;
      }
      push_id(id);  // an input of the node below it
    }
  }
  g.scalars.resize(static_cast<size_t>(sc - g.scalars.data()));
  scalar_begin[count] = static_cast<uint32_t>(g.scalars.size());
  g.nodes.resize(count);
  g.in_begin.resize(count + 1);
  g.scalar_begin.resize(count + 1);
  g.in_idx.resize(edges);
  size_t used = static_cast<size_t>(w - g.canonical.data());
  if (g.canonical.size() < used + 1 + g.outputs.size()) grow(g.canonical, used + 1 + g.outputs.size());
  w = g.canonical.data() + used;
  *w++ = ~0ull;  // separates nodes from outputs
  for (uint32_t id : g.outputs) *w++ = id;
  g.canonical.resize(static_cast<size_t>(w - g.canonical.data()));
  uint64_t forced = g_forced_hash.load(std::memory_order_relaxed);
  g.hash = forced ? forced : xxh3_64(g.canonical.data(), g.canonical.size() * sizeof(uint64_t));
}

std::string to_string(const Graph& g) {
  std::ostringstream os;
  for (uint32_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = *g.nodes[i];
    os << "%" << i << " = " << op_name(n.op) << " " << to_string(n.dtype) << "[";
    for (size_t d = 0; d < n.shape.n; ++d) os << (d ? "," : "") << n.shape[d];
    os << "]";
    if (n.device.is_cuda()) os << "@" << n.device.str();
    if (n.attr.n) {
      os << " {";
      for (size_t a = 0; a < n.attr.n; ++a) os << (a ? "," : "") << n.attr[a];
      os << "}";
    }
    auto ins = g.inputs_of(i);
    const bool scalar_operand = has_scalar_operand(n);  // "(%0, $0.5)": the scalar is the second operand
    if (!ins.empty()) {
      os << " (";
      for (size_t k = 0; k < ins.size(); ++k) os << (k ? ", " : "") << "%" << ins[k];
      if (scalar_operand) os << ", $" << g.scalars[g.scalar_begin[i]].f;
      os << ")";
    }
    if (!scalar_operand)
      for (uint32_t s = g.scalar_begin[i]; s < g.scalar_begin[i + 1]; ++s) os << " $" << g.scalars[s].f;
    if (n.line) os << "  # " << n.file << ":" << n.line;
    os << "\n";
  }
  os << "outputs:";
  for (auto o : g.outputs) os << " %" << o;
  os << "\n";
  return os.str();
}

namespace testing {
void force_hash(uint64_t value) { g_forced_hash.store(value); }
}  // namespace testing

}  // namespace loom::ir
