// Graph building: an iterative post-order walk that assigns each node its
// canonical index and writes its canonical words in the same pass.
#include "ir/graph.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <sstream>

namespace loom::ir {

namespace {

std::atomic<uint64_t> g_forced_hash{0};

// Node* -> canonical index, open addressing. One per thread, reused across
// syncs: a generation stamp replaces clearing, so a sync touches only the
// slots its graph uses.
class NodeIndex {
 public:
  static constexpr uint32_t kUnset = ~0u;

  void reset(size_t expected) {
    size_t want = 64;
    while (want < expected * 2) want <<= 1;
    if (want > slots_.size()) resize(want);
    if (++gen_ == 0) {  // stamps wrapped: really clear once every 2^32 uses
      for (auto& s : slots_) s.gen = 0;
      gen_ = 1;
    }
    count_ = 0;
  }
  // The slot position of `n`, inserted (unset) if absent; `fresh` tells
  // which. Growing the table moves every slot: growths() then changes and
  // positions taken before are stale (find_pos gives the new ones).
  uint32_t find_or_insert(const Node* n, bool& fresh) {
    if (count_ >= limit_) grow();
    size_t h = hash(n);
    while (true) {
      Slot& s = data_[h];
      if (s.gen != gen_) {
        s = Slot{n, kUnset, gen_};
        ++count_;
        fresh = true;
        return static_cast<uint32_t>(h);
      }
      if (s.key == n) {
        fresh = false;
        return static_cast<uint32_t>(h);
      }
      h = (h + 1) & mask_;
    }
  }
  uint32_t find_pos(const Node* n) const {
    size_t h = hash(n);
    while (!(data_[h].gen == gen_ && data_[h].key == n)) h = (h + 1) & mask_;
    return static_cast<uint32_t>(h);
  }
  uint32_t& index_at(uint32_t pos) { return data_[pos].index; }
  uint32_t find(const Node* n) const { return data_[find_pos(n)].index; }
  uint64_t growths() const { return growths_; }

