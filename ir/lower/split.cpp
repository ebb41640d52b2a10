// The split pass: a reduction with too few rows to fill the machine (a
// whole-tensor sum is one row) becomes two kernels per reduce phase. The
// first computes P partial results per row, each over 1/P of the row, into
// a temporary of [P, rows]; the second folds each row's P partials with the
// same operator into the row's value. A later phase that reads it (var's
// sum of squared deviations reads the mean) loads it from a [rows]
// temporary; the last fold runs the original per-row store (a division, a
// fused epilogue) on the result, or, when the kernel ends by storing every
// element (softmax, layer norm), a pointwise kernel over all of its loops
// does, reading the row values. A row kernel runs its rows in parallel (TBB
// ranges of loop 0 on the CPU, groups of threads on the GPU) and each row
// on one thread or one group, so before this a sum of 2^24 floats ran on
// one core, or one block of one SM.
//
// The split is on the first reduced loop, into P parts of equal length
// and, when P does not divide it, a tail kernel for the remainder, one
// more part (SplitShape). P is the new loop 0 of the first kernel: its
// remaining loops are the original's, so a reduction whose rows lie across
// memory (x.sum(0)) still does in both kernels
// (ir::rows_lie_across_memory). P depends only on the shapes and the
// backend's target, never on the machine: the same program gives the same
// bits everywhere. Argmax and argmin (arg_partials, arg_fold) and bfloat16
// reductions (round_row_value) have their own partials.
#include "ir/lower/lower.h"

#include <algorithm>
#include <limits>

