// Lowering passes (see ir/lower.h for the list and why each exists).
#include "ir/lower.h"

#include <algorithm>
#include <unordered_map>
#include <optional>
#include <sstream>

namespace loom::ir {

namespace {

// Ops with a hand-written kernel: their inputs and output are whole buffers.
bool is_library(Op op) {
  switch (op) {
    case Op::MatMul: case Op::Concat: case Op::IndexSelect: case Op::Gather: case Op::ScatterAdd:
    case Op::ScatterStrided: case Op::ToDevice: case Op::RandUniform: case Op::RandNormal: case Op::Linspace:
      return true;
    default:
      return false;
  }
}

// A random tensor of a floating dtype is computed where it is used (Philox
// at the element's counter, ir/philox.h), so dropout's mask or an
// initializer's scaling is one kernel with no random buffer.
bool fused_random(Op op, ScalarType dt) { return (op == Op::RandUniform || op == Op::RandNormal) && is_floating_point(dt); }

bool is_elementwise(Op op) {
  Family f = op_family(op);
  return f == Family::Unary || f == Family::Binary || f == Family::Ternary;
}

// Which loop dim indexes each dim of a node inside a kernel (-1: the node
// is broadcast along that dim, or the dim has size 1).
using DimMap = Dims;

// Rough per-element cost of an op, to decide recompute vs store and to size
// parallel chunks. Transcendentals cost more than adds.
double op_cost(Op op) {
  switch (op) {
    case Op::Exp: case Op::Log: case Op::Log1p: case Op::Expm1: case Op::Tanh: case Op::Sigmoid:
    case Op::Gelu: case Op::GeluTanh: case Op::Silu: case Op::Erf: case Op::Sin: case Op::Cos: case Op::Pow:
      return 8;
    case Op::Div: case Op::Sqrt: case Op::Rsqrt: case Op::Reciprocal: case Op::Fmod: case Op::Remainder:
      return 3;
    case Op::Clamp:  // a maximum and a minimum
      return 2;
    case Op::RandUniform:  // ten Philox rounds
      return 12;
    case Op::RandNormal:  // and Box-Muller in double
      return 40;
    case Op::MatMul:  // never recomputed: a product read by two kernels gets a buffer
      return 1e9;
    default:
      return 1;
  }
}

constexpr const char* kGraphOutput = "graph output";
// Producers of a GEMM's operand at most this costly (op_cost) are applied
// as the GEMM reads the operand: a negation, a scaling, a ReLU, a clamp, a
// division, not an exp (recomputed for each tile of C that reads it).
constexpr double kCheapProducerCost = 3;

struct NeedsBuffer {
  uint32_t node;
  std::string reason;
};

class Lowering {
 public:
  Lowering(const Graph& g, const LowerOptions& options)
      : g_(g), opt_(options), n_(static_cast<uint32_t>(g.size())), absorbed_(n_, -1), rejected_(n_, false) {}

  KernelProgram run(LowerLog* log) {
    std::string passes;
    KernelProgram best = attempt(&passes);
    // Without absorptions every value can have a buffer, so the first
    // attempt is always complete; if it were not, a kernel would read a
    // buffer nothing wrote.
    if (!absorb_ok_) throw std::logic_error("loom internal error: lowering left a value without a kernel\n" + passes);
    // Absorption: a graph output that is one value per row of the single
    // kernel reading it (layer norm's mean when the caller keeps it) is
    // computed and stored by that kernel, so its own kernel and the extra
    // pass over the rows go away. Each candidate is kept only if the
    // program it gives stores it there and has fewer kernels.
    std::vector<Candidate> todo = candidates_;
    while (!todo.empty()) {
      auto [node, consumer] = todo.back();
      todo.pop_back();
      absorbed_[node] = static_cast<int32_t>(consumer);
      std::string trial_passes;
      KernelProgram trial = attempt(&trial_passes);
      if (absorb_ok_ && trial.kernels.size() < best.kernels.size()) {
        best = std::move(trial);
        passes = std::move(trial_passes);
        todo = candidates_;
      } else {
        absorbed_[node] = -1;
        rejected_[node] = true;
      }
    }
    if (log) log->passes += passes;
    return best;
  }

 private:
  // Every pass once, with the current absorptions.
  KernelProgram attempt(std::string* passes) {
    reason_.assign(n_, "");
    absorb_ok_ = true;
    boundaries();
    note(passes, "boundaries: " + std::to_string(count_buffers()) + " of " + std::to_string(n_) + " nodes own a buffer");
    // Kernels and recompute alternate until no kernel asks for another buffer.
    // A round that asks gives at least one more node a buffer, so this ends
    // within n_ rounds; no cap, since stopping early leaves kernels missing
    // (a gradient summed over 90 unsynced backward calls took 66 rounds).
    for (int round = 0;; ++round) {
      std::vector<NeedsBuffer> needs;
      const size_t given = build_all(needs);
      if (needs.empty()) needs = recompute_check();
      // No progress (an absorbed value its consumer cannot compute): stop;
      // run() then rejects the absorption.
      const bool progress = given > 0 || std::any_of(needs.begin(), needs.end(), [&](const NeedsBuffer& nb) {
                              return reason_[nb.node].empty();
                            });
      if (!needs.empty() && !progress) {
        absorb_ok_ = false;  // kernels are missing: run() rejects this trial absorption
        return std::move(p_);
      }
      if (needs.empty()) break;
      for (auto& nb : needs) reason_[nb.node] = nb.reason;
      note(passes, "kernels/recompute: " + std::to_string(needs.size()) + " more buffers (round " +
                       std::to_string(round + 1) + ")");
    }
    note(passes, "kernels: " + std::to_string(p_.kernels.size()) + " generated, " +
                     std::to_string(p_.library_calls.size()) + " library calls");
    for (uint32_t i = 0; i < n_; ++i)
      if (absorbed_[i] >= 0) {
        absorb_ok_ = absorb_ok_ && stored_by_consumer_only(i);
        note(passes, "absorb: %" + std::to_string(i) + " stored per row by the kernel of %" + std::to_string(absorbed_[i]));
      }
    find_candidates();
    size_t before = p_.kernels.size();
    vertical();
    note(passes, "vertical: " + std::to_string(before - p_.kernels.size()) + " kernels joined their producer");
    before = p_.kernels.size();
    horizontal();
    note(passes, "horizontal: " + std::to_string(before - p_.kernels.size()) + " kernels merged");
    note(passes, "late updates: " + std::to_string(late_updates()) + " steps moved after the last reader of what they update");
    note(passes, "checks first: " + std::to_string(checks_first()) + " steps moved before the steps they do not need");
    int collapsed = 0;
    for (Kernel& k : p_.kernels) collapsed += collapse(k);
    note(passes, "collapse: " + std::to_string(collapsed) + " loop dims merged");
    note(passes, "split: " + std::to_string(split_reductions(p_, opt_.split_reduction_rows)) +
                     " reductions split into partials and their fold");
    plan_buffers();
    note(passes, "buffers: arena " + std::to_string(p_.arena_bytes) + " bytes");
    for (uint32_t i = 0; i < n_; ++i)
      if (!reason_[i].empty() && g_.nodes[i]->op != Op::Input) p_.boundaries.push_back({i, reason_[i]});
    return std::move(p_);
  }

  static void note(std::string* passes, const std::string& line) {
    if (passes) *passes += line + "\n";
  }
  size_t count_buffers() const {
    return std::count_if(reason_.begin(), reason_.end(), [](const std::string& r) { return !r.empty(); });
  }
  const Node& node(uint32_t i) const { return *g_.nodes[i]; }
  // A floating-point product is a GEMM kernel when the backend takes them.
  bool gemm(uint32_t i) const {
    return node(i).op == Op::MatMul && opt_.gemm_kernels && is_floating_point(node(i).dtype) && !narrow_product(i) &&
           !short_product(i);
  }
  // A product inlined as K multiply-adds (LowerOptions::short_products_inline).
  bool short_product(uint32_t i) const {
    const int64_t k = float_product_2d(i) ? node(g_.inputs_of(i)[0]).shape[1] : 0;
    return opt_.short_products_inline && k >= 1 && k <= kShortProductMaxK;
  }
  // A product computed as a row kernel (LowerOptions::narrow_products_as_rows).
  bool narrow_product(uint32_t i) const {
    return opt_.narrow_products_as_rows && float_product_2d(i) && node(i).shape[1] <= kNarrowProductMaxN &&
           node(g_.inputs_of(i)[0]).shape[1] >= kNarrowProductMinK;
  }
  // A [M, K] x [K, N] product of float32 or float64 (no batch; bfloat16 keeps its GEMM).
  bool float_product_2d(uint32_t i) const {
    const Node& nd = node(i);
    return nd.op == Op::MatMul && nd.shape.n == 2 && (nd.dtype == kFloat || nd.dtype == kDouble);
  }
  // A product this lowering generates code for: a GEMM, a row kernel or
  // inlined multiply-adds (else a library call).
  bool generated_product(uint32_t i) const { return gemm(i) || narrow_product(i) || short_product(i); }
  bool library(uint32_t i) const {
    return is_library(node(i).op) && !generated_product(i) && !fused_random(node(i).op, node(i).dtype) &&
           !fused_gather(i);
  }
  // A gather computed where it is used (ExprKind::Gather): x[i, t[i]] is a
  // load of x at a position its index tensor moves, so cross_entropy's
  // pick of the target's log-probability is part of the kernel that sums
  // it. (A 0-d index reads element 0 unchecked, as the reference does: the
  // library kernel keeps that case.)
  bool fused_gather(uint32_t i) const { return node(i).op == Op::Gather && node(i).shape.n > 0; }
  // A producer a GEMM applies to its operand's elements as it reads them
  // (ir::Contraction::a_value): a cheap op on one input of the product's
  // dtype and the same shape (scalar operands allowed: x * 0.5, a clamp's
  // bounds), not a graph input or constant.
  bool fusible_producer(uint32_t i, ScalarType dt) const {
    const Node& nd = node(i);
    const auto ins = g_.inputs_of(i);
    const bool one_input = nd.op == Op::Clamp || op_family(nd.op) == Family::Unary || has_scalar_operand(nd);
    return one_input && ins.size() == 1 && is_elementwise(nd.op) && nd.dtype == dt && node(ins[0]).dtype == dt &&
           node(ins[0]).shape == nd.shape && op_cost(nd.op) <= kCheapProducerCost;
  }
  // Operand `in` of GEMM product `product` with its fusible producers
  // walked through: the node the GEMM reads (`in` itself when none fuses),
  // and the producers, from the operand down, in `chain`. A producer that
  // owns a buffer (reason_) ends the walk: the GEMM reads that buffer.
  // Producers are fused only where LowerOptions::operand_producers_min_work
  // allows and their input is not computed by a generated kernel.
  uint32_t operand_base(uint32_t product, uint32_t in, std::vector<uint32_t>* chain = nullptr) const {
    const Node& p = node(product);
    if (!gemm(product) || p.dtype == kBFloat16 || opt_.operand_producers_min_work < 0) return in;
    const auto ins = g_.inputs_of(product);
    const double work = static_cast<double>(p.numel()) * node(ins[0]).shape[node(ins[0]).shape.n - 1];
    if (work < opt_.operand_producers_min_work) return in;
    uint32_t base = in;
    std::vector<uint32_t> walked;
    while (reason_[base].empty() && fusible_producer(base, p.dtype)) {
      walked.push_back(base);
      base = g_.inputs_of(base)[0];
    }
    const uint32_t source = node(base).op == Op::AsStrided ? g_.inputs_of(base)[0] : base;
    if (walked.empty() || !(node(source).op == Op::Input || library(source))) return in;
    if (chain) *chain = std::move(walked);
    return base;
  }
  void need(uint32_t i, const std::string& why) {
    if (reason_[i].empty()) reason_[i] = why;
  }

