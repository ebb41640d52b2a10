// Kernel emission. Every loop-carried value (loop indices, accumulators,
// row results) lives in an alloca, clang -O0 style: the code stays a direct
// transcription of the loop IR, and mem2reg/SROA turn it into registers.
#include "jit/llvm/codegen.h"
#include "jit/llvm/ir_loops.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/Host.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/TargetParser/Triple.h>

#include <functional>
#include <map>
#include <limits>

#include <loom/error.h>

#include "ir/lower.h"
#include "jit/llvm/gemm.h"
#include "jit/llvm/math.h"
#include "jit/llvm/runtime_calls.h"
#include "jit/llvm/memory_hints.h"

namespace loom::jit::llvm_cpu {

using llvm::IRBuilder;
using llvm::Type;
using llvm::Value;

const Target& host_target() {
  static const Target t = [] {
    Target r;
    r.triple = llvm::sys::getProcessTriple();
    r.cpu = llvm::sys::getHostCPUName().str();
    llvm::StringMap<bool> feats;
    llvm::sys::getHostCPUFeatures(feats);
    // LOOM_CPU_ISA=avx2 or baseline compiles for less than the host has, so
    // the AVX2 and SSE2 code paths (tiles, math, vector widths) can be run
    // and tested on an AVX-512 machine.
    const char* isa = std::getenv("LOOM_CPU_ISA");
    const std::string want = isa ? isa : "";
    if (want == "avx2" || want == "baseline") {
      r.cpu = want == "avx2" ? "x86-64-v3" : "x86-64";
      for (auto& f : feats) {
        const std::string name = f.first().str();
        const bool wide = name.rfind("avx512", 0) == 0 || name == "evex512" || name.rfind("avx10", 0) == 0 ||
                          name.rfind("amx", 0) == 0;
        const bool avx = name.rfind("avx", 0) == 0 || name == "fma" || name == "f16c" || name.rfind("vaes", 0) == 0 ||
                         name == "vpclmulqdq" || name == "gfni";
        if (wide || (want == "baseline" && avx)) f.second = false;
      }
    }
    // Every feature is named, off ones too: the CPU name alone implies its
    // model's features, and a hypervisor may hide some of them (a Zen 4 VM
    // without AVX-512 reports "znver4"), so "+" only would let LLVM emit
    // instructions this CPU faults on.
    std::vector<std::string> named;
    for (auto& f : feats) named.push_back((f.second ? "+" : "-") + f.first().str());
    std::sort(named.begin(), named.end());  // deterministic: part of the disk-cache key
    for (auto& f : named) r.features += (r.features.empty() ? "" : ",") + f;
    r.vector_width = feats.lookup("avx512f") ? 16 : feats.lookup("avx2") ? 8 : 4;
    return r;
  }();
  return t;
}

std::string build_id() {
  return std::string("codegen ") + __DATE__ " " __TIME__ + ", " + ir::lower_build_id() + ", " + math_build_id() + ", " +
         memory_hints_build_id() + ", " + gemm_build_id();
}

std::string kernel_symbol(size_t i) { return "loom_k" + std::to_string(i); }

LoopBlock transpose_block(const ir::KernelProgram& p, const ir::Kernel& k) {
  const int n = k.loop.n;
  if (k.contraction || k.outer != 0 || k.phases.size() != 1 || k.phases[0].kind != ir::Phase::Store ||
      k.phases[0].per_row || n < 2)
    return {};
  int64_t widest = 0;  // bytes of the widest element read or written across rows
  for (const ir::Access& a : k.accesses) {
    const int64_t across = a.strides[n - 1], along = a.strides[n - 2];
    if (across != 0 && across != 1 && (along == 1 || along == -1))
      widest = std::max<int64_t>(widest, element_size(p.buffers[a.buffer].dtype));
  }
  if (widest == 0) return {};
  const LoopBlock b{256, 64 / widest};
  if (k.loop[n - 1] < 2 * b.cols || k.loop[n - 2] < 2 * b.cols) return {};  // a few lines: in cache anyway
  return b;
}

int64_t column_lanes(const ir::Kernel& k, int vector_width) {
  if (k.outer < 1) return 0;
  bool reduces = false;
  for (const ir::Phase& ph : k.phases) {
    if (ph.kind == ir::Phase::Reduce && (ph.reduce_op == ir::Op::ArgMax || ph.reduce_op == ir::Op::ArgMin)) return 0;
    reduces = reduces || ph.kind == ir::Phase::Reduce;
  }
  if (!reduces) return 0;
  const int64_t lanes = 8 * vector_width;
  if (k.loop[k.outer - 1] < lanes || !ir::rows_lie_across_memory(k)) return 0;
  for (const ir::Expr& x : k.exprs)
    if (x.kind == ir::ExprKind::Op && (x.op == ir::Op::RandUniform || x.op == ir::Op::RandNormal)) return 0;
  return lanes;
}

int64_t parallel_unit(const ir::KernelProgram& p, const ir::Kernel& k, const Target& t) {
  if (k.loop.n == 2)
    if (const int64_t rows = transpose_block(p, k).rows) return rows;
  if (k.outer == 1)
    if (const int64_t lanes = column_lanes(k, t.vector_width)) return lanes;
  return 1;
}

namespace {

using ir::ExprKind;
using ir::Op;

constexpr int kManyStreams = 16;
int memory_reads(const ir::Kernel& k) {
  return static_cast<int>(std::count_if(k.exprs.begin(), k.exprs.end(), [](const ir::Expr& x) { return ir::reads_memory(x); }));
}

class KernelEmitter {
 public:
  // `p` and `k`: the kernel as its function sees it (ir::LocalKernel), of
  // whose buffers only the dtype may be read (the kernels sharing this
  // function differ in the rest); `hints`: memory_hints of the kernel in
  // its whole program.
  KernelEmitter(const ir::KernelProgram& p, const ir::Kernel& k, MemoryHints hints, llvm::Module& m, const Target& t,
                size_t index)
      : p_(p), k_(k), target_(t), m_(m), ctx_(m.getContext()), b_(ctx_), width_(t.vector_width), hints_(std::move(hints)) {
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
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, kernel_symbol(index), m);
    fn_->addFnAttr("target-cpu", t.cpu);
    fn_->addFnAttr("target-features", t.features);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    for (unsigned a = k.contraction ? 0 : 2; a < fty->getNumParams(); ++a) fn_->addParamAttr(a, llvm::Attribute::NoAlias);
  }

  void emit() {
    if (k_.contraction) return emit_gemm();
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry);
    auto args = fn_->arg_begin();
    begin_ = &*args++;
    end_ = &*args++;
    bufs_ = &*args++;
    fs_ = &*args++;
    is_ = &*args++;
    err_ = &*args++;
    begin_body();
    row_.assign(k_.phases.size(), nullptr);
    for (size_t ph = 0; ph < k_.phases.size(); ++ph)
      if (k_.phases[ph].kind == ir::Phase::Reduce) {
        const Op op = k_.phases[ph].reduce_op;
        Type* t = op == Op::ArgMax || op == Op::ArgMin ? b_.getInt64Ty() : scalar_type(k_.exprs[k_.phases[ph].value].dtype);
        row_[ph] = b_.CreateAlloca(t, nullptr, "row" + std::to_string(ph));
      }

    if (column_) {
      nest(0, k_.outer - 1, 1, [&](int) { column_loop(); });
    } else {
      nest(0, k_.outer, 1, [&](int) {
        for (size_t ph = 0; ph < k_.phases.size(); ++ph) emit_phase(ph);
      });
    }

    // Non-temporal stores are weakly ordered: fence them before the caller
    // (another thread, after the parallel loop) reads the output.
    if (std::find(hints_.stream.begin(), hints_.stream.end(), true) != hints_.stream.end())
      b_.CreateIntrinsic(llvm::Intrinsic::x86_sse_sfence, {}, {});
    end_body();
  }

