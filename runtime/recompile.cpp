// A graph's structure is its ops, how they are wired, their ranks and the
// backend. Graphs of one structure that compile apart differ in what the
// key holds besides: a dtype, a size or an attribute. The last compile of
// each structure is kept (its nodes' dtypes, shapes, attributes and the
// lines that recorded them), a bounded number of structures, so that the
// next compile of the same structure can say what changed.
#include "runtime/recompile.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <loom/error.h>

#include "ir/hash.h"
#include "runtime/buffer.h"

namespace loom::runtime {

namespace {

struct NodeShape {
  ir::Op op;
  ScalarType dtype;
  ir::Dims shape;
  ir::Attrs attr;
  const char* file;
  uint32_t line;
};

struct Snapshot {
  std::vector<NodeShape> nodes;
  std::vector<uint32_t> input_nodes;
};

// Remembered at once, the oldest going first: at most this many
// structures, holding at most this many nodes together (~100 bytes each).
constexpr size_t kStructures = 256, kNodes = size_t{1} << 18;

struct Memory {
  std::mutex mu;
  std::list<uint64_t> order;  // oldest first
  std::unordered_map<uint64_t, Snapshot> by_structure;
  size_t nodes = 0;
};
Memory& memory() {
  static Memory* m = new Memory();  // never destroyed: compiles may run during exit
  return *m;
}

uint64_t structure_of(const ir::Graph& g, const char* backend) {
  std::vector<uint64_t> words;
  words.reserve(g.size() * 4 + 8);
  for (const char* p = backend; *p; ++p) words.push_back(static_cast<unsigned char>(*p));
  for (uint32_t i = 0; i < g.size(); ++i) {
    const ir::Node& n = *g.nodes[i];
    words.push_back(static_cast<uint64_t>(n.op) | static_cast<uint64_t>(n.shape.n) << 8 |
                    static_cast<uint64_t>(n.attr.n) << 16 | static_cast<uint64_t>(n.device.type()) << 24);
    for (uint32_t in : g.inputs_of(i)) words.push_back(in);
    words.push_back(~0ull);
  }
  for (uint32_t o : g.outputs) words.push_back(o);
  return ir::xxh3_64(words.data(), words.size() * sizeof(uint64_t));
}

Snapshot snapshot_of(const ir::Graph& g) {
  Snapshot s;
  s.input_nodes = g.input_nodes;
  s.nodes.reserve(g.size());
  for (const ir::Node* n : g.nodes)
    s.nodes.push_back({n->op, n->dtype, n->shape, n->attr, n->file, n->line});
  return s;
}

std::string type_str(ScalarType t, const ir::Dims& d) {
  std::ostringstream os;
  os << t << "[";
  for (size_t i = 0; i < d.size(); ++i) os << (i ? ", " : "") << d[i];
  os << "]";
  return os.str();
}

std::string where(const NodeShape& n) {
  return n.line ? std::string(" (recorded at ") + n.file + ":" + std::to_string(n.line) + ")" : "";
}

// "Float[4, 3] -> Float[5, 3] (dim 0: 4 -> 5)".
std::string change(const NodeShape& a, const NodeShape& b) {
  std::string line = type_str(a.dtype, a.shape) + " -> " + type_str(b.dtype, b.shape);
  if (a.dtype == b.dtype && a.shape.n == b.shape.n)
    for (size_t d = 0; d < b.shape.size(); ++d)
      if (a.shape[d] != b.shape[d])
        line += " (dim " + std::to_string(d) + ": " + std::to_string(a.shape[d]) + " -> " + std::to_string(b.shape[d]) + ")";
  return line;
}

// What differs between two graphs of one structure, the inputs first.
CompileWhy diff(const Snapshot& old, const Snapshot& now) {
  std::vector<std::string> lines;
  CompileReason reason = CompileReason::Evicted;
  auto note = [&](CompileReason r, std::string line) {
    if (reason == CompileReason::Evicted) reason = r;
    if (lines.size() < 3) lines.push_back(std::move(line));
  };
  for (size_t i = 0; i < now.nodes.size(); ++i) {
    const NodeShape &a = old.nodes[i], &b = now.nodes[i];
    if (ir::op_family(b.op) != ir::Family::Leaf || (a.dtype == b.dtype && a.shape == b.shape)) continue;
    std::string who;
    for (size_t k = 0; k < now.input_nodes.size(); ++k)
      if (now.input_nodes[k] == i) who = "input " + std::to_string(k);
    if (who.empty()) who = ir::op_name(b.op);
    note(a.dtype != b.dtype ? CompileReason::Dtype : CompileReason::Shape, who + where(b) + ": " + change(a, b));
  }
  // Else the first ops that differ: in their attributes, or in the type of
  // their value with the same attributes (a slice of a stored tensor whose
  // length changed: its view is a shape, not an attribute).
  if (lines.empty())
    for (size_t i = 0; i < now.nodes.size(); ++i) {
      const NodeShape &a = old.nodes[i], &b = now.nodes[i];
      if (a.attr == b.attr && a.dtype == b.dtype && a.shape == b.shape) continue;
      std::string line = std::string(ir::op_name(b.op)) + where(b) + ": ";
      if (a.attr != b.attr) {
        std::ostringstream os;
        auto list = [&](const ir::Attrs& x) {
          os << "{";
          for (size_t k = 0; k < x.size(); ++k) os << (k ? "," : "") << x[k];
          os << "}";
        };
        os << "attributes ";
        list(a.attr);
        os << " -> ";
        list(b.attr);
        note(CompileReason::Attribute, line + os.str());
      } else {
        note(a.dtype != b.dtype ? CompileReason::Dtype : CompileReason::Shape, line + change(a, b));
      }
    }
  CompileWhy why{reason, ""};
  if (reason == CompileReason::Evicted) {
    why.text = "the same graph, compiled before and evicted from the executable cache";
  } else {
    for (size_t k = 0; k < lines.size(); ++k) why.text += (k ? "; " : "") + lines[k];
  }
  return why;
}

}  // namespace

const char* compile_reason_name(CompileReason r) {
  switch (r) {
    case CompileReason::NewGraph: return "new graph";
    case CompileReason::Shape: return "shape";
    case CompileReason::Dtype: return "dtype";
    case CompileReason::Attribute: return "attribute";
    case CompileReason::Alignment: return "alignment";
    case CompileReason::Evicted: return "evicted";
  }
  return "?";
}

CompileWhy explain_compile(const ir::Graph& g, const char* backend, bool alignment_variant) {
  if (alignment_variant)
    return {CompileReason::Alignment,
            "the same graph, whose view offsets lack the alignment the first compile's code assumed"};
  const uint64_t key = structure_of(g, backend);
  Snapshot now = snapshot_of(g);
  Memory& m = memory();
  std::lock_guard lock(m.mu);
  auto it = m.by_structure.find(key);
  CompileWhy why;
  if (it != m.by_structure.end()) {
    // Equal node counts but for a structure-hash collision, which is then new.
    if (it->second.nodes.size() == now.nodes.size()) why = diff(it->second, now);
    m.nodes -= it->second.nodes.size();
    m.by_structure.erase(it);
    m.order.remove(key);
  }
  m.nodes += now.nodes.size();
  m.by_structure.emplace(key, std::move(now));
  m.order.push_back(key);
  while (m.order.size() > 1 && (m.order.size() > kStructures || m.nodes > kNodes)) {
    auto oldest = m.by_structure.find(m.order.front());
    m.nodes -= oldest->second.nodes.size();
    m.by_structure.erase(oldest);
    m.order.pop_front();
  }
  return why;
}

namespace {
SizesAsArgs mode_from_env() {
  const char* e = std::getenv("LOOM_DYNAMIC");
  if (!e || !*e || std::strcmp(e, "auto") == 0) return SizesAsArgs::Automatic;
  if (std::strcmp(e, "always") == 0) return SizesAsArgs::Always;
  if (std::strcmp(e, "never") == 0) return SizesAsArgs::Never;
  throw Error(std::string("loom: LOOM_DYNAMIC=") + e + ": expected auto, always or never");
}
std::atomic<SizesAsArgs>& mode_now() {
  static std::atomic<SizesAsArgs> m{mode_from_env()};
  return m;
}
}  // namespace

SizesAsArgs sizes_as_args_mode() { return mode_now().load(std::memory_order_relaxed); }
SizesAsArgs set_sizes_as_args_mode(SizesAsArgs mode) { return mode_now().exchange(mode); }

ir::Lift sizes_as_args(const ir::Graph& g) {
  switch (sizes_as_args_mode()) {
    case SizesAsArgs::Always: return ir::Lift::All;
    case SizesAsArgs::Never: return ir::Lift::None;
    case SizesAsArgs::Automatic: break;
  }
  for (uint32_t i : g.input_nodes)
    if (const auto* b = static_cast<const Buffer*>(g.nodes[i]->data.get()); b && b->dynamic()) return ir::Lift::All;
  return ir::Lift::Seen;
}

}  // namespace loom::runtime