  // ---------------------------------------------------------------- pass 1
  void boundaries() {
    for (uint32_t i = 0; i < n_; ++i) {
      const Node& nd = node(i);
      auto ins = g_.inputs_of(i);
      if (nd.op == Op::Input) need(i, "graph input");
      if (generated_product(i)) {
        // The product's operands are read by the GEMM's packing, through
        // any strides (a transpose, a broadcast batch): the viewed buffer is
        // enough, no copy. (A narrow product's row kernel and a short
        // product's multiply-adds read each operand element up to N or M
        // times: computed once, into a buffer.)
        if (narrow_product(i)) need(i, "narrow product: a row of K per element");
        for (uint32_t operand : ins) {
          // A GEMM applies cheap producers of an operand as it reads it
          // (operand_base): then it reads their input.
          const uint32_t in = operand_base(i, operand);
          need_readable(in, "viewed by matrix product",
                        in == operand ? "operand of matrix product" : "input of a matrix product's fused operand producers");
        }
      } else if (library(i)) {
        need(i, std::string("library kernel ") + op_name(nd.op));
        for (uint32_t in : ins) {
          // A contiguous view of a buffer is that buffer at an offset: no copy.
          if (uint32_t src; contiguous_view_of(in, src)) {
            need(src, std::string("viewed by library kernel ") + op_name(nd.op));
            continue;
          }
          need(in, std::string("input of library kernel ") + op_name(nd.op));
        }
      }
      // The gathered tensor is read at computed positions.
      if (fused_gather(i)) need_readable(ins[0], "viewed by a fused gather", "read by a fused gather");
      if (nd.op == Op::AsStrided && node(ins[0]).op != Op::Full && !dim_view(i))
        need(ins[0], "read through a strided view");
    }
    for (uint32_t o : g_.outputs) need(o, kGraphOutput);
    // An absorbed temporary is stored by its consumer's kernel: it needs its
    // buffer from the first round (a graph output has one anyway).
    for (uint32_t i = 0; i < n_; ++i)
      if (absorbed_[i] >= 0) need(i, "absorbed: stored per row by the kernel of %" + std::to_string(absorbed_[i]));
  }

  // Node `in` is read from memory at any position (KernelBuilder::buffer_view):
  // a view of a computed value through its source's buffer, anything else
  // through its own.
  void need_readable(uint32_t in, const char* viewed, const char* read) {
    const uint32_t owner = memory_owner(in);
    need(owner, owner == in ? read : viewed);
  }
  // The node whose buffer a reader from memory of `in` reads: a view's
  // source (unless a constant), or `in` itself.
  uint32_t memory_owner(uint32_t in) const {
    const bool view = node(in).op == Op::AsStrided && node(g_.inputs_of(in)[0]).op != Op::Full;
    return view ? g_.inputs_of(in)[0] : in;
  }

  // Whether view node i reads its source dim for dim: every source dim
  // longer than 1 is one view dim of the same size at the source's
  // contiguous stride, and every other view dim has size 1 or stride 0 (a
  // broadcast); no offset. Squeeze, unsqueeze, permute, expand and the
  // reshapes that only add or drop size-1 dims are such views. A kernel
  // then computes the source inline at the view's position (source dim d
  // at view dim (*view_dim)[d], -1 where d has size 1), so the source needs
  // no buffer of its own.
  bool dim_view(uint32_t i, Dims* view_dim = nullptr) const {
    const Node& v = node(i);
    const Node& src = node(g_.inputs_of(i)[0]);
    if (v.attr[v.shape.n] != 0) return false;
    const Dims contiguous = contiguous_strides(src.shape);
    Dims at;
    at.n = src.shape.n;
    for (uint8_t d = 0; d < src.shape.n; ++d) at[d] = -1;
    for (uint8_t d = 0; d < v.shape.n; ++d) {
      if (v.shape[d] == 1 || v.attr[d] == 0) continue;
      int found = -1;
      for (uint8_t s = 0; s < src.shape.n && found < 0; ++s)
        if (src.shape[s] == v.shape[d] && src.shape[s] != 1 && contiguous[s] == v.attr[d] && at[s] < 0) found = s;
      if (found < 0) return false;
      at[found] = d;
    }
    for (uint8_t s = 0; s < src.shape.n; ++s)
      if (src.shape[s] != 1 && at[s] < 0) return false;
    if (view_dim) *view_dim = at;
    return true;
  }

  // Whether node i reads a contiguous window (any offset) of a node that
  // is not a constant: then a library kernel can read that node's buffer.
  bool contiguous_view_of(uint32_t i, uint32_t& src) const {
    const Node& nd = node(i);
    if (nd.op != Op::AsStrided) return false;
    src = g_.inputs_of(i)[0];
    if (node(src).op == Op::Full) return false;
    const Dims want = contiguous_strides(nd.shape);
    for (uint8_t d = 0; d < nd.shape.n; ++d)
      if (nd.shape[d] != 1 && nd.attr[d] != want[d]) return false;
    return true;
  }

  // ---------------------------------------------------------------- pass 2
  // Builds every step; returns how many nodes it gave a buffer on the way.
  // A kernel asking for a buffer gets it at once and is built again, so
  // one round finds all it needs: a chain whose values each need a buffer
  // only once the one below has one (softmaxes over alternate dims, each
  // kernel reaching the bottom of the chain before the reductions that
  // fail) took a round, rebuilding every kernel, per value (200: 18 s).
  // Kernels built earlier in the round may have inlined such a node: a
  // round with needs is always followed by another.
  size_t build_all(std::vector<NeedsBuffer>& needs) {
    size_t given = 0;
    p_ = KernelProgram{};
    buffer_of_.assign(n_, -1);
    inlined_by_.assign(n_, {});
    // Buffers: inputs in slot order, then outputs, then temporaries.
    for (uint32_t s = 0; s < g_.input_nodes.size(); ++s) add_buffer(g_.input_nodes[s], BufferKind::Input, s);
    for (uint32_t s = 0; s < g_.outputs.size(); ++s) {
      uint32_t o = g_.outputs[s];
      if (buffer_of_[o] < 0) add_buffer(o, BufferKind::Output, s);
      p_.output_buffers.push_back(static_cast<uint32_t>(buffer_of_[o]));
    }
    uint32_t temps = 0;
    for (uint32_t i = 0; i < n_; ++i)
      if (!reason_[i].empty() && buffer_of_[i] < 0) add_buffer(i, BufferKind::Temp, temps++);
    // One step per buffer-owning node, in graph order (producers first).
    for (uint32_t i = 0; i < n_; ++i) {
      if (reason_[i].empty() || node(i).op == Op::Input) continue;
      if (absorbed_[i] >= 0) continue;  // its consumer's kernel stores it
      if (library(i)) {
        const Node& nd = node(i);
        LibraryCall call{nd.op, i, {}, static_cast<uint32_t>(buffer_of_[i]), nd.dtype, nd.shape, {}, {}, nd.attr,
                         g_.scalar_begin[i], g_.scalar_begin[i + 1] - g_.scalar_begin[i]};
        for (uint32_t in : g_.inputs_of(i)) {
          uint32_t src;
          const bool alias = reason_[in].empty() && contiguous_view_of(in, src);
          call.inputs.push_back(static_cast<uint32_t>(buffer_of_[alias ? src : in]));
          call.input_offsets.push_back(alias ? node(in).attr[node(in).shape.n] : 0);
          call.input_shapes.push_back(node(in).shape);
          call.input_dtypes.push_back(node(in).dtype);
        }
        p_.steps.push_back({Step::Library, static_cast<uint32_t>(p_.library_calls.size())});
        p_.library_calls.push_back(std::move(call));
        continue;
      }
      std::optional<KernelBuilder> kb;
      std::optional<NeedsBuffer> nb;
      for (;;) {
        kb.emplace(*this, i);
        nb = kb->build();
        if (!nb || !reason_[nb->node].empty()) break;
        reason_[nb->node] = nb->reason;
        add_buffer(nb->node, BufferKind::Temp, temps++);
        needs.push_back(*nb);
        ++given;
      }
      if (nb) {
        needs.push_back(*nb);
        continue;
      }
      p_.steps.push_back({Step::Generated, static_cast<uint32_t>(p_.kernels.size())});
      p_.kernels.push_back(std::move(kb->k));
    }
    return given;
  }

  void add_buffer(uint32_t i, BufferKind kind, uint32_t index) {
    buffer_of_[i] = static_cast<int32_t>(p_.buffers.size());
    p_.buffers.push_back({kind, index, node(i).dtype, node(i).numel()});
  }

  // Builds the kernel that computes buffer-owning node `root`.
  class KernelBuilder {
   public:
    KernelBuilder(Lowering& l, uint32_t root) : l_(l), root_(root) {}
    Kernel k;