  // A GEMM kernel: gemm.cpp emits the tile loop; the epilogue is this
  // kernel's one store phase, evaluated by eval() at each position the tile
  // hands back, with the Contract expr reading the tile's sums.
  void emit_gemm() {
    const ScalarType dt = p_.buffers[k_.accesses[k_.contraction->a].buffer].dtype;
    for (uint32_t a : {k_.contraction->a, k_.contraction->b})
      if (p_.buffers[k_.accesses[a].buffer].dtype != dt || !is_floating_point(dt))
        throw Error("loom: llvm: matrix product (node %" + std::to_string(k_.contraction->node) +
                    ") with operands of different or non-floating dtypes");
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry);
    auto args = fn_->arg_begin();
    Value* tile = &*args++;
    bufs_ = &*args++;
    fs_ = &*args++;
    is_ = &*args++;
    err_ = &*args++;
    begin_body();
    phase_ = 0;
    const ir::Phase& ph = k_.phases.at(0);
    std::vector<bool> need(k_.exprs.size(), false);
    for (auto [a, e] : ph.stores) mark(e, need);
    const int n = k_.loop.n;
    // The operands' fused producers: their exprs over ExprKind::Operand,
    // evaluated on w lanes of a packed panel (kGemmPrepareA / B).
    const ir::Contraction& c = *k_.contraction;
    std::array<std::vector<bool>, 2> need_op;
    for (int w = 0; w < 2; ++w) {
      need_op[w].assign(k_.exprs.size(), false);
      if (c.fused_operand(w)) mark(c.value(w), need_op[w]);
    }
    auto operand_op = [&](int which, Value* x, int w) {
      operand_ = x;
      return eval(need_op[which], w)[c.value(which)];
    };
    emit_gemm_tile(b_, fn_, tile, dt, gemm_shape(target_, dt), [&](Value* batch, Value* i, Value* j, Value* product, int w) {
      if (n == 3) b_.CreateStore(batch, idx_[0]);
      b_.CreateStore(i, idx_[n - 2]);
      b_.CreateStore(j, idx_[n - 1]);
      contract_ = product;
      auto vals = eval(need, w);
      for (auto [a, e] : ph.stores) store(a, vals[e], k_.exprs[e].dtype, w);
    }, operand_op, {c.fused_operand(0), c.fused_operand(1)});
    end_body();
  }

 private:
  // What every kernel body (loops or a GEMM tile) starts with: the loop
  // index slots, the error accumulator, each access's base pointer, the
  // row stash plan.
  void begin_body() {
    for (uint8_t d = 0; d < k_.loop.n; ++d) idx_.push_back(b_.CreateAlloca(b_.getInt64Ty(), nullptr, "i" + std::to_string(d)));
    err_acc_ = b_.CreateAlloca(b_.getInt32Ty(), nullptr, "err");
    b_.CreateStore(b_.getInt32(0), err_acc_);
    bad_index_ = b_.CreateAlloca(b_.getInt64Ty(), nullptr, "bad_index");
    bad_size_ = b_.CreateAlloca(b_.getInt64Ty(), nullptr, "bad_size");
    b_.CreateStore(b_.getInt64(0), bad_index_);
    b_.CreateStore(b_.getInt64(0), bad_size_);
    for (const ir::Access& a : k_.accesses)
      base_.push_back(b_.CreateLoad(b_.getPtrTy(), b_.CreateConstGEP1_64(b_.getPtrTy(), bufs_, a.buffer)));
    plan_stash();
  }

  // Bad data is reported once, after all loops.
  void end_body() {
    Value* e = b_.CreateLoad(b_.getInt32Ty(), err_acc_);
    auto* set = llvm::BasicBlock::Create(ctx_, "set_err", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "done", fn_);
    b_.CreateCondBr(b_.CreateICmpNE(e, b_.getInt32(0)), set, done);
    b_.SetInsertPoint(set);
    b_.CreateStore(e, err_);  // KernelError: word at 0, index at 8, size at 16
    b_.CreateStore(b_.CreateLoad(b_.getInt64Ty(), bad_index_), b_.CreateConstGEP1_64(b_.getInt8Ty(), err_, 8));
    b_.CreateStore(b_.CreateLoad(b_.getInt64Ty(), bad_size_), b_.CreateConstGEP1_64(b_.getInt8Ty(), err_, 16));
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    b_.CreateRetVoid();
  }

  // ---------------------------------------------------------------- loops
  // Loops [d, to): loop 0 runs [begin, end), others their full extent; the
  // innermost runs `width` lanes per step and then a scalar tail.
  void nest(int d, int to, int width, const std::function<void(int)>& body) {
    if (d >= to) {
      body(1);
      return;
    }
    Value* lo = d == 0 ? begin_ : b_.getInt64(0);
    Value* hi = d == 0 ? end_ : b_.getInt64(k_.loop[d]);
    if (block_.rows && d + 2 == to) return blocked(d, lo, hi, width, body);
    b_.CreateStore(lo, idx_[d]);
    if (d + 1 < to) {
      loop(d, hi, 1, [&] { nest(d + 1, to, width, body); });
      return;
    }
    innermost(d, hi, width, body);
  }

  // The last two loops [d, d + 2) in blocks of block_.rows x block_.cols
  // (transpose_block): for each block of rows, its column strips one line
  // of the operand's elements wide, each strip row by row. Not streamed: a
  // strip's rows are short.
  void blocked(int d, Value* lo, Value* hi, int width, const std::function<void(int)>& body) {
    Value* cols = b_.getInt64(k_.loop[d + 1]);
    for_range(b_, fn_, lo, hi, block_.rows, "block_rows", [&](Value* i0) {
      Value* i_hi = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateAdd(i0, b_.getInt64(block_.rows)), hi);
      for_range(b_, fn_, b_.getInt64(0), cols, block_.cols, "block_cols", [&](Value* j0) {
        Value* j_hi = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateAdd(j0, b_.getInt64(block_.cols)), cols);
        b_.CreateStore(i0, idx_[d]);
        loop(d, i_hi, 1, [&] {
          b_.CreateStore(j0, idx_[d + 1]);
          std::vector<uint32_t> stream;
          std::swap(stream, stream_);
          innermost(d + 1, j_hi, width, body);
          std::swap(stream, stream_);
        });
      });
    });
  }

  // The innermost loop d from idx[d] to hi: unrolled vector steps, then one
  // vector, then scalars.
  void innermost(int d, Value* hi, int width, const std::function<void(int)>& body) {
    // A streamed store phase has no cached unrolled loop: where its stores
    // cannot be aligned (an address not a multiple of the element, two
    // outputs out of phase) it runs one vector per step, and the kernel's
    // largest body is not compiled twice.
    if (width > 1 && !stream_.empty())
      stream_loop(d, hi, width * unroll_, body);
    else if (width > 1 && unroll_ > 1)
      loop(d, hi, width * unroll_, [&] { body(width * unroll_); });
    if (width > 1) loop(d, hi, width, [&] { body(width); });
    loop(d, hi, 1, [&] { body(1); });
  }

  // The streaming part of a store phase's innermost loop: scalar steps
  // until the first streamed store's address is 64-byte aligned, then, if
  // every streamed store is aligned there, `step`-lane steps with
  // non-temporal stores. The one-vector and scalar loops that follow finish
  // the row.
  void stream_loop(int d, Value* hi, int step, const std::function<void(int)>& body) {
    auto address = [&](uint32_t a) {
      const ScalarType dt = p_.buffers[k_.accesses[a].buffer].dtype;
      return b_.CreatePtrToInt(b_.CreateGEP(memory_type(dt), base_[a], offset(k_.accesses[a])), b_.getInt64Ty());
    };
    const uint32_t lead = stream_[0];
    const int64_t esize = element_size(p_.buffers[k_.accesses[lead].buffer].dtype);
    Value* addr = address(lead);
    Value* whole = b_.CreateICmpEQ(b_.CreateAnd(addr, b_.getInt64(esize - 1)), b_.getInt64(0));
    Value* to_line = b_.CreateUDiv(b_.CreateAnd(b_.CreateSub(b_.getInt64(0), addr), b_.getInt64(63)), b_.getInt64(esize));
    Value* i = b_.CreateLoad(b_.getInt64Ty(), idx_[d]);
    Value* peel_hi = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, hi, b_.CreateAdd(i, b_.CreateSelect(whole, to_line, b_.getInt64(0))));
    loop(d, peel_hi, 1, [&] { body(1); });
    Value* aligned = b_.getTrue();
    for (uint32_t a : stream_) aligned = b_.CreateAnd(aligned, b_.CreateICmpEQ(b_.CreateAnd(address(a), b_.getInt64(63)), b_.getInt64(0)));
    auto* nt = llvm::BasicBlock::Create(ctx_, "stream", fn_);
    auto* after = llvm::BasicBlock::Create(ctx_, "stream_done", fn_);
    b_.CreateCondBr(aligned, nt, after);
    b_.SetInsertPoint(nt);
    streaming_ = true;
    loop(d, hi, step, [&] {
      prefetch_ahead(step);
      body(step);
    });
    streaming_ = false;
    b_.CreateBr(after);
    b_.SetInsertPoint(after);
  }

  // Prefetches the elements kAheadBytes past this w-lane step of the
  // hinted accesses (MemoryHints::ahead): one prefetch per cache line.
  void prefetch_ahead(int w) {
    for (uint32_t a : hints_.ahead) {
      const ir::Access& acc = k_.accesses[a];
      const ScalarType dt = p_.buffers[acc.buffer].dtype;
      const int64_t esize = static_cast<int64_t>(element_size(dt));
      Value* ahead = b_.CreateGEP(memory_type(dt), base_[a], b_.CreateAdd(offset(acc), b_.getInt64(kAheadBytes / esize)));
      for (int64_t line = 0; line < w * esize; line += 64)
        b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {b_.getPtrTy()},
                           {b_.CreateConstGEP1_64(b_.getInt8Ty(), ahead, line), b_.getInt32(0), b_.getInt32(3), b_.getInt32(1)});
    }
  }

  // Prefetches the next row's elements of the hinted accesses (see
  // memory_hints.h): one prefetch per cache line of a w-lane step.
  void prefetch_next_row(int w) {
    const int row_loop = k_.outer - 1;
    for (uint32_t a : hints_.prefetch) {
      const ir::Access& acc = k_.accesses[a];
      const ScalarType dt = p_.buffers[acc.buffer].dtype;
      Value* next = b_.CreateGEP(memory_type(dt), base_[a], b_.CreateAdd(offset(acc), b_.getInt64(acc.strides[row_loop])));
      for (int64_t line = 0; line < w * static_cast<int64_t>(element_size(dt)); line += 64)
        b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {b_.getPtrTy()},
                           {b_.CreateConstGEP1_64(b_.getInt8Ty(), next, line), b_.getInt32(0), b_.getInt32(2), b_.getInt32(1)});
    }
  }

  // while (idx[d] + step <= hi) { body; idx[d] += step; }  (continues from idx[d])
  void loop(int d, Value* hi, int step, const std::function<void()>& body) {
    auto* cond = llvm::BasicBlock::Create(ctx_, "loop" + std::to_string(d), fn_);
    auto* inner = llvm::BasicBlock::Create(ctx_, "body" + std::to_string(d), fn_);
    auto* after = llvm::BasicBlock::Create(ctx_, "after" + std::to_string(d), fn_);
    b_.CreateBr(cond);
    b_.SetInsertPoint(cond);
    Value* i = b_.CreateLoad(b_.getInt64Ty(), idx_[d]);
    b_.CreateCondBr(b_.CreateICmpSLE(b_.CreateAdd(i, b_.getInt64(step)), hi), inner, after);
    b_.SetInsertPoint(inner);
    body();
    Value* i2 = b_.CreateLoad(b_.getInt64Ty(), idx_[d]);
    b_.CreateStore(b_.CreateAdd(i2, b_.getInt64(step)), idx_[d]);
    b_.CreateBr(cond);
    b_.SetInsertPoint(after);
  }

  // ---------------------------------------------------------------- columns
  // A reduction kernel whose rows lie across memory (x.sum(0), x.var(0) of
  // a row-major x: column_lanes): the last outer loop runs column_ rows at
  // once, one vector lane each, so every step of the reduction reads
  // column_ adjacent elements of one memory row instead of one element of
  // a new row (a new line, past 4 KiB a new page) per step. Then the rows
  // left over one at a time, as every other kernel runs them.
  void column_loop() {
    const int d = k_.outer - 1;
    Value* hi = d == 0 ? end_ : b_.getInt64(k_.loop[d]);
    b_.CreateStore(d == 0 ? begin_ : b_.getInt64(0), idx_[d]);
    lane_dim_ = d;
    loop(d, hi, static_cast<int>(column_), [&] { column_phases(static_cast<int>(column_)); });
    lane_dim_ = -1;
    loop(d, hi, 1, [&] {
      for (size_t ph = 0; ph < k_.phases.size(); ++ph) emit_phase(ph);
    });
  }

  // The kernel's phases with w lanes along lane_dim_: a Reduce phase folds
  // the reduced loops one element per step into w accumulators (its w row
  // values then live in column_rows_ for the later phases), a per-row Store
  // stores w results, any other Store walks the reduced loops again (var(0)
  // is two Reduce phases and a per-row Store, softmax(x, 0) two Reduce
  // phases and a Store).
  void column_phases(int w) {
    llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    column_rows_.assign(k_.phases.size(), nullptr);
    for (size_t p = 0; p < k_.phases.size(); ++p) {
      const ir::Phase& ph = k_.phases[p];
      phase_ = static_cast<int>(p);
      std::vector<bool> need(k_.exprs.size(), false);
      if (ph.kind == ir::Phase::Reduce) mark(ph.value, need);
      for (auto [a, e] : ph.stores) mark(e, need);
      if (ph.kind == ir::Phase::Reduce) {
        const ScalarType dt = k_.exprs[ph.value].dtype;
        llvm::AllocaInst* acc = entry.CreateAlloca(vec_type(dt, w), nullptr, "column_acc");
        b_.CreateStore(identity(ph.reduce_op, dt, w), acc);
        nest(k_.outer, k_.loop.n, 1, [&](int) {
          Value* v = eval(need, w)[ph.value];
          b_.CreateStore(combine(ph.reduce_op, dt, b_.CreateLoad(vec_type(dt, w), acc), v), acc);
        });
        Value* total = b_.CreateLoad(vec_type(dt, w), acc);
        if (dt == kBFloat16) total = bf16_round(total);  // summed in float32, rounded once
        column_rows_[p] = entry.CreateAlloca(vec_type(dt, w), nullptr, "column_row");
        b_.CreateStore(total, column_rows_[p]);
        continue;
      }
      auto store_all = [&] {
        auto vals = eval(need, w);
        for (auto [a, e] : ph.stores) store(a, vals[e], k_.exprs[e].dtype, w);
      };
      if (ph.per_row) {
        for (int d = k_.outer; d < k_.loop.n; ++d) b_.CreateStore(b_.getInt64(0), idx_[d]);
        store_all();
      } else {
        nest(k_.outer, k_.loop.n, 1, [&](int) { store_all(); });
      }
    }
    column_rows_.clear();
  }
  // The loop whose index the lanes of a w-lane value follow.
  int lane_dim() const { return lane_dim_ >= 0 ? lane_dim_ : k_.loop.n - 1; }

  // ---------------------------------------------------------------- phases
  void emit_phase(size_t ph_index) {
    const ir::Phase& ph = k_.phases[ph_index];
    phase_ = static_cast<int>(ph_index);
    std::vector<bool> need(k_.exprs.size(), false);
    if (ph.kind == ir::Phase::Reduce) mark(ph.value, need);
    for (auto [a, e] : ph.stores) mark(e, need);

    const bool prefetch = static_cast<int>(ph_index) == hints_.prefetch_phase;
    if (ph.kind == ir::Phase::Store) {
      auto body = [&](int w) {
        if (prefetch && w > 1) prefetch_next_row(w);
        auto vals = eval(need, w);
        for (auto [a, e] : ph.stores) store(a, vals[e], k_.exprs[e].dtype, w);
      };
      if (ph.per_row) {
        for (int d = k_.outer; d < k_.loop.n; ++d) b_.CreateStore(b_.getInt64(0), idx_[d]);
        body(1);
      } else {
        for (auto [a, e] : ph.stores)
          if (hints_.stream[a] && std::find(stream_.begin(), stream_.end(), a) == stream_.end()) stream_.push_back(a);
        nest(k_.outer, k_.loop.n, width_, body);
        stream_.clear();
      }
      return;
    }

    const ScalarType dt = k_.exprs[ph.value].dtype;
    const bool arg = ph.reduce_op == Op::ArgMax || ph.reduce_op == Op::ArgMin;
    // An arg over a long row (one reduced dim: ir/ops.def) keeps a best
    // value and position per lane; a short one walks element by element
    // (folding the lanes would cost more than the row).
    const int w = arg && k_.loop[k_.loop.n - 1] < kArgLanesMinRow ? 1 : width_;
    Type* st = scalar_type(dt);
    // One accumulator per step width of the loop (unrolled, vector, scalar
    // tail), folded together after the row. An arg's are positions (-1:
    // none yet), beside its best values (`best`).
    std::map<int, llvm::AllocaInst*> acc, best;
    for (int lanes : {1, w, w > 1 ? w * unroll_ : 1}) acc.emplace(lanes, nullptr);
    for (auto& [lanes, slot] : acc) {
      slot = b_.CreateAlloca(arg ? vec_type(kLong, lanes) : vec_type(dt, lanes));
      b_.CreateStore(arg ? llvm::ConstantInt::get(vec_type(kLong, lanes), -1, true) : identity(ph.reduce_op, dt, lanes),
                     slot);
      if (!arg) continue;
      best[lanes] = b_.CreateAlloca(vec_type(dt, lanes));
      b_.CreateStore(llvm::Constant::getNullValue(vec_type(dt, lanes)), best[lanes]);
    }
    nest(k_.outer, k_.loop.n, w, [&](int lanes) {
      if (prefetch && lanes > 1) prefetch_next_row(lanes);
      Value* v = eval(need, lanes)[ph.value];
      if (arg) {
        arg_step(ph.reduce_op, dt, v, lanes, best.at(lanes), acc.at(lanes));
        return;
      }
      llvm::AllocaInst* slot = acc.at(lanes);
      b_.CreateStore(combine(ph.reduce_op, dt, b_.CreateLoad(vec_type(dt, lanes), slot), v), slot);
    });
    Value* total;
    if (arg) {
      total = arg_fold(ph.reduce_op, dt, best, acc);
    } else {
      total = b_.CreateLoad(st, acc.at(1));
      for (auto& [lanes, slot] : acc)
        if (lanes > 1) total = combine(ph.reduce_op, dt, horizontal(ph.reduce_op, dt, b_.CreateLoad(vec_type(dt, lanes), slot)), total);
      if (dt == kBFloat16) total = bf16_round(total);  // summed in float32, rounded once
    }
    b_.CreateStore(total, row_[ph_index]);
  }

  void mark(uint32_t e, std::vector<bool>& need) {
    if (need[e]) return;
    need[e] = true;
    if (reloaded(e)) return;  // read back from the row stash: its operands are not needed
    const ir::Expr& x = k_.exprs[e];
    for (int o = 0; o < ir::operand_count(x); ++o) mark(ir::operand(x, o), need);
  }

  // Whether v beats b for an argmax/argmin (lane by lane): a NaN beats
  // every number, nothing beats a NaN.
  Value* arg_better(Op op, ScalarType dt, Value* v, Value* b) {
    if (is_floating_point(dt)) {
      Value* cmp = op == Op::ArgMax ? b_.CreateFCmpOGT(v, b) : b_.CreateFCmpOLT(v, b);
      return b_.CreateAnd(b_.CreateNot(b_.CreateFCmpUNO(b, b)), b_.CreateOr(b_.CreateFCmpUNO(v, v), cmp));
    }
    if (dt == kBool) return op == Op::ArgMax ? b_.CreateICmpUGT(v, b) : b_.CreateICmpULT(v, b);
    return op == Op::ArgMax ? b_.CreateICmpSGT(v, b) : b_.CreateICmpSLT(v, b);
  }

  // Argmax/argmin step of `lanes` elements at the row position: each lane
  // keeps its best value and where it was; ties keep the earlier.
  void arg_step(Op op, ScalarType dt, Value* v, int lanes, llvm::AllocaInst* best, llvm::AllocaInst* at) {
    Value* b = b_.CreateLoad(vec_type(dt, lanes), best);
    Value* i = b_.CreateLoad(vec_type(kLong, lanes), at);
    Value* none = b_.CreateICmpSLT(i, llvm::Constant::getNullValue(i->getType()));
    Value* take = b_.CreateOr(none, arg_better(op, dt, v, b));
    Value* pos = splat(b_.CreateLoad(b_.getInt64Ty(), idx_[k_.outer]), lanes);
    if (lanes > 1) {
      std::vector<llvm::Constant*> lane;
      for (int l = 0; l < lanes; ++l) lane.push_back(b_.getInt64(l));
      pos = b_.CreateAdd(pos, llvm::ConstantVector::get(lane));
    }
    b_.CreateStore(b_.CreateSelect(take, v, b), best);
    b_.CreateStore(b_.CreateSelect(take, pos, i), at);
  }

  // The row's argmax/argmin from every lane of every accumulator: the best
  // value, and of equal ones (NaNs alike) the least position.
  Value* arg_fold(Op op, ScalarType dt, const std::map<int, llvm::AllocaInst*>& best,
                  const std::map<int, llvm::AllocaInst*>& at) {
    Value* bv = b_.CreateLoad(scalar_type(dt), best.at(1));
    Value* bi = b_.CreateLoad(b_.getInt64Ty(), at.at(1));
    for (const auto& [lanes, slot] : at) {
      if (lanes == 1) continue;
      Value* vs = b_.CreateLoad(vec_type(dt, lanes), best.at(lanes));
      Value* is = b_.CreateLoad(vec_type(kLong, lanes), slot);
      for (int l = 0; l < lanes; ++l) {
        Value* v = b_.CreateExtractElement(vs, l);
        Value* i = b_.CreateExtractElement(is, l);
        Value* same = is_floating_point(dt)
                          ? b_.CreateOr(b_.CreateFCmpOEQ(v, bv), b_.CreateAnd(b_.CreateFCmpUNO(v, v), b_.CreateFCmpUNO(bv, bv)))
                          : b_.CreateICmpEQ(v, bv);
        Value* wins = b_.CreateOr(b_.CreateICmpSLT(bi, b_.getInt64(0)),
                                  b_.CreateOr(arg_better(op, dt, v, bv), b_.CreateAnd(same, b_.CreateICmpSLT(i, bi))));
        Value* take = b_.CreateAnd(b_.CreateICmpSGE(i, b_.getInt64(0)), wins);
        bv = b_.CreateSelect(take, v, bv);
        bi = b_.CreateSelect(take, i, bi);
      }
    }
    return bi;
  }

  // ---------------------------------------------------------------- reductions
  Value* identity(Op op, ScalarType dt, int lanes) {
    Type* ty = vec_type(dt, lanes);
    const bool fp = is_floating_point(dt);
    switch (op) {
      case Op::Sum: case Op::Any: return llvm::Constant::getNullValue(ty);
      case Op::Prod: return fp ? llvm::ConstantFP::get(ty, 1.0) : llvm::ConstantInt::get(ty, 1);
      case Op::All: return llvm::ConstantInt::get(ty, 1);
      case Op::Max:
        if (fp) return llvm::ConstantFP::getInfinity(ty, true);
        return dt == kBool ? llvm::ConstantInt::get(ty, 0) : llvm::ConstantInt::get(ty, llvm::APInt::getSignedMinValue(ty->getScalarSizeInBits()));
      case Op::Min:
        if (fp) return llvm::ConstantFP::getInfinity(ty, false);
        return dt == kBool ? llvm::ConstantInt::get(ty, 1) : llvm::ConstantInt::get(ty, llvm::APInt::getSignedMaxValue(ty->getScalarSizeInBits()));
      default: return llvm::Constant::getNullValue(ty);
    }
  }

  Value* combine(Op op, ScalarType dt, Value* a, Value* v) {
    const bool fp = is_floating_point(dt);
    switch (op) {
      case Op::Sum: return fp ? b_.CreateFAdd(a, v) : dt == kBool ? b_.CreateOr(a, v) : b_.CreateAdd(a, v);
      case Op::Prod: return fp ? b_.CreateFMul(a, v) : dt == kBool ? b_.CreateAnd(a, v) : b_.CreateMul(a, v);
      case Op::Max:
        if (fp) return fmax_nan(a, v);
        return dt == kBool ? b_.CreateOr(a, v) : b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, a, v);
      case Op::Min:
        if (fp) return fmin_nan(a, v);
        return dt == kBool ? b_.CreateAnd(a, v) : b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, a, v);
      case Op::All: return b_.CreateAnd(a, v);
      case Op::Any: return b_.CreateOr(a, v);
      default: return a;
    }
  }

  // NaN-propagating max/min, as the reference computes them (a NaN operand
  // wins; otherwise a > b ? a : b). Spelled out because LLVM 16's x86
  // backend cannot select llvm.maximum. The freeze keeps InstCombine from
  // merging the two selects into one blend under an or-ed mask (cmpunord,
  // cmplt, or, blendv); apart, the inner one is a maxps/minps, whose NaN
  // rule (the second operand) is the same select: 3 operations a vector,
  // not 4 (amax of 1M floats on Zen 3: 52.8-56.4 -> 41.1-46.3 us).
  Value* fmax_nan(Value* a, Value* c) {
    return b_.CreateSelect(b_.CreateFCmpUNO(a, a), a, b_.CreateFreeze(b_.CreateSelect(b_.CreateFCmpOGT(a, c), a, c)));
  }
  Value* fmin_nan(Value* a, Value* c) {
    return b_.CreateSelect(b_.CreateFCmpUNO(a, a), a, b_.CreateFreeze(b_.CreateSelect(b_.CreateFCmpOLT(a, c), a, c)));
  }

  // Folds a vector's lanes pairwise (halves, then quarters...).
  Value* horizontal(Op op, ScalarType dt, Value* v) {
    unsigned n = llvm::cast<llvm::FixedVectorType>(v->getType())->getNumElements();
    while (n > 1) {
      unsigned h = n / 2;
      std::vector<int> lo(h), hi(h);
      for (unsigned i = 0; i < h; ++i) {
        lo[i] = static_cast<int>(i);
        hi[i] = static_cast<int>(i + h);
      }
      v = combine(op, dt, b_.CreateShuffleVector(v, lo), b_.CreateShuffleVector(v, hi));
      n = h;
    }
    return b_.CreateExtractElement(v, uint64_t{0});
  }

  // ---------------------------------------------------------------- memory
  // Element offset of access `a` at the current loop indices (lane 0).
  Value* offset(const ir::Access& a) {
    Value* off = b_.getInt64(a.offset);
    for (uint8_t d = 0; d < a.strides.n; ++d)
      if (a.strides[d]) off = b_.CreateAdd(off, b_.CreateMul(b_.CreateLoad(b_.getInt64Ty(), idx_[d]), b_.getInt64(a.strides[d])));
    return off;
  }

  Value* load(uint32_t ai, ScalarType dt, int w) {
    const ir::Access& a = k_.accesses[ai];
    Type* mt = memory_type(dt);
    Value* base = b_.CreateGEP(mt, base_[ai], offset(a));
    Value* v;
    const int64_t inner = a.strides.n ? a.strides[lane_dim()] : 0;
    if (w == 1) {
      v = b_.CreateLoad(mt, base);
    } else if (inner == 1) {
      v = b_.CreateAlignedLoad(llvm::FixedVectorType::get(mt, w), base, llvm::Align(element_size(dt)));
    } else if (inner == 0) {
      v = b_.CreateVectorSplat(w, b_.CreateLoad(mt, base));
    } else {
      v = llvm::PoisonValue::get(llvm::FixedVectorType::get(mt, w));
      for (int l = 0; l < w; ++l)
        v = b_.CreateInsertElement(v, b_.CreateLoad(mt, b_.CreateConstGEP1_64(mt, base, l * inner)), uint64_t(l));
    }
    if (dt == kBool) v = b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
    if (dt == kBFloat16) v = bf16_widen(v);
    return v;
  }

  // A fused gather's w elements: access x.a at the loop position, each lane
  // moved by its index (in range: an IndexCheck's value) times x.imm. One
  // masked gather (vpgatherqps on AVX-512 / AVX2) for a vector step.
  Value* gather(const ir::Expr& x, Value* index, int w) {
    const ir::Access& a = k_.accesses[x.a];
    Type* mt = memory_type(x.dtype);
    Value* base = b_.CreateGEP(mt, base_[x.a], offset(a));
    Value* moved = b_.CreateMul(index, splat(b_.getInt64(x.imm), w));
    Value* v;
    if (w == 1) {
      v = b_.CreateLoad(mt, b_.CreateGEP(mt, base, moved));
    } else {
      const int64_t inner = a.strides.n ? a.strides[lane_dim()] : 0;
      std::vector<llvm::Constant*> lanes;
      for (int l = 0; l < w; ++l) lanes.push_back(b_.getInt64(l * inner));
      Value* at = b_.CreateAdd(moved, llvm::ConstantVector::get(lanes));
      v = b_.CreateMaskedGather(llvm::FixedVectorType::get(mt, w), b_.CreateGEP(mt, base, at),
                                llvm::Align(element_size(x.dtype)));
    }
    if (x.dtype == kBool) v = b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
    if (x.dtype == kBFloat16) v = bf16_widen(v);
    return v;
  }

  void store(uint32_t ai, Value* v, ScalarType dt, int w) {
    const ir::Access& a = k_.accesses[ai];
    Type* mt = memory_type(dt);
    if (dt == kBool) v = b_.CreateZExt(v, w == 1 ? mt : static_cast<Type*>(llvm::FixedVectorType::get(mt, w)));
    if (dt == kBFloat16) v = bf16_narrow(v);
    Value* base = b_.CreateGEP(mt, base_[ai], offset(a));
    const int64_t inner = a.strides.n ? a.strides[lane_dim()] : 0;
    if (w == 1) {
      b_.CreateStore(v, base);
    } else if (inner == 1 && streaming_ && hints_.stream[ai] && dt != kBFloat16) {
      llvm::StoreInst* st = b_.CreateAlignedStore(v, base, llvm::Align(64));
      st->setMetadata(llvm::LLVMContext::MD_nontemporal,
                      llvm::MDNode::get(ctx_, llvm::ConstantAsMetadata::get(b_.getInt32(1))));
    } else if (inner == 1) {
      b_.CreateAlignedStore(v, base, llvm::Align(element_size(dt)));
    } else {
      for (int l = 0; l < w; ++l)
        b_.CreateStore(b_.CreateExtractElement(v, uint64_t(l)), b_.CreateConstGEP1_64(mt, base, l * inner));
    }
  }

  // ---------------------------------------------------------------- expressions
  std::vector<Value*> eval(const std::vector<bool>& need, int w) {
    std::vector<Value*> v(k_.exprs.size(), nullptr);
    for (size_t e = 0; e < k_.exprs.size(); ++e) {
      if (!need[e]) continue;
      if (reloaded(e)) {
        v[e] = stash_access(e, w, nullptr);
        continue;
      }
      v[e] = eval_one(k_.exprs[e], v, w);
      if (stash_[e] && stash_first_[e] == phase_) stash_access(e, w, v[e]);
    }
    return v;
  }

  // ---------------------------------------------------------------- row stash
  // A costly value computed in a reduce phase and used again by a later
  // phase of the same row (softmax's exp(x - max): summed, then divided) is
  // kept in a row-sized stack buffer instead of being computed twice.
  void plan_stash() {
    const size_t n = k_.exprs.size();
    stash_.assign(n, false);
    stash_first_.assign(n, -1);
    if (k_.outer == 0 && k_.loop.n) return;  // whole-tensor rows do not fit a stack buffer
    if (column_) return;  // rows side by side (column_phases): computed again, a lane each
    int64_t row = 1;
    for (int d = k_.outer; d < k_.loop.n; ++d) row *= k_.loop[d];
    if (row > kMaxStashRow) return;
    std::vector<bool> row_dependent(n, false);
    for (size_t e = 0; e < n; ++e) {
      const ir::Expr& x = k_.exprs[e];
      if (ir::reads_memory(x) || x.kind == ExprKind::Iota) row_dependent[e] = true;
      for (int o = 0; o < ir::operand_count(x); ++o) row_dependent[e] = row_dependent[e] || row_dependent[ir::operand(x, o)];
    }
    std::vector<int> last(n, -1);
    for (size_t p = 0; p < k_.phases.size(); ++p) {
      const ir::Phase& ph = k_.phases[p];
      std::vector<bool> need(n, false);
      if (ph.kind == ir::Phase::Reduce) mark(ph.value, need);
      for (auto [a, e] : ph.stores) mark(e, need);
      for (size_t e = 0; e < n; ++e) {
        if (!need[e]) continue;
        if (stash_first_[e] < 0) stash_first_[e] = static_cast<int>(p);
        if (!ph.per_row) last[e] = static_cast<int>(p);
      }
    }
    for (size_t e = 0; e < n; ++e) {
      const ir::Expr& x = k_.exprs[e];
      const int first = stash_first_[e];
      stash_[e] = x.kind == ExprKind::Op && ir::costly_op(x.op) && x.dtype != kBool && row_dependent[e] && first >= 0 &&
                  last[e] > first && k_.phases[first].kind == ir::Phase::Reduce &&
                  k_.phases[first].reduce_op != Op::ArgMax && k_.phases[first].reduce_op != Op::ArgMin;
      if (stash_[e]) stash_buf_[e] = b_.CreateAlloca(scalar_type(x.dtype), b_.getInt64(row), "stash" + std::to_string(e));
    }
  }
  bool reloaded(uint32_t e) const { return !stash_.empty() && stash_[e] && phase_ > stash_first_[e]; }
  // Stores `v` into (or, with v null, loads from) e's stash at the row position.
  Value* stash_access(uint32_t e, int w, Value* v) {
    Value* pos = b_.getInt64(0);
    int64_t stride = 1;
    for (int d = k_.loop.n - 1; d >= k_.outer; --d) {
      pos = b_.CreateAdd(pos, b_.CreateMul(b_.CreateLoad(b_.getInt64Ty(), idx_[d]), b_.getInt64(stride)));
      stride *= k_.loop[d];
    }
    Type* st = scalar_type(k_.exprs[e].dtype);
    Value* at = b_.CreateGEP(st, stash_buf_.at(e), pos);
    Type* ty = w == 1 ? st : static_cast<Type*>(llvm::FixedVectorType::get(st, w));
    if (v) {
      b_.CreateAlignedStore(v, at, llvm::Align(register_size(k_.exprs[e].dtype)));
      return v;
    }
    return b_.CreateAlignedLoad(ty, at, llvm::Align(register_size(k_.exprs[e].dtype)));
  }
  static constexpr int64_t kMaxStashRow = 16384;
  // Rows at least this long reduce an argmax/argmin in vector lanes.
  static constexpr int64_t kArgLanesMinRow = 1024;

  Value* eval_one(const ir::Expr& x, const std::vector<Value*>& v, int w) {
    Value* r = eval_value(x, v, w);
    return x.dtype == kBFloat16 && ir::is_computed(x) ? bf16_round(r) : r;
  }
  Value* eval_value(const ir::Expr& x, const std::vector<Value*>& v, int w) {
    switch (x.kind) {
      case ExprKind::Load: return load(x.a, x.dtype, w);
      case ExprKind::Gather: return gather(x, v[x.b], w);
      case ExprKind::Scalar: return splat(scalar_arg(x.a, x.dtype), w);
      case ExprKind::RowValue:
        if (column_rows_.size() > x.a && column_rows_[x.a]) return b_.CreateLoad(vec_type(x.dtype, w), column_rows_[x.a]);
        return splat(b_.CreateLoad(scalar_type(x.dtype), row_[x.a]), w);
      case ExprKind::Iota: {
        if (x.a == ~0u) return splat(b_.getInt64(0), w);
        Value* i = splat(b_.CreateLoad(b_.getInt64Ty(), idx_[x.a]), w);
        if (w > 1 && static_cast<int>(x.a) == lane_dim()) {
          std::vector<llvm::Constant*> lanes;
          for (int l = 0; l < w; ++l) lanes.push_back(b_.getInt64(l));
          i = b_.CreateAdd(i, llvm::ConstantVector::get(lanes));
        }
        return i;
      }
      case ExprKind::Contract: return contract_;
      case ExprKind::Operand: return operand_;
      case ExprKind::Const: {
        Type* t = scalar_type(x.dtype);
        return splat(is_floating_point(x.dtype) ? llvm::ConstantFP::get(t, static_cast<double>(x.imm))
                                                : llvm::ConstantInt::get(t, static_cast<uint64_t>(x.imm), true),
                     w);
      }
      case ExprKind::Op: break;
    }
    if (x.op == Op::RandUniform || x.op == Op::RandNormal) return random(x, v[x.a], v[x.b], w);
    if (x.op == Op::Exp && minus_row_max(x.a)) return emit_exp_nonpositive(b_, v[x.a]);
    const ir::Family f = ir::op_family(x.op);
    if (f == ir::Family::Unary) return unary(x.op, v[x.a], k_.exprs[x.a].dtype, x.dtype);
    if (f == ir::Family::Ternary) return b_.CreateSelect(v[x.a], v[x.b], v[x.c]);
    // An op that can fail names its own node in the error word (ir::Expr::imm).
    return binary(x.op, v[x.a], v[x.b], k_.exprs[x.a].dtype, ir::can_fail_op(x.op) ? static_cast<uint32_t>(x.imm) : k_.root);
  }

  // Whether expr e is `v - m` with m the max of v over this row, as softmax,
  // log_softmax and logsumexp lower: every element the kernel evaluates v at
  // is one the Reduce phase folded, so e <= 0 or NaN (math.h:
  // emit_exp_nonpositive). float and double only: bfloat16 rounds e.
  bool minus_row_max(uint32_t e) const {
    const ir::Expr& s = k_.exprs[e];
    if (s.kind != ExprKind::Op || s.op != Op::Sub || (s.dtype != kFloat && s.dtype != kDouble)) return false;
    const ir::Expr& m = k_.exprs[s.b];
    if (m.kind != ExprKind::RowValue) return false;
    const ir::Phase& p = k_.phases[m.a];
    return p.kind == ir::Phase::Reduce && p.reduce_op == Op::Max && p.value == s.a;
  }

  // w random values, one call for the step (runtime_calls.h): counters
  // and results pass through stack slots made once in the entry block.
  Value* random(const ir::Expr& x, Value* counter, Value* seed, int w) {
    auto* i64 = b_.getInt64Ty();
    Type* st = scalar_type(x.dtype);
    llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    Value* counters = entry.CreateAlloca(i64, b_.getInt64(w), "counters");
    Value* out = entry.CreateAlloca(st, b_.getInt64(w), "random");
    b_.CreateAlignedStore(counter, counters, llvm::Align(8));
    if (w > 1) seed = b_.CreateExtractElement(seed, uint64_t{0});
    const int32_t kind = (x.op == Op::RandNormal ? kRandomNormal : 0) | (x.dtype == kDouble ? kRandomDouble : 0);
    auto callee = m_.getOrInsertFunction(kRandomCall, llvm::FunctionType::get(b_.getVoidTy(), {i64, b_.getPtrTy(), i64, b_.getInt32Ty(), b_.getPtrTy()}, false));
    b_.CreateCall(callee, {seed, counters, b_.getInt64(w), b_.getInt32(kind), out});
    Type* ty = w == 1 ? st : static_cast<Type*>(llvm::FixedVectorType::get(st, w));
    return b_.CreateAlignedLoad(ty, out, llvm::Align(register_size(x.dtype)));
  }

  Value* scalar_arg(uint32_t slot, ScalarType dt) {
    Value* f = b_.CreateLoad(b_.getDoubleTy(), b_.CreateConstGEP1_64(b_.getDoubleTy(), fs_, slot));
    Value* i = b_.CreateLoad(b_.getInt64Ty(), b_.CreateConstGEP1_64(b_.getInt64Ty(), is_, slot));
    switch (dt) {
      case kBool: return b_.CreateOr(b_.CreateFCmpUNE(f, llvm::ConstantFP::get(b_.getDoubleTy(), 0.0)),
                                     b_.CreateICmpNE(i, b_.getInt64(0)));
      case kInt: return b_.CreateTrunc(i, b_.getInt32Ty());
      case kLong: return i;
      case kFloat: return b_.CreateFPTrunc(f, b_.getFloatTy());
      case kDouble: return f;
      case kBFloat16: return b_.CreateFPTrunc(f, b_.getFloatTy());
    }
    return f;
  }

  Value* unary(Op op, Value* x, ScalarType in, ScalarType out) {
    if (op == Op::Cast) return cast(x, in, out);
    if (op == Op::LogicalNot) return b_.CreateNot(x);
    Type* ty = x->getType();
    if (in == kBool) return x;  // abs, relu, sign, floor ... of bool are the identity
    if (!is_floating_point(in)) {
      Value* zero = llvm::Constant::getNullValue(ty);
      switch (op) {
        case Op::Neg: return b_.CreateNeg(x);
        case Op::Abs: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b_.getFalse());
        case Op::Relu: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, zero);
        case Op::Sign:
          return b_.CreateSub(b_.CreateZExt(b_.CreateICmpSGT(x, zero), ty), b_.CreateZExt(b_.CreateICmpSLT(x, zero), ty));
        default: return x;  // floor, ceil, round of an integer
      }
    }
    auto c = [&](double d) { return llvm::ConstantFP::get(ty, d); };
    switch (op) {
      case Op::Neg: return b_.CreateFNeg(x);
      case Op::Abs: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
      case Op::Exp: return emit_exp(b_, x);
      case Op::Log: return emit_log(b_, x);
      case Op::Log1p: return emit_log1p(b_, x);
      case Op::Expm1: return emit_expm1(b_, x);
      case Op::Sqrt: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
      case Op::Rsqrt: return b_.CreateFDiv(c(1.0), b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x));
      case Op::Sin: return emit_sin(b_, x);
      case Op::Cos: return emit_cos(b_, x);
      case Op::Tanh: return emit_tanh(b_, x);
      case Op::Sigmoid: return emit_sigmoid(b_, x);
      case Op::Relu: return b_.CreateSelect(b_.CreateFCmpUGT(x, c(0.0)), x, c(0.0));  // NaN stays NaN
      case Op::Gelu:
        return b_.CreateFMul(b_.CreateFMul(c(0.5), x), b_.CreateFAdd(c(1.0), emit_erf(b_, b_.CreateFMul(x, c(0.70710678118654752440)))));
      case Op::GeluTanh: {
        Value* x3 = b_.CreateFMul(b_.CreateFMul(x, x), x);
        Value* inner = b_.CreateFMul(c(0.79788456080286535588), b_.CreateFAdd(x, b_.CreateFMul(c(0.044715), x3)));
        return b_.CreateFMul(b_.CreateFMul(c(0.5), x), b_.CreateFAdd(c(1.0), emit_tanh(b_, inner)));
      }
      case Op::Silu: return b_.CreateFMul(x, emit_sigmoid(b_, x));
      case Op::Erf: return emit_erf(b_, x);
      case Op::Floor: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x);
      case Op::Ceil: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x);
      case Op::Round: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::rint, x);  // half to even
      case Op::Sign:
        return b_.CreateSelect(b_.CreateFCmpOGT(x, c(0.0)), c(1.0), b_.CreateSelect(b_.CreateFCmpOLT(x, c(0.0)), c(-1.0), c(0.0)));
      case Op::Reciprocal: return b_.CreateFDiv(c(1.0), x);
      default: return x;
    }
  }

  Value* cast(Value* x, ScalarType in, ScalarType out) {
    if (in == out) return x;
    Type* to = x->getType()->isVectorTy()
                   ? static_cast<Type*>(llvm::FixedVectorType::get(scalar_type(out), llvm::cast<llvm::FixedVectorType>(x->getType())->getNumElements()))
                   : scalar_type(out);
    if (out == kBool)
      return is_floating_point(in) ? b_.CreateFCmpUNE(x, llvm::Constant::getNullValue(x->getType()))
                                   : b_.CreateICmpNE(x, llvm::Constant::getNullValue(x->getType()));
    if (in == kBool) return is_floating_point(out) ? b_.CreateUIToFP(x, to) : b_.CreateZExt(x, to);
    if (is_floating_point(in) && is_floating_point(out)) return b_.CreateFPCast(x, to);
    if (is_floating_point(in)) return b_.CreateFPToSI(x, to);
    if (is_floating_point(out)) return b_.CreateSIToFP(x, to);
    return b_.CreateSExtOrTrunc(x, to);
  }

  Value* binary(Op op, Value* a, Value* c, ScalarType dt, uint32_t fail_node) {
    if (is_floating_point(dt)) return binary_fp(op, a, c);
    if (dt == kBool) {
      switch (op) {
        case Op::Eq: return b_.CreateICmpEQ(a, c);
        case Op::Ne: return b_.CreateICmpNE(a, c);
        case Op::Lt: return b_.CreateICmpULT(a, c);
        case Op::Le: return b_.CreateICmpULE(a, c);
        case Op::Gt: return b_.CreateICmpUGT(a, c);
        case Op::Ge: return b_.CreateICmpUGE(a, c);
        case Op::Mul: case Op::Minimum: case Op::LogicalAnd: return b_.CreateAnd(a, c);
        default: return b_.CreateOr(a, c);  // add, maximum, logical_or
      }
    }
    switch (op) {
      case Op::Add: return b_.CreateAdd(a, c);
      case Op::Sub: return b_.CreateSub(a, c);
      case Op::Mul: return b_.CreateMul(a, c);
      case Op::Maximum: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, a, c);
      case Op::Minimum: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, a, c);
      case Op::Eq: return b_.CreateICmpEQ(a, c);
      case Op::Ne: return b_.CreateICmpNE(a, c);
      case Op::Lt: return b_.CreateICmpSLT(a, c);
      case Op::Le: return b_.CreateICmpSLE(a, c);
      case Op::Gt: return b_.CreateICmpSGT(a, c);
      case Op::Ge: return b_.CreateICmpSGE(a, c);
      case Op::Pow: return int_pow(a, c);
      case Op::Fmod: case Op::Remainder: return int_mod(op, a, c, fail_node);
      case Op::IndexCheck: return index_check(a, c, fail_node);
      default: return a;
    }
  }

  Value* binary_fp(Op op, Value* a, Value* c) {
    switch (op) {
      case Op::Add: return b_.CreateFAdd(a, c);
      case Op::Sub: return b_.CreateFSub(a, c);
      case Op::Mul: return b_.CreateFMul(a, c);
      case Op::Div: return b_.CreateFDiv(a, c);
      case Op::Pow: return emit_pow(b_, a, c);
      case Op::Maximum: return fmax_nan(a, c);
      case Op::Minimum: return fmin_nan(a, c);
      case Op::Fmod: return b_.CreateFRem(a, c);  // exact fmod; rare enough for its libm call
      case Op::Remainder: {
        Value* m = b_.CreateFRem(a, c);
        Value* zero = llvm::Constant::getNullValue(a->getType());
        Value* adjust = b_.CreateAnd(b_.CreateFCmpUNE(m, zero),
                                     b_.CreateXor(b_.CreateFCmpOLT(c, zero), b_.CreateFCmpOLT(m, zero)));
        return b_.CreateSelect(adjust, b_.CreateFAdd(m, c), m);
      }
      case Op::Eq: return b_.CreateFCmpOEQ(a, c);
      case Op::Ne: return b_.CreateFCmpUNE(a, c);
      case Op::Lt: return b_.CreateFCmpOLT(a, c);
      case Op::Le: return b_.CreateFCmpOLE(a, c);
      case Op::Gt: return b_.CreateFCmpOGT(a, c);
      case Op::Ge: return b_.CreateFCmpOGE(a, c);
      default: return a;
    }
  }

  // An index that must lie in [0, n): kept, and the error flag raised if
  // any lane's does not. A lane out of range becomes 0, so a fused gather
  // (ExprKind::Gather) reads inside its buffer while the run fails.
  // The first bad index (the lowest bad lane) and its bound are kept for
  // the message (KernelError).
  Value* index_check(Value* i, Value* n, uint32_t fail_node) {
    Value* zero = llvm::Constant::getNullValue(i->getType());
    Value* bad_lane = b_.CreateOr(b_.CreateICmpSLT(i, zero), b_.CreateICmpSGE(i, n));
    Value *bad = bad_lane, *index = i, *size = n;
    if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(i->getType())) {
      bad = b_.CreateOrReduce(bad_lane);
      Value* mask = b_.CreateBitCast(bad_lane, b_.getIntNTy(vt->getNumElements()));
      Value* lane = b_.CreateIntrinsic(llvm::Intrinsic::cttz, {mask->getType()}, {mask, b_.getTrue()});
      lane = b_.CreateSelect(bad, lane, llvm::ConstantInt::get(mask->getType(), 0));
      index = b_.CreateExtractElement(i, lane), size = b_.CreateExtractElement(n, lane);
    }
    Value* e = b_.CreateLoad(b_.getInt32Ty(), err_acc_);
    Value* first = b_.CreateAnd(bad, b_.CreateICmpEQ(e, b_.getInt32(0)));
    auto keep = [&](llvm::AllocaInst* slot, Value* v) {
      b_.CreateStore(b_.CreateSelect(first, b_.CreateSExtOrTrunc(v, b_.getInt64Ty()), b_.CreateLoad(b_.getInt64Ty(), slot)), slot);
    };
    keep(bad_index_, index);
    keep(bad_size_, size);
    b_.CreateStore(b_.CreateSelect(bad, b_.getInt32(error_word(kErrorIndexOutOfRange, fail_node)), e), err_acc_);
    return b_.CreateSelect(bad_lane, zero, i);
  }

  // Integer fmod/remainder; a zero divisor yields 0 and raises the error flag.
  Value* int_mod(Op op, Value* a, Value* d, uint32_t fail_node) {
    Type* ty = a->getType();
    Value* zero = llvm::Constant::getNullValue(ty);
    Value* one = llvm::ConstantInt::get(ty, 1);
    Value* minus1 = llvm::ConstantInt::getSigned(ty, -1);
    Value* is0 = b_.CreateICmpEQ(d, zero);
    Value* ism1 = b_.CreateICmpEQ(d, minus1);
    Value* safe = b_.CreateSelect(b_.CreateOr(is0, ism1), one, d);
    Value* r = b_.CreateSRem(a, safe);
    r = b_.CreateSelect(b_.CreateOr(is0, ism1), zero, r);
    if (op == Op::Remainder) {
      Value* adjust = b_.CreateAnd(b_.CreateICmpNE(r, zero), b_.CreateXor(b_.CreateICmpSLT(d, zero), b_.CreateICmpSLT(r, zero)));
      r = b_.CreateSelect(adjust, b_.CreateAdd(r, d), r);
    }
    Value* any0 = ty->isVectorTy() ? b_.CreateOrReduce(is0) : is0;
    Value* e = b_.CreateLoad(b_.getInt32Ty(), err_acc_);
    b_.CreateStore(b_.CreateSelect(any0, b_.getInt32(error_word(kErrorIntegerDivisionByZero, fail_node)), e), err_acc_);
    return r;
  }

  // Integer power by squaring, unrolled over the exponent's bits; negative
  // exponents give PyTorch's 1, -1 or 0.
  Value* int_pow(Value* base, Value* e) {
    Type* ty = base->getType();
    const unsigned bits = ty->getScalarSizeInBits();
    Value* zero = llvm::Constant::getNullValue(ty);
    Value* one = llvm::ConstantInt::get(ty, 1);
    Value* result = one;
    Value* p = base;
    for (unsigned bit = 0; bit + 1 < bits; ++bit) {
      Value* set = b_.CreateICmpNE(b_.CreateAnd(b_.CreateLShr(e, llvm::ConstantInt::get(ty, bit)), one), zero);
      result = b_.CreateSelect(set, b_.CreateMul(result, p), result);
      p = b_.CreateMul(p, p);
    }
    Value* odd = b_.CreateICmpNE(b_.CreateAnd(e, one), zero);
    Value* neg_result = b_.CreateSelect(b_.CreateICmpEQ(base, one), one,
                                        b_.CreateSelect(b_.CreateICmpEQ(base, llvm::ConstantInt::getSigned(ty, -1)),
                                                        b_.CreateSelect(odd, llvm::ConstantInt::getSigned(ty, -1), one), zero));
    return b_.CreateSelect(b_.CreateICmpSLT(e, zero), neg_result, result);
  }

  // ---------------------------------------------------------------- types
  Type* scalar_type(ScalarType dt) {
    switch (dt) {
      case kBool: return b_.getInt1Ty();
      case kInt: return b_.getInt32Ty();
      case kLong: return b_.getInt64Ty();
      case kFloat: return b_.getFloatTy();
      case kDouble: return b_.getDoubleTy();
      case kBFloat16: return b_.getFloatTy();  // computed in float32, rounded per op (bf16_round)
    }
    return b_.getFloatTy();
  }
  Type* memory_type(ScalarType dt) {
    return dt == kBool ? b_.getInt8Ty() : dt == kBFloat16 ? b_.getInt16Ty() : scalar_type(dt);
  }
  // Bytes of a value in registers (a bfloat16 is held as a float).
  static int64_t register_size(ScalarType dt) { return dt == kBFloat16 ? 4 : static_cast<int64_t>(element_size(dt)); }

  // ---------------------------------------------------------------- bfloat16
  // A bfloat16 value lives in a float register holding a number that
  // bfloat16 represents exactly: a load widens (the bits are the float's
  // high half), every op's result is rounded to nearest even, a store keeps
  // the high half. Rounding per op is what the reference backend (and
  // PyTorch eager) does, so a fused chain gives the unfused bits.
  Type* int_like(Value* v, Type* scalar) {
    auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(v->getType());
    return vt ? static_cast<Type*>(llvm::FixedVectorType::get(scalar, vt->getNumElements())) : scalar;
  }
  Value* bf16_widen(Value* bits) {
    Type* i32 = int_like(bits, b_.getInt32Ty());
    return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(bits, i32), llvm::ConstantInt::get(i32, 16)), int_like(bits, b_.getFloatTy()));
  }
  // The float's bits rounded to the nearest bfloat16, in the high half
  // (ties to even; a NaN becomes a quiet NaN of the same sign).
  Value* bf16_rounded_bits(Value* f) {
    Type* i32 = int_like(f, b_.getInt32Ty());
    auto k = [&](uint32_t c) { return llvm::ConstantInt::get(i32, c); };
    Value* u = b_.CreateBitCast(f, i32);
    Value* odd = b_.CreateAnd(b_.CreateLShr(u, k(16)), k(1));
    Value* r = b_.CreateAnd(b_.CreateAdd(u, b_.CreateAdd(k(0x7fff), odd)), k(0xffff0000u));
    Value* nan = b_.CreateFCmpUNO(f, f);
    return b_.CreateSelect(nan, b_.CreateOr(b_.CreateAnd(u, k(0xffff0000u)), k(0x00400000u)), r);
  }
  Value* bf16_round(Value* f) { return b_.CreateBitCast(bf16_rounded_bits(f), f->getType()); }
  Value* bf16_narrow(Value* f) {
    return b_.CreateTrunc(b_.CreateLShr(bf16_rounded_bits(f), llvm::ConstantInt::get(int_like(f, b_.getInt32Ty()), 16)),
                          int_like(f, b_.getInt16Ty()));
  }
  Type* vec_type(ScalarType dt, int w) {
    return w == 1 ? scalar_type(dt) : static_cast<Type*>(llvm::FixedVectorType::get(scalar_type(dt), w));
  }
  Value* splat(Value* s, int w) { return w == 1 ? s : b_.CreateVectorSplat(w, s); }

  const ir::KernelProgram& p_;
  const ir::Kernel& k_;
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
  const LoopBlock block_ = transpose_block(p_, k_);
  const int64_t column_ = column_lanes(k_, width_);
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
};

}  // namespace

