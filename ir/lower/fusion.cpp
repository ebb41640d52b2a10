// Lowering after the kernels are built: absorption candidates, the
// recompute-or-store check, the fusion passes (vertical and horizontal
// fusion, late updates, checks first), collapse and buffers (the arena). See
// ir/lower/lowering.h.
#include <algorithm>

#include "ir/lower/lowering.h"

namespace loom::ir::lowering {

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
void Lowering::find_candidates() {
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
std::vector<std::vector<bool>> Lowering::kernel_waits() const {
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

bool Lowering::library_reads(uint32_t b) const {
  for (const LibraryCall& c : p_.library_calls)
    if (std::find(c.inputs.begin(), c.inputs.end(), b) != c.inputs.end()) return true;
  return false;
}

// After kernels are built: absorbed node i is written by its consumer's
// kernel alone, per row, read by no library call, and read only by
// kernels after the writer.
bool Lowering::stored_by_consumer_only(uint32_t i) const {
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

// ---------------------------------------------------------------- recompute or store
// A value inlined into several kernels is recomputed by each: fine for a
// few cheap ops, wasteful for a reduction or a long chain.
std::vector<NeedsBuffer> Lowering::recompute_check() {
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
  // By bytes, from the last node back: a stored value's own inlined
  // operands are then computed once, in its kernel, and need no buffer.
  std::vector<bool> covered(n_, false);
  for (const NeedsBuffer& nb : out) covered[nb.node] = true;
  for (uint32_t i = n_; i-- > 0;) {
    if (covered[i] || inlined_by_[i].size() < 2 || !rereads_cost_more(i, inlined_by_[i].size())) continue;
    out.push_back({i, "used by " + std::to_string(inlined_by_[i].size()) +
                          " kernels, each rereading more bytes to recompute it than storing it moves"});
    cover_inlined(i, covered);
  }
  return out;
}

void Lowering::cover_inlined(uint32_t i, std::vector<bool>& covered) const {
  for (uint32_t in : g_.inputs_of(i))
    if (!covered[in] && reason_[in].empty()) covered[in] = true, cover_inlined(in, covered);
}

// A value that is cheap to compute can still be dear to recompute when it
// gathers many stored tensors (a residual network's gradient: each block's
// ReLU mask and its skip connection's gradient, seven tensors deep by the
// last block, read again by each of a batch norm's three backward
// kernels). Recomputed by k kernels, each reads L bytes an element;
// stored, one kernel reads L and writes S, and the k readers read S.
bool Lowering::rereads_cost_more(uint32_t i, size_t readers) const {
  if (node(i).numel() < kMinBytesCheckElements) return false;
  std::vector<uint32_t> seen;
  const double load = subtree_load_bytes(i, static_cast<double>(node(i).numel()), seen);
  const double store = static_cast<double>(element_size(node(i).dtype));
  const double k = static_cast<double>(readers);
  return (k + 1) * store < (k - 1) * load;
}

double Lowering::subtree_load_bytes(uint32_t i, double root_numel, std::vector<uint32_t>& seen) const {
  double bytes = 0;
  for (uint32_t in : g_.inputs_of(i)) {
    if (std::find(seen.begin(), seen.end(), in) != seen.end()) continue;
    seen.push_back(in);
    if (reason_[in].empty() && node(in).op != Op::Input)
      bytes += subtree_load_bytes(in, root_numel, seen);
    else  // stored: an input broadcast from fewer elements counts in proportion
      bytes += static_cast<double>(element_size(node(in).dtype)) *
               std::min(1.0, static_cast<double>(node(in).numel()) / root_numel);
  }
  return bytes;
}

// The cost of computing one element of node i, its stored inputs free. An
// input with fewer elements than i (a per-channel value broadcast over a
// batch: a norm's 1/sqrt(var + eps)) counts in proportion, once per its
// own element: the alternative to recomputing it is storing i, which costs
// per element of i.
double Lowering::subtree_cost(uint32_t i) const {
  if (!reason_[i].empty()) return 0;
  double c = op_cost(node(i).op);
  const double numel = static_cast<double>(std::max<int64_t>(node(i).numel(), 1));
  for (uint32_t in : g_.inputs_of(i)) {
    const double share = std::min(1.0, static_cast<double>(node(in).numel()) / numel);
    c += share * subtree_cost(in);
  }
  return c;
}

// ---------------------------------------------------------------- vertical
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
void Lowering::vertical() {
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
void Lowering::drop_unread_temporaries() {
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

bool Lowering::store_only(const Kernel& k) {
  return k.outer == 0 && k.phases.size() == 1 && k.phases[0].kind == Phase::Store && !k.phases[0].per_row;
}

// B's loops are A's (a store-only A), or A's rows: a row kernel whose
// last phase stores per row (a bias gradient's sum over the batch, then
// the optimizer's update of the bias, row by row). A reduction the split
// pass would cut into parts is left as it is (a joined kernel is not split).
bool Lowering::over_rows_of(const Kernel& a, const Kernel& b) const {
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
bool Lowering::joinable(const Kernel& a, const Kernel& b) const {
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
int64_t Lowering::stored_value(const Kernel& a, const Access& x) {
  for (const Phase& ph : a.phases) {
    if (ph.kind != Phase::Store || (ph.per_row != (x.strides.n < a.loop.n))) continue;
    for (auto [acc, e] : ph.stores) {
      const Access& y = a.accesses[acc];
      bool same = y.buffer == x.buffer && y.offset == x.offset && y.offset_scalar == x.offset_scalar;
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
void Lowering::join(Kernel& a, const Kernel& b) {
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

// ---------------------------------------------------------------- horizontal
// Adjacent generated kernels over the same loops, neither reading what the
// other writes, become one kernel: one pass over memory instead of two.
void Lowering::horizontal() {
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

// ---------------------------------------------------------------- late updates
// A step that computes a graph output from an input that later steps
// still read (an optimizer's update of a parameter, joined into the GEMM
// of its gradient by the vertical pass, before the backward GEMM that reads the old
// parameter) moves after those readers, and after every step it does not
// conflict with. Values are unchanged; what changes is that the update
// now runs after the last read of the old value, so the runtime can write
// it straight into the parameter's buffer (OutputPlan::donated) instead
// of into a new buffer that is copied back after the run (W4: 4 MiB a
// step). Moved steps keep their order; the buffer plan comes after.
int Lowering::late_updates() {
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
void Lowering::steps_last(const std::vector<bool>& last) {
  std::vector<Step> steps;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t s = 0; s < p_.steps.size(); ++s)
      if (last[s] == (pass == 1)) steps.push_back(p_.steps[s]);
  p_.steps = std::move(steps);
}

// ---------------------------------------------------------------- checks first
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
int Lowering::checks_first() {
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
bool Lowering::may_update(uint32_t out, uint32_t in) const {
  const BufferInfo &o = p_.buffers[out], &i = p_.buffers[in];
  return o.kind == BufferKind::Output && o.dtype == i.dtype && o.numel == i.numel;
}

bool Lowering::overlap(const std::vector<uint32_t>& xs, const std::vector<uint32_t>& ys) {
  return std::any_of(xs.begin(), xs.end(), [&](uint32_t x) { return std::find(ys.begin(), ys.end(), x) != ys.end(); });
}

std::vector<StepBuffers> Lowering::all_step_buffers() const {
  std::vector<StepBuffers> b;
  for (const Step& st : p_.steps) b.push_back(ir::step_buffers(p_, st));
  return b;
}

// Whether two steps must keep their order: one writes what the other
// reads or writes.
bool Lowering::conflict(const StepBuffers& x, const StepBuffers& y) {
  return overlap(x.writes, y.reads) || overlap(x.reads, y.writes) || overlap(x.writes, y.writes);
}

bool Lowering::reads_any(const Kernel& k, const std::vector<uint32_t>& bufs) {
  if (k.contraction)
    for (uint32_t a : {k.contraction->a, k.contraction->b})
      if (std::find(bufs.begin(), bufs.end(), k.accesses[a].buffer) != bufs.end()) return true;
  for (const Expr& e : k.exprs)
    if (reads_memory(e) && std::find(bufs.begin(), bufs.end(), k.accesses[e.a].buffer) != bufs.end())
      return true;
  return false;
}

// Joined or merged, two kernels stay within kMaxKernelExprs (lower.h).
bool Lowering::within_size_bound(const Kernel& a, const Kernel& b) {
  return a.exprs.size() + b.exprs.size() <= kMaxKernelExprs &&
         a.accesses.size() + b.accesses.size() <= kMaxMergedAccesses &&
         (a.phases.size() + b.phases.size() <= 2 || emitted_exprs(a) + emitted_exprs(b) <= kMaxKernelExprs);
}

bool Lowering::can_merge(const Kernel& a, const Kernel& b) {
  if (!(a.loop == b.loop) || a.outer != b.outer || a.contraction || b.contraction || !within_size_bound(a, b))
    return false;
  // Only kernels without reduce phases: their phase structure is one store.
  for (const Kernel* k : {&a, &b})
    for (const Phase& ph : k->phases)
      if (ph.kind != Phase::Store || ph.per_row) return false;
  return !reads_any(b, written(a)) && !reads_any(a, written(b));
}

void Lowering::merge(Kernel& a, const Kernel& b) {
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

// ---------------------------------------------------------------- collapse
// Loops d and d+1 merge when every access steps through them as through
// one loop (stride[d] == stride[d+1] * extent[d+1]) and no Iota needs d.
int Lowering::collapse(Kernel& k) {
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

void Lowering::erase_dim(Dims& dims, int d) {
  for (int j = d; j + 1 < dims.n; ++j) dims[j] = dims[j + 1];
  --dims.n;
}

// ---------------------------------------------------------------- buffers
// Linear scan over the steps: a temporary lives from the step that writes
// it to the last step that reads it; freed space is reused first-fit.
void Lowering::plan_buffers() {
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


}  // namespace loom::ir::lowering
