// The lowering's one class, shared by the files that define its passes
// (internal to ir/lower/; the interface is lower.h). The passes in order are
// Lowering::passes() in lower.cpp, each named with its function and file:
//   lower.cpp          run, attempt (which runs the list), boundaries,
//                      printing
//   kernels.cpp        kernels: build_all and KernelBuilder, one kernel from
//                      one root node
//   fusion.cpp         absorption, recompute, vertical, horizontal, late
//                      updates, checks first, collapse, buffers
//   split.cpp, operand_copies.cpp  free functions over the finished program
// Stepping through a compile starts at Lowering::attempt: each pass is one
// call there.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ir/kernel.h"
#include "ir/lower/lower.h"

namespace loom::ir::lowering {

// Ops with a hand-written kernel: their inputs and output are whole buffers.
inline bool is_library(Op op) {
  switch (op) {
    case Op::MatMul: case Op::Concat: case Op::IndexSelect: case Op::Gather: case Op::ScatterAdd: case Op::ScatterReduce:
    case Op::ArgSort: case Op::Scan: case Op::Attention: case Op::AttentionGradQ: case Op::AttentionGradKV:
    case Op::Conv2d: case Op::Conv2dGradInput: case Op::Conv2dGradWeight:
    case Op::ScatterStrided: case Op::ToDevice: case Op::RandUniform: case Op::RandNormal: case Op::Linspace:
      return true;
    default:
      return false;
  }
}

// A random tensor of a floating dtype is computed where it is used (Philox
// at the element's counter, ir/philox.h), so dropout's mask or an
// initializer's scaling is one kernel with no random buffer.
inline bool fused_random(Op op, ScalarType dt) { return (op == Op::RandUniform || op == Op::RandNormal) && is_floating_point(dt); }

inline bool is_elementwise(Op op) {
  Family f = op_family(op);
  return f == Family::Unary || f == Family::Binary || f == Family::Ternary;
}

// Which loop dim indexes each dim of a node inside a kernel (-1: the node
// is broadcast along that dim, or the dim has size 1).
using DimMap = Dims;

// An op's per-element cost (ops.def's Cost column: ir::op_cost) decides
// recompute against store and sizes parallel chunks.
using ir::op_cost;

inline constexpr const char* kGraphOutput = "graph output";
// Producers of a GEMM's operand at most this costly (op_cost) are applied
// as the GEMM reads the operand: a negation, a scaling, a ReLU, a clamp, a
// division, not an exp (recomputed for each tile of C that reads it).
inline constexpr double kCheapProducerCost = 3;

struct NeedsBuffer {
  uint32_t node;
  std::string reason;
};


class Lowering {
 public:
  Lowering(const Graph& g, const LowerOptions& options)
      : g_(g), opt_(options), n_(static_cast<uint32_t>(g.size())), absorbed_(n_, -1), rejected_(n_, false) {}

  // A pass: its name and place (ir/lower/lower.h PassInfo) and the member that
  // runs it, which returns what it changed (LOOM_LOG=passes).
  struct Pass {
    PassInfo info;
    std::string (Lowering::*run)();
  };
  // The passes in the order attempt() runs them: the one list (lower.cpp).
  static const std::vector<Pass>& passes();

  // Every pass, then absorption trials (lower.cpp).
  KernelProgram run(LowerLog* log);

 private:
  KernelProgram attempt(std::string* passes);  // every pass once, with the current absorptions
  // The passes as passes() runs them: each returns what it changed. A pass
  // that finds the attempt cannot be completed (an absorbed value its
  // consumer cannot compute) sets stopped_.
  std::string pass_boundaries();
  std::string pass_kernels();
  std::string pass_absorption();
  std::string pass_vertical();
  std::string pass_horizontal();
  std::string pass_late_updates();
  std::string pass_checks_first();
  std::string pass_collapse();
  std::string pass_split();
  std::string pass_operand_copies();
  std::string pass_buffers();
  bool stopped_ = false;

  // ---------------------------------------------------------------- shared by the passes
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
  // A [M, K] x [K, N] product of float32 or float64 (no batch; bfloat16 and float16 keep their GEMM).
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
  // Operand `in` of GEMM `product` with its fusible producers walked through (lower.cpp).
  uint32_t operand_base(uint32_t product, uint32_t in, std::vector<uint32_t>* chain = nullptr) const;
  // Node i owns a buffer because of `why`; the first reason names it, the
  // others are kept for the fusion log (Boundary::also).
  void need(uint32_t i, const std::string& why) {
    if (reason_[i].empty()) reason_[i] = why;
    else if (why != reason_[i] && std::find(also_[i].begin(), also_[i].end(), why) == also_[i].end())
      also_[i].push_back(why);
  }