KernelFunctions share_functions(const ir::KernelProgram& p) {
  // Memory hints depend on the rest of the program (whether anyone reads
  // an output again): part of what makes two kernels' code the same.
  return ir::share_kernels(p, [&](const ir::Kernel& k) {
    const MemoryHints h = memory_hints(p, k);
    std::string key;
    for (bool s : h.stream) key += s ? 'S' : '.';
    key += ';' + std::to_string(h.prefetch_phase);
    for (uint32_t a : h.prefetch) key += ',' + std::to_string(a);
    key += ';';
    for (uint32_t a : h.ahead) key += ',' + std::to_string(a);
    return key;
  });
}

std::unique_ptr<llvm::Module> emit_module(const ir::KernelProgram& p, const KernelFunctions& f,
                                          std::span<const uint32_t> which, llvm::LLVMContext& ctx, const Target& t) {
  auto m = std::make_unique<llvm::Module>("loom_graph", ctx);
  m->setTargetTriple(t.triple);
  for (uint32_t i : which) {
    const ir::LocalKernel& l = f.local[f.first[i]];
    KernelEmitter(l.program, l.kernel(), memory_hints(p, p.kernels[f.first[i]]), *m, t, i).emit();
  }
  return m;
}

std::unique_ptr<llvm::Module> emit_module(const ir::KernelProgram& p, const KernelFunctions& f, llvm::LLVMContext& ctx,
                                          const Target& t) {
  std::vector<uint32_t> all(f.first.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint32_t>(i);
  return emit_module(p, f, all, ctx, t);
}

std::vector<std::vector<uint32_t>> compile_parts(const KernelFunctions& f, size_t parts) {
  // Work to compile, roughly: the body's exprs and phases, and for a GEMM
  // kernel its tile code (an unrolled MR x NR block of FMAs per K-loop
  // variant) on top. Largest first, each to the lightest part (W4's 13
  // functions on 2 cores: 1110 ms in one part, 550-600 ms in two).
  std::vector<std::pair<double, uint32_t>> work;
  for (size_t i = 0; i < f.first.size(); ++i) {
    const ir::Kernel& k = f.local[f.first[i]].kernel();
    work.push_back({static_cast<double>(k.exprs.size() + 8 * k.phases.size()) + (k.contraction ? 200.0 : 0.0),
                    static_cast<uint32_t>(i)});
  }
  std::sort(work.begin(), work.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::vector<std::vector<uint32_t>> out(std::max<size_t>(1, std::min(parts, work.size())));
  std::vector<double> load(out.size(), 0);
  for (auto [w, i] : work) {
    const size_t lightest = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    out[lightest].push_back(i);
    load[lightest] += w;
  }
  for (auto& part : out) std::sort(part.begin(), part.end());
  return out;
}

}  // namespace loom::jit::llvm_cpu
