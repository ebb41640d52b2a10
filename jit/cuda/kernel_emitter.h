// KernelEmitter: one kernel of the loop IR as CUDA C text (internal to
// jit/cuda; the interface is jit/cuda/codegen.h). The structure follows the
// LLVM generator (jit/llvm/kernel_emitter.h): phases in order, each
// expression of the body once per element, the same NaN, integer-wrap and
// error semantics; only the loop structure differs (threads instead of
// loops, see codegen.h). Its members are defined by stage:
//   kernel_emitter.cpp  the kernel, GEMM, a product in a single block,
//                       pointwise and row kernels
//   emit_expr.cpp       the row stash and early loads, bodies: each
//                       expression as C, loads and stores
// emit_source (codegen.cpp) makes one per distinct kernel and calls emit().
#pragma once
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "ir/kernel.h"
#include "ir/local_kernel.h"
#include "jit/cuda/codegen.h"
#include "jit/cuda/gemm.h"

namespace loom::jit::cuda::detail {

using ir::ExprKind;
using ir::Family;
using ir::Op;

inline constexpr int kLanes = 4;           // elements per thread in vectorized pointwise kernels
inline constexpr int kMaxPerThread = 8;    // a row up to G x this many elements stays in registers
inline constexpr int kMaxStashRegs = 48;   // registers per thread the row stash may take
inline constexpr int kMaxEarlyRegs = 64;   // and the loads moved into phase 0 (plan_early_loads)
inline constexpr int kColumnSteps = 4;     // column groups: steps per thread before a row takes more threads
inline constexpr int kColumnMinRows = 256; // column groups: rows a kernel needs for enough blocks
// The parameters every generated kernel starts with (codegen.h), and a
// single-block program's steps too.
inline const char* const kKernelParams = "void* const* bufs, const double* fs, const long long* is, long long* err";

inline const char* ctype(ScalarType dt) {
  switch (dt) {
    case kBool: return "bool";
    case kInt: return "int";
    case kLong: return "long long";
    case kFloat: return "float";
    case kDouble: return "double";
    case kBFloat16: return "float";  // computed in float32, rounded per op (loom_bf16_round)
    case kHalf: return "float";      // the same (loom_f16_round)
    case kByte: return "unsigned char";
    case kChar: return "signed char";
    case kShort: return "short";
  }
  return "float";
}
inline const char* mtype(ScalarType dt) {
  return dt == kBool ? "unsigned char" : is_reduced_floating_point(dt) ? "unsigned short" : ctype(dt);
}
// Reduction accumulators: bool and the narrow integers fold as int (warp
// shuffles take no bool, char or short); an int holds each of their values.
inline const char* acctype(ScalarType dt) { return dt == kBool || (is_integral(dt) && element_size(dt) < 4) ? "int" : ctype(dt); }
inline bool fp(ScalarType dt) { return is_floating_point(dt); }
// A libm-style name for dt: expf for float, exp for double.
inline std::string fn(const char* name, ScalarType dt) { return std::string(name) + (dt == kDouble ? "" : "f"); }

inline std::string lit(double v, ScalarType dt) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return dt == kDouble ? s : "(float)" + s;
}

inline int64_t prod(const ir::Dims& d, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; ++i) p *= d[i];
  return p;
}

inline int pow2_at_least(int64_t x) {
  int p = 1;
  while (p < x && p < (1 << 20)) p <<= 1;
  return p;
}


// Threads that share one element of a single-block product: the block's
// threads over the outputs, a power of two from 1 to 32 (one warp).
inline int block_product_lanes(int64_t outputs) {
  int p = 1;
  while (p < 32 && outputs * p * 2 <= kSingleBlockThreads) p *= 2;
  return p;
}

inline bool is_pointwise(const ir::Kernel& k) {
  return k.phases.size() == 1 && k.phases[0].kind == ir::Phase::Store && !k.phases[0].per_row;
}

// A load of a pointwise kernel over two loops that walks memory along loop
// 0, not along loop 1 (the loop a warp's threads walk): `x.t() + y`, a
// transposing copy. KernelPlan::tiled stages it through shared memory.
inline constexpr int kTile = 32;  // tiled kernels: kTile x kTile elements a block, kTile x 8 threads
inline bool tiled_load(const ir::Kernel& k, const ir::Access& a) {
  return k.loop.n == 2 && a.strides[0] == 1 && a.strides[1] != 1 && a.strides[1] != 0;
}

