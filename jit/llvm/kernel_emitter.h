// KernelEmitter: one kernel of the loop IR as one LLVM function (internal
// to jit/llvm; the interface is jit/llvm/codegen.h). Every loop-carried
// value (loop indices, accumulators, row results) lives in an alloca, clang
// -O0 style: the code stays a direct transcription of the loop IR, and
// mem2reg/SROA turn it into registers. Its members are defined by stage:
//   kernel_emitter.cpp  the function, loops, columns, phases, reductions
//   emit_expr.cpp       memory accesses, expressions, the row stash, types
//   emit_prefetch.cpp   prefetches: inputs ahead, a row kernel's next row
// emit_module (codegen.cpp) makes one per distinct kernel and calls emit().
#pragma once
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/TargetParser/Triple.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/kernel.h"
#include "jit/llvm/codegen.h"
#include "jit/llvm/memory_hints.h"

namespace loom::jit::llvm_cpu::detail {

using llvm::IRBuilder;
using llvm::Type;
using llvm::Value;
using ir::ExprKind;
using ir::Op;

inline constexpr int kManyStreams = 16;
inline int memory_reads(const ir::Kernel& k) {
  return static_cast<int>(std::count_if(k.exprs.begin(), k.exprs.end(), [](const ir::Expr& x) { return ir::reads_memory(x); }));
}

class KernelEmitter {
 public:
  // `p` and `k`: the kernel as its function sees it (ir::LocalKernel), of
  // whose buffers only the dtype may be read (the kernels sharing this
  // function differ in the rest); `sizes`: its numbers that are arguments
  // (none for a static kernel); `hints`: memory_hints of the kernel in its
  // whole program.
  KernelEmitter(const ir::KernelProgram& p, const ir::Kernel& k, const ir::SizeArgs& sizes, MemoryHints hints,
                llvm::Module& m, const Target& t, const std::string& symbol)
      : p_(p), k_(k), sizes_(sizes), target_(t), m_(m), ctx_(m.getContext()), b_(ctx_), width_(t.vector_width),
        hints_(std::move(hints)) {
    // Spreading the next row's prefetch over a row's phases is planned
    // from the row's length: with that length an argument, the next row
    // is prefetched whole.
    if (sizes.any() && k.loop.n && sizes.lifted_loop(k.loop.n - 1)) hints_.prefetch_spread = false;
    // Non-temporal stores: x86 only (the sfence below), and only where a
    // whole unrolled step is a multiple of a cache line, so one aligned
    // address keeps every later step aligned.
    const bool x86 = llvm::Triple(t.triple).isX86();
    for (size_t a = 0; a < k.accesses.size(); ++a)
      if (hints_.stream[a] && !(x86 && width_ > 1 && width_ * unroll_ * element_size(p.buffers[k.accesses[a].buffer].dtype) % 64 == 0))
        hints_.stream[a] = false;
    auto* i64 = b_.getInt64Ty();
    auto* ptr = b_.getPtrTy();
    // A GEMM kernel's function is its tile function (GemmFn): the driver
    // owns the loops around it.
    auto* fty = k.contraction ? llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, ptr, ptr}, false)
                              : llvm::FunctionType::get(b_.getVoidTy(), {i64, i64, ptr, ptr, ptr, ptr}, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, m);
    fn_->addFnAttr("target-cpu", t.cpu);
    fn_->addFnAttr("target-features", t.features);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    for (unsigned a = k.contraction ? 0 : 2; a < fty->getNumParams(); ++a) fn_->addParamAttr(a, llvm::Attribute::NoAlias);
  }

  // ---------------------------------------------------------------- the function (kernel_emitter.cpp)
  void emit();

  void emit_gemm();

 private:
  void begin_body();

  void end_body();

  // ---------------------------------------------------------------- loops (kernel_emitter.cpp)
  void nest(int d, int to, int width, const std::function<void(int)>& body);

  void blocked(int d, Value* lo, Value* hi, int width, const std::function<void(int)>& body);

  void innermost(int d, Value* hi, int width, const std::function<void(int)>& body);

  void stream_loop(int d, Value* hi, int step, const std::function<void(int)>& body);

  void prefetch_lines(const std::vector<uint32_t>& accesses, int w, const SpreadShare& part,
                      const std::function<Value*(const ir::Access&, int64_t esize)>& distance, int locality);
  void prefetch_ahead(int w);

  void prefetch_next_row(int w, int share);
  void plan_prefetch();

  void loop(int d, Value* hi, int step, const std::function<void()>& body);

  // ---------------------------------------------------------------- columns (kernel_emitter.cpp)
  void column_loop();

  void column_phases(int w);
  // The loop whose index the lanes of a w-lane value follow.
  int lane_dim() const { return lane_dim_ >= 0 ? lane_dim_ : k_.loop.n - 1; }

  // ---------------------------------------------------------------- phases (kernel_emitter.cpp)
  void emit_phase(size_t ph_index);

  void mark(uint32_t e, std::vector<bool>& need);
  // The exprs phase ph's loop evaluates: its reduced value and its stores
  // with their operands, down to values read back from the row stash (as
  // phase_ sees it).
  std::vector<bool> phase_need(const ir::Phase& ph);

  Value* arg_better(Op op, ScalarType dt, Value* v, Value* b);

  void arg_step(Op op, ScalarType dt, Value* v, int lanes, llvm::AllocaInst* best, llvm::AllocaInst* at);

  Value* arg_fold(Op op, ScalarType dt, const std::map<int, llvm::AllocaInst*>& best,
                  const std::map<int, llvm::AllocaInst*>& at);

  // ---------------------------------------------------------------- reductions (kernel_emitter.cpp)
  Value* identity(Op op, ScalarType dt, int lanes);

  Value* combine(Op op, ScalarType dt, Value* a, Value* v);

  Value* fmax_nan(Value* a, Value* c);
  Value* fmin_nan(Value* a, Value* c);

  Value* horizontal(Op op, ScalarType dt, Value* v);

  // ---------------------------------------------------------------- sizes (emit_expr.cpp)
  // A number of the kernel: its constant, or with sizes as arguments the
  // run's value (ir::SizeArgs). Every extent, stride, offset and constant
  // the code computes with is read through these.
  Value* number(int32_t slot, int64_t value);
  Value* extent(int d) { return number(sizes_.loop_slot(d), k_.loop[d]); }
  Value* stride(uint32_t ai, int d) { return number(sizes_.stride_slot(ai, d), k_.accesses[ai].strides[d]); }
  Value* imm(uint32_t e) { return number(sizes_.imm_slot(e), k_.exprs[e].imm); }
  uint32_t access_index(const ir::Access& a) const { return static_cast<uint32_t>(&a - k_.accesses.data()); }
  // The w lanes' element offsets from lane 0 along lane_dim() (0, s, 2s, ...).
  Value* lane_offsets(uint32_t ai, int w);

  // ---------------------------------------------------------------- memory (emit_expr.cpp)
  Value* offset(const ir::Access& a);
  [[noreturn]] static void no_code(Op op, ScalarType dt);

  Value* load(uint32_t ai, ScalarType dt, int w);

  Value* gather(const ir::Expr& x, Value* index, int w);

  void store(uint32_t ai, Value* v, ScalarType dt, int w);

  // ---------------------------------------------------------------- expressions (emit_expr.cpp)
  std::vector<Value*> eval(const std::vector<bool>& need, int w);

  // ---------------------------------------------------------------- row stash (emit_expr.cpp)
  void plan_stash();
  std::vector<bool> row_dependent() const;  // exprs whose value changes along the row
  bool reloaded(uint32_t e) const { return !stash_.empty() && stash_[e] && phase_ > stash_first_[e]; }
  Value* stash_access(uint32_t e, int w, Value* v);
  static constexpr int64_t kMaxStashRow = 16384;
  // Rows at least this long reduce an argmax/argmin in vector lanes.
  static constexpr int64_t kArgLanesMinRow = 1024;

  Value* eval_one(const ir::Expr& x, const std::vector<Value*>& v, int w);
  Value* eval_value(const ir::Expr& x, const std::vector<Value*>& v, int w);

  bool minus_row_max(uint32_t e) const;

  Value* random(const ir::Expr& x, Value* counter, Value* seed, int w);

  Value* scalar_arg(uint32_t slot, ScalarType dt);

  Value* unary(Op op, Value* x, ScalarType in, ScalarType out);

  Value* cast(Value* x, ScalarType in, ScalarType out);

  Value* binary(Op op, Value* a, Value* c, ScalarType dt, uint32_t fail_node);

  Value* binary_fp(Op op, Value* a, Value* c);

  Value* index_check(Value* i, Value* n, uint32_t fail_node);

  Value* int_mod(Op op, Value* a, Value* d, uint32_t fail_node);

  Value* int_pow(Value* base, Value* e, bool is_signed);

  Value* binary_unsigned(Op op, Value* a, Value* c, uint32_t fail_node);

  // ---------------------------------------------------------------- types (emit_expr.cpp)
  Type* scalar_type(ScalarType dt);
  Type* memory_type(ScalarType dt);
  // Bytes of a value in registers (a bfloat16 or float16 is held as a float).
  static int64_t register_size(ScalarType dt) {
    return is_reduced_floating_point(dt) ? 4 : static_cast<int64_t>(element_size(dt));
  }

  // ---------------------------------------------------------------- bfloat16, float16 (emit_expr.cpp)
  Type* int_like(Value* v, Type* scalar);
  Value* bf16_widen(Value* bits);
  Value* bf16_rounded_bits(Value* f);
  Value* bf16_round(Value* f) { return b_.CreateBitCast(bf16_rounded_bits(f), f->getType()); }
  Value* bf16_narrow(Value* f);
  Value* f16_widen(Value* bits);
  Value* f16_narrow(Value* f);
  Value* f16_round(Value* f) { return f16_widen(f16_narrow(f)); }
  // A float computed for a 16-bit float dtype, rounded to it (still a float);
  // any other dtype's value as it is.
  Value* round_to(ScalarType dt, Value* f) {
    return dt == kBFloat16 ? bf16_round(f) : dt == kHalf ? f16_round(f) : f;
  }
  Type* vec_type(ScalarType dt, int w);
  Value* splat(Value* s, int w) { return w == 1 ? s : b_.CreateVectorSplat(w, s); }

  // ---------------------------------------------------------------- state
  const ir::KernelProgram& p_;
  const ir::Kernel& k_;
  const ir::SizeArgs& sizes_;
  const Target& target_;
  Value* contract_ = nullptr;  // a GEMM's sums at the epilogue's position
  Value* operand_ = nullptr;   // a GEMM operand's elements while its fused producers are emitted
  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  IRBuilder<> b_;
  const int width_;
  MemoryHints hints_;
  std::vector<uint32_t> stream_;  // the streamed stores of the store phase being emitted
  bool streaming_ = false;        // emitting its non-temporal loop
  // Vectors per step of an innermost loop (before its one-vector and
  // scalar tails). Independent vectors in flight hide the latency of the
  // long dependency chains of the math emitters (one vector of
  // sigmoid(tanh(x)) leaves the out-of-order window mostly waiting) and give
  // a reduction as many accumulators. Two with AVX2's 16 registers, four
  // with AVX-512's 32 or for a kernel with a transcendental (cost 8: W2's
  // softmax on Zen 3, 0.353-0.362 -> 0.318-0.333 ns/element, interleaved
  // runs; eight was no better), eight for two or more with either ISA: W1
  // 0.62 -> 0.54 ns/element on Zen 4 (AVX-512, from four), 0.53-0.59 ->
  // 0.45-0.51 on Zen 3 (AVX2, from four: the spills this costs use the
  // load/store ports, which the FMA chains leave idle; sixteen or twelve
  // are slower again).
  // A kernel reading 16 or more streams (a gradient summed over many
  // backward calls, a sum of many inputs) already has that many independent
  // loads per step: unrolled further it only spills (64 inputs of 4 MiB:
  // 12.2-13.4 -> 9.0-11.0 ms, 16: 3.1-3.4 -> 2.1-2.2 ms, interleaved runs
  // on Zen 4) and takes twice as long to compile.
  const int unroll_ = memory_reads(k_) >= kManyStreams ? 1
                      : k_.cost_per_element >= 16      ? 8
                      : (width_ >= 16 || k_.cost_per_element >= 8) ? 4
                                                                   : 2;
  const LoopBlock block_ = transpose_block(p_, k_, &sizes_);
  const int64_t column_ = column_lanes(k_, width_, &sizes_);
  int lane_dim_ = -1;  // -1: the innermost loop
  std::vector<llvm::AllocaInst*> column_rows_;  // the column path's row values, w lanes each
  llvm::Function* fn_ = nullptr;
  Value *begin_ = nullptr, *end_ = nullptr, *bufs_ = nullptr, *fs_ = nullptr, *is_ = nullptr, *err_ = nullptr;
  std::vector<llvm::AllocaInst*> idx_;
  std::vector<Value*> base_;
  std::vector<llvm::AllocaInst*> row_;
  llvm::AllocaInst* err_acc_ = nullptr;
  llvm::AllocaInst *bad_index_ = nullptr, *bad_size_ = nullptr;  // the first failed index_check's operands
  int phase_ = -1;                 // the phase being emitted
  std::vector<bool> stash_;        // exprs kept per row (plan_stash)
  std::vector<int> stash_first_;   // the phase that computes each
  std::map<uint32_t, Value*> stash_buf_;
  std::vector<int64_t> prefetch_weight_;  // per listed phase: its share of the next row (plan_prefetch)
};


}  // namespace loom::jit::llvm_cpu::detail
