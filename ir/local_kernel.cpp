#include "ir/local_kernel.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <utility>

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

// A number of the kernel as its key holds it: its value, or, where it is a
// size argument, a mark that no real number takes (the value is the run's).
constexpr int64_t kArgument = std::numeric_limits<int64_t>::min();
int64_t keyed(int64_t value, int32_t slot) { return slot == SizeArgs::kFixed ? value : kArgument; }

// `shape`: the key SizeHistory keeps kernels by (every liftable number an
// argument), which also leaves out whether an access's offset is a runtime
// scalar: a product reading a weight its graph computes (offset 0) and the
// same product reading it as an input (a view, its offset a scalar) are one
// lineage, so the second lifts its length (each keeps its own code: the
// shape only says which numbers to lift).
void write_key(const LocalKernel& l, std::string& out, bool shape = false) {
  KeyWriter w(out);
  const Kernel& k = l.kernel();
  const SizeArgs& z = l.sizes;
  const bool args = z.any();
  w.put(args);
  w.put(l.program.buffers.size());
  for (const BufferInfo& b : l.program.buffers) w.put(b.dtype);
  w.put(k.loop.n);
  for (int d = 0; d < k.loop.n; ++d) w.put(keyed(k.loop[d], args ? z.loop[d] : SizeArgs::kFixed));
  w.put(k.outer);
  w.put(k.cost_per_element);
  w.put(k.root);
  w.put(k.accesses.size());
  for (size_t i = 0; i < k.accesses.size(); ++i) {
    const Access& a = k.accesses[i];
    w.put(a.buffer), w.put(keyed(a.offset, args ? z.offset[i] : SizeArgs::kFixed));
    if (!shape) w.put(a.offset_scalar), w.put(a.offset_align);
    w.put(a.strides.n);
    for (int d = 0; d < a.strides.n; ++d) w.put(keyed(a.strides[d], args ? z.strides[i][d] : SizeArgs::kFixed));
  }
  w.put(k.exprs.size());
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& x = k.exprs[i];
    w.put(x.kind), w.put(x.op), w.put(x.dtype), w.put(x.a), w.put(x.b), w.put(x.c);
    w.put(keyed(x.imm, args ? z.imm[i] : SizeArgs::kFixed));
  }
  w.put(k.phases.size());
  for (const Phase& ph : k.phases) {
    w.put(ph.kind), w.put(ph.reduce_op), w.put(ph.value), w.put(ph.per_row);
    w.put(ph.stores.size());
    for (auto [a, e] : ph.stores) w.put(a), w.put(e);
  }
  w.put(k.contraction.has_value());
  if (const auto& c = k.contraction) {
    w.put(c->node), w.put(keyed(c->k, z.k)), w.put(c->a), w.put(c->b), w.put(keyed(c->a_k, z.a_k)),
        w.put(keyed(c->b_k, z.b_k));
    w.put(c->a_value), w.put(c->b_value);
  }
}

// Gives the liftable numbers of k slots of z, in one fixed order (loops,
// accesses, exprs, the contraction), so kernels with equal keys number
// their arguments alike: every one, or those `only` marks (by their place
// in that order).
void lift_sizes(const Kernel& k, SizeArgs& z, const std::vector<bool>* only = nullptr) {
  size_t place = 0;
  auto slot = [&](int64_t v) {
    if (!liftable(v)) return SizeArgs::kFixed;
    if (only && !(*only)[place++]) return SizeArgs::kFixed;
    z.values.push_back(v);
    return static_cast<int32_t>(z.values.size() - 1);
  };
  for (int d = 0; d < k.loop.n; ++d) z.loop.push_back(slot(k.loop[d]));
  for (const Access& a : k.accesses) {
    z.offset.push_back(slot(a.offset));
    std::array<int32_t, kMaxDims> s;
    s.fill(SizeArgs::kFixed);
    for (int d = 0; d < a.strides.n; ++d) s[d] = slot(a.strides[d]);
    z.strides.push_back(s);
  }
  // A Const's value and a Gather's step are numbers of the sizes; an
  // op's imm that names a node (can_fail_op) is not.
  for (const Expr& x : k.exprs)
    z.imm.push_back(x.kind == ExprKind::Const || x.kind == ExprKind::Gather ? slot(x.imm) : SizeArgs::kFixed);
  if (const auto& c = k.contraction) z.k = slot(c->k), z.a_k = slot(c->a_k), z.b_k = slot(c->b_k);
}

}  // namespace