// Whether 4 consecutive innermost elements can form one aligned 16-byte
// (or 4-byte for bool) group in every access that walks them: the checks
// of the numbers that are constants in the code pass, and `lifted(slot)`
// is called for each checked number that is a size argument of `z` (the
// run's value decides: its multiple of 4).
template <class Lifted>
bool lanes_fit(const ir::KernelProgram& p, const ir::Kernel& k, const ir::SizeArgs& z, Lifted&& lifted) {
  const int n = k.loop.n;
  if (n == 0) return false;
  auto multiple = [&](int32_t slot, int64_t value) {
    if (slot == ir::SizeArgs::kFixed) return value % kLanes == 0;
    lifted(slot);
    return true;
  };
  if (!multiple(z.loop_slot(n - 1), k.loop[n - 1])) return false;
  for (uint32_t ai = 0; ai < k.accesses.size(); ++ai) {
    const ir::Access& a = k.accesses[ai];
    if (a.strides[n - 1] != 1) continue;
    if (a.has_runtime_offset() && a.offset_align % kLanes != 0) return false;
    if (!multiple(z.offset_slot(ai), a.offset)) return false;
    for (int d = 0; d + 1 < n; ++d)
      if (!multiple(z.stride_slot(ai, d), a.strides[d])) return false;
    const ir::BufferInfo& b = p.buffers[a.buffer];
    if (b.kind == ir::BufferKind::Temp && b.arena_offset % 32 != 0) return false;
  }
  return true;
}

// At this size (every number its value).
inline bool can_use_lanes(const ir::KernelProgram& p, const ir::Kernel& k) {
  return lanes_fit(p, k, ir::SizeArgs{}, [](int32_t) {});
}

// With sizes as arguments: whether the 4 lanes hang on numbers that are
// arguments only, the constants' checks passing: the text then takes 4
// lanes where the run's numbers allow and 1 elsewhere
// (KernelEmitter::lanes_condition), instead of a function of its own for
// each (a length of 157 after one of 708).
inline bool lanes_at_run_time(const ir::KernelProgram& p, const ir::Kernel& k, const ir::SizeArgs& z) {
  bool lifted = false;
  return z.any() && lanes_fit(p, k, z, [&](int32_t) { lifted = true; }) && lifted;
}

class KernelEmitter {
 public:
  // A kernel of its own (not `single_block`): p and k are a kernel's local
  // form (ir::LocalKernel), emitted as the shared function `name` (if
  // given; else shared_symbol(index)), whose failures name their node
  // through the launch's node table (`nd`). A single-block step:
  // kernel_symbol(index) of the whole program, its nodes as constants.
  // `sizes`: the kernel's numbers that are arguments (ir::SizeArgs; none:
  // every number a literal of the text).
  KernelEmitter(const ir::KernelProgram& p, const ir::Kernel& k, size_t index, std::ostringstream& out,
                GemmConfig gemm = {}, bool single_block = false, std::string name = {},
                const ir::SizeArgs& sizes = kStatic)
      : p_(p), k_(k), sizes_(sizes), index_(index), o_(out), plan_(plan_kernel(p, k, &sizes)), gemm_(gemm),
        single_block_(single_block), name_(std::move(name)) {
    // Values that are the same for every element of a phase (scalars, row
    // results and what is computed from them only) are computed once per
    // thread before the element loop: kernels have no __restrict__ (a
    // donated output aliases its input), so the compiler would otherwise
    // reload scalars and redo divisions after every store.
    varies_.assign(k.exprs.size(), false);
    for (size_t e = 0; e < k.exprs.size(); ++e) {
      const ir::Expr& x = k.exprs[e];
      if (ir::reads_memory(x) || x.kind == ExprKind::Iota || x.kind == ExprKind::Contract || x.kind == ExprKind::Operand)
        varies_[e] = true;
      for (int o = 0; o < ir::operand_count(x); ++o) varies_[e] = varies_[e] || varies_[ir::operand(x, o)];
    }
  }

  // ---------------------------------------------------------------- the kernel (kernel_emitter.cpp)
  void emit();

 private:
  // ---------------------------------------------------------------- GEMM, a product in a single block, pointwise, rows (kernel_emitter.cpp)
  void emit_gemm();
  struct GemmText {
    std::string batch, m, n, k, a_m, a_k, a_b, b_k, b_n, b_b, a_at, b_at;
  };
  GemmText gemm_text(const GemmProblem& g) const;

  std::string operand_ops();

  void emit_block_product();

  std::string element_indices(const char* in) const;

  std::vector<bool> kernel_buffers() const;
  void emit_buffer_pointers(const std::vector<bool>& used);
  std::string symbol() const {
    return single_block_ ? kernel_symbol(index_) : !name_.empty() ? name_ : shared_symbol(index_);
  }

  void emit_gemm_prologue(const std::vector<bool>& used);
  // `T* b<i> = (T*)bufs[i];` for each used buffer, each line after `indent`.
  std::string buffer_pointers(const std::vector<bool>& used, const char* indent) const;

  void emit_pointwise();
  void emit_pointwise_loop(const std::vector<bool>& need);
  // lanes_at_run_time: the C condition under which the run's numbers allow 4 lanes.
  std::string lanes_condition() const;

  void emit_tiled();

  bool lane_vector(uint32_t access) const;

  void emit_rows();

  void open_row_loop(const std::vector<bool>& need, const ir::Phase& ph, const char* in);

  void close_row_loop(const ir::Phase& ph, const char* in);

  void stores(const ir::Phase& ph, const char* in);

  void emit_phase(const ir::Phase& ph, size_t index);

