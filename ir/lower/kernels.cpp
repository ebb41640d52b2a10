// The kernels pass: every buffer-owning node becomes a step, a library call
// or a kernel built from it as root (Lowering::KernelBuilder). See
// ir/lower/lowering.h.
#include <algorithm>
#include <optional>
#include <unordered_map>

#include "ir/lower/lowering.h"

namespace loom::ir::lowering {

// ---------------------------------------------------------------- kernels
// Builds the kernel that computes buffer-owning node `root`.
class Lowering::KernelBuilder {
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

  uint32_t add_access(uint32_t buffer, int64_t offset, const Dims& strides, const Dims& shape, const DimMap& map,
                      uint32_t offset_scalar = Access::kNoScalar, int64_t offset_align = 1) {
    Access a{buffer, offset, {}, offset_scalar, offset_align};
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
        const uint32_t offset_scalar = view_offset_is_scalar(nd) ? l_.g_.scalar_begin[i] : Access::kNoScalar;
        const int64_t align = view_offset_is_scalar(nd) ? l_.runtime_offset_align(offset_scalar, nd.dtype) : 1;
        uint32_t a = add_access(static_cast<uint32_t>(l_.buffer_of_[ins[0]]), static_view_offset(nd), strides, nd.shape,
                                map, offset_scalar, align);
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
    const uint32_t access = add_access(xb.buffer, xb.offset, xb.strides, along, map, xb.offset_scalar, xb.offset_align);
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
      if (b.same_place(a)) return static_cast<uint32_t>(j);
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
    return add_access(v.buffer, v.offset, v.strides, nd.shape, map, v.offset_scalar, v.offset_align);
  }

  // Where node `in`'s elements are in memory, for a reader that needs a
  // buffer (a product's operand, a gathered tensor): its own buffer, or,
  // for a view boundaries() gave none, its source's through the view's
  // strides and offset.
  struct BufferView {
    uint32_t buffer;
    int64_t offset = 0;
    Dims strides;
    uint32_t offset_scalar = Access::kNoScalar;
    int64_t offset_align = 1;
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
      v.offset = static_view_offset(nd);
      if (view_offset_is_scalar(nd)) {
        v.offset_scalar = l_.g_.scalar_begin[in];
        v.offset_align = l_.runtime_offset_align(v.offset_scalar, nd.dtype);
      }
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

// Builds every step; returns how many nodes it gave a buffer on the way.
// A kernel asking for a buffer gets it at once and is built again, so
// one round finds all it needs: a chain whose values each need a buffer
// only once the one below has one (softmaxes over alternate dims, each
// kernel reaching the bottom of the chain before the reductions that
// fail) took a round, rebuilding every kernel, per value (200: 18 s).
// Kernels built earlier in the round may have inlined such a node: a
// round with needs is always followed by another.
size_t Lowering::build_all(std::vector<NeedsBuffer>& needs) {
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
                       g_.scalar_begin[i], g_.scalar_begin[i + 1] - g_.scalar_begin[i], {}, {}};
      for (uint32_t in : g_.inputs_of(i)) {
        uint32_t src;
        const bool alias = reason_[in].empty() && contiguous_view_of(in, src);
        call.inputs.push_back(static_cast<uint32_t>(buffer_of_[alias ? src : in]));
        call.input_offsets.push_back(alias ? static_view_offset(node(in)) : 0);
        call.input_offset_scalars.push_back(alias && view_offset_is_scalar(node(in)) ? g_.scalar_begin[in]
                                                                                     : Access::kNoScalar);
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

void Lowering::add_buffer(uint32_t i, BufferKind kind, uint32_t index) {
  buffer_of_[i] = static_cast<int32_t>(p_.buffers.size());
  p_.buffers.push_back({kind, index, node(i).dtype, node(i).numel()});
}


}  // namespace loom::ir::lowering