namespace loom::ir {

namespace {

// Keeps the exprs some phase needs (operands are earlier exprs, so one
// backward sweep marks them) and the accesses those read or store through.
void drop_dead(Kernel& k) {
  std::vector<bool> live(k.exprs.size(), false);
  for (const Phase& ph : k.phases) {
    if (ph.kind == Phase::Reduce) live[ph.value] = true;
    for (auto [a, e] : ph.stores) live[e] = true;
  }
  for (size_t e = k.exprs.size(); e-- > 0;)
    if (live[e])
      for (int o = 0; o < operand_count(k.exprs[e]); ++o) live[operand(k.exprs[e], o)] = true;
  std::vector<uint32_t> expr_to(k.exprs.size(), ~0u);
  std::vector<Expr> exprs;
  for (size_t e = 0; e < k.exprs.size(); ++e) {
    if (!live[e]) continue;
    Expr x = k.exprs[e];
    for (int o = 0; o < operand_count(x); ++o) operand(x, o) = expr_to[operand(x, o)];
    expr_to[e] = static_cast<uint32_t>(exprs.size());
    exprs.push_back(x);
  }
  k.exprs = std::move(exprs);
  for (Phase& ph : k.phases) {
    if (ph.kind == Phase::Reduce) ph.value = expr_to[ph.value];
    for (auto& [a, e] : ph.stores) e = expr_to[e];
  }
  drop_unused_accesses(k);
}

// An argmax or argmin (one reduce phase) followed by a per-row store.
bool is_arg_split(const Kernel& k) {
  return k.phases.size() == 2 && k.phases[0].kind == Phase::Reduce &&
         (k.phases[0].reduce_op == Op::ArgMax || k.phases[0].reduce_op == Op::ArgMin) &&
         k.phases[1].kind == Phase::Store && k.phases[1].per_row;
}

// How a row splits along its first reduced loop: `parts` parts of `len`
// slices of that loop each, then, where that leaves a remainder, a tail of
// `tail` slices, a part of its own (the last, so row order is kept).
struct SplitShape {
  int64_t parts = 0, len = 0, tail = 0;  // parts 0: not split
  int64_t count() const { return parts + (tail ? 1 : 0); }  // partials per row
};

// How a row of kernel k splits (parts 0: not split). A divisor of the first
// reduced loop near the target gives parts alone; without one (a prime
// length, twice a prime) the target's parts and a tail.
SplitShape parts(const Kernel& k, int64_t target_rows) {
  const int n = k.loop.n, outer = k.outer;
  const size_t m = k.phases.size() - 1;  // reduce phases, then one store
  if (target_rows <= 0 || k.contraction || outer >= n || n >= kMaxDims || m < 1 || m > 4) return {};
  if (k.phases[m].kind != Phase::Store) return {};
  // An argmax or argmin splits alone, before a per-row store (arg_partials).
  const bool arg = is_arg_split(k);
  for (size_t i = 0; i < m && !arg; ++i) {
    const Phase& red = k.phases[i];
    if (red.kind != Phase::Reduce || red.reduce_op == Op::ArgMax || red.reduce_op == Op::ArgMin) return {};
    // A bfloat16 or float16 reduction is computed in float32 and rounded once: its
    // partials are float32 and the fold rounds (widened()), which this pass
    // does for one reduce phase before a per-row store.
    if (is_reduced_floating_point(k.exprs[red.value].dtype) && !(m == 1 && k.phases[1].per_row)) return {};
  }
  for (const Expr& x : k.exprs) {
    // An Iota names a loop dim, which the split renumbers (random numbers
    // are indexed by it): left whole.
    if (x.kind == ExprKind::Iota) return {};
    // A row value is stored in its reduction's dtype and loaded back as
    // itself (an argmax's index goes through its own buffers).
    if (!arg && x.kind == ExprKind::RowValue && x.dtype != k.exprs[k.phases[x.a].value].dtype) return {};
  }
  int64_t rows = 1, row = 1;
  for (int d = 0; d < outer; ++d) rows *= k.loop[d];
  for (int d = outer; d < n; ++d) row *= k.loop[d];
  if (rows >= target_rows || row < 2 * kSplitMinPart) return {};
  const int64_t extent = k.loop[outer];
  const int64_t most = std::min<int64_t>({(target_rows + rows - 1) / rows, extent, row / kSplitMinPart});
  for (int64_t p = most; p >= 2 && 2 * p > most; --p)
    if (extent % p == 0) return {p, extent / p, 0};
  if (most < 2) return {};
  return {most, extent / most, extent % most};
}

// Buffers of one split kernel: per reduce phase its partials ([p, rows],
// row-major) and, where a later kernel reads them, its folded row values
// ([rows]): every phase's but the last's when the kernel ends in a per-row
// store, every phase's when it ends in a store of every element.
struct SplitBuffers {
  std::vector<uint32_t> parts, rows;
  int64_t count = 1;  // rows: the product of the outer loops
  Dims row_strides;   // per outer loop, its stride in a [rows] buffer
};

// Rewrites the row values of kernel k for a kernel that computes reduce
// phase i as its phase 0: those of earlier phases become loads of their
// buffers (`strides` per loop of k), phase i's is row value 0.
void read_earlier_rows(Kernel& k, size_t i, const SplitBuffers& sb, const Dims& strides) {
  std::vector<uint32_t> access(i);
  for (size_t j = 0; j < i; ++j) {
    access[j] = static_cast<uint32_t>(k.accesses.size());
    k.accesses.push_back(Access{sb.rows[j], 0, strides});
  }
  for (Expr& x : k.exprs) {
    if (x.kind != ExprKind::RowValue) continue;
    if (x.a < i) x = Expr{ExprKind::Load, Op::Cast, x.dtype, access[x.a]};
    else if (x.a == i) x.a = 0;
  }
}

// The dtype partials are kept in: bfloat16 and float16 reductions are
// computed in float32 and rounded once, by the fold.
ScalarType widened(ScalarType dt) { return is_reduced_floating_point(dt) ? kFloat : dt; }

// Appends to kernel k; returns the new entry's index.
uint32_t add_expr(Kernel& k, const Expr& x) {
  k.exprs.push_back(x);
  return static_cast<uint32_t>(k.exprs.size() - 1);
}
uint32_t add_access(Kernel& k, const Access& a) {
  k.accesses.push_back(a);
  return static_cast<uint32_t>(k.accesses.size() - 1);
}

// The reduction an argmax (argmin) compares by: max (min).
Op extreme_of(Op arg) { return arg == Op::ArgMax ? Op::Max : Op::Min; }

// A fold of float32 partials for a kernel whose phase 0 row value is `dt`
// (bfloat16): that row value, as k's store reads it, becomes the float32
// one rounded once. The new row value goes first (operands are earlier
// exprs), the rest move up one.
void round_row_value(Kernel& b, ScalarType dt) {
  std::vector<Expr> exprs = {Expr{ExprKind::RowValue, Op::Cast, widened(dt), 0}};
  for (Expr x : b.exprs) {
    for (int o = 0; o < operand_count(x); ++o) ++operand(x, o);
    if (x.kind == ExprKind::RowValue && x.a == 0 && x.dtype == dt) x = Expr{ExprKind::Op, Op::Cast, dt, 0};
    exprs.push_back(x);
  }
  b.exprs = std::move(exprs);
  for (Phase& ph : b.phases) {
    if (ph.kind == Phase::Reduce) ++ph.value;
    for (auto& [a, e] : ph.stores) ++e;
  }
}

// k over `count` parts from slice `first` of its first reduced loop: loop 0
// is the part, then k's loops with the first reduced one `len` long.
Kernel part_loops(const Kernel& k, int64_t count, int64_t len, int64_t first) {
  const int outer = k.outer, n = k.loop.n;
  Kernel a = k;
  a.loop = Dims{};
  a.loop.push_back(count);
  for (int d = 0; d < n; ++d) a.loop.push_back(d == outer ? len : k.loop[d]);
  a.outer = static_cast<uint8_t>(outer + 1);
  for (Access& x : a.accesses) {
    Dims s;
    s.push_back(x.strides[outer] * len);
    for (int d = 0; d < n; ++d) s.push_back(x.strides[d]);
    x.offset += first * x.strides[outer];
    x.strides = s;
  }
  return a;
}

// The parts of a split as partials kernels see them: the `parts` equal
// ones, then the tail.
struct PartRange {
  int64_t count, len, first;  // parts, slices each, the first slice
  int64_t index;              // the first part's index among the row's partials
  const char* suffix;
};
std::vector<PartRange> part_ranges(const SplitShape& sh) {
  std::vector<PartRange> r = {{sh.parts, sh.len, 0, 0, "_parts"}};
  if (sh.tail) r.push_back({1, sh.tail, sh.parts * sh.len, sh.parts, "_tail"});
  return r;
}

// A [rows] buffer's strides in a partials kernel: broadcast along the part
// and the row.
Dims part_rows(const Kernel& k, const SplitBuffers& sb) {
  Dims rows;
  rows.push_back(0);
  for (int d = 0; d < k.loop.n; ++d) rows.push_back(d < k.outer ? sb.row_strides[d] : 0);
  return rows;
}

// The kernel of phase i's partials over the parts of `pr`: it stores each
// row's value at [part, row].
Kernel partials(const Kernel& k, size_t i, const PartRange& pr, const SplitBuffers& sb) {
  Kernel a = part_loops(k, pr.count, pr.len, pr.first);
  a.name = k.name + pr.suffix + (i ? std::to_string(i) : "");
  const Dims rows = part_rows(k, sb);
  read_earlier_rows(a, i, sb, rows);
  Dims to = rows;
  to[0] = sb.count;
  const uint32_t part = add_access(a, Access{sb.parts[i], pr.index * sb.count, to});
  Phase reduce = k.phases[i];
  const ScalarType dt = widened(k.exprs[reduce.value].dtype);
  if (dt != k.exprs[reduce.value].dtype)  // reduced in float32, as the kernel would
    reduce.value = add_expr(a, Expr{ExprKind::Op, Op::Cast, dt, reduce.value});
  Phase store;
  store.per_row = true;
  store.stores = {{part, add_expr(a, Expr{ExprKind::RowValue, Op::Cast, dt, 0})}};
  a.phases = {reduce, store};
  drop_dead(a);
  return a;
}

// The kernel that folds phase i's parts: k's outer loops, then the part.
// Its Reduce phase reads the partials; then it stores the row value for the
// later kernels or, for the last phase before a per-row store, runs k's own
// per-row store.
// k's outer loops, then the part (p partials per row): the loops of a fold.
// k's accesses stay, for its per-row store, which reads its row's elements
// at reduced index 0.
Kernel fold_loops(const Kernel& k, int64_t p, std::string name) {
  const int outer = k.outer;
  Kernel b = k;
  b.name = std::move(name);
  b.loop.n = static_cast<uint8_t>(outer + 1);
  b.loop[outer] = p;
  for (Access& x : b.accesses) {
    x.strides.n = static_cast<uint8_t>(outer + 1);
    x.strides[outer] = 0;
  }
  return b;
}

// A [p, rows] partials buffer's strides in a fold.
Dims fold_parts(const SplitBuffers& sb) {
  Dims from = sb.row_strides;
  from.push_back(sb.count);
  return from;
}

Kernel fold(const Kernel& k, size_t i, int64_t p, const SplitBuffers& sb) {
  const bool last = i + 1 == k.phases.size() - 1 && k.phases.back().per_row;
  Kernel b = fold_loops(k, p, k.name + "_fold" + (i ? std::to_string(i) : ""));
  Dims rows = sb.row_strides;
  rows.push_back(0);
  read_earlier_rows(b, i, sb, rows);
  const ScalarType dt = widened(k.exprs[k.phases[i].value].dtype);
  Phase reduce = k.phases[i];
  reduce.value = add_expr(b, Expr{ExprKind::Load, Op::Cast, dt, add_access(b, Access{sb.parts[i], 0, fold_parts(sb)})});
  Phase store = k.phases.back();
  if (!last) {
    store.per_row = true;
    const uint32_t to = add_access(b, Access{sb.rows[i], 0, rows});
    store.stores = {{to, add_expr(b, Expr{ExprKind::RowValue, Op::Cast, dt, 0})}};
  }
  b.phases = {reduce, store};
  b.cost_per_element = 1;
  if (dt != k.exprs[k.phases[i].value].dtype) round_row_value(b, k.exprs[k.phases[i].value].dtype);
  drop_dead(b);
  return b;
}

// An argmax or argmin (is_arg_split; first occurrence, a NaN counting as
// the largest and the smallest, as PyTorch) over parts. The partials kernel
// finds each part's arg (phase 0, k's own) and its max or min (phase 1, a
// second pass over the part, which is in cache), and stores the arg as a
// position in the whole row: the part's first position plus its own.
// The fold takes the max (min) of the parts' values, then the least stored
// position among the parts holding it, or, the max being NaN, a NaN: the
// first occurrence in the row, since parts are in row order.
struct ArgBuffers {
  uint32_t values = 0, positions = 0;  // [p, rows] each
};

Kernel arg_partials(const Kernel& k, const PartRange& pr, const SplitBuffers& sb, const ArgBuffers& ab) {
  Kernel a = part_loops(k, pr.count, pr.len, pr.first);
  a.name = k.name + pr.suffix;
  const ScalarType dt = k.exprs[k.phases[0].value].dtype;
  int64_t slice = 1;  // elements of a row in one slice of its first reduced loop
  for (int d = k.outer + 1; d < k.loop.n; ++d) slice *= k.loop[d];
  auto push = [&](const Expr& x) { return add_expr(a, x); };
  auto constant = [&](int64_t v) { return push(Expr{ExprKind::Const, Op::Cast, kLong, 0, 0, 0, v}); };
  const uint32_t at = push(Expr{ExprKind::RowValue, Op::Cast, kLong, 0});
  const uint32_t part_start = push(Expr{ExprKind::Op, Op::Mul, kLong, push(Expr{ExprKind::Iota, Op::Cast, kLong, 0}),
                                        constant(pr.len * slice)});
  const uint32_t start = push(Expr{ExprKind::Op, Op::Add, kLong, constant(pr.first * slice), part_start});
  const uint32_t position = push(Expr{ExprKind::Op, Op::Add, kLong, start, at});
  const uint32_t value = push(Expr{ExprKind::RowValue, Op::Cast, dt, 1});
  Dims to = part_rows(k, sb);
  to[0] = sb.count;
  Phase extreme = k.phases[0];
  extreme.reduce_op = extreme_of(k.phases[0].reduce_op);
  Phase store;
  store.per_row = true;
  store.stores = {{add_access(a, Access{ab.positions, pr.index * sb.count, to}), position},
                  {add_access(a, Access{ab.values, pr.index * sb.count, to}), value}};
  a.phases = {k.phases[0], extreme, store};
  drop_dead(a);
  return a;
}

Kernel arg_fold(const Kernel& k, int64_t p, const SplitBuffers& sb, const ArgBuffers& ab) {
  Kernel b = fold_loops(k, p, k.name + "_fold");
  // k's store reads the arg, row value 0: here phase 1's.
  for (Expr& x : b.exprs)
    if (x.kind == ExprKind::RowValue) x.a = 1;
  auto push = [&](const Expr& x) { return add_expr(b, x); };
  auto op = [&](Op o, ScalarType dt, uint32_t x, uint32_t y, uint32_t z = 0) {
    return push(Expr{ExprKind::Op, o, dt, x, y, z});
  };
  const Dims from = fold_parts(sb);
  const ScalarType dt = k.exprs[k.phases[0].value].dtype;
  const uint32_t v = push(Expr{ExprKind::Load, Op::Cast, dt, add_access(b, Access{ab.values, 0, from})});
  const uint32_t at = push(Expr{ExprKind::Load, Op::Cast, kLong, add_access(b, Access{ab.positions, 0, from})});
  const uint32_t m = push(Expr{ExprKind::RowValue, Op::Cast, dt, 0});
  const uint32_t both_nan = op(Op::LogicalAnd, kBool, op(Op::Ne, kBool, v, v), op(Op::Ne, kBool, m, m));
  const uint32_t holds = op(Op::LogicalOr, kBool, op(Op::Eq, kBool, v, m), both_nan);
  const uint32_t never = push(Expr{ExprKind::Const, Op::Cast, kLong, 0, 0, 0, std::numeric_limits<int64_t>::max()});
  Phase extreme = k.phases[0];
  extreme.reduce_op = extreme_of(k.phases[0].reduce_op);
  extreme.value = v;
  Phase first = k.phases[0];
  first.reduce_op = Op::Min;
  first.value = op(Op::Where, kLong, holds, at, never);
  b.phases = {extreme, first, k.phases.back()};
  b.cost_per_element = 1;
  drop_dead(b);
  return b;
}

// A store of every element (softmax's, layer norm's): k's loops, all of
// them parallel now (a pointwise kernel), each row value loaded from its
// buffer.
Kernel apply(const Kernel& k, const SplitBuffers& sb) {
  Kernel c = k;
  c.name = k.name + "_apply";
  c.outer = 0;
  Dims rows = sb.row_strides;
  for (int d = k.outer; d < k.loop.n; ++d) rows.push_back(0);
  read_earlier_rows(c, k.phases.size() - 1, sb, rows);
  c.phases = {k.phases.back()};
  drop_dead(c);
  return c;
}

}  // namespace

int split_reductions(KernelProgram& prog, int64_t target_rows) {
  int split = 0;
  rewrite_kernels(prog, [&](Kernel& k, auto&& add) {
    const SplitShape sh = parts(k, target_rows);
    const int64_t p = sh.count();  // partials per row
    if (sh.parts == 0) {
      add(std::move(k));
      return;
    }
    SplitBuffers sb;
    sb.row_strides.n = k.outer;
    for (int d = k.outer - 1; d >= 0; --d) {
      sb.row_strides[d] = sb.count;
      sb.count *= k.loop[d];
    }
    ++split;
    if (is_arg_split(k)) {
      ArgBuffers ab;
      ab.values = add_temp(prog, k.exprs[k.phases[0].value].dtype, p * sb.count);
      ab.positions = add_temp(prog, kLong, p * sb.count);
      for (const PartRange& pr : part_ranges(sh)) add(arg_partials(k, pr, sb, ab));
      add(arg_fold(k, p, sb, ab));
      return;
    }
    const size_t m = k.phases.size() - 1;
    const bool per_row = k.phases.back().per_row;
    for (size_t i = 0; i < m; ++i) {
      const ScalarType dt = widened(k.exprs[k.phases[i].value].dtype);
      sb.parts.push_back(add_temp(prog, dt, p * sb.count));
      sb.rows.push_back(i + 1 < m || !per_row ? add_temp(prog, dt, sb.count) : ~0u);
    }
    for (size_t i = 0; i < m; ++i) {
      for (const PartRange& pr : part_ranges(sh)) add(partials(k, i, pr, sb));
      add(fold(k, i, p, sb));
    }
    if (!per_row) add(apply(k, sb));
  });
  return split;
}


}  // namespace loom::ir