    std::optional<NeedsBuffer> build() {
      const Node& r = l_.node(root_);
      k.name = "k" + std::to_string(root_) + "_" + op_name(r.op);
      k.root = root_;
      if (op_family(r.op) == Family::Reduce) return build_reduction_root(r);
      if (l_.narrow_product(root_)) return build_narrow_product_root(r);
      k.loop = r.shape;
      DimMap id = identity(r.shape.n);
      uint32_t v = expr(root_, id, true);
      if (!failed_ && k.contraction && (!k.phases.empty() || k.outer != 0))
        fail(k.contraction->node, "matrix product in a kernel with reduce phases");
      if (failed_) return failed_;
      if (k.contraction) k.name += "_gemm";
      Phase store;
      store.per_row = rows_added_;  // one element per row (extend_rows)
      store.stores.push_back({buffer_access(root_, id), v});
      k.phases.push_back(std::move(store));
      store_absorbed();
      finish();
      return std::nullopt;
    }

   private:
    std::optional<NeedsBuffer> build_reduction_root(const Node& r) {
      uint32_t in = l_.g_.inputs_of(root_)[0];
      const Dims& s_in = l_.node(in).shape;
      const uint64_t mask = static_cast<uint64_t>(r.attr[0]);
      // Loops: kept dims first (rows), reduced dims last (one row).
      DimMap in_map;
      in_map.n = s_in.n;
      for (int pass = 0; pass < 2; ++pass)
        for (uint8_t d = 0; d < s_in.n; ++d)
          if (((mask >> d) & 1) == static_cast<uint64_t>(pass)) {
            in_map[d] = k.loop.n;
            k.loop.push_back(s_in[d]);
            if (pass == 0) k.outer = k.loop.n;
          }
      rows_fixed_ = true;  // a full reduction has outer == 0 too: inlined reductions must not redefine its rows
      uint32_t value = expr(in, in_map, false);
      if (failed_) return failed_;
      uint32_t rv = add_reduce(r.op, value, r.dtype);
      // The keep-shape output is indexed by the kept loops.
      DimMap out_map;
      out_map.n = r.shape.n;
      for (uint8_t d = 0; d < r.shape.n; ++d) out_map[d] = (mask >> d & 1) ? -1 : in_map[d];
      return store_per_row(rv, out_map);
    }

    // The root's value rv, stored once per row at out_map; then the
    // absorbed outputs.
    std::optional<NeedsBuffer> store_per_row(uint32_t rv, const DimMap& out_map) {
      Phase store;
      store.per_row = true;
      store.stores.push_back({buffer_access(root_, out_map), rv});
      k.phases.push_back(std::move(store));
      store_absorbed();
      finish();
      return std::nullopt;
    }

    // C[m, n] = sum over k of A[m, k] * B[k, n] as a row kernel: loops
    // (m, n | k), the operands read from their buffers at any strides.
    std::optional<NeedsBuffer> build_narrow_product_root(const Node& r) {
      const auto ins = l_.g_.inputs_of(root_);
      k.loop.n = 0;
      for (int64_t extent : {r.shape[0], r.shape[1], l_.node(ins[0]).shape[1]}) k.loop.push_back(extent);
      k.outer = 2;
      rows_fixed_ = true;
      DimMap a_map, b_map, out_map = identity(2);
      a_map.n = b_map.n = 2;
      a_map[0] = 0, a_map[1] = 2;
      b_map[0] = 2, b_map[1] = 1;
      const uint32_t a = expr(ins[0], a_map, false), b = expr(ins[1], b_map, false);
      if (failed_) return failed_;
      return store_per_row(add_reduce(Op::Sum, push(Expr{ExprKind::Op, Op::Mul, r.dtype, a, b}), r.dtype), out_map);
    }

    // Absorbed outputs (Lowering::run) are stored once per row, after the
    // phases that compute them. Each must be read at one position that
    // depends on the rows only, and its elements must match the rows one to
    // one (each row writes one element, no two rows the same).
    void store_absorbed() {
      const bool reduces = std::any_of(k.phases.begin(), k.phases.end(), [](const Phase& ph) { return ph.kind == Phase::Reduce; });
      for (const auto& [i, map] : absorbed_uses_) {
        const Node& nd = l_.node(i);
        bool ok = reduces && std::count_if(absorbed_uses_.begin(), absorbed_uses_.end(), [&](const auto& u) { return u.first == i; }) == 1;
        std::vector<bool> row_seen(k.outer, false);
        for (uint8_t d = 0; d < nd.shape.n && ok; ++d) {
          if (nd.shape[d] == 1) continue;
          ok = map[d] >= 0 && map[d] < k.outer && !row_seen[map[d]];
          if (ok) row_seen[map[d]] = true;
        }
        ok = ok && std::all_of(row_seen.begin(), row_seen.end(), [](bool b) { return b; });
        if (!ok) {
          l_.absorb_ok_ = false;
          continue;
        }
        Phase store;
        store.per_row = true;
        store.stores.push_back({buffer_access(i, map), memo_.at(ExprKey{i, map})});
        k.phases.push_back(std::move(store));
      }
    }

    void finish() {
      double cost = 0;
      for (const Expr& e : k.exprs) cost += e.kind == ExprKind::Op ? op_cost(e.op) : 0.25;
      k.cost_per_element = std::max(1.0, cost);
    }

    static DimMap identity(uint8_t n) {
      DimMap m;
      m.n = n;
      for (uint8_t d = 0; d < n; ++d) m[d] = d;
      return m;
    }

    uint32_t push(Expr e) {
      k.exprs.push_back(e);
      return static_cast<uint32_t>(k.exprs.size() - 1);
    }

    // An access to node i's buffer (contiguous, i's shape) under `map`.
    uint32_t buffer_access(uint32_t i, const DimMap& map) {
      const Node& nd = l_.node(i);
      return add_access(static_cast<uint32_t>(l_.buffer_of_[i]), 0, contiguous_strides(nd.shape), nd.shape, map);
    }

    uint32_t add_access(uint32_t buffer, int64_t offset, const Dims& strides, const Dims& shape, const DimMap& map) {
      Access a{buffer, offset, {}};
      a.strides.n = k.loop.n;
      for (uint8_t d = 0; d < shape.n; ++d)
        if (map[d] >= 0 && shape[d] != 1) a.strides[map[d]] += strides[d];
      return access_index(a);
    }

    uint32_t add_reduce(Op op, uint32_t value, ScalarType dt) {
      Phase ph;
      ph.kind = Phase::Reduce;
      ph.reduce_op = op;
      ph.value = value;
      k.phases.push_back(std::move(ph));
      emitted_ += phase_expr_count(k, k.phases.back());
      return push(Expr{ExprKind::RowValue, Op::Cast, dt, static_cast<uint32_t>(k.phases.size() - 1)});
    }

    // The expression for node i's element at the loop position `map` gives.
    uint32_t expr(uint32_t i, const DimMap& map, bool is_root) {
      if (failed_) return 0;
      const ExprKey key{i, map};
      if (auto it = memo_.find(key); it != memo_.end()) return it->second;
      // LLVM's and NVRTC's time grows with the square of a kernel's body
      // (a chain of 8,000 adds: 5.7 s as one kernel), and this recursion's
      // depth with the longest chain it inlines. The first inlined value
      // met that deep, or whose exprs take the body past the bound, is
      // stored and read back instead, which costs little at that size; its
      // own kernel, built next round, splits again if still too large.
      const bool may_split = !is_root && splittable(i);
      if (may_split && depth_ >= kMaxKernelExprs) return too_large(i);
      ++depth_;
      uint32_t e = make_expr(i, map, is_root);
      --depth_;
      if (may_split && k.exprs.size() > kMaxKernelExprs) return too_large(i);
      memo_[key] = e;
      return e;
    }

