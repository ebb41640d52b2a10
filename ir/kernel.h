// Loop-level IR: what lowering (ir/lower/lower.h) hands the code generators.
//
// A KernelProgram is a list of steps over numbered buffers. A step is either
// a generated Kernel (loops over an iteration space, with an expression
// body: every pointwise op, view, broadcast, cast and reduction of the graph
// ends up here) or a LibraryCall (an op with a hand-written kernel:
// matmul, gathers and scatters, cat, random numbers).
//
// Buffers: the graph's inputs, the graph's outputs, and temporaries that a
// BufferPlan places in one arena. Views, broadcasts and dtype casts never
// create a buffer: they are the strides of an Access and the Cast exprs of a
// body.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "ir/node.h"

namespace loom::ir {

enum class BufferKind : uint8_t { Input, Output, Temp };

struct BufferInfo {
  BufferKind kind;
  uint32_t index;       // Input: input slot; Output: output slot; Temp: temp number
  ScalarType dtype;
  int64_t numel;
  int64_t arena_offset = -1;  // Temp: bytes from the arena's start (BufferPlan)
};

// An element of a buffer as an affine function of the loop indices:
// buffer[offset + scalar + sum(strides[d] * i_d)], where `scalar` is the
// runtime scalar in slot offset_scalar (a view of a stored tensor whose
// offset is a run argument: ir/node.h's view_offset_is_scalar), or 0 for
// kNoScalar. Stride 0 is a broadcast. Of a runtime offset a code generator
// may assume only that it is a multiple of offset_align elements (the
// program's offset_guards make every run hold to it).
struct Access {
  static constexpr uint32_t kNoScalar = ~0u;
  uint32_t buffer;
  int64_t offset = 0;
  Dims strides;  // one per loop dim
  uint32_t offset_scalar = kNoScalar;
  int64_t offset_align = 1;
  bool has_runtime_offset() const { return offset_scalar != kNoScalar; }
  // Whether every element offset of this access is a multiple of `n` elements
  // at loop position 0.
  bool start_aligned(int64_t n) const { return offset % n == 0 && (!has_runtime_offset() || offset_align % n == 0); }
  // Same element at every loop position, in every run.
  bool same_place(const Access& o) const {
    return buffer == o.buffer && offset == o.offset && offset_scalar == o.offset_scalar && strides == o.strides;
  }
};

// One SSA value of a kernel body. Operands are indices of earlier Exprs.
enum class ExprKind : uint8_t {
  Load,      // accesses[a]
  Scalar,    // runtime scalar #a, converted to dtype
  Op,        // an elementwise ir::Op (Unary, Binary, Where, Cast) on a, b, c; or RandUniform /
             // RandNormal of (counter a, seed b), both kLong: ir/philox.h's value at that counter
  RowValue,  // the result of reduce phase #a for the current outer index
  Iota,      // the linear index along loop dim a (arange-style leaves)
  Contract,  // the kernel's matrix product at the current position (Kernel::contraction)
  Const,     // the integer literal `imm`, converted to dtype (a random tensor's strides)
  Operand,   // an element of the product's operand a (0: A, 1: B) as the GEMM reads it: the
             // leaf of Contraction::a_value / b_value, never of the kernel's body
  Gather,    // accesses[a] moved `imm` elements per unit of expr b (a fused gather: x[i, t[i]]
             // is x's access with its gathered dim left out, moved by t[i] * x's stride there);
             // b is always an IndexCheck, whose value is in range (0 where the run fails)
};

struct Expr {
  ExprKind kind;
  Op op = Op::Cast;  // ExprKind::Op only
  ScalarType dtype;
  uint32_t a = 0, b = 0, c = 0;
  // ExprKind::Const: the value. An op that can fail on bad data
  // (can_fail_op): the canonical index of the node it computes, which the
  // error names (the kernel's root is usually another op).
  int64_t imm = 0;
};

// Ops whose kernels report bad data: an index out of range, an integer
// division by zero (whatever the dtype: a float Fmod simply never fails).
inline bool can_fail_op(Op op) { return op == Op::IndexCheck || op == Op::Fmod || op == Op::Remainder; }

// Whether expr x reads memory at accesses[x.a]: a Load (at the loop
// position) or a Gather (moved along one dim by a computed index).
inline bool reads_memory(const Expr& x) { return x.kind == ExprKind::Load || x.kind == ExprKind::Gather; }

// How many of a, b, c an expr reads (earlier exprs): an Op's by its family
// (a random value's: counter and seed), a Gather its index (b, operand 0);
// other kinds read none.
inline int operand_count(const Expr& x) {
  if (x.kind == ExprKind::Gather) return 1;
  if (x.kind != ExprKind::Op) return 0;
  switch (op_family(x.op)) {
    case Family::Unary: return 1;
    case Family::Ternary: return 3;
    default: return 2;
  }
}
inline uint32_t operand(const Expr& x, int i) { return x.kind == ExprKind::Gather || i == 1 ? x.b : i == 0 ? x.a : x.c; }
inline uint32_t& operand(Expr& x, int i) { return x.kind == ExprKind::Gather || i == 1 ? x.b : i == 0 ? x.a : x.c; }
// An expr whose value is computed here (an op, a scalar, a constant, a
// product's sum), not read (a load, a row value, an index): the exprs a
// code generator rounds when their dtype is stored narrower than it
// computes (bfloat16 is computed in float32).
inline bool is_computed(const Expr& x) {
  return x.kind == ExprKind::Op || x.kind == ExprKind::Scalar || x.kind == ExprKind::Const ||
         x.kind == ExprKind::Contract;
}

// A kernel runs `phases` in order for every outer index (loops [0, outer)).
// A Reduce phase loops over the row (loops [outer, n)) folding `value` with
// `op`; later phases read its result as a RowValue. A Store phase loops over
// the row and writes each (access, value) pair. A pure pointwise kernel has
// outer == 0 and one Store phase; a plain reduction has one Reduce phase
// followed by a Store of its RowValue.
struct Phase {
  enum Kind : uint8_t { Reduce, Store } kind = Store;
  Op reduce_op = Op::Sum;  // Reduce: Sum, Prod, Max, Min, ArgMax, ArgMin, All, Any
  uint32_t value = 0;      // Reduce: the folded expr
  std::vector<std::pair<uint32_t, uint32_t>> stores;  // Store: (access, expr)
  // Store phases of a reduction kernel run once per outer index, not per row element.
  bool per_row = false;
};

// A matrix product computed by the kernel itself, so that its pointwise
// consumers (bias, activation, residual, scaling, a cast) are the kernel's
// body, applied where the product is stored: the GEMM's epilogue.
//
//   value(position) = sum over t < k of A[a + t*a_k] * B[b + t*b_k]
//
// accumulated in the dtype of the Contract exprs (Float or Double; integer
// products stay library calls). The kernel's loops are exactly the
// product's shape, [M, N] or [Batch, M, N]: its last two loops are M and N.
// `a` and `b` are ordinary entries of Kernel::accesses (so every pass that
// asks which buffers a kernel reads sees them), with stride 0 along N and
// along M respectively. A transposed or otherwise strided operand is only
// other strides: the code generator's packing reads it, no copy is made.
//
// An operand's cheap pointwise producers (relu(x) @ W, (x * s) @ W: ops on
// one input with scalar operands, ir/lower/lowering.h's fusible_producer) are
// fused too: `a_value` is then an expr over ExprKind::Operand{a = 0} whose
// value is the element the product multiplies, `A` reading the producers'
// input. The code generators apply it to each element once, where the
// product reads its operand (llvm: the packed panels; cuda: the
// shared-memory tiles), so the producers' output is never stored.
struct Contraction {
  static constexpr uint32_t kRaw = ~0u;  // a_value / b_value: the element as it is
  uint32_t node = 0;    // the MatMul's canonical index (errors, dumps)
  int64_t k = 0;        // extent of the contracted dim
  uint32_t a = 0, b = 0;      // indices into Kernel::accesses, at t = 0
  int64_t a_k = 0, b_k = 0;   // their strides along the contracted dim
  uint32_t a_value = kRaw, b_value = kRaw;  // fused producers: exprs of Kernel::exprs, or kRaw
  uint32_t value(int which) const { return which == 0 ? a_value : b_value; }  // 0: A, 1: B
  bool fused_operand(int which) const { return value(which) != kRaw; }
};

struct Kernel {
  std::string name;  // "k3_softmax_rows", for dumps and profiles
  Dims loop;         // iteration space, outermost first
  uint8_t outer = 0; // loops [0, outer) index rows; [outer, n) index one row
  std::vector<Access> accesses;
  std::vector<Expr> exprs;
  std::vector<Phase> phases;
  uint32_t root = 0;                  // the node whose buffer it fills (errors name it)
  std::vector<uint32_t> graph_nodes;  // canonical indices of the nodes it computes
  double cost_per_element = 1;        // rough arithmetic cost, to size parallel chunks
  // A GEMM kernel: outer == 0, one Store phase, the product read by
  // ExprKind::Contract exprs. Absent for every other kernel.
  std::optional<Contraction> contraction;
};

// An op with a hand-written kernel (kernels/cpu/): reads whole contiguous
// buffers, writes one. Carries what it needs of its node, so an executable
// never points into the graph it was compiled from.
struct LibraryCall {
  Op op;
  uint32_t node;                 // canonical index in the graph (for errors)
  std::vector<uint32_t> inputs;  // buffer ids
  uint32_t output;               // buffer id
  ScalarType dtype;              // of the output
  Dims shape;                    // of the output
  std::vector<Dims> input_shapes;
  std::vector<ScalarType> input_dtypes;
  Attrs attr;
  uint32_t scalar_begin = 0;     // its runtime scalars, in RunArgs::scalars
  uint32_t num_scalars = 0;
  std::vector<int64_t> input_offsets;  // elements into each input buffer (a contiguous view)
  // Per input: Access::kNoScalar, or the runtime scalar added to its offset
  // (a contiguous view of a stored tensor at a runtime offset).
  std::vector<uint32_t> input_offset_scalars;
  uint32_t input_offset_scalar(size_t i) const {
    return i < input_offset_scalars.size() ? input_offset_scalars[i] : Access::kNoScalar;
  }
  // The element input i starts at, given the run's scalars.
  int64_t input_offset(size_t i, const RtScalar* scalars) const {
    const uint32_t s = input_offset_scalar(i);
    return input_offsets[i] + (s == Access::kNoScalar ? 0 : scalars[s].i);
  }
};

// True when no two elements of a strided view (ScatterStrided's attrs)
// share a position: then its writes may run in any order. Otherwise the last
// write in row-major order must win, as in the reference, so a scatter runs
// sequentially. Sorted by |stride|, each dim must step past everything the
// smaller dims span.
inline bool never_overlaps(const Dims& sizes, const int64_t* strides) {
  std::array<std::pair<int64_t, int64_t>, kMaxDims> dims{};
  int nd = 0;
  for (int d = 0; d < sizes.n; ++d)
    if (sizes[d] > 1) dims[nd++] = {strides[d] < 0 ? -strides[d] : strides[d], sizes[d]};
  for (int i = 1; i < nd; ++i)  // insertion sort by stride: at most 8 dims
    for (int j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
  int64_t extent = 0;  // the span the smaller dims cover
  for (int i = 0; i < nd; ++i) {
    if (dims[i].first <= extent) return false;
    extent += (dims[i].second - 1) * dims[i].first;
  }
  return true;
}

struct Step {
  enum Kind : uint8_t { Generated, Library } kind;
  uint32_t index;  // into kernels or library_calls
};

// Why a value is a buffer rather than an expression inlined into its
// consumers: printed by LOOM_LOG=fusion and into the dump.
struct Boundary {
  uint32_t node;
  std::string reason;               // the first reason it owns a buffer
  std::vector<std::string> also;    // every other reason found for it (LOOM_LOG=fusion prints them all)
};

struct KernelProgram {
  std::vector<BufferInfo> buffers;
  std::vector<Kernel> kernels;
  std::vector<LibraryCall> library_calls;
  std::vector<Step> steps;
  std::vector<Boundary> boundaries;
  std::vector<uint32_t> output_buffers;  // per graph output, a buffer id
  int64_t arena_bytes = 0;
  // (runtime scalar slot, elements): each run's runtime view offsets in
  // those slots must be multiples of that many elements, which accesses'
  // offset_align promised the code (LowerOptions::offset_alignment_bytes).
  std::vector<std::pair<uint32_t, int64_t>> offset_guards;
};

// The buffers a step reads and the buffers it writes (an in-place update is
// in both). Lowering orders and joins steps by them; the CUDA runtime gives
// each launch of a replayed graph only the dependencies they imply.
struct StepBuffers {
  std::vector<uint32_t> reads, writes;
};
inline StepBuffers kernel_buffers(const Kernel& k) {
  StepBuffers b;
  for (const Expr& e : k.exprs)
    if (reads_memory(e)) b.reads.push_back(k.accesses[e.a].buffer);
  if (k.contraction) b.reads.insert(b.reads.end(), {k.accesses[k.contraction->a].buffer, k.accesses[k.contraction->b].buffer});
  for (const Phase& ph : k.phases)
    for (auto& [a, e] : ph.stores) b.writes.push_back(k.accesses[a].buffer);
  return b;
}
inline StepBuffers step_buffers(const KernelProgram& p, const Step& s) {
  if (s.kind == Step::Generated) return kernel_buffers(p.kernels[s.index]);
  const LibraryCall& c = p.library_calls[s.index];
  return StepBuffers{c.inputs, {c.output}};
}

// For the passes that replace a kernel by several (split, operand
// copies): calls each(kernel, emit) for every generated step in order;
// emit(k) appends a kernel where that step was (the kernel itself
// included, when it stays). Library steps keep their place.
template <class Each>
void rewrite_kernels(KernelProgram& p, Each&& each) {
  std::vector<Step> steps;
  std::vector<Kernel> kernels;
  auto emit = [&](Kernel k) {
    steps.push_back({Step::Generated, static_cast<uint32_t>(kernels.size())});
    kernels.push_back(std::move(k));
  };
  for (const Step& s : p.steps) {
    if (s.kind == Step::Generated) each(p.kernels[s.index], emit);
    else steps.push_back(s);
  }
  p.steps = std::move(steps);
  p.kernels = std::move(kernels);
}

// A new temporary buffer of p (numbered after the others): its id.
inline uint32_t add_temp(KernelProgram& p, ScalarType dt, int64_t numel) {
  const uint32_t index = static_cast<uint32_t>(
      std::count_if(p.buffers.begin(), p.buffers.end(), [](const BufferInfo& b) { return b.kind == BufferKind::Temp; }));
  p.buffers.push_back({BufferKind::Temp, index, dt, numel});
  return static_cast<uint32_t>(p.buffers.size() - 1);
}

// Whether a step can fail on bad data: an index out of range (gather,
// index_select, scatter_add) or an integer division by zero (fmod,
// remainder). A failed run must leave every existing tensor as it was, so
// lowering runs such steps as early as it can (pass "checks first") and the
// runtime writes into a caller's buffer only after the last of them
// (runtime/output_plan.cpp).
inline bool can_fail(const KernelProgram& p, const Step& s) {
  if (s.kind == Step::Library) {
    const Op op = p.library_calls[s.index].op;
    return op == Op::IndexSelect || op == Op::Gather || op == Op::ScatterAdd || op == Op::ScatterReduce;
  }
  for (const Expr& e : p.kernels[s.index].exprs)
    if (e.kind == ExprKind::Op && can_fail_op(e.op) && (e.op == Op::IndexCheck || !is_floating_point(e.dtype)))
      return true;
  return false;
}

// The exprs phase `ph` of kernel k evaluates (what its reduction or its
// stores need, and what those need).
inline std::vector<bool> phase_exprs(const Kernel& k, const Phase& ph) {
  std::vector<bool> need(k.exprs.size(), false);
  std::vector<uint32_t> todo;
  if (ph.kind == Phase::Reduce) todo.push_back(ph.value);
  for (auto [a, e] : ph.stores) todo.push_back(e);
  while (!todo.empty()) {
    const uint32_t e = todo.back();
    todo.pop_back();
    if (need[e]) continue;
    need[e] = true;
    for (int o = 0; o < operand_count(k.exprs[e]); ++o) todo.push_back(operand(k.exprs[e], o));
  }
  return need;
}

// How many exprs phase `ph` of kernel k evaluates.
inline size_t phase_expr_count(const Kernel& k, const Phase& ph) {
  const std::vector<bool> need = phase_exprs(k, ph);
  return static_cast<size_t>(std::count(need.begin(), need.end(), true));
}

// The exprs a code generator emits for kernel k: each phase's loop
// evaluates what phase_exprs names, so a value several phases need is
// emitted (and computed) once per phase. This, not exprs.size(), is the
// body LLVM and NVRTC compile.
inline size_t emitted_exprs(const Kernel& k) {
  size_t n = 0;
  for (const Phase& ph : k.phases) n += phase_expr_count(k, ph);
  return n;
}

// Removes the accesses no load, store or product reads or writes through
// (after a pass replaced loads or stores), renumbering the rest.
inline void drop_unused_accesses(Kernel& k) {
  std::vector<bool> used(k.accesses.size(), false);
  for (const Expr& x : k.exprs)
    if (reads_memory(x)) used[x.a] = true;
  for (const Phase& ph : k.phases)
    for (auto [a, e] : ph.stores) used[a] = true;
  if (k.contraction) used[k.contraction->a] = used[k.contraction->b] = true;
  std::vector<uint32_t> to(k.accesses.size(), ~0u);
  std::vector<Access> kept;
  for (size_t a = 0; a < k.accesses.size(); ++a)
    if (used[a]) to[a] = static_cast<uint32_t>(kept.size()), kept.push_back(k.accesses[a]);
  k.accesses = std::move(kept);
  for (Expr& x : k.exprs)
    if (reads_memory(x)) x.a = to[x.a];
  for (Phase& ph : k.phases)
    for (auto& [a, e] : ph.stores) a = to[a];
  if (k.contraction) k.contraction->a = to[k.contraction->a], k.contraction->b = to[k.contraction->b];
}

// Whether a row kernel's rows lie across memory: every access is contiguous
// or broadcast along the last outer loop, none walks a reduce loop with
// stride +-1, and at least one moves along a reduce loop (x.sum(0) of a
// row-major x: each step of a row is a different memory row). Run row by
// row, such a kernel touches a new cache line per element; both code
// generators then put adjacent rows side by side instead (llvm: one vector
// lane each, jit/llvm/codegen.h column_lanes; cuda: one thread each,
// jit/cuda/codegen.h KernelPlan::columns), so each step reads adjacent
// elements.
inline bool rows_lie_across_memory(const Kernel& k) {
  const int n = k.loop.n, o = k.outer - 1;
  if (k.contraction || k.outer < 1 || k.outer >= n) return false;
  bool across = false;
  for (const Access& a : k.accesses) {
    if (a.strides[o] != 0 && a.strides[o] != 1) return false;
    for (int d = k.outer; d < n; ++d) {
      if (a.strides[d] == 1 || a.strides[d] == -1) return false;  // read along its row: the usual order is right
      across = across || a.strides[d] != 0;
    }
  }
  return across;
}

// The bytes a program's own description takes (kernels, steps, buffers):
// part of what a cached executable holds (Executable::bytes).
inline int64_t description_bytes(const KernelProgram& p) {
  size_t n = sizeof(KernelProgram) + p.buffers.size() * sizeof(BufferInfo) + p.steps.size() * sizeof(Step) +
             p.boundaries.size() * (sizeof(Boundary) + 48);
  for (const Kernel& k : p.kernels) {
    n += sizeof(Kernel) + k.name.size() + k.accesses.size() * sizeof(Access) + k.exprs.size() * sizeof(Expr) +
         k.graph_nodes.size() * sizeof(uint32_t);
    for (const Phase& ph : k.phases) n += sizeof(Phase) + ph.stores.size() * sizeof(ph.stores[0]);
  }
  for (const LibraryCall& c : p.library_calls)
    n += sizeof(LibraryCall) + c.inputs.size() * (sizeof(uint32_t) + sizeof(Dims) + 2 * sizeof(int64_t) + 4);
  return static_cast<int64_t>(n);
}

std::string to_string(const Kernel& k);
std::string to_string(const KernelProgram& p);

}  // namespace loom::ir