 private:
  struct Slot {
    const Node* key = nullptr;
    uint32_t index = kUnset;
    uint32_t gen = 0;
  };
  // Fibonacci hashing: the product's top bits, which depend on every bit
  // of the address (pooled nodes sit a fixed stride apart).
  size_t hash(const Node* n) const { return reinterpret_cast<uintptr_t>(n) * 0x9E3779B97F4A7C15ull >> shift_; }
  void resize(size_t size) {  // a power of two; empties the table
    slots_.assign(size, Slot{});
    data_ = slots_.data();
    mask_ = size - 1;
    shift_ = 64 - std::countr_zero(size);
    limit_ = size / 2;  // at most half full: probes stay short
    gen_ = 0;
    count_ = 0;
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    const uint32_t g = gen_;
    resize(old.size() * 2);
    gen_ = 1;
    ++growths_;
    for (auto& s : old)
      if (s.gen == g) {
        bool fresh;
        index_at(find_or_insert(s.key, fresh)) = s.index;
      }
  }
  std::vector<Slot> slots_;
  // Cached from slots_ so the probe loop reads no vector internals.
  Slot* data_ = nullptr;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t limit_ = 0;
  size_t count_ = 0;
  uint32_t gen_ = 0;
  uint64_t growths_ = 0;
};

// The header word of a node: everything about it that fits in 64 bits.
uint64_t header_word(const Node& n) {
  uint64_t dev = static_cast<uint64_t>(n.device.type()) << 4 | (static_cast<uint64_t>(n.device.index()) & 0xF);
  return static_cast<uint64_t>(n.op) | static_cast<uint64_t>(n.dtype) << 8 | dev << 16 |
         static_cast<uint64_t>(n.shape.n) << 24 | static_cast<uint64_t>(n.attr.n) << 32 |
         static_cast<uint64_t>(n.num_scalars) << 40 | static_cast<uint64_t>(n.inputs.size()) << 48;
}

// A node on the walk's stack: its next input to visit and its index slot.
struct Frame {
  const Node* node;
  uint32_t next;
  uint32_t pos;
};

// The walk's scratch, reused per thread so a steady-state build allocates nothing.
struct Scratch {
  NodeIndex index;
  std::vector<Frame> stack;
  // Canonical indices of placed inputs, awaiting their consumer: a node's
  // inputs are the last inputs.size() entries when it is placed, so each
  // node costs one hash insert and no lookup per input.
  std::vector<uint64_t> ids;
  // The canonical words, written through a raw cursor with one room check
  // per node rather than a capacity check and end-pointer store per word,
  // then copied into Graph::canonical in one go.
  std::vector<uint64_t> words;
  uint64_t* room(uint64_t* at, size_t n) {
    const size_t used = static_cast<size_t>(at - words.data());
    if (used + n > words.size()) words.resize(std::max<size_t>(2 * words.size(), used + n + 4096));
    return words.data() + used;
  }
};

// Out of line on purpose: GCC re-derives a thread_local's address with a
// __tls_get_addr call after every call it makes (15 per node in the walk);
// through a returned reference it is an ordinary pointer.
[[gnu::noinline]] Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace

void build_graph(std::span<const Node* const> outputs, Graph& g) {
  Scratch& scratch = thread_scratch();
  NodeIndex& index = scratch.index;
  std::vector<Frame>& stack = scratch.stack;
  std::vector<uint64_t>& ids = scratch.ids;
  g.nodes.clear();
  g.in_begin.assign(1, 0);
  g.in_idx.clear();
  g.outputs.clear();
  g.input_nodes.clear();
  g.scalars.clear();
  g.scalar_begin.clear();
  index.reset(outputs.size() * 8);
  ids.clear();

  uint64_t* w = scratch.room(scratch.words.data(), 1);
  *w++ = kIrVersion;
  uint32_t next_id = 0;
  for (const Node* out : outputs) {
    bool fresh;
    uint32_t out_pos = index.find_or_insert(out, fresh);
    if (!fresh) continue;
    stack.clear();
    stack.push_back(Frame{out, 0, out_pos});
    while (!stack.empty()) {
      Frame& f = stack.back();
      const Node& n = *f.node;
      const size_t k = n.inputs.size();
      if (f.next < k) {
        const Node* child = n.inputs[f.next++].get();
        bool child_fresh;
        const uint64_t growths = index.growths();
        uint32_t pos = index.find_or_insert(child, child_fresh);
        if (index.growths() != growths)  // rare: the table moved, re-find the frames' slots
          for (Frame& fr : stack) fr.pos = index.find_pos(fr.node);
        if (child_fresh)
          stack.push_back(Frame{child, 0, pos});
        else
          ids.push_back(index.index_at(pos));  // placed before (a DAG has no back edges)
        continue;
      }
      // All inputs placed: this node gets the next index.
      const uint32_t id = next_id++;
      index.index_at(f.pos) = id;
      g.nodes.push_back(&n);
      w = scratch.room(w, 1 + n.shape.n + n.attr.n + k);
      *w++ = header_word(n);
      for (size_t d = 0; d < n.shape.n; ++d) *w++ = static_cast<uint64_t>(n.shape[d]);
      for (size_t a = 0; a < n.attr.n; ++a) *w++ = static_cast<uint64_t>(n.attr[a]);
      const uint64_t* in_ids = ids.data() + (ids.size() - k);
      for (size_t j = 0; j < k; ++j) {
        w[j] = in_ids[j];
        g.in_idx.push_back(static_cast<uint32_t>(in_ids[j]));
      }
      w += k;
      ids.resize(ids.size() - k);
      g.in_begin.push_back(static_cast<uint32_t>(g.in_idx.size()));
      g.scalar_begin.push_back(static_cast<uint32_t>(g.scalars.size()));
      for (uint8_t s = 0; s < n.num_scalars; ++s) g.scalars.push_back(n.scalar[s]);
      if (n.op == Op::Input) g.input_nodes.push_back(id);
      stack.pop_back();
      if (!stack.empty()) ids.push_back(id);  // an input of the node below it
    }
  }
  g.scalar_begin.push_back(static_cast<uint32_t>(g.scalars.size()));
  w = scratch.room(w, 1 + outputs.size());
  *w++ = ~0ull;  // separates nodes from outputs
  for (const Node* out : outputs) {
    uint32_t id = index.find(out);
    g.outputs.push_back(id);
    *w++ = id;
  }
  g.canonical.assign(scratch.words.data(), w);
  uint64_t forced = g_forced_hash.load(std::memory_order_relaxed);
  g.hash = forced ? forced : XXH3_64bits(g.canonical.data(), g.canonical.size() * sizeof(uint64_t));
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
    if (!ins.empty()) {
      os << " (";
      for (size_t k = 0; k < ins.size(); ++k) os << (k ? ", " : "") << "%" << ins[k];
      os << ")";
    }
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