    uint32_t make_expr(uint32_t i, const DimMap& map, bool is_root) {
      const Node& nd = l_.node(i);
      auto ins = l_.g_.inputs_of(i);
      const bool absorbed = !is_root && l_.absorbed_[i] == static_cast<int32_t>(root_);
      if (!is_root && !l_.reason_[i].empty() && !absorbed)
        return push(Expr{ExprKind::Load, Op::Cast, nd.dtype, buffer_access(i, map)});
      if (absorbed) absorbed_uses_.push_back({i, map});
      if (!is_root) l_.inlined_by_[i].push_back(root_);
      k.graph_nodes.push_back(i);
      switch (nd.op) {
        case Op::Full:
          return push(Expr{ExprKind::Scalar, Op::Cast, nd.dtype, l_.g_.scalar_begin[i]});
        case Op::Arange: {
          // start + i * step, in double as the reference computes it.
          uint32_t iota = push(Expr{ExprKind::Iota, Op::Cast, kLong,
                                    map[0] >= 0 && nd.shape[0] != 1 ? static_cast<uint32_t>(map[0]) : ~0u});
          if (!is_floating_point(nd.dtype)) {
            // Integer dtypes use the truncated integer start and step, as PyTorch and the reference do.
            uint32_t start = push(Expr{ExprKind::Scalar, Op::Cast, kLong, l_.g_.scalar_begin[i]});
            uint32_t step = push(Expr{ExprKind::Scalar, Op::Cast, kLong, l_.g_.scalar_begin[i] + 1});
            uint32_t prod = push(Expr{ExprKind::Op, Op::Mul, kLong, iota, step});
            uint32_t sum = push(Expr{ExprKind::Op, Op::Add, kLong, start, prod});
            return nd.dtype == kLong ? sum : push(Expr{ExprKind::Op, Op::Cast, nd.dtype, sum});
          }
          uint32_t fi = push(Expr{ExprKind::Op, Op::Cast, kDouble, iota});
          uint32_t start = push(Expr{ExprKind::Scalar, Op::Cast, kDouble, l_.g_.scalar_begin[i]});
          uint32_t step = push(Expr{ExprKind::Scalar, Op::Cast, kDouble, l_.g_.scalar_begin[i] + 1});
          uint32_t prod = push(Expr{ExprKind::Op, Op::Mul, kDouble, fi, step});
          uint32_t sum = push(Expr{ExprKind::Op, Op::Add, kDouble, start, prod});
          return nd.dtype == kDouble ? sum : push(Expr{ExprKind::Op, Op::Cast, nd.dtype, sum});
        }
        case Op::RandUniform:
        case Op::RandNormal: {
          // Philox at counter = offset + the element's row-major index in
          // the random tensor's own shape: the value the library kernel
          // would have stored there, whatever view reads it.
          uint32_t counter = push(Expr{ExprKind::Scalar, Op::Cast, kLong, l_.g_.scalar_begin[i] + 1});
          int64_t stride = 1;
          for (int d = nd.shape.n - 1; d >= 0; --d) {
            if (map[d] >= 0 && nd.shape[d] != 1) {
              uint32_t at = push(Expr{ExprKind::Iota, Op::Cast, kLong, static_cast<uint32_t>(map[d])});
              if (stride != 1) {
                Expr c{ExprKind::Const, Op::Cast, kLong};
                c.imm = stride;
                at = push(Expr{ExprKind::Op, Op::Mul, kLong, at, push(c)});
              }
              counter = push(Expr{ExprKind::Op, Op::Add, kLong, counter, at});
            }
            stride *= nd.shape[d];
          }
          uint32_t seed = push(Expr{ExprKind::Scalar, Op::Cast, kLong, l_.g_.scalar_begin[i]});
          return push(Expr{ExprKind::Op, nd.op, nd.dtype, counter, seed});
        }
        case Op::AsStrided: {
          const Node& src = l_.node(ins[0]);
          if (src.op == Op::Full) return push(Expr{ExprKind::Scalar, Op::Cast, nd.dtype, l_.g_.scalar_begin[ins[0]]});
          // Computed here (boundaries() let only a dim view through), or a
          // dim view of a value this kernel absorbs (a loss's count, viewed as a 0-d tensor).
          const bool absorbed_source = l_.absorbed_[ins[0]] == static_cast<int32_t>(root_) && l_.dim_view(i);
          if (l_.reason_[ins[0]].empty() || absorbed_source) {
            Dims view_dim;
            l_.dim_view(i, &view_dim);
            DimMap src_map;
            src_map.n = src.shape.n;
            for (uint8_t d = 0; d < src.shape.n; ++d) src_map[d] = view_dim[d] >= 0 ? map[view_dim[d]] : -1;
            return expr(ins[0], src_map, false);
          }
          Dims strides;
          strides.n = nd.shape.n;
          for (uint8_t d = 0; d < nd.shape.n; ++d) strides[d] = nd.attr[d];
          uint32_t a = add_access(static_cast<uint32_t>(l_.buffer_of_[ins[0]]), nd.attr[nd.shape.n], strides, nd.shape, map);
          return push(Expr{ExprKind::Load, Op::Cast, nd.dtype, a});
        }
        case Op::MatMul:
          return l_.short_product(i) ? short_product(i, nd, map) : contraction(i, nd, map);
        case Op::Gather:
          return gather(i, nd, map);
        case Op::Clamp:
          return one_input_op(i, nd, expr(ins[0], child_map(nd.shape, l_.node(ins[0]).shape, map), false));
        default:
          break;
      }
      if (is_elementwise(nd.op)) {
        if (ins.size() == 1) return one_input_op(i, nd, expr(ins[0], child_map(nd.shape, l_.node(ins[0]).shape, map), false));
        uint32_t ops[3] = {0, 0, 0};
        for (size_t q = 0; q < ins.size(); ++q) ops[q] = expr(ins[q], child_map(nd.shape, l_.node(ins[q]).shape, map), false);
        return push(Expr{ExprKind::Op, nd.op, nd.dtype, ops[0], ops[1], ops[2], can_fail_op(nd.op) ? int64_t{i} : 0});
      }
      if (op_family(nd.op) == Family::Reduce) return inline_reduction(i, nd, map);
      fail(i, std::string("no inline form for ") + op_name(nd.op));
      return 0;
    }

    // Elementwise node i, whose one tensor input has the value x: a unary
    // op, a binary op with a scalar operand, or a clamp.
    uint32_t one_input_op(uint32_t i, const Node& nd, uint32_t x) {
      const uint32_t s = l_.g_.scalar_begin[i];
      if (nd.op == Op::Clamp) {
        // Exactly what clamp recorded as two nodes before: maximum with the
        // low bound, then minimum with the high one, each in the node's dtype.
        const uint32_t lo = push(Expr{ExprKind::Scalar, Op::Cast, nd.dtype, s});
        const uint32_t mx = push(Expr{ExprKind::Op, Op::Maximum, nd.dtype, x, lo});
        const uint32_t hi = push(Expr{ExprKind::Scalar, Op::Cast, nd.dtype, s + 1});
        return push(Expr{ExprKind::Op, Op::Minimum, nd.dtype, mx, hi});
      }
      uint32_t y = 0;
      if (has_scalar_operand(nd))  // the scalar in the input's (compute) dtype, as a Full leaf of it was
        y = push(Expr{ExprKind::Scalar, Op::Cast, l_.node(l_.g_.inputs_of(i)[0]).dtype, s});
      return push(Expr{ExprKind::Op, nd.op, nd.dtype, x, y, 0, can_fail_op(nd.op) ? int64_t{i} : 0});
    }

    // A matrix product inside a kernel: its value is the kernel's GEMM
    // (Kernel::contraction), so it must span the kernel's loops dim for dim
    // (the kernel is the product followed by pointwise ops), one per kernel.
    uint32_t contraction(uint32_t i, const Node& nd, const DimMap& map) {
      bool exact = !rows_fixed_ && !k.contraction && k.outer == 0 && nd.shape == k.loop;
      for (uint8_t d = 0; d < nd.shape.n && exact; ++d) exact = map[d] == d || (map[d] < 0 && nd.shape[d] == 1);
      if (!exact) {
        fail(i, "matrix product not read elementwise over its own shape");
        return 0;
      }
      const auto ins = l_.g_.inputs_of(i);
      const uint8_t n = nd.shape.n;  // 2, or 3 with a batch
      Contraction c;
      c.node = i;
      c.k = l_.node(ins[0]).shape[n - 1];
      // Operand dims: A (batch, m, k), B (batch, k, n); -1 for the k dim,
      // which is not a loop of the kernel.
      DimMap amap, bmap;
      amap.n = bmap.n = n;
      if (n == 3) amap[0] = bmap[0] = 0;
      amap[n - 2] = n - 2, amap[n - 1] = -1;
      bmap[n - 2] = -1, bmap[n - 1] = n - 1;
      int64_t a_k = 0, b_k = 0;
      std::vector<uint32_t> a_chain, b_chain;
      const uint32_t a_base = l_.operand_base(i, ins[0], &a_chain), b_base = l_.operand_base(i, ins[1], &b_chain);
      if (!in_memory(a_base) || !in_memory(b_base)) return 0;
      c.a = operand_access(a_base, amap, n - 1, a_k);
      c.b = operand_access(b_base, bmap, n - 2, b_k);
      c.a_k = a_k, c.b_k = b_k;
      if (!a_chain.empty()) c.a_value = fused_producers(a_chain, 0, nd.dtype);
      if (!b_chain.empty()) c.b_value = fused_producers(b_chain, 1, nd.dtype);
      k.contraction = c;
      return push(Expr{ExprKind::Contract, Op::Cast, nd.dtype});
    }

    // The value of an operand's element after its fused producers (`chain`,
    // from the operand down): exprs over ExprKind::Operand `which`. Not
    // memoized: the same node read by the epilogue is its own expression.
    uint32_t fused_producers(const std::vector<uint32_t>& chain, uint32_t which, ScalarType dt) {
      uint32_t v = push(Expr{ExprKind::Operand, Op::Cast, dt, which});
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        const uint32_t i = *it;
        l_.inlined_by_[i].push_back(root_);
        k.graph_nodes.push_back(i);
        v = one_input_op(i, l_.node(i), v);
      }
      return v;
    }

    // out[..., j, ...] = x[..., index[..., j, ...], ...] along dim attr[0]:
    // x's access over the other dims (out's position there: gather needs
    // index.size(d) <= x.size(d)), moved by the checked index times x's
    // stride along the gathered dim. The check names the gather.
    uint32_t gather(uint32_t i, const Node& nd, const DimMap& map) {
      if (k.contraction) {  // a GEMM's epilogue reads its loads ahead (jit/cuda): a buffer
        fail(i, "gather in a matrix product's epilogue");
        return 0;
      }
      const auto ins = l_.g_.inputs_of(i);
      const int d = static_cast<int>(nd.attr[0]);
      const Node& x = l_.node(ins[0]);
      if (!in_memory(ins[0])) return 0;
      const BufferView xb = buffer_view(ins[0]);
      Dims along = nd.shape;  // out's position on every dim but d
      along[d] = 1;
      const uint32_t access = add_access(xb.buffer, xb.offset, xb.strides, along, map);
      const uint32_t index = expr(ins[1], child_map(nd.shape, l_.node(ins[1]).shape, map), false);
      if (failed_) return 0;
      const uint32_t size = push(Expr{ExprKind::Const, Op::Cast, kLong, 0, 0, 0, x.shape[d]});
      const uint32_t checked = push(Expr{ExprKind::Op, Op::IndexCheck, kLong, index, size, 0, int64_t{i}});
      return push(Expr{ExprKind::Gather, Op::Cast, nd.dtype, access, checked, 0, xb.strides[d]});
    }

    // C[m, n] = A[m, 0] B[0, n] + A[m, 1] B[1, n] + ... in k order (the
    // order a GEMM's accumulator adds them in), each operand element a load
    // at its own offset: K multiply-adds of this kernel's element.
    uint32_t short_product(uint32_t i, const Node& nd, const DimMap& map) {
      const auto ins = l_.g_.inputs_of(i);
      DimMap amap, bmap;
      amap.n = bmap.n = 2;
      amap[0] = map[0], amap[1] = -1;
      bmap[0] = -1, bmap[1] = map[1];
      int64_t a_k = 0, b_k = 0;
      const uint32_t a0 = operand_access(ins[0], amap, 1, a_k), b0 = operand_access(ins[1], bmap, 0, b_k);
      uint32_t sum = 0;
      for (int64_t kk = 0; kk < l_.node(ins[0]).shape[1]; ++kk) {
        Access a = k.accesses[a0], b = k.accesses[b0];
        a.offset += kk * a_k, b.offset += kk * b_k;
        const uint32_t x = push(Expr{ExprKind::Load, Op::Cast, nd.dtype, access_index(a)});
        const uint32_t y = push(Expr{ExprKind::Load, Op::Cast, nd.dtype, access_index(b)});
        const uint32_t term = push(Expr{ExprKind::Op, Op::Mul, nd.dtype, x, y});
        sum = kk == 0 ? term : push(Expr{ExprKind::Op, Op::Add, nd.dtype, sum, term});
      }
      return sum;
    }
    // The index of access a in this kernel (added if new).
    uint32_t access_index(const Access& a) {
      for (size_t j = 0; j < k.accesses.size(); ++j) {
        const Access& b = k.accesses[j];
        if (b.buffer == a.buffer && b.offset == a.offset && b.strides == a.strides) return static_cast<uint32_t>(j);
      }
      k.accesses.push_back(a);
      return static_cast<uint32_t>(k.accesses.size() - 1);
    }

