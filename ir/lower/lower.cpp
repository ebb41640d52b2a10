// Lowering: the list of passes and the sequence that runs it, the
// boundaries pass, printing. The class is in ir/lower/lowering.h.
#include "ir/lower/lower.h"

#include <algorithm>
#include <sstream>

#include "ir/lower/lowering.h"

namespace loom::ir {

namespace lowering {

KernelProgram Lowering::run(LowerLog* log) {
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

// The passes, in order: the one list (ir/lower/lower.h lowering_passes() gives
// it without the members; docs/ARCHITECTURE.md section 3 follows it, a test
// checks that).
const std::vector<Lowering::Pass>& Lowering::passes() {
  static const std::vector<Pass> list = {
      {{"boundaries", "Lowering::boundaries", "ir/lower/lower.cpp",
        "which nodes own a buffer, each with its reason; the others are inlined into their readers"},
       &Lowering::pass_boundaries},
      {{"kernels", "Lowering::build_all", "ir/lower/kernels.cpp",
        "one kernel per buffer-owning node, its producers inlined; alternates with recompute until no kernel asks "
        "for a buffer"},
       &Lowering::pass_kernels},
      {{"absorption", "Lowering::find_candidates", "ir/lower/fusion.cpp",
        "checks the absorbed values of this attempt and finds the outputs its consumer could store per row"},
       &Lowering::pass_absorption},
      {{"vertical", "Lowering::vertical", "ir/lower/fusion.cpp",
        "a kernel reading only where an earlier kernel over the same loops stores joins it"},
       &Lowering::pass_vertical},
      {{"horizontal", "Lowering::horizontal", "ir/lower/fusion.cpp",
        "adjacent independent kernels over the same loops merge"},
       &Lowering::pass_horizontal},
      {{"late updates", "Lowering::late_updates", "ir/lower/fusion.cpp",
        "an update of an input moves after the input's last reader, so it can be written in place"},
       &Lowering::pass_late_updates},
      {{"checks first", "Lowering::checks_first", "ir/lower/fusion.cpp",
        "steps that can fail on bad data run before every step they do not need"},
       &Lowering::pass_checks_first},
      {{"collapse", "Lowering::collapse", "ir/lower/fusion.cpp",
        "adjacent loops every access walks contiguously merge"},
       &Lowering::pass_collapse},
      {{"split", "split_reductions", "ir/lower/split.cpp",
        "a reduction of too few rows becomes partials over parts of each row and their fold"},
       &Lowering::pass_split},
      {{"operand copies", "copy_operands", "ir/lower/operand_copies.cpp",
        "a large GEMM's operand laid out against its tiles is read from a copy laid out for them (cuda)"},
       &Lowering::pass_operand_copies},
      {{"buffers", "Lowering::plan_buffers", "ir/lower/fusion.cpp",
        "temporaries get offsets in one arena by liveness, reusing freed space"},
       &Lowering::pass_buffers},
  };
  return list;
}

// Every pass once, with the current absorptions.
KernelProgram Lowering::attempt(std::string* passes) {
  reason_.assign(n_, "");
  also_.assign(n_, {});
  absorb_ok_ = true;
  stopped_ = false;
  const std::vector<Pass>& list = Lowering::passes();
  for (size_t k = 0; k < list.size(); ++k) {
    const Pass& pass = list[k];
    const std::string what = (this->*pass.run)();
    note(passes, std::to_string(k + 1) + "/" + std::to_string(list.size()) + " " + pass.info.name + ": " + what + "  [" +
                     pass.info.function + ", " + pass.info.file + "]");
    if (stopped_) return std::move(p_);  // kernels are missing: run() rejects this trial absorption
  }
  for (uint32_t i = 0; i < n_; ++i)
    if (!reason_[i].empty() && g_.nodes[i]->op != Op::Input) p_.boundaries.push_back({i, reason_[i], also_[i]});
  return std::move(p_);
}

std::string Lowering::pass_boundaries() {
  boundaries();
  return std::to_string(count_buffers()) + " of " + std::to_string(n_) + " nodes own a buffer";
}

// Kernels and recompute alternate until no kernel asks for another buffer.
// A round that asks gives at least one more node a buffer, so this ends
// within n_ rounds; no cap, since stopping early leaves kernels missing
// (a gradient summed over 90 unsynced backward calls took 66 rounds).
std::string Lowering::pass_kernels() {
  size_t more = 0;
  int rounds = 1;
  for (;; ++rounds) {
    std::vector<NeedsBuffer> needs;
    const size_t given = build_all(needs);
    if (needs.empty()) needs = recompute_check();
    // No progress (an absorbed value its consumer cannot compute): stop;
    // run() then rejects the absorption.
    const bool progress = given > 0 || std::any_of(needs.begin(), needs.end(), [&](const NeedsBuffer& nb) {
                            return reason_[nb.node].empty();
                          });
    if (!needs.empty() && !progress) {
      absorb_ok_ = false;
      stopped_ = true;
      return "stopped: an absorbed value cannot be computed by its consumer";
    }
    if (needs.empty()) break;
    for (auto& nb : needs) need(nb.node, nb.reason);
    more += needs.size();
  }
  return std::to_string(p_.kernels.size()) + " generated, " + std::to_string(p_.library_calls.size()) +
         " library calls (rounds: " + std::to_string(rounds) + ", " + std::to_string(more) +
         " more buffers asked for by kernels and recompute)";
}

std::string Lowering::pass_absorption() {
  std::string absorbed;
  for (uint32_t i = 0; i < n_; ++i)
    if (absorbed_[i] >= 0) {
      absorb_ok_ = absorb_ok_ && stored_by_consumer_only(i);
      absorbed += " %" + std::to_string(i) + " stored per row by the kernel of %" + std::to_string(absorbed_[i]) + ";";
    }
  find_candidates();
  return (absorbed.empty() ? std::string("none absorbed;") : "absorbed:" + absorbed) + " " +
         std::to_string(candidates_.size()) + " candidates";
}

std::string Lowering::pass_vertical() {
  const size_t before = p_.kernels.size();
  vertical();
  return std::to_string(before - p_.kernels.size()) + " kernels joined their producer";
}

std::string Lowering::pass_horizontal() {
  const size_t before = p_.kernels.size();
  horizontal();
  return std::to_string(before - p_.kernels.size()) + " kernels merged";
}

std::string Lowering::pass_late_updates() {
  return std::to_string(late_updates()) + " steps moved after the last reader of what they update";
}

std::string Lowering::pass_checks_first() {
  return std::to_string(checks_first()) + " steps moved before the steps they do not need";
}

std::string Lowering::pass_collapse() {
  int collapsed = 0;
  for (Kernel& k : p_.kernels) collapsed += collapse(k);
  return std::to_string(collapsed) + " loop dims merged";
}

std::string Lowering::pass_split() {
  return std::to_string(split_reductions(p_, opt_.split_reduction_rows)) +
         " reductions split into partials and their fold";
}

std::string Lowering::pass_operand_copies() {
  return std::to_string(copy_operands(p_, opt_)) + " GEMM operands copied in the layout their tiles want";
}

std::string Lowering::pass_buffers() {
  plan_buffers();
  return "arena " + std::to_string(p_.arena_bytes) + " bytes";
}

// Operand `in` of GEMM product `product` with its fusible producers
// walked through: the node the GEMM reads (`in` itself when none fuses),
// and the producers, from the operand down, in `chain`. A producer that
// owns a buffer (reason_) ends the walk: the GEMM reads that buffer.
// Producers are fused only where LowerOptions::operand_producers_min_work
// allows and their input is not computed by a generated kernel.
uint32_t Lowering::operand_base(uint32_t product, uint32_t in, std::vector<uint32_t>* chain) const {
  const Node& p = node(product);
  if (!gemm(product) || is_reduced_floating_point(p.dtype) || opt_.operand_producers_min_work < 0) return in;
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

// ---------------------------------------------------------------- boundaries
void Lowering::boundaries() {
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
void Lowering::need_readable(uint32_t in, const char* viewed, const char* read) {
  const uint32_t owner = memory_owner(in);
  need(owner, owner == in ? read : viewed);
}

// The node whose buffer a reader from memory of `in` reads: a view's
// source (unless a constant), or `in` itself.
uint32_t Lowering::memory_owner(uint32_t in) const {
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
bool Lowering::dim_view(uint32_t i, Dims* view_dim) const {
  const Node& v = node(i);
  const Node& src = node(g_.inputs_of(i)[0]);
  if (view_offset_is_scalar(v) || static_view_offset(v) != 0) return false;
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
bool Lowering::contiguous_view_of(uint32_t i, uint32_t& src) const {
  const Node& nd = node(i);
  if (nd.op != Op::AsStrided) return false;
  src = g_.inputs_of(i)[0];
  if (node(src).op == Op::Full) return false;
  const Dims want = contiguous_strides(nd.shape);
  for (uint8_t d = 0; d < nd.shape.n; ++d)
    if (nd.shape[d] != 1 && nd.attr[d] != want[d]) return false;
  return true;
}

}  // namespace lowering

const std::vector<PassInfo>& lowering_passes() {
  static const std::vector<PassInfo> infos = [] {
    std::vector<PassInfo> v;
    for (const lowering::Lowering::Pass& p : lowering::Lowering::passes()) v.push_back(p.info);
    return v;
  }();
  return infos;
}

KernelProgram lower(const Graph& g, LowerLog* log, const LowerOptions& options) {
  KernelProgram p = lowering::Lowering(g, options).run(log);
  // What the final kernels' code may rely on of the runtime offsets.
  for (const Kernel& k : p.kernels)
    for (const Access& a : k.accesses)
      if (a.has_runtime_offset() && a.offset_align > 1) p.offset_guards.emplace_back(a.offset_scalar, a.offset_align);
  std::sort(p.offset_guards.begin(), p.offset_guards.end());
  p.offset_guards.erase(std::unique(p.offset_guards.begin(), p.offset_guards.end()), p.offset_guards.end());
  return p;
}


// ---------------------------------------------------------------- printing
std::string to_string(const Kernel& k) {
  std::ostringstream os;
  os << "kernel " << k.name << " loops [";
  for (uint8_t d = 0; d < k.loop.n; ++d) os << (d ? "," : "") << k.loop[d] << (d + 1 == k.outer ? " |" : "");
  os << "] cost " << k.cost_per_element << "\n";
  if (const auto& c = k.contraction) {
    auto side = [&](uint32_t acc, int64_t step, uint32_t value) {
      // One stream, no string concatenation (GCC 12 warns, falsely, on "e" + std::string).
      std::ostringstream o;
      if (value != Contraction::kRaw) o << "e" << value << "(";
      o << "@" << acc << "[+" << step << "*t]";
      if (value != Contraction::kRaw) o << ")";
      return o.str();
    };
    os << "  gemm %" << c->node << ": sum over t < " << c->k << " of " << side(c->a, c->a_k, c->a_value) << " * "
       << side(c->b, c->b_k, c->b_value) << "\n";
  }
  for (size_t a = 0; a < k.accesses.size(); ++a) {
    const Access& x = k.accesses[a];
    os << "  @" << a << " = buf" << x.buffer << "[" << x.offset;
    if (x.has_runtime_offset()) {
      os << " + $" << x.offset_scalar;
      if (x.offset_align > 1) os << " (a multiple of " << x.offset_align << ")";
    }
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
  for (const Boundary& b : p.boundaries) {
    os << "  %" << b.node << ": " << b.reason;
    for (const std::string& r : b.also) os << "; " << r;
    os << "\n";
  }
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