  std::string identity(Op op, ScalarType dt);

  std::string combine(Op op, ScalarType dt, const std::string& a, const std::string& b);

  // ---------------------------------------------------------------- row stash (emit_expr.cpp)
  void plan_stash();
  void plan_early_loads();
  // Registers a stashed value of dtype dt takes a thread: its row elements.
  int stash_regs(ScalarType dt) const { return plan_.per_thread * plan_.lanes * (element_size(dt) == 8 ? 2 : 1); }
  bool reloaded(uint32_t e) const { return !stash_.empty() && stash_[e] && phase_ > first_[e]; }

  std::vector<bool> needed(const ir::Phase& ph);
  void mark(uint32_t e, std::vector<bool>& need);

  // ---------------------------------------------------------------- sizes (emit_expr.cpp)
  // A number of the kernel as C: its literal, or with sizes as arguments
  // the run's value from the int scalars. The text then holds no lifted
  // number: it is the same at every size (it keys the cubin), and what it
  // does decide by size (lanes, steps, group widths) it prints, so a size
  // that decides otherwise gets other text.
  std::string number(int32_t slot, int64_t v) const {
    return slot == ir::SizeArgs::kFixed ? std::to_string(v) + "LL" : "z" + std::to_string(slot);
  }
  // The size arguments read once, into registers, at a kernel's start:
  // `const long long z<slot> = is[...]`. Read where used, each would be
  // loaded again after every store (the kernel's pointers may alias: no
  // __restrict__), which took W3's layer norm from 0.08 to 0.15 ms.
  std::string size_registers() const {
    std::string s;
    for (size_t i = 0; i < sizes_.values.size(); ++i)
      s += "  const long long z" + std::to_string(i) + " = is[" + std::to_string(sizes_.base + i) + "]; (void)z" +
           std::to_string(i) + ";\n";
    return s;
  }
  std::string extent(int d) const { return number(sizes_.loop_slot(d), k_.loop[d]); }
  std::string stride(uint32_t ai, int d) const { return number(sizes_.stride_slot(ai, d), k_.accesses[ai].strides[d]); }
  std::string imm(uint32_t e) const { return number(sizes_.imm_slot(e), k_.exprs[e].imm); }
  std::string access_offset(uint32_t ai) const { return number(sizes_.offset_slot(ai), k_.accesses[ai].offset); }
  // The product of loops [from, to)'s extents divided by `divisor`, as C:
  // a literal unless one of them is an argument.
  std::string extent_product(int from, int to, int64_t divisor = 1) const;
  // "<extent>u" for a narrow (unsigned) index, else the extent as long long.
  std::string index_extent(int d, bool narrow) const {
    return sizes_.lifted_loop(d) ? (narrow ? "(unsigned)" : "") + extent(d) : std::to_string(k_.loop[d]) + (narrow ? "u" : "LL");
  }
  uint32_t access_index(const ir::Access& a) const { return static_cast<uint32_t>(&a - k_.accesses.data()); }

  // ---------------------------------------------------------------- bodies (emit_expr.cpp)
  std::string stash_slot() const { return plan_.lanes > 1 ? "[j * 4 + l]" : "[j]"; }

  void hoisted(const std::vector<bool>& need, const char* in);

  void body(const std::vector<bool>& need, const char* in);

  std::string offset(const ir::Access& a, const std::string& lane);
  [[noreturn]] static void no_code(Op op, ScalarType dt);

  std::string lane_index() const { return lane_ ? "l" : ""; }

  std::string rounded(const ir::Expr& x, uint32_t e);

  std::string value(const ir::Expr& x, uint32_t e);

  std::string unary(Op op, const std::string& x, ScalarType in, ScalarType out);

  std::string binary(Op op, const std::string& a, const std::string& b, ScalarType dt, uint32_t fail_node);

  std::string to_memory(uint32_t e);

  void store(uint32_t ai, uint32_t e, const char* in);

  // ---------------------------------------------------------------- state
  static inline const ir::SizeArgs kStatic{};
  const ir::KernelProgram& p_;
  const ir::Kernel& k_;
  const ir::SizeArgs& sizes_;
  size_t index_;
  std::ostringstream& o_;
  KernelPlan plan_;
  GemmConfig gemm_;
  bool single_block_;          // a step of loom_program, not a kernel (a shared function) of its own
  std::string name_;           // the shared function's symbol, when its program is the function alone
  bool lane_ = false;          // emitting inside a pointwise lane loop
  bool preloaded_ = false;     // a GEMM epilogue: loads come from its `loaded` struct
  std::vector<bool> from_tile_;  // emit_tiled: per access, read from its shared-memory tile
  int phase_ = -1;
  std::vector<bool> stash_;    // exprs kept in registers across phases
  std::vector<bool> early_;    // stashed loads moved into phase 0 (plan_early_loads)
  std::vector<int> first_;     // the phase that computes each
  std::vector<bool> varies_;   // differs between the elements of a phase (see the constructor)
};


}  // namespace loom::jit::cuda::detail