    // Operand `in` of a product (its own buffer, or a strided view of one:
    // boundaries() made sure) as an access over the kernel's loops, and its
    // stride along the contracted dim `kd`.
    uint32_t operand_access(uint32_t in, const DimMap& map, uint8_t kd, int64_t& k_stride) {
      const Node& nd = l_.node(in);
      const BufferView v = buffer_view(in);
      k_stride = nd.shape[kd] == 1 ? 0 : v.strides[kd];
      return add_access(v.buffer, v.offset, v.strides, nd.shape, map);
    }

    // Where node `in`'s elements are in memory, for a reader that needs a
    // buffer (a product's operand, a gathered tensor): its own buffer, or,
    // for a view boundaries() gave none, its source's through the view's
    // strides and offset.
    struct BufferView {
      uint32_t buffer;
      int64_t offset = 0;
      Dims strides;
    };
    // Whether buffer_view(in) may be asked: `in` has a buffer, or is a view
    // (not of a constant) of a node that has one. boundaries() made it so
    // for what it saw, but a product's operand base moves when a node of
    // its producer chain gets a buffer later (from its own round, or one
    // met later in graph order): sign(sign(x)) with x = index_select(...)
    // read x, then the outer sign, once the inner one was scattered into.
    // Else the kernel fails and asks for a buffer as boundaries() would
    // have (Lowering::need_readable).
    bool in_memory(uint32_t in) {
      const uint32_t owner = l_.memory_owner(in);
      if (!l_.reason_[in].empty() || !l_.reason_[owner].empty()) return true;
      fail(owner, owner == in ? "read from memory by matrix product or gather" : "viewed by matrix product or gather");
      return false;
    }
    BufferView buffer_view(uint32_t in) const {
      const Node& nd = l_.node(in);
      BufferView v;
      if (!l_.reason_[in].empty()) {
        v.buffer = static_cast<uint32_t>(l_.buffer_of_[in]);
        v.strides = contiguous_strides(nd.shape);
      } else {
        v.buffer = static_cast<uint32_t>(l_.buffer_of_[l_.g_.inputs_of(in)[0]]);
        v.strides.n = nd.shape.n;
        for (uint8_t d = 0; d < nd.shape.n; ++d) v.strides[d] = nd.attr[d];
        v.offset = nd.attr[nd.shape.n];
      }
      return v;
    }

    // A reduction inside a kernel: allowed when it reduces exactly the
    // kernel's row loops and its result is constant along them.
    uint32_t inline_reduction(uint32_t i, const Node& nd, const DimMap& map) {
      const uint32_t in = l_.g_.inputs_of(i)[0];
      const Dims& s_in = l_.node(in).shape;
      const uint64_t mask = static_cast<uint64_t>(nd.attr[0]);
      int reduced = 0;
      for (uint8_t d = 0; d < s_in.n; ++d) reduced += mask >> d & 1;
      extend_rows(s_in, mask, reduced, map);
      if (!rows_fixed_ && k.phases.empty() && k.outer == 0) k.outer = static_cast<uint8_t>(k.loop.n - reduced);  // first one sets the rows
      // Fixed from here: a reduction nested in this one's value ((x / x.sum(0)).sum() over [1, 9, 1],
      // whose phase comes first) must reduce the same rows, not set others.
      rows_fixed_ = true;
      const int row = k.loop.n - k.outer;
      if (row != reduced || reduced == 0 || ((nd.op == Op::ArgMax || nd.op == Op::ArgMin) && reduced != 1)) {
        fail(i, "reduction over other loops than its consumer's rows");
        return 0;
      }
      DimMap in_map;
      in_map.n = s_in.n;
      int next_row = k.outer;
      for (uint8_t d = 0; d < s_in.n; ++d) {
        if (mask >> d & 1) {
          if (k.loop[next_row] != s_in[d]) {
            fail(i, "reduction over other loops than its consumer's rows");
            return 0;
          }
          in_map[d] = next_row++;
        } else {
          if (map[d] >= k.outer) {
            fail(i, "reduction result varies along its consumer's rows");
            return 0;
          }
          in_map[d] = map[d];
        }
      }
      uint32_t value = expr(in, in_map, false);
      if (failed_) return 0;
      const uint32_t row_value = add_reduce(nd.op, value, nd.dtype);
      // Each phase evaluates its value's whole expression again, so phases
      // that each read the one before (y = y - y.mean() + x, n times) emit
      // a body that grows with their square though the exprs grow linearly
      // (n = 100: 16 s of LLVM). Past the bound, the reduced value is stored
      // and this phase and every later one read it back.
      if (emitted_ > kMaxKernelExprs) {
        if (splittable(in)) return too_large(in);
        if (splittable(i)) return too_large(i);
      }
      return row_value;
    }

    // A pointwise root over a reduction's result that is not broadcast along
    // any of the root's loops (a loss's sum / count, x.sum(1) * 2): the
    // reduced dims become the kernel's rows, one row per element of the
    // root, which is stored per row. One kernel instead of the reduction's
    // and the pointwise op's. Earlier accesses get stride 0 along the rows.
    void extend_rows(const Dims& s_in, uint64_t mask, int reduced, const DimMap& map) {
      if (rows_fixed_ || !k.phases.empty() || k.outer != 0 || k.contraction) return;
      std::array<bool, kMaxDims> kept{};
      for (uint8_t d = 0; d < s_in.n; ++d) {
        if (mask >> d & 1 || s_in[d] == 1) continue;
        if (map[d] < 0) return;
        kept[map[d]] = true;
      }
      if (reduced == 0 || k.loop.n + reduced > kMaxDims) return;
      for (uint8_t d = 0; d < k.loop.n; ++d)
        if (k.loop[d] != 1 && !kept[d]) return;  // the result is broadcast along loop d
      const uint8_t outer = k.loop.n;
      for (uint8_t d = 0; d < s_in.n; ++d)
        if (mask >> d & 1) k.loop.push_back(s_in[d]);
      for (Access& a : k.accesses)
        while (a.strides.n < k.loop.n) a.strides.push_back(0);
      k.outer = outer;
      rows_fixed_ = rows_added_ = true;
    }

    // NumPy broadcasting: child dims align right with the parent's.
    static DimMap child_map(const Dims& parent, const Dims& child, const DimMap& map) {
      DimMap m;
      m.n = child.n;
      const int shift = parent.n - child.n;
      for (uint8_t d = 0; d < child.n; ++d) m[d] = child[d] == 1 ? -1 : map[d + shift];
      return m;
    }

    void fail(uint32_t i, const std::string& why) {
      if (!failed_) failed_ = NeedsBuffer{i, why};
    }
    // Whether inlined node i may get a buffer of its own instead (not this
    // kernel's root, not already given one, not a value it must store).
    bool splittable(uint32_t i) const {
      return i != root_ && l_.reason_[i].empty() && l_.absorbed_[i] != static_cast<int32_t>(root_);
    }
    // Out of line: expr() recurses once per inlined node, so its frame stays small.
    [[gnu::noinline, gnu::cold]] uint32_t too_large(uint32_t i) {
      fail(i, "kernel size bound: the kernel of %" + std::to_string(root_) + " would hold or emit more than " +
                  std::to_string(kMaxKernelExprs) + " expressions or inline a chain that long");
      return 0;
    }

    Lowering& l_;
    uint32_t root_;
    // Node i's value at loop position `map`, once per kernel. Hashed, with
    // the map held inline: the lowering's hottest lookup.
    struct ExprKey {
      uint32_t node;
      DimMap map;
      bool operator==(const ExprKey& o) const { return node == o.node && map == o.map; }
    };
    struct ExprKeyHash {
      size_t operator()(const ExprKey& x) const {
        uint64_t h = x.node * 0x9E3779B97F4A7C15ull ^ x.map.n;
        for (int64_t d : x.map) h = (h ^ static_cast<uint64_t>(d)) * 0x100000001B3ull;
        return static_cast<size_t>(h ^ (h >> 29));
      }
    };
    std::unordered_map<ExprKey, uint32_t, ExprKeyHash> memo_;
    std::optional<NeedsBuffer> failed_;
    size_t depth_ = 0;  // expr() calls in progress: the chain being inlined
    size_t emitted_ = 0;  // exprs the reduce phases so far evaluate (ir::emitted_exprs)
    bool rows_fixed_ = false;  // a reduction root, or the first reduction met, decided the rows
    bool rows_added_ = false;  // extend_rows gave a pointwise root rows
    std::vector<std::pair<uint32_t, DimMap>> absorbed_uses_;  // absorbed nodes met, at their map
  };

