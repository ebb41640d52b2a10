// Graph building: an iterative post-order walk that assigns each node its
// canonical index and writes its canonical words in the same pass.
#include "ir/graph.h"

#include <xxhash.h>

#include <atomic>
#include <sstream>

namespace loom::ir {

namespace {

std::atomic<uint64_t> g_forced_hash{0};

// Node* -> canonical index, open addressing. One per thread, reused across
// syncs: a generation stamp replaces clearing, so a sync touches only the
// slots its graph uses.
class NodeIndex {
 public:
  void reset(size_t expected) {
    size_t want = 64;
    while (want < expected * 2) want <<= 1;
    if (want > slots_.size()) {
      slots_.assign(want, Slot{});
      gen_ = 0;
    }
    mask_ = slots_.size() - 1;
    if (++gen_ == 0) {  // stamps wrapped: really clear once every 2^32 uses
      for (auto& s : slots_) s.gen = 0;
      gen_ = 1;
    }
    count_ = 0;
  }
  // Returns the slot for `n`; `fresh` tells whether it was absent.
  uint32_t* find_or_insert(const Node* n, bool& fresh) {
    if ((count_ + 1) * 2 > slots_.size()) grow();
    size_t h = hash(n) & mask_;
    while (true) {
      Slot& s = slots_[h];
      if (s.gen != gen_) {
        s = Slot{n, kUnset, gen_};
        ++count_;
        fresh = true;
        return &s.index;
      }
      if (s.key == n) {
        fresh = false;
        return &s.index;
      }
      h = (h + 1) & mask_;
    }
  }
  uint32_t find(const Node* n) const {
    size_t h = hash(n) & mask_;
    while (true) {
      const Slot& s = slots_[h];
      if (s.gen == gen_ && s.key == n) return s.index;
      h = (h + 1) & mask_;
    }
  }
  static constexpr uint32_t kUnset = ~0u;

 private:
  struct Slot {
    const Node* key = nullptr;
    uint32_t index = kUnset;
    uint32_t gen = 0;
  };
  static size_t hash(const Node* n) {
    auto x = reinterpret_cast<uintptr_t>(n);
    return (x >> 4) * 0x9E3779B97F4A7C15ull >> 16;
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    uint32_t g = gen_;
    gen_ = 1;
    count_ = 0;
    for (auto& s : old)
      if (s.gen == g) {
        bool fresh;
        *find_or_insert(s.key, fresh) = s.index;
      }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t count_ = 0;
  uint32_t gen_ = 0;
};

// The header word of a node: everything about it that fits in 64 bits.
uint64_t header_word(const Node& n) {
  uint64_t dev = static_cast<uint64_t>(n.device.type()) << 4 | (static_cast<uint64_t>(n.device.index()) & 0xF);
  return static_cast<uint64_t>(n.op) | static_cast<uint64_t>(n.dtype) << 8 | dev << 16 |
         static_cast<uint64_t>(n.shape.n) << 24 | static_cast<uint64_t>(n.attr.n) << 32 |
         static_cast<uint64_t>(n.num_scalars) << 40 | static_cast<uint64_t>(n.inputs.size()) << 48;
}

}  // namespace

void build_graph(std::span<const Node* const> outputs, Graph& g) {
  thread_local NodeIndex index;
  thread_local std::vector<std::pair<const Node*, uint32_t>> stack;
  g.nodes.clear();
  g.in_begin.assign(1, 0);
  g.in_idx.clear();
  g.outputs.clear();
  g.input_nodes.clear();
  g.scalars.clear();
  g.scalar_begin.clear();
  g.canonical.clear();
  index.reset(outputs.size() * 8);

  g.canonical.push_back(kIrVersion);
  for (const Node* out : outputs) {
    bool fresh;
    index.find_or_insert(out, fresh);
    if (!fresh) continue;
    stack.clear();
    stack.emplace_back(out, 0);
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (next < n->inputs.size()) {
        const Node* child = n->inputs[next++].get();
        bool child_fresh;
        index.find_or_insert(child, child_fresh);
        if (child_fresh) stack.emplace_back(child, 0);
        continue;
      }
      // All inputs placed: this node gets the next index.
      const Node* done = n;
      stack.pop_back();
      uint32_t id = static_cast<uint32_t>(g.nodes.size());
      bool f;
      *index.find_or_insert(done, f) = id;
      g.nodes.push_back(done);
      g.canonical.push_back(header_word(*done));
      g.canonical.insert(g.canonical.end(), done->shape.begin(), done->shape.end());
      g.canonical.insert(g.canonical.end(), done->attr.begin(), done->attr.end());
      for (const auto& in : done->inputs) {
        uint32_t ii = index.find(in.get());
        g.in_idx.push_back(ii);
        g.canonical.push_back(ii);
      }
      g.in_begin.push_back(static_cast<uint32_t>(g.in_idx.size()));
      g.scalar_begin.push_back(static_cast<uint32_t>(g.scalars.size()));
      for (uint8_t s = 0; s < done->num_scalars; ++s) g.scalars.push_back(done->scalar[s]);
      if (done->op == Op::Input) g.input_nodes.push_back(id);
    }
  }
  g.scalar_begin.push_back(static_cast<uint32_t>(g.scalars.size()));
  g.canonical.push_back(~0ull);  // separates nodes from outputs
  for (const Node* out : outputs) {
    uint32_t id = index.find(out);
    g.outputs.push_back(id);
    g.canonical.push_back(id);
  }
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
