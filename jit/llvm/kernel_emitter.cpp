// KernelEmitter (jit/llvm/kernel_emitter.h): the function, its loops (plain,
// blocked for transposes, streamed, by columns), its phases and reductions.
#include "jit/llvm/kernel_emitter.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <functional>
#include <map>

#include <loom/error.h>

#include "jit/llvm/gemm.h"
#include "jit/llvm/ir_loops.h"
#include "jit/llvm/runtime_calls.h"

namespace loom::jit::llvm_cpu::detail {

void KernelEmitter::emit() {
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
void KernelEmitter::emit_gemm() {
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
  auto at_position = [&](Value* batch, Value* i, Value* j) {
    if (n == 3) b_.CreateStore(batch, idx_[0]);
    b_.CreateStore(i, idx_[n - 2]);
    b_.CreateStore(j, idx_[n - 1]);
  };
  auto epilogue = [&](Value* batch, Value* i, Value* j, Value* product, int w) {
    at_position(batch, i, j);
    contract_ = product;
    auto vals = eval(need, w);
    for (auto [a, e] : ph.stores) store(a, vals[e], k_.exprs[e].dtype, w);
  };
  // The epilogue's loads and stores that run along the row (or stay on
  // one element of it), prefetched at each tile's start (gemm.cpp), so
  // their misses overlap the K loop instead of stalling the epilogue after
  // it. W4 on Zen 3, in one process alternating with and without: the
  // weight gradients with their SGD update (which read and write two 4 MiB
  // tensors and write the .grad) 5.25 -> 4.96 ms and 4.06 -> 3.37 ms (p25),
  // the K = 10 gradient of h2 with its ReLU mask 0.21 -> 0.17 ms.
  // Written accesses are fetched for writing (an in-place update's read
  // then rides on that line).
  std::vector<std::pair<uint32_t, bool>> epilogue_memory;  // access, written
  auto same_place = [&](uint32_t x, uint32_t y) { return k_.accesses[x].same_place(k_.accesses[y]); };
  for (auto [a, e] : ph.stores) epilogue_memory.push_back({a, true});
  for (size_t e = 0; e < k_.exprs.size(); ++e) {
    if (!need[e] || k_.exprs[e].kind != ir::ExprKind::Load) continue;
    const uint32_t a = k_.exprs[e].a;
    if (std::none_of(epilogue_memory.begin(), epilogue_memory.end(), [&](auto m) { return same_place(m.first, a); }))
      epilogue_memory.push_back({a, false});
  }
  auto prefetch_row = [&](Value* batch, Value* i, Value* j, int cols) {
    at_position(batch, i, j);
    for (auto [a, written] : epilogue_memory) {
      const ir::Access& acc = k_.accesses[a];
      const int64_t along = acc.strides[n - 1];
      if (along != 0 && along != 1) continue;
      const ScalarType edt = p_.buffers[acc.buffer].dtype;
      const int64_t bytes = along ? cols * static_cast<int64_t>(element_size(edt)) : 1;
      Value* at = b_.CreateGEP(memory_type(edt), base_[a], offset(acc));
      std::vector<int64_t> offsets;
      for (int64_t o = 0; o < bytes; o += 64) offsets.push_back(o);
      if (bytes > 1) offsets.push_back(bytes - 1);  // the row may start mid-line
      for (int64_t o : offsets) llvm_cpu::prefetch(b_, b_.CreateConstGEP1_64(b_.getInt8Ty(), at, o), written, 3);
    }
  };
  emit_gemm_tile(b_, fn_, tile, dt, gemm_shape(target_, dt), epilogue, operand_op,
                 {c.fused_operand(0), c.fused_operand(1)}, gemm_dot_product(k_, gemm_shape(target_, dt), &sizes_), prefetch_row);
  end_body();
}

// What every kernel body (loops or a GEMM tile) starts with: the loop
// index slots, the error accumulator, each access's base pointer, the
// row stash plan.
void KernelEmitter::begin_body() {
  for (uint8_t d = 0; d < k_.loop.n; ++d) idx_.push_back(b_.CreateAlloca(b_.getInt64Ty(), nullptr, "i" + llvm::Twine(unsigned{d})));
  err_acc_ = b_.CreateAlloca(b_.getInt32Ty(), nullptr, "err");
  b_.CreateStore(b_.getInt32(0), err_acc_);
  bad_index_ = b_.CreateAlloca(b_.getInt64Ty(), nullptr, "bad_index");
  bad_size_ = b_.CreateAlloca(b_.getInt64Ty(), nullptr, "bad_size");
  b_.CreateStore(b_.getInt64(0), bad_index_);
  b_.CreateStore(b_.getInt64(0), bad_size_);
  for (const ir::Access& a : k_.accesses) {
    Value* base = b_.CreateLoad(b_.getPtrTy(), b_.CreateConstGEP1_64(b_.getPtrTy(), bufs_, a.buffer));
    // A runtime offset (a view of a stored tensor) moves the base once, here.
    if (a.has_runtime_offset())
      base = b_.CreateGEP(memory_type(p_.buffers[a.buffer].dtype), base,
                          b_.CreateLoad(b_.getInt64Ty(), b_.CreateConstGEP1_64(b_.getInt64Ty(), is_, a.offset_scalar)));
    base_.push_back(base);
  }
  plan_stash();
  plan_prefetch();
}

// Bad data is reported once, after all loops.
void KernelEmitter::end_body() {
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
void KernelEmitter::nest(int d, int to, int width, const std::function<void(int)>& body) {
  if (d >= to) {
    body(1);
    return;
  }
  Value* lo = d == 0 ? begin_ : b_.getInt64(0);
  Value* hi = d == 0 ? end_ : extent(d);
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
void KernelEmitter::blocked(int d, Value* lo, Value* hi, int width, const std::function<void(int)>& body) {
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
void KernelEmitter::innermost(int d, Value* hi, int width, const std::function<void(int)>& body) {
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
void KernelEmitter::stream_loop(int d, Value* hi, int step, const std::function<void(int)>& body) {
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

// while (idx[d] + step <= hi) { body; idx[d] += step; }  (continues from idx[d])
void KernelEmitter::loop(int d, Value* hi, int step, const std::function<void()>& body) {
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
void KernelEmitter::column_loop() {
  const int d = k_.outer - 1;
  Value* hi = d == 0 ? end_ : extent(d);
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
void KernelEmitter::column_phases(int w) {
  llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  column_rows_.assign(k_.phases.size(), nullptr);
  for (size_t p = 0; p < k_.phases.size(); ++p) {
    const ir::Phase& ph = k_.phases[p];
    phase_ = static_cast<int>(p);
    const std::vector<bool> need = phase_need(ph);
    if (ph.kind == ir::Phase::Reduce) {
      const ScalarType dt = k_.exprs[ph.value].dtype;
      llvm::AllocaInst* acc = entry.CreateAlloca(vec_type(dt, w), nullptr, "column_acc");
      b_.CreateStore(identity(ph.reduce_op, dt, w), acc);
      nest(k_.outer, k_.loop.n, 1, [&](int) {
        Value* v = eval(need, w)[ph.value];
        b_.CreateStore(combine(ph.reduce_op, dt, b_.CreateLoad(vec_type(dt, w), acc), v), acc);
      });
      Value* total = b_.CreateLoad(vec_type(dt, w), acc);
      total = round_to(dt, total);  // a 16-bit float: summed in float32, rounded once
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

// ---------------------------------------------------------------- phases
void KernelEmitter::emit_phase(size_t ph_index) {
  const ir::Phase& ph = k_.phases[ph_index];
  phase_ = static_cast<int>(ph_index);
  const std::vector<bool> need = phase_need(ph);

  // This phase's share of the next row's prefetch, or -1 (MemoryHints::prefetch_phases).
  const auto listed = std::find(hints_.prefetch_phases.begin(), hints_.prefetch_phases.end(), static_cast<int>(ph_index));
  const int share = listed == hints_.prefetch_phases.end() ? -1 : static_cast<int>(listed - hints_.prefetch_phases.begin());
  const bool prefetch = share >= 0;
  if (ph.kind == ir::Phase::Store) {
    auto body = [&](int w) {
      if (prefetch && w > 1) prefetch_next_row(w, share);
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
  const int w = arg && !sizes_.lifted_loop(k_.loop.n - 1) && k_.loop[k_.loop.n - 1] < kArgLanesMinRow ? 1 : width_;
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
    if (prefetch && lanes > 1) prefetch_next_row(lanes, share);
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
    total = round_to(dt, total);  // a 16-bit float: summed in float32, rounded once
  }
  b_.CreateStore(total, row_[ph_index]);
}

std::vector<bool> KernelEmitter::phase_need(const ir::Phase& ph) {
  std::vector<bool> need(k_.exprs.size(), false);
  if (ph.kind == ir::Phase::Reduce) mark(ph.value, need);
  for (auto [a, e] : ph.stores) mark(e, need);
  return need;
}

void KernelEmitter::mark(uint32_t e, std::vector<bool>& need) {
  if (need[e]) return;
  need[e] = true;
  if (reloaded(e)) return;  // read back from the row stash: its operands are not needed
  const ir::Expr& x = k_.exprs[e];
  for (int o = 0; o < ir::operand_count(x); ++o) mark(ir::operand(x, o), need);
}

// Whether v beats b for an argmax/argmin (lane by lane): a NaN beats
// every number, nothing beats a NaN.
Value* KernelEmitter::arg_better(Op op, ScalarType dt, Value* v, Value* b) {
  if (is_floating_point(dt)) {
    Value* cmp = op == Op::ArgMax ? b_.CreateFCmpOGT(v, b) : b_.CreateFCmpOLT(v, b);
    return b_.CreateAnd(b_.CreateNot(b_.CreateFCmpUNO(b, b)), b_.CreateOr(b_.CreateFCmpUNO(v, v), cmp));
  }
  if (!is_signed_type(dt)) return op == Op::ArgMax ? b_.CreateICmpUGT(v, b) : b_.CreateICmpULT(v, b);
  return op == Op::ArgMax ? b_.CreateICmpSGT(v, b) : b_.CreateICmpSLT(v, b);
}

// Argmax/argmin step of `lanes` elements at the row position: each lane
// keeps its best value and where it was; ties keep the earlier.
void KernelEmitter::arg_step(Op op, ScalarType dt, Value* v, int lanes, llvm::AllocaInst* best, llvm::AllocaInst* at) {
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
Value* KernelEmitter::arg_fold(Op op, ScalarType dt, const std::map<int, llvm::AllocaInst*>& best,
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
Value* KernelEmitter::identity(Op op, ScalarType dt, int lanes) {
  Type* ty = vec_type(dt, lanes);
  const bool fp = is_floating_point(dt);
  switch (op) {
    case Op::Sum: case Op::Any: return llvm::Constant::getNullValue(ty);
    case Op::Prod: return fp ? llvm::ConstantFP::get(ty, 1.0) : llvm::ConstantInt::get(ty, 1);
    case Op::All: return llvm::ConstantInt::get(ty, 1);
    case Op::Max:
      if (fp) return llvm::ConstantFP::getInfinity(ty, true);
      if (!is_signed_type(dt)) return llvm::ConstantInt::get(ty, 0);  // bool, uint8
      return llvm::ConstantInt::get(ty, llvm::APInt::getSignedMinValue(ty->getScalarSizeInBits()));
    case Op::Min:
      if (fp) return llvm::ConstantFP::getInfinity(ty, false);
      if (dt == kBool) return llvm::ConstantInt::get(ty, 1);
      if (dt == kByte) return llvm::ConstantInt::get(ty, llvm::APInt::getMaxValue(ty->getScalarSizeInBits()));
      return llvm::ConstantInt::get(ty, llvm::APInt::getSignedMaxValue(ty->getScalarSizeInBits()));
    default: no_code(op, dt);  // ArgMax and ArgMin keep a value and a position: arg_step
  }
}

Value* KernelEmitter::combine(Op op, ScalarType dt, Value* a, Value* v) {
  const bool fp = is_floating_point(dt);
  switch (op) {
    case Op::Sum: return fp ? b_.CreateFAdd(a, v) : dt == kBool ? b_.CreateOr(a, v) : b_.CreateAdd(a, v);
    case Op::Prod: return fp ? b_.CreateFMul(a, v) : dt == kBool ? b_.CreateAnd(a, v) : b_.CreateMul(a, v);
    case Op::Max:
      if (fp) return fmax_nan(a, v);
      return dt == kBool ? b_.CreateOr(a, v)
                         : b_.CreateBinaryIntrinsic(dt == kByte ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, a, v);
    case Op::Min:
      if (fp) return fmin_nan(a, v);
      return dt == kBool ? b_.CreateAnd(a, v)
                         : b_.CreateBinaryIntrinsic(dt == kByte ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, a, v);
    case Op::All: return b_.CreateAnd(a, v);
    case Op::Any: return b_.CreateOr(a, v);
    default: no_code(op, dt);
  }
}

// NaN-propagating max/min, as the reference computes them (a NaN operand
// wins; otherwise a > b ? a : b). Spelled out because LLVM 16's x86
// backend cannot select llvm.maximum. The freeze keeps InstCombine from
// merging the two selects into one blend under an or-ed mask (cmpunord,
// cmplt, or, blendv); apart, the inner one is a maxps/minps, whose NaN
// rule (the second operand) is the same select: 3 operations a vector,
// not 4 (amax of 1M floats on Zen 3: 52.8-56.4 -> 41.1-46.3 us).
Value* KernelEmitter::fmax_nan(Value* a, Value* c) {
  return b_.CreateSelect(b_.CreateFCmpUNO(a, a), a, b_.CreateFreeze(b_.CreateSelect(b_.CreateFCmpOGT(a, c), a, c)));
}

Value* KernelEmitter::fmin_nan(Value* a, Value* c) {
  return b_.CreateSelect(b_.CreateFCmpUNO(a, a), a, b_.CreateFreeze(b_.CreateSelect(b_.CreateFCmpOLT(a, c), a, c)));
}

// Folds a vector's lanes pairwise (halves, then quarters...).
Value* KernelEmitter::horizontal(Op op, ScalarType dt, Value* v) {
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


}  // namespace loom::jit::llvm_cpu::detail