  // ---------------------------------------------------------------- absorption
  // Candidates: a graph output that only one generated kernel reads (no
  // library call), smaller than that reader's loops: a per-row value such as
  // a mean the caller keeps. And a temporary reduction read by several
  // kernels whose first reader reduces over rows as long as its own, when
  // every later reader already waits for that first one: storing it there
  // then lengthens no chain of kernels (on a GPU independent kernels run
  // side by side; cross-entropy's count of targets is read by the loss's
  // kernel and by the gradient's, which does not wait for the loss, so it
  // keeps its own kernel, off the critical path).
  void find_candidates() {
    candidates_.clear();
    std::vector<std::vector<bool>> after;  // after[j][i]: kernel j waits for kernel i (temporaries only)
    // Per buffer, the kernels that read it (in step order) and whether a
    // library call does: once, not a walk of every kernel per output.
    std::vector<std::vector<const Kernel*>> readers_of(p_.buffers.size());
    for (const Kernel& k : p_.kernels) {
      std::vector<uint32_t> reads = read_buffers(k);
      std::sort(reads.begin(), reads.end());
      reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
      for (uint32_t b : reads) readers_of[b].push_back(&k);
    }
    std::vector<bool> library_read(p_.buffers.size(), false);
    for (const LibraryCall& c : p_.library_calls)
      for (uint32_t b : c.inputs) library_read[b] = true;
    for (uint32_t o = 0; o < n_; ++o) {
      const bool output = reason_[o] == kGraphOutput;
      const bool temp_reduction = !output && !reason_[o].empty() && op_family(node(o).op) == Family::Reduce &&
                                  buffer_of_[o] >= 0 && p_.buffers[buffer_of_[o]].kind == BufferKind::Temp;
      if (!(output || temp_reduction) || absorbed_[o] >= 0 || rejected_[o] || is_library(node(o).op)) continue;  // MatMul too
      const uint32_t b = static_cast<uint32_t>(buffer_of_[o]);
      if (library_read[b]) continue;
      const std::vector<const Kernel*>& readers = readers_of[b];
      if (readers.empty() || (output && readers.size() != 1) || readers[0]->root == o) continue;
      const Kernel& r = *readers[0];
      if (readers.size() > 1) {
        if (after.empty()) after = kernel_waits();
        const size_t first = static_cast<size_t>(&r - p_.kernels.data());
        if (!std::all_of(readers.begin() + 1, readers.end(),
                         [&](const Kernel* k) { return after[static_cast<size_t>(k - p_.kernels.data())][first]; }))
          continue;
      }
      int64_t space = 1, row = 1, reduced = 1;
      for (uint8_t d = 0; d < r.loop.n; ++d) space *= r.loop[d], row *= d >= r.outer ? r.loop[d] : 1;
      if (node(o).numel() * 2 > space) continue;
      if (temp_reduction) {
        const Node& in = node(g_.inputs_of(o)[0]);
        for (uint8_t d = 0; d < in.shape.n; ++d) reduced *= (node(o).attr[0] >> d & 1) ? in.shape[d] : 1;
        if (r.outer == r.loop.n || reduced != row) continue;
      }
      if (std::none_of(candidates_.begin(), candidates_.end(), [&](const Candidate& c) { return c.first == o; }))
        candidates_.push_back({o, r.root});
    }
  }

  // Which kernels wait, directly or through others, for which (by the
  // buffers they write and read, library calls included).
  std::vector<std::vector<bool>> kernel_waits() const {
    const std::vector<StepBuffers> b = all_step_buffers();
    const size_t n = p_.steps.size();
    std::vector<std::vector<bool>> step_after(n, std::vector<bool>(n, false));
    for (size_t j = 0; j < n; ++j)
      for (size_t i = 0; i < j; ++i)
        if (conflict(b[i], b[j]) || step_after[j][i]) {
          step_after[j][i] = true;
          for (size_t h = 0; h < i; ++h) step_after[j][h] = step_after[j][h] || step_after[i][h];
        }
    std::vector<std::vector<bool>> after(p_.kernels.size(), std::vector<bool>(p_.kernels.size(), false));
    for (size_t j = 0; j < n; ++j)
      for (size_t i = 0; i < n; ++i)
        if (step_after[j][i] && p_.steps[j].kind == Step::Generated && p_.steps[i].kind == Step::Generated)
          after[p_.steps[j].index][p_.steps[i].index] = true;
    return after;
  }

  bool library_reads(uint32_t b) const {
    for (const LibraryCall& c : p_.library_calls)
      if (std::find(c.inputs.begin(), c.inputs.end(), b) != c.inputs.end()) return true;
    return false;
  }

  // After kernels are built: absorbed node i is written by its consumer's
  // kernel alone, per row, read by no library call, and read only by
  // kernels after the writer.
  bool stored_by_consumer_only(uint32_t i) const {
    const uint32_t b = static_cast<uint32_t>(buffer_of_[i]);
    if (library_reads(b)) return false;
    int writers = 0;
    for (const Kernel& k : p_.kernels) {
      if (reads_any(k, {b}) && writers == 0) return false;  // reads before the write, or in the writer
      for (const Phase& ph : k.phases)
        for (auto [a, e] : ph.stores)
          if (k.accesses[a].buffer == b) {
            if (k.root != static_cast<uint32_t>(absorbed_[i]) || !ph.per_row || reads_any(k, {b})) return false;
            ++writers;
          }
    }
    return writers == 1;
  }

  // ---------------------------------------------------------------- pass 3
  // A value inlined into several kernels is recomputed by each: fine for a
  // few cheap ops, wasteful for a reduction or a long chain.
  std::vector<NeedsBuffer> recompute_check() {
    std::vector<NeedsBuffer> out;
    for (uint32_t i = 0; i < n_; ++i) {
      auto& by = inlined_by_[i];
      std::sort(by.begin(), by.end());
      by.erase(std::unique(by.begin(), by.end()), by.end());
      if (by.size() < 2) continue;
      if (op_family(node(i).op) == Family::Reduce)
        out.push_back({i, "reduction used by " + std::to_string(by.size()) + " kernels"});
      else if (subtree_cost(i) > kMaxRecomputeCost)
        out.push_back({i, "used by " + std::to_string(by.size()) + " kernels and costlier to recompute than to store"});
    }
    return out;
  }

  double subtree_cost(uint32_t i) const {
    if (!reason_[i].empty()) return 0;
    double c = op_cost(node(i).op);
    for (uint32_t in : g_.inputs_of(i)) c += subtree_cost(in);
    return c;
  }
  static constexpr double kMaxRecomputeCost = 12;

  // ---------------------------------------------------------------- pass 4a
  // A store-only kernel B that reads what an earlier kernel A over the same
  // loops stores (a graph output both need: a GEMM's activation the caller
  // keeps, then W5's clamp chain over it), and only at the positions A
  // stores it, joins A: B's loads become A's stored values, and the buffer
  // is written once and never read back. B moves up to A, so the steps
  // between must neither write what B reads nor touch what B writes, and A
  // must not read what B writes. A may also be a row kernel whose last
  // phase stores per row and B a kernel over its rows (over_rows_of): a
  // bias gradient's sum and the optimizer's updates of the bias. A
  // temporary that only B read is then stored by no one.
  //
  // A joinable A writes what B reads, so it can only be the nearest earlier
  // step touching B's buffers: per buffer, the last step so far that reads
  // it and that writes it name that step without walking the steps between
  // (4,000 independent kernels: each walked all before it).
  void vertical() {
    std::vector<bool> gone(p_.steps.size(), false);
    constexpr int64_t kNone = -1;
    std::vector<int64_t> last_read(p_.buffers.size(), kNone), last_written(p_.buffers.size(), kNone);
    for (size_t sb = 0; sb < p_.steps.size(); ++sb) {
      const StepBuffers bb = ir::step_buffers(p_, p_.steps[sb]);
      int64_t at = static_cast<int64_t>(sb);  // where B's work runs: sb, or the A it joins
      if (p_.steps[sb].kind == Step::Generated) {
        Kernel& b = p_.kernels[p_.steps[sb].index];
        int64_t sa = kNone;
        for (uint32_t r : bb.reads) sa = std::max(sa, last_written[r]);
        for (uint32_t w : bb.writes) sa = std::max({sa, last_read[w], last_written[w]});
        if (store_only(b) && !b.contraction && sa != kNone && p_.steps[sa].kind == Step::Generated &&
            joinable(p_.kernels[p_.steps[sa].index], b)) {
          join(p_.kernels[p_.steps[sa].index], b);
          gone[sb] = true;
          at = sa;
        }
      }
      for (uint32_t r : bb.reads) last_read[r] = std::max(last_read[r], at);
      for (uint32_t w : bb.writes) last_written[w] = std::max(last_written[w], at);
    }
    std::vector<Step> steps;
    std::vector<Kernel> kernels;
    for (size_t s = 0; s < p_.steps.size(); ++s) {
      if (gone[s]) continue;
      if (p_.steps[s].kind == Step::Generated) {
        steps.push_back({Step::Generated, static_cast<uint32_t>(kernels.size())});
        kernels.push_back(std::move(p_.kernels[p_.steps[s].index]));
      } else {
        steps.push_back(p_.steps[s]);
      }
    }
    p_.steps = std::move(steps);
    p_.kernels = std::move(kernels);
    drop_unread_temporaries();
  }

  // Stores into temporaries no step reads (their reader joined the writer),
  // and kernels that stored nothing else.
  void drop_unread_temporaries() {
    std::vector<bool> read(p_.buffers.size(), false);
    for (const Step& st : p_.steps)
      for (uint32_t b : ir::step_buffers(p_, st).reads) read[b] = true;
    for (Kernel& k : p_.kernels) {
      bool dropped = false;
      for (Phase& ph : k.phases) {
        const size_t before = ph.stores.size();
        std::erase_if(ph.stores, [&](const std::pair<uint32_t, uint32_t>& st) {
          const uint32_t b = k.accesses[st.first].buffer;
          return p_.buffers[b].kind == BufferKind::Temp && !read[b];
        });
        dropped = dropped || ph.stores.size() != before;
      }
      if (!dropped) continue;
      // Empty store phases go; row values name reduce phases by position.
      std::vector<uint32_t> to(k.phases.size());
      std::vector<Phase> kept;
      for (size_t p = 0; p < k.phases.size(); ++p) {
        to[p] = static_cast<uint32_t>(kept.size());
        if (k.phases[p].kind == Phase::Reduce || !k.phases[p].stores.empty()) kept.push_back(std::move(k.phases[p]));
      }
      k.phases = std::move(kept);
      for (Expr& x : k.exprs)
        if (x.kind == ExprKind::RowValue) x.a = to[x.a];
      drop_unused_accesses(k);
    }
    // A kernel left storing nothing computed only such temporaries: gone.
    std::vector<Step> steps;
    std::vector<Kernel> kernels;
    for (const Step& st : p_.steps) {
      if (st.kind != Step::Generated) {
        steps.push_back(st);
        continue;
      }
      Kernel& k = p_.kernels[st.index];
      if (std::none_of(k.phases.begin(), k.phases.end(), [](const Phase& ph) { return !ph.stores.empty(); })) continue;
      steps.push_back({Step::Generated, static_cast<uint32_t>(kernels.size())});
      kernels.push_back(std::move(k));
    }
    p_.steps = std::move(steps);
    p_.kernels = std::move(kernels);
  }

