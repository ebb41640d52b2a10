// Pass 5b, split: a reduction with too few rows to fill the machine (a
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
// The split is on the first reduced loop, which P must divide, and P is
// the new loop 0 of the first kernel: its remaining loops are the
// original's, so a reduction whose rows lie across memory (x.sum(0)) still
// does in both kernels (ir::rows_lie_across_memory). P depends only on the
// shapes and the backend's target, never on the machine: the same program
// gives the same bits everywhere.
#include "ir/lower.h"

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

// How many parts a row of kernel k splits into (0: not split).
int64_t parts(const Kernel& k, int64_t target_rows) {
  const int n = k.loop.n, outer = k.outer;
  const size_t m = k.phases.size() - 1;  // reduce phases, then one store
  if (target_rows <= 0 || k.contraction || outer >= n || n >= kMaxDims || m < 1 || m > 4) return 0;
  if (k.phases[m].kind != Phase::Store) return 0;
  for (size_t i = 0; i < m; ++i) {
    const Phase& red = k.phases[i];
    if (red.kind != Phase::Reduce || red.reduce_op == Op::ArgMax || red.reduce_op == Op::ArgMin) return 0;
    // A bfloat16 sum is summed in float32 and rounded once: a partial would
    // round twice.
    if (k.exprs[red.value].dtype == kBFloat16) return 0;
  }
  for (const Expr& x : k.exprs) {
    // An Iota names a loop dim, which the split renumbers (random numbers
    // are indexed by it): left whole.
    if (x.kind == ExprKind::Iota) return 0;
    // A row value is stored in its reduction's dtype and loaded back as itself.
    if (x.kind == ExprKind::RowValue && x.dtype != k.exprs[k.phases[x.a].value].dtype) return 0;
  }
  int64_t rows = 1, row = 1;
  for (int d = 0; d < outer; ++d) rows *= k.loop[d];
  for (int d = outer; d < n; ++d) row *= k.loop[d];
  if (rows >= target_rows || row < 2 * kSplitMinPart) return 0;
  const int64_t extent = k.loop[outer];
  for (int64_t p = std::min((target_rows + rows - 1) / rows, extent); p >= 2; --p)
    if (extent % p == 0 && row / p >= kSplitMinPart) return p;
  return 0;
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

// The kernel of phase i's partials: loop 0 is the part, then k's loops with
// the first reduced one 1/p as long; it stores each row's value at [part, row].
Kernel partials(const Kernel& k, size_t i, int64_t p, const SplitBuffers& sb) {
  const int outer = k.outer, n = k.loop.n;
  Kernel a = k;
  a.name = k.name + "_parts" + (i ? std::to_string(i) : "");
  a.loop = Dims{};
  a.loop.push_back(p);
  for (int d = 0; d < n; ++d) a.loop.push_back(d == outer ? k.loop[d] / p : k.loop[d]);
  a.outer = static_cast<uint8_t>(outer + 1);
  for (Access& x : a.accesses) {
    Dims s;
    s.push_back(x.strides[outer] * (k.loop[outer] / p));
    for (int d = 0; d < n; ++d) s.push_back(x.strides[d]);
    x.strides = s;
  }
  Dims rows;  // a [rows] buffer: broadcast along the part and the row
  rows.push_back(0);
  for (int d = 0; d < n; ++d) rows.push_back(d < outer ? sb.row_strides[d] : 0);
  read_earlier_rows(a, i, sb, rows);
  Dims to = rows;
  to[0] = sb.count;
  a.accesses.push_back(Access{sb.parts[i], 0, to});
  a.exprs.push_back(Expr{ExprKind::RowValue, Op::Cast, k.exprs[k.phases[i].value].dtype, 0});
  Phase store;
  store.per_row = true;
  store.stores = {{static_cast<uint32_t>(a.accesses.size() - 1), static_cast<uint32_t>(a.exprs.size() - 1)}};
  a.phases = {k.phases[i], store};
  drop_dead(a);
  return a;
}

// The kernel that folds phase i's parts: k's outer loops, then the part.
// Its Reduce phase reads the partials; then it stores the row value for the
// later kernels or, for the last phase before a per-row store, runs k's own
// per-row store.
Kernel fold(const Kernel& k, size_t i, int64_t p, const SplitBuffers& sb) {
  const int outer = k.outer;
  const bool last = i + 1 == k.phases.size() - 1 && k.phases.back().per_row;
  Kernel b = k;
  b.name = k.name + "_fold" + (i ? std::to_string(i) : "");
  b.loop.n = static_cast<uint8_t>(outer + 1);
  b.loop[outer] = p;
  for (Access& x : b.accesses) {
    x.strides.n = static_cast<uint8_t>(outer + 1);
    x.strides[outer] = 0;  // the per-row store reads its row's elements at reduced index 0
  }
  Dims rows = sb.row_strides;
  rows.push_back(0);
  read_earlier_rows(b, i, sb, rows);
  Dims from = sb.row_strides;
  from.push_back(sb.count);
  const ScalarType dt = k.exprs[k.phases[i].value].dtype;
  b.accesses.push_back(Access{sb.parts[i], 0, from});
  b.exprs.push_back(Expr{ExprKind::Load, Op::Cast, dt, static_cast<uint32_t>(b.accesses.size() - 1)});
  Phase reduce = k.phases[i];
  reduce.value = static_cast<uint32_t>(b.exprs.size() - 1);
  Phase store = k.phases.back();
  if (!last) {
    store.per_row = true;
    b.accesses.push_back(Access{sb.rows[i], 0, rows});
    b.exprs.push_back(Expr{ExprKind::RowValue, Op::Cast, dt, 0});
    store.stores = {{static_cast<uint32_t>(b.accesses.size() - 1), static_cast<uint32_t>(b.exprs.size() - 1)}};
  }
  b.phases = {reduce, store};
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
  uint32_t temps = 0;
  for (const BufferInfo& b : prog.buffers) temps += b.kind == BufferKind::Temp;
  auto temp = [&](ScalarType dt, int64_t numel) {
    prog.buffers.push_back({BufferKind::Temp, temps++, dt, numel});
    return static_cast<uint32_t>(prog.buffers.size() - 1);
  };
  std::vector<Step> steps;
  std::vector<Kernel> kernels;
  auto add = [&](Kernel k) {
    steps.push_back({Step::Generated, static_cast<uint32_t>(kernels.size())});
    kernels.push_back(std::move(k));
  };
  for (const Step& s : prog.steps) {
    if (s.kind != Step::Generated) {
      steps.push_back(s);
      continue;
    }
    Kernel& k = prog.kernels[s.index];
    const int64_t p = parts(k, target_rows);
    if (p == 0) {
      add(std::move(k));
      continue;
    }
    SplitBuffers sb;
    sb.row_strides.n = k.outer;
    for (int d = k.outer - 1; d >= 0; --d) {
      sb.row_strides[d] = sb.count;
      sb.count *= k.loop[d];
    }
    const size_t m = k.phases.size() - 1;
    const bool per_row = k.phases.back().per_row;
    for (size_t i = 0; i < m; ++i) {
      const ScalarType dt = k.exprs[k.phases[i].value].dtype;
      sb.parts.push_back(temp(dt, p * sb.count));
      sb.rows.push_back(i + 1 < m || !per_row ? temp(dt, sb.count) : ~0u);
    }
    for (size_t i = 0; i < m; ++i) {
      add(partials(k, i, p, sb));
      add(fold(k, i, p, sb));
    }
    if (!per_row) add(apply(k, sb));
    ++split;
  }
  prog.steps = std::move(steps);
  prog.kernels = std::move(kernels);
  return split;
}

std::string split_build_id() { return std::string("split ") + __DATE__ " " __TIME__; }

}  // namespace loom::ir