  // ---------------------------------------------------------------- boundaries (lower.cpp)
  void boundaries();
  void need_readable(uint32_t in, const char* viewed, const char* read);
  uint32_t memory_owner(uint32_t in) const;
  bool dim_view(uint32_t i, Dims* view_dim = nullptr) const;
  bool contiguous_view_of(uint32_t i, uint32_t& src) const;

  // ---------------------------------------------------------------- kernels (kernels.cpp)
  size_t build_all(std::vector<NeedsBuffer>& needs);
  void add_buffer(uint32_t i, BufferKind kind, uint32_t index);
  class KernelBuilder;  // one kernel from one root node: kernels.cpp

  // ---------------------------------------------------------------- absorption (fusion.cpp)
  void find_candidates();
  std::vector<std::vector<bool>> kernel_waits() const;
  bool library_reads(uint32_t b) const;
  bool stored_by_consumer_only(uint32_t i) const;

  // ---------------------------------------------------------------- recompute (fusion.cpp)
  std::vector<NeedsBuffer> recompute_check();
  double subtree_cost(uint32_t i) const;
  static constexpr double kMaxRecomputeCost = 12;
  // Bytes one element of `root` reads from stored values when recomputed.
  double subtree_load_bytes(uint32_t i, double root_numel, std::vector<uint32_t>& seen) const;
  bool rereads_cost_more(uint32_t i, size_t readers) const;
  void cover_inlined(uint32_t i, std::vector<bool>& covered) const;
  // From this many elements on, memory traffic decides too (below it, an
  // extra kernel costs more than the bytes it saves).
  static constexpr int64_t kMinBytesCheckElements = int64_t{1} << 20;

  // ---------------------------------------------------------------- vertical (fusion.cpp)
  void vertical();
  void drop_unread_temporaries();
  static bool store_only(const Kernel& k);
  static std::vector<uint32_t> read_buffers(const Kernel& k) { return kernel_buffers(k).reads; }
  bool over_rows_of(const Kernel& a, const Kernel& b) const;
  bool joinable(const Kernel& a, const Kernel& b) const;
  static int64_t stored_value(const Kernel& a, const Access& x);
  static void join(Kernel& a, const Kernel& b);

  // ---------------------------------------------------------------- horizontal (fusion.cpp)
  void horizontal();

  // ---------------------------------------------------------------- late updates (fusion.cpp)
  int late_updates();
  void steps_last(const std::vector<bool>& last);

  // ---------------------------------------------------------------- checks first (fusion.cpp)
  int checks_first();

  // What steps read and write, and when two kernels may become one
  // (the fusion passes, fusion.cpp).
  bool may_update(uint32_t out, uint32_t in) const;
  static bool overlap(const std::vector<uint32_t>& xs, const std::vector<uint32_t>& ys);
  std::vector<StepBuffers> all_step_buffers() const;
  static bool conflict(const StepBuffers& x, const StepBuffers& y);
  static std::vector<uint32_t> written(const Kernel& k) { return kernel_buffers(k).writes; }
  static bool reads_any(const Kernel& k, const std::vector<uint32_t>& bufs);
  static bool within_size_bound(const Kernel& a, const Kernel& b);
  static bool can_merge(const Kernel& a, const Kernel& b);
  static void merge(Kernel& a, const Kernel& b);

  // ---------------------------------------------------------------- collapse (fusion.cpp)
  static int collapse(Kernel& k);
  static void erase_dim(Dims& dims, int d);

  // ---------------------------------------------------------------- buffers (fusion.cpp)
  void plan_buffers();

  // ---------------------------------------------------------------- state
  const Graph& g_;
  const LowerOptions opt_;

 public:
  // The elements a runtime view offset (in scalar slot `slot`, of a view
  // of `dt`) is taken to be a multiple of: LowerOptions::
  // offset_alignment_bytes' worth where this graph's offset is one, else 1.
  int64_t runtime_offset_align(uint32_t slot, ScalarType dt) const {
    if (opt_.offset_alignment_bytes <= 0) return 1;
    const int64_t group = std::max<int64_t>(1, opt_.offset_alignment_bytes / static_cast<int64_t>(element_size(dt)));
    return g_.scalars[slot].i % group == 0 ? group : 1;
  }

 private:
  const uint32_t n_;
  KernelProgram p_;
  std::vector<std::string> reason_;  // non-empty: the node owns a buffer, for this reason
  std::vector<std::vector<std::string>> also_;  // its other reasons (need())
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

}  // namespace loom::ir::lowering