  static bool store_only(const Kernel& k) {
    return k.outer == 0 && k.phases.size() == 1 && k.phases[0].kind == Phase::Store && !k.phases[0].per_row;
  }
  static std::vector<uint32_t> read_buffers(const Kernel& k) { return kernel_buffers(k).reads; }
  // B's loops are A's (a store-only A), or A's rows: a row kernel whose
  // last phase stores per row (a bias gradient's sum over the batch, then
  // the optimizer's update of the bias, row by row). A reduction the split
  // pass would cut into parts is left as it is (a joined kernel is not split).
  bool over_rows_of(const Kernel& a, const Kernel& b) const {
    if (store_only(a)) return a.loop == b.loop;
    if (a.contraction || a.phases.empty() || !a.phases.back().per_row || b.loop.n != a.outer) return false;
    int64_t rows = 1, row = 1;
    for (uint8_t d = 0; d < a.loop.n; ++d) {
      if (d < a.outer && a.loop[d] != b.loop[d]) return false;
      (d < a.outer ? rows : row) *= a.loop[d];
    }
    return !(opt_.split_reduction_rows > 0 && rows < opt_.split_reduction_rows && row >= 2 * kSplitMinPart);
  }
  // B reads something A stores, only where A stores it, and A reads nothing B writes.
  bool joinable(const Kernel& a, const Kernel& b) const {
    if (!over_rows_of(a, b) || !within_size_bound(a, b)) return false;
    const auto a_writes = written(a), b_writes = written(b), a_reads = read_buffers(a);
    for (uint32_t w : b_writes)
      if (std::find(a_reads.begin(), a_reads.end(), w) != a_reads.end() ||
          std::find(a_writes.begin(), a_writes.end(), w) != a_writes.end())
        return false;
    bool uses = false;
    for (const Expr& e : b.exprs) {
      if (!reads_memory(e)) continue;
      const Access& x = b.accesses[e.a];
      if (std::find(a_writes.begin(), a_writes.end(), x.buffer) == a_writes.end()) continue;
      if (e.kind == ExprKind::Gather || stored_value(a, x) < 0) return false;  // a gather reads other elements
      uses = true;
    }
    return uses;
  }
  // The expr A stores at exactly access x of B (over A's loops or A's
  // rows: A's access then does not move along the row loops), or -1.
  static int64_t stored_value(const Kernel& a, const Access& x) {
    for (const Phase& ph : a.phases) {
      if (ph.kind != Phase::Store || (ph.per_row != (x.strides.n < a.loop.n))) continue;
      for (auto [acc, e] : ph.stores) {
        const Access& y = a.accesses[acc];
        bool same = y.buffer == x.buffer && y.offset == x.offset;
        for (uint8_t d = 0; d < a.loop.n && same; ++d) same = y.strides[d] == (d < x.strides.n ? x.strides[d] : 0);
        if (same) return e;
      }
    }
    return -1;
  }
  // B's accesses gain stride 0 along A's row loops; its stores join A's
  // first phase (a store-only A) or A's last phase, a per-row store: one
  // phase, whose loads all come before its stores, so an update written
  // into its input's buffer (OutputPlan::donated) is never read back by a
  // later phase of the row.
  static void join(Kernel& a, const Kernel& b) {
    const uint32_t aoff = static_cast<uint32_t>(a.accesses.size());
    const bool rows = !store_only(a);
    for (Access x : b.accesses) {
      while (x.strides.n < a.loop.n) x.strides.push_back(0);
      a.accesses.push_back(x);
    }
    std::vector<uint32_t> at(b.exprs.size());  // b's expr -> a's
    for (size_t i = 0; i < b.exprs.size(); ++i) {
      Expr e = b.exprs[i];
      if (e.kind == ExprKind::Load) {
        if (int64_t v = stored_value(a, b.accesses[e.a]); v >= 0) {
          at[i] = static_cast<uint32_t>(v);
          continue;
        }
      }
      if (reads_memory(e)) e.a += aoff;
      for (int o = 0; o < operand_count(e); ++o) operand(e, o) = at[operand(e, o)];
      at[i] = static_cast<uint32_t>(a.exprs.size());
      a.exprs.push_back(e);
    }
    Phase& to = rows ? a.phases.back() : a.phases[0];
    for (auto [acc, e] : b.phases[0].stores) to.stores.push_back({acc + aoff, at[e]});
    a.graph_nodes.insert(a.graph_nodes.end(), b.graph_nodes.begin(), b.graph_nodes.end());
    a.name += "+" + b.name;
    a.cost_per_element += b.cost_per_element;
    drop_unused_accesses(a);  // the accesses of B's replaced loads are read by nothing now
  }
  // ---------------------------------------------------------------- pass 4b
  // Adjacent generated kernels over the same loops, neither reading what the
  // other writes, become one kernel: one pass over memory instead of two.
  void horizontal() {
    std::vector<Step> steps;
    std::vector<Kernel> kernels;
    for (const Step& s : p_.steps) {
      if (s.kind == Step::Generated && !steps.empty() && steps.back().kind == Step::Generated &&
          can_merge(kernels.back(), p_.kernels[s.index])) {
        merge(kernels.back(), p_.kernels[s.index]);
        continue;
      }
      if (s.kind == Step::Generated) {
        steps.push_back({Step::Generated, static_cast<uint32_t>(kernels.size())});
        kernels.push_back(std::move(p_.kernels[s.index]));
      } else {
        steps.push_back(s);
      }
    }
    p_.steps = std::move(steps);
    p_.kernels = std::move(kernels);
  }

  // ---------------------------------------------------------------- pass 4c
  // A step that computes a graph output from an input that later steps
  // still read (an optimizer's update of a parameter, joined into the GEMM
  // of its gradient by pass 4a, before the backward GEMM that reads the old
  // parameter) moves after those readers, and after every step it does not
  // conflict with. Values are unchanged; what changes is that the update
  // now runs after the last read of the old value, so the runtime can write
  // it straight into the parameter's buffer (OutputPlan::donated) instead
  // of into a new buffer that is copied back after the run (W4: 4 MiB a
  // step). Moved steps keep their order; the buffer plan comes after.
  int late_updates() {
    const size_t ns = p_.steps.size();
    const std::vector<StepBuffers> b = all_step_buffers();
    auto has = [](const std::vector<uint32_t>& xs, uint32_t x) { return std::find(xs.begin(), xs.end(), x) != xs.end(); };
    std::vector<bool> late(ns, false);
    int moved = 0;
    for (size_t s = ns; s-- > 0;) {
      bool updates = false, conflicts = false;
      for (size_t t = s + 1; t < ns && !conflicts; ++t) {
        if (late[t]) continue;
        conflicts = conflict(b[s], b[t]);
        for (uint32_t in : b[s].reads)
          updates = updates || (p_.buffers[in].kind == BufferKind::Input && has(b[t].reads, in) &&
                                std::any_of(b[s].writes.begin(), b[s].writes.end(), [&](uint32_t w) { return may_update(w, in); }));
      }
      late[s] = updates && !conflicts;
      moved += late[s];
    }
    if (moved > 0) steps_last(late);
    return moved;
  }
  // Moves the steps marked in `last` after the others; each group keeps its
  // order.
  void steps_last(const std::vector<bool>& last) {
    std::vector<Step> steps;
    for (int pass = 0; pass < 2; ++pass)
      for (size_t s = 0; s < p_.steps.size(); ++s)
        if (last[s] == (pass == 1)) steps.push_back(p_.steps[s]);
    p_.steps = std::move(steps);
  }
  // ---------------------------------------------------------------- pass 4d
  // The steps that can fail on bad data (ir::can_fail: a cross-entropy's
  // gather of its labels, an index_select) run as early as what they read
  // allows: each one, and every earlier step it needs (transitively: a step
  // that writes what it reads, or touches what it writes), moves ahead of
  // the steps it does not need. Values are unchanged. A failed run must
  // leave every tensor as it was, so the runtime writes into a caller's
  // buffer (an in-place update) only after the last such step
  // (runtime/output_plan.cpp); with the check after the updates (a training
  // step that also returns its loss, gradients zeroed in place), every
  // update would go to a new buffer and be copied back. Returns the number
  // of steps moved.
  int checks_first() {
    const size_t ns = p_.steps.size();
    const std::vector<StepBuffers> b = all_step_buffers();
    std::vector<bool> early(ns, false);
    for (size_t s = ns; s-- > 0;) {
      early[s] = early[s] || can_fail(p_, p_.steps[s]);
      if (!early[s]) continue;
      for (size_t t = 0; t < s; ++t)
        early[t] = early[t] || conflict(b[t], b[s]);
    }
    // Moved: a step that is not early but comes before an early one.
    int moved = 0;
    size_t last_early = 0;
    for (size_t s = 0; s < ns; ++s)
      if (early[s]) last_early = s + 1;
    for (size_t s = 0; s < last_early; ++s) moved += !early[s];
    if (moved > 0) {
      std::vector<bool> late(ns);
      for (size_t s = 0; s < ns; ++s) late[s] = !early[s];
      steps_last(late);
    }
    return moved;
  }

  // An output that could be written into input `in`'s buffer: same size and type.
  bool may_update(uint32_t out, uint32_t in) const {
    const BufferInfo &o = p_.buffers[out], &i = p_.buffers[in];
    return o.kind == BufferKind::Output && o.dtype == i.dtype && o.numel == i.numel;
  }
  static bool overlap(const std::vector<uint32_t>& xs, const std::vector<uint32_t>& ys) {
    return std::any_of(xs.begin(), xs.end(), [&](uint32_t x) { return std::find(ys.begin(), ys.end(), x) != ys.end(); });
  }
  std::vector<StepBuffers> all_step_buffers() const {
    std::vector<StepBuffers> b;
    for (const Step& st : p_.steps) b.push_back(ir::step_buffers(p_, st));
    return b;
  }
  // Whether two steps must keep their order: one writes what the other
  // reads or writes.
  static bool conflict(const StepBuffers& x, const StepBuffers& y) {
    return overlap(x.writes, y.reads) || overlap(x.reads, y.writes) || overlap(x.writes, y.writes);
  }