namespace {
// The kernel's shape: its key with `all` (every liftable number, lift_sizes)
// as arguments.
std::string shape_of(LocalKernel& l, const SizeArgs& all) {
  l.sizes = all;
  std::string shape;
  write_key(l, shape, true);
  l.sizes = SizeArgs{};
  return shape;
}

// The kernel alone, its places renamed; sizes static, no key yet.
LocalKernel rename(const KernelProgram& p, const Kernel& k) {
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
  return l;
}
}  // namespace

LocalKernel localize(const KernelProgram& p, const Kernel& k, Lift lift, SizeHistory* history, uint64_t generation) {
  LocalKernel l = rename(p, k);
  if (lift != Lift::None || history) {
    SizeArgs all;
    lift_sizes(l.kernel(), all);
    if (all.any()) {
      std::vector<bool> varied;
      if (history) varied = history->note(shape_of(l, all), all.values, generation);
      if (lift == Lift::All) l.sizes = std::move(all);
      if (lift == Lift::Seen && !varied.empty()) lift_sizes(l.kernel(), l.sizes, &varied);
      l.sizes.base = static_cast<uint32_t>(l.scalars.size());
      if (!l.sizes.any()) l.sizes = SizeArgs{};  // nothing lifted: the static kernel, and its key
    }
  }
  write_key(l, l.key);
  return l;
}

std::string shape_key(const KernelProgram& p, const Kernel& k) {
  LocalKernel l = rename(p, k);
  SizeArgs all;
  lift_sizes(l.kernel(), all);
  return shape_of(l, all);
}

SizeHistory::Lineage* SizeHistory::nearest(std::vector<Lineage>& lineages, const std::vector<int64_t>& values,
                                           uint64_t generation, std::vector<bool>& lift) {
  // Nearest: the fewest numbers that differ and are not arguments yet, then
  // the fewest that differ (of rows x width, 80 x 64 is the lineage of
  // 48 x 64, whose rows vary, not of 48 x 32, whose rows vary too).
  Lineage* best = nullptr;
  std::pair<size_t, size_t> best_cost;
  for (Lineage& l : lineages) {
    if (l.generation >= generation || l.first.size() != values.size()) continue;
    std::pair<size_t, size_t> cost{0, 0};
    for (size_t i = 0; i < values.size(); ++i) {
      cost.first += !l.varied[i] && values[i] != l.first[i];
      cost.second += values[i] != l.first[i];
    }
    if (!best || cost < best_cost) best = &l, best_cost = cost;
  }
  lift.assign(values.size(), false);
  if (best)
    for (size_t i = 0; i < values.size(); ++i) lift[i] = best->varied[i] || values[i] != best->first[i];
  return best;
}

std::vector<bool> SizeHistory::note(const std::string& shape, const std::vector<int64_t>& values,
                                    uint64_t generation) {
  std::lock_guard lock(mu_);
  if (by_shape_.size() > 100000) by_shape_.clear();  // bounded: forgetting costs a compile at most
  std::vector<Lineage>& lineages = by_shape_[shape];
  std::vector<bool> lift;
  if (Lineage* l = nearest(lineages, values, generation, lift)) {
    l->varied = lift;  // what it lifts now, its lineage lifts from now on
    return lift;
  }
  // None earlier: a lineage of its own, unless this compile began one with
  // the same numbers (a model's twelve blocks).
  for (const Lineage& l : lineages)
    if (l.generation == generation && l.first == values) return lift;
  if (lineages.size() >= kLineagesPerShape) lineages.erase(lineages.begin());  // the oldest
  lineages.push_back({values, std::vector<bool>(values.size(), false), generation});
  return lift;
}

SharedKernels share_kernels(const KernelProgram& p,
                            const std::function<std::string(const Kernel&, const LocalKernel&)>& extra_key,
                            const std::function<bool(const Kernel&)>& shareable, Lift lift, SizeHistory* history) {
  SharedKernels f;
  std::unordered_map<std::string, uint32_t> by_key;
  const uint64_t generation = history ? history->begin() : 0;
  for (const Kernel& k : p.kernels) {
    LocalKernel l = localize(p, k, lift, history, generation);
    const uint32_t fresh_id = static_cast<uint32_t>(f.first.size());
    uint32_t id = fresh_id;
    std::string key = l.key + extra_key(k, l);
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
