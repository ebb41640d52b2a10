#include "ir/local_kernel.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <unordered_map>

namespace loom::ir {

namespace {

// Local names handed out in order of first use.
class Renamer {
 public:
  explicit Renamer(std::vector<uint32_t>& table) : table_(table) {}
  uint32_t operator()(uint32_t global) {
    for (size_t i = 0; i < table_.size(); ++i)
      if (table_[i] == global) return static_cast<uint32_t>(i);
    table_.push_back(global);
    return static_cast<uint32_t>(table_.size() - 1);
  }

 private:
  std::vector<uint32_t>& table_;  // few entries: a kernel touches a handful of buffers
};

// The key's bytes: fixed-size fields appended raw, lists with their length.
class KeyWriter {
 public:
  explicit KeyWriter(std::string& out) : out_(out) {}
  template <class T>
  void put(const T& x) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &x, sizeof(T));
    out_.append(bytes, sizeof(T));
  }
  void put_dims(const Dims& d) {
    put(d.n);
    for (int64_t x : d) put(x);
  }

 private:
  std::string& out_;
};

void write_key(const LocalKernel& l, std::string& out) {
  KeyWriter w(out);
  const Kernel& k = l.kernel();
  w.put(l.program.buffers.size());
  for (const BufferInfo& b : l.program.buffers) w.put(b.dtype);
  w.put_dims(k.loop);
  w.put(k.outer);
  w.put(k.cost_per_element);
  w.put(k.root);
  w.put(k.accesses.size());
  for (const Access& a : k.accesses) w.put(a.buffer), w.put(a.offset), w.put(a.offset_scalar), w.put(a.offset_align), w.put_dims(a.strides);
  w.put(k.exprs.size());
  for (const Expr& x : k.exprs) w.put(x.kind), w.put(x.op), w.put(x.dtype), w.put(x.a), w.put(x.b), w.put(x.c), w.put(x.imm);
  w.put(k.phases.size());
  for (const Phase& ph : k.phases) {
    w.put(ph.kind), w.put(ph.reduce_op), w.put(ph.value), w.put(ph.per_row);
    w.put(ph.stores.size());
    for (auto [a, e] : ph.stores) w.put(a), w.put(e);
  }
  w.put(k.contraction.has_value());
  if (const auto& c = k.contraction) {
    w.put(c->node), w.put(c->k), w.put(c->a), w.put(c->b), w.put(c->a_k), w.put(c->b_k);
    w.put(c->a_value), w.put(c->b_value);
  }
}

}  // namespace

LocalKernel localize(const KernelProgram& p, const Kernel& k) {
  LocalKernel l;
  Kernel local = k;
  local.name.clear();          // dumps only
  local.graph_nodes.clear();   // lowering's bookkeeping
  Renamer node(l.nodes), buffer(l.buffers), scalar(l.scalars);
  local.root = node(k.root);
  for (Access& a : local.accesses) {
    a.buffer = buffer(a.buffer);
    if (a.has_runtime_offset()) a.offset_scalar = scalar(a.offset_scalar);
  }
  for (Expr& x : local.exprs) {
    if (x.kind == ExprKind::Scalar) x.a = scalar(x.a);
    if (x.kind == ExprKind::Op && can_fail_op(x.op)) x.imm = node(static_cast<uint32_t>(x.imm));
  }
  if (local.contraction) local.contraction->node = node(local.contraction->node);
  for (uint32_t b : l.buffers) l.program.buffers.push_back(p.buffers[b]);
  l.program.kernels.push_back(std::move(local));
  l.program.steps.push_back({Step::Generated, 0});
  write_key(l, l.key);
  return l;
}

SharedKernels share_kernels(const KernelProgram& p, const std::function<std::string(const Kernel&)>& extra_key,
                            const std::function<bool(const Kernel&)>& shareable) {
  SharedKernels f;
  std::unordered_map<std::string, uint32_t> by_key;
  for (const Kernel& k : p.kernels) {
    LocalKernel l = localize(p, k);
    const uint32_t fresh_id = static_cast<uint32_t>(f.first.size());
    uint32_t id = fresh_id;
    std::string key = l.key + extra_key(k);
    if (!shareable || shareable(k)) id = by_key.try_emplace(key, fresh_id).first->second;
    if (id == fresh_id) {
      f.first.push_back(static_cast<uint32_t>(f.local.size()));
      f.keys.push_back(std::move(key));
    }
    f.function.push_back(id);
    f.local.push_back(std::move(l));
  }
  return f;
}

std::string key_symbol(const char* prefix, const std::string& key) {
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  char hex[40];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return prefix + std::string(hex);
}

}  // namespace loom::ir