  static std::vector<uint32_t> written(const Kernel& k) { return kernel_buffers(k).writes; }
  static bool reads_any(const Kernel& k, const std::vector<uint32_t>& bufs) {
    if (k.contraction)
      for (uint32_t a : {k.contraction->a, k.contraction->b})
        if (std::find(bufs.begin(), bufs.end(), k.accesses[a].buffer) != bufs.end()) return true;
    for (const Expr& e : k.exprs)
      if (reads_memory(e) && std::find(bufs.begin(), bufs.end(), k.accesses[e.a].buffer) != bufs.end())
        return true;
    return false;
  }
  // Joined or merged, two kernels stay within kMaxKernelExprs (lower.h).
  static bool within_size_bound(const Kernel& a, const Kernel& b) {
    return a.exprs.size() + b.exprs.size() <= kMaxKernelExprs &&
           a.accesses.size() + b.accesses.size() <= kMaxMergedAccesses &&
           (a.phases.size() + b.phases.size() <= 2 || emitted_exprs(a) + emitted_exprs(b) <= kMaxKernelExprs);
  }
  static bool can_merge(const Kernel& a, const Kernel& b) {
    if (!(a.loop == b.loop) || a.outer != b.outer || a.contraction || b.contraction || !within_size_bound(a, b))
      return false;
    // Only kernels without reduce phases: their phase structure is one store.
    for (const Kernel* k : {&a, &b})
      for (const Phase& ph : k->phases)
        if (ph.kind != Phase::Store || ph.per_row) return false;
    return !reads_any(b, written(a)) && !reads_any(a, written(b));
  }
  static void merge(Kernel& a, const Kernel& b) {
    const uint32_t eoff = static_cast<uint32_t>(a.exprs.size()), aoff = static_cast<uint32_t>(a.accesses.size());
    a.accesses.insert(a.accesses.end(), b.accesses.begin(), b.accesses.end());
    for (Expr e : b.exprs) {
      if (reads_memory(e)) e.a += aoff;
      for (int o = 0; o < operand_count(e); ++o) operand(e, o) += eoff;
      a.exprs.push_back(e);
    }
    for (auto [acc, e] : b.phases[0].stores) a.phases[0].stores.push_back({acc + aoff, e + eoff});
    a.graph_nodes.insert(a.graph_nodes.end(), b.graph_nodes.begin(), b.graph_nodes.end());
    a.name += "+" + b.name;
    a.cost_per_element += b.cost_per_element;
  }

  // ---------------------------------------------------------------- pass 5
  // Loops d and d+1 merge when every access steps through them as through
  // one loop (stride[d] == stride[d+1] * extent[d+1]) and no Iota needs d.
  static int collapse(Kernel& k) {
    int merged = 0;
    if (k.contraction) return 0;  // a GEMM's loops are [Batch,] M, N by definition
    for (int d = static_cast<int>(k.loop.n) - 2; d >= 0; --d) {
      if ((d < k.outer) != (d + 1 < k.outer)) continue;
      bool ok = true;
      for (const Access& a : k.accesses) ok = ok && a.strides[d] == a.strides[d + 1] * k.loop[d + 1];
      for (const Expr& e : k.exprs) ok = ok && !(e.kind == ExprKind::Iota && (e.a == static_cast<uint32_t>(d) || e.a == static_cast<uint32_t>(d + 1)));
      if (!ok) continue;
      k.loop[d] *= k.loop[d + 1];
      for (Access& a : k.accesses) {
        a.strides[d] = a.strides[d + 1];
        erase_dim(a.strides, d + 1);
      }
      for (Expr& e : k.exprs)
        if (e.kind == ExprKind::Iota && e.a != ~0u && e.a > static_cast<uint32_t>(d)) --e.a;
      erase_dim(k.loop, d + 1);
      if (d + 1 < k.outer) --k.outer;
      ++merged;
    }
    return merged;
  }
  static void erase_dim(Dims& dims, int d) {
    for (int j = d; j + 1 < dims.n; ++j) dims[j] = dims[j + 1];
    --dims.n;
  }

  // ---------------------------------------------------------------- pass 6
  // Linear scan over the steps: a temporary lives from the step that writes
  // it to the last step that reads it; freed space is reused first-fit.
  void plan_buffers() {
    const size_t nb = p_.buffers.size(), ns = p_.steps.size();
    std::vector<int64_t> first(nb, -1), last(nb, -1);
    auto touch = [&](uint32_t b, int64_t s) {
      if (first[b] < 0) first[b] = s;
      last[b] = std::max(last[b], s);
    };
    for (size_t s = 0; s < ns; ++s) {
      const Step& st = p_.steps[s];
      if (st.kind == Step::Library) {
        const LibraryCall& c = p_.library_calls[st.index];
        for (uint32_t b : c.inputs) touch(b, s);
        touch(c.output, s);
      } else {
        for (const Access& a : p_.kernels[st.index].accesses) touch(a.buffer, s);
      }
    }
    struct Block {
      int64_t offset, size;
    };
    std::vector<Block> free_blocks;
    std::vector<std::pair<int64_t, uint32_t>> releases;  // (step, buffer)
    int64_t top = 0;
    for (size_t s = 0; s < ns; ++s) {
      for (uint32_t b = 0; b < nb; ++b) {
        BufferInfo& info = p_.buffers[b];
        if (info.kind != BufferKind::Temp || first[b] != static_cast<int64_t>(s)) continue;
        int64_t size = (info.numel * static_cast<int64_t>(element_size(info.dtype)) + 63) / 64 * 64;
        auto it = std::find_if(free_blocks.begin(), free_blocks.end(), [&](const Block& f) { return f.size >= size; });
        if (it != free_blocks.end()) {
          info.arena_offset = it->offset;
          if (it->size > size) *it = {it->offset + size, it->size - size};
          else free_blocks.erase(it);
        } else {
          info.arena_offset = top;
          top += size;
        }
        releases.push_back({last[b], b});
      }
      for (auto& [when, b] : releases)
        if (when == static_cast<int64_t>(s)) {
          int64_t size = (p_.buffers[b].numel * static_cast<int64_t>(element_size(p_.buffers[b].dtype)) + 63) / 64 * 64;
          free_blocks.push_back({p_.buffers[b].arena_offset, size});
        }
    }
    p_.arena_bytes = top;
  }

  const Graph& g_;
  const LowerOptions opt_;
  const uint32_t n_;
  KernelProgram p_;
  std::vector<std::string> reason_;  // non-empty: the node owns a buffer, for this reason
  std::vector<int32_t> buffer_of_;
  std::vector<std::vector<uint32_t>> inlined_by_;  // kernels (by root) that inline the node
  // Absorption (run): node -> root of the kernel that computes and stores it
  // per row (-1: none); outputs tried and not kept; whether this attempt
  // stored every absorbed node as planned; the next outputs to try.
  std::vector<int32_t> absorbed_;
  std::vector<bool> rejected_;
  bool absorb_ok_ = true;
  using Candidate = std::pair<uint32_t, uint32_t>;  // (output node, root of its reader's kernel)
  std::vector<Candidate> candidates_;
};

}  // namespace

KernelProgram lower(const Graph& g, LowerLog* log, const LowerOptions& options) {
  return Lowering(g, options).run(log);
}

std::string lower_build_id() { return std::string("lower ") + __DATE__ " " __TIME__ + ", " + split_build_id(); }

// ---------------------------------------------------------------- printing
std::string to_string(const Kernel& k) {
  std::ostringstream os;
  os << "kernel " << k.name << " loops [";
  for (uint8_t d = 0; d < k.loop.n; ++d) os << (d ? "," : "") << k.loop[d] << (d + 1 == k.outer ? " |" : "");
  os << "] cost " << k.cost_per_element << "\n";
  if (const auto& c = k.contraction) {
    auto side = [&](uint32_t acc, int64_t step, uint32_t value) {
      std::ostringstream o;
      o << "@" << acc << "[+" << step << "*t]";
      return value == Contraction::kRaw ? o.str() : "e" + std::to_string(value) + "(" + o.str() + ")";
    };
    os << "  gemm %" << c->node << ": sum over t < " << c->k << " of " << side(c->a, c->a_k, c->a_value) << " * "
       << side(c->b, c->b_k, c->b_value) << "\n";
  }
  for (size_t a = 0; a < k.accesses.size(); ++a) {
    const Access& x = k.accesses[a];
    os << "  @" << a << " = buf" << x.buffer << "[" << x.offset;
    for (uint8_t d = 0; d < x.strides.n; ++d)
      if (x.strides[d]) os << " + " << x.strides[d] << "*i" << int(d);
    os << "]\n";
  }
  for (size_t e = 0; e < k.exprs.size(); ++e) {
    const Expr& x = k.exprs[e];
    os << "  e" << e << " " << to_string(x.dtype) << " = ";
    switch (x.kind) {
      case ExprKind::Load: os << "load @" << x.a; break;
      case ExprKind::Gather: os << "gather @" << x.a << " + e" << x.b << "*" << x.imm; break;
      case ExprKind::Scalar: os << "scalar $" << x.a; break;
      case ExprKind::RowValue: os << "row value of phase " << x.a; break;
      case ExprKind::Iota: os << "iota i" << (x.a == ~0u ? -1 : static_cast<int>(x.a)); break;
      case ExprKind::Contract: os << "gemm"; break;
      case ExprKind::Const: os << x.imm; break;
      case ExprKind::Operand: os << "element of operand " << (x.a == 0 ? "A" : "B"); break;
      case ExprKind::Op: {
        os << op_name(x.op);
        for (int o = 0; o < operand_count(x); ++o) os << (o ? ", e" : " e") << operand(x, o);
        break;
      }
    }
    os << "\n";
  }
  for (size_t p = 0; p < k.phases.size(); ++p) {
    const Phase& ph = k.phases[p];
    if (ph.kind == Phase::Reduce) {
      os << "  phase " << p << ": reduce " << op_name(ph.reduce_op) << " e" << ph.value << "\n";
    } else {
      os << "  phase " << p << ": store" << (ph.per_row ? " per row" : "");
      for (auto [a, e] : ph.stores) os << " @" << a << "=e" << e;
      os << "\n";
    }
  }
  return os.str();
}

std::string to_string(const KernelProgram& p) {
  std::ostringstream os;
  static const char* kinds[] = {"input", "output", "temp"};
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const BufferInfo& x = p.buffers[b];
    os << "buf" << b << ": " << kinds[static_cast<int>(x.kind)] << " #" << x.index << " " << to_string(x.dtype) << "["
       << x.numel << "]";
    if (x.kind == BufferKind::Temp) os << " arena+" << x.arena_offset;
    os << "\n";
  }
  os << "boundaries:\n";
  for (const Boundary& b : p.boundaries) os << "  %" << b.node << ": " << b.reason << "\n";
  for (const Step& s : p.steps) {
    if (s.kind == Step::Library) {
      const LibraryCall& c = p.library_calls[s.index];
      os << "library " << op_name(c.op) << " %" << c.node << " -> buf" << c.output << " (";
      for (size_t i = 0; i < c.inputs.size(); ++i) os << (i ? ", " : "") << "buf" << c.inputs[i];
      os << ")\n";
    } else {
      os << to_string(p.kernels[s.index]);
    }
  }
  os << "arena " << p.arena_bytes << " bytes\n";
  return os.str();
}

}  // namespace loom::ir
