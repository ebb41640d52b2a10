// KernelEmitter (jit/llvm/kernel_emitter.h): what one step of a loop
// computes: loads, gathers and stores, the expressions of the loop IR with
// their math (jit/llvm/math.h), the row stash, and the types and bfloat16
// and float16 conversions they use.
#include "jit/llvm/kernel_emitter.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <loom/error.h>

#include "jit/llvm/math.h"
#include "jit/llvm/runtime_calls.h"

namespace loom::jit::llvm_cpu::detail {

// ---------------------------------------------------------------- sizes
// Read where it is used: is_ is noalias and never written, so LLVM hoists
// the loads out of the loops.
Value* KernelEmitter::number(int32_t slot, int64_t value) {
  if (slot == ir::SizeArgs::kFixed) return b_.getInt64(value);
  return b_.CreateLoad(b_.getInt64Ty(), b_.CreateConstGEP1_64(b_.getInt64Ty(), is_, sizes_.base + static_cast<uint32_t>(slot)));
}

Value* KernelEmitter::lane_offsets(uint32_t ai, int w) {
  const ir::Access& a = k_.accesses[ai];
  const int d = lane_dim();
  std::vector<llvm::Constant*> lanes;
  for (int l = 0; l < w; ++l) lanes.push_back(b_.getInt64(l));
  Value* ramp = llvm::ConstantVector::get(lanes);
  if (a.strides.n == 0) return llvm::Constant::getNullValue(ramp->getType());
  return b_.CreateMul(ramp, splat(stride(ai, d), w));
}

// ---------------------------------------------------------------- memory
// Element offset of access `a` at the current loop indices (lane 0).
Value* KernelEmitter::offset(const ir::Access& a) {
  const uint32_t ai = access_index(a);
  Value* off = number(sizes_.offset_slot(ai), a.offset);
  for (uint8_t d = 0; d < a.strides.n; ++d)
    if (a.strides[d]) off = b_.CreateAdd(off, b_.CreateMul(b_.CreateLoad(b_.getInt64Ty(), idx_[d]), stride(ai, d)));
  return off;
}

Value* KernelEmitter::load(uint32_t ai, ScalarType dt, int w) {
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
    Value* step = stride(ai, lane_dim());
    v = llvm::PoisonValue::get(llvm::FixedVectorType::get(mt, w));
    for (int l = 0; l < w; ++l)
      v = b_.CreateInsertElement(v, b_.CreateLoad(mt, b_.CreateGEP(mt, base, b_.CreateMul(step, b_.getInt64(l)))), uint64_t(l));
  }
  if (dt == kBool) v = b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
  if (dt == kBFloat16) v = bf16_widen(v);
  if (dt == kHalf) v = f16_widen(v);
  return v;
}

// A fused gather's w elements: access x.a at the loop position, each lane
// moved by its index (in range: an IndexCheck's value) times x.imm. One
// masked gather (vpgatherqps on AVX-512 / AVX2) for a vector step.
Value* KernelEmitter::gather(const ir::Expr& x, Value* index, int w) {
  const ir::Access& a = k_.accesses[x.a];
  Type* mt = memory_type(x.dtype);
  Value* base = b_.CreateGEP(mt, base_[x.a], offset(a));
  Value* moved = b_.CreateMul(index, splat(imm(static_cast<uint32_t>(&x - k_.exprs.data())), w));
  Value* v;
  if (w == 1) {
    v = b_.CreateLoad(mt, b_.CreateGEP(mt, base, moved));
  } else {
    Value* at = b_.CreateAdd(moved, lane_offsets(x.a, w));
    v = b_.CreateMaskedGather(llvm::FixedVectorType::get(mt, w), b_.CreateGEP(mt, base, at),
                              llvm::Align(element_size(x.dtype)));
  }
  if (x.dtype == kBool) v = b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
  if (x.dtype == kBFloat16) v = bf16_widen(v);
  if (x.dtype == kHalf) v = f16_widen(v);
  return v;
}

void KernelEmitter::store(uint32_t ai, Value* v, ScalarType dt, int w) {
  const ir::Access& a = k_.accesses[ai];
  Type* mt = memory_type(dt);
  if (dt == kBool) v = b_.CreateZExt(v, w == 1 ? mt : static_cast<Type*>(llvm::FixedVectorType::get(mt, w)));
  if (dt == kBFloat16) v = bf16_narrow(v);
  if (dt == kHalf) v = f16_narrow(v);
  Value* base = b_.CreateGEP(mt, base_[ai], offset(a));
  const int64_t inner = a.strides.n ? a.strides[lane_dim()] : 0;
  if (w == 1) {
    b_.CreateStore(v, base);
  } else if (inner == 1 && streaming_ && hints_.stream[ai] && !is_reduced_floating_point(dt)) {
    llvm::StoreInst* st = b_.CreateAlignedStore(v, base, llvm::Align(64));
    st->setMetadata(llvm::LLVMContext::MD_nontemporal,
                    llvm::MDNode::get(ctx_, llvm::ConstantAsMetadata::get(b_.getInt32(1))));
  } else if (inner == 1) {
    b_.CreateAlignedStore(v, base, llvm::Align(element_size(dt)));
  } else {
    Value* step = stride(ai, lane_dim());
    for (int l = 0; l < w; ++l)
      b_.CreateStore(b_.CreateExtractElement(v, uint64_t(l)), b_.CreateGEP(mt, base, b_.CreateMul(step, b_.getInt64(l))));
  }
}

// ---------------------------------------------------------------- expressions
std::vector<Value*> KernelEmitter::eval(const std::vector<bool>& need, int w) {
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
void KernelEmitter::plan_stash() {
  const size_t n = k_.exprs.size();
  stash_.assign(n, false);
  stash_first_.assign(n, -1);
  if (k_.outer == 0 && k_.loop.n) return;  // whole-tensor rows do not fit a stack buffer
  if (column_) return;  // rows side by side (column_phases): computed again, a lane each
  for (int d = k_.outer; d < k_.loop.n; ++d)
    if (sizes_.lifted_loop(d)) return;  // a row whose length is an argument: no stack buffer sized by it
  int64_t row = 1;
  for (int d = k_.outer; d < k_.loop.n; ++d) row *= k_.loop[d];
  if (row > kMaxStashRow) return;
  const std::vector<bool> along_row = row_dependent();
  std::vector<int> last(n, -1);
  for (size_t p = 0; p < k_.phases.size(); ++p) {
    const ir::Phase& ph = k_.phases[p];
    const std::vector<bool> need = phase_need(ph);
    for (size_t e = 0; e < n; ++e) {
      if (!need[e]) continue;
      if (stash_first_[e] < 0) stash_first_[e] = static_cast<int>(p);
      if (!ph.per_row) last[e] = static_cast<int>(p);
    }
  }
  for (size_t e = 0; e < n; ++e) {
    const ir::Expr& x = k_.exprs[e];
    const int first = stash_first_[e];
    stash_[e] = x.kind == ExprKind::Op && ir::costly_op(x.op) && x.dtype != kBool && along_row[e] && first >= 0 &&
                last[e] > first && k_.phases[first].kind == ir::Phase::Reduce &&
                k_.phases[first].reduce_op != Op::ArgMax && k_.phases[first].reduce_op != Op::ArgMin;
    if (stash_[e]) stash_buf_[e] = b_.CreateAlloca(scalar_type(x.dtype), b_.getInt64(row), "stash" + std::to_string(e));
  }
}

std::vector<bool> KernelEmitter::row_dependent() const {
  std::vector<bool> along(k_.exprs.size(), false);
  for (size_t e = 0; e < k_.exprs.size(); ++e) {
    const ir::Expr& x = k_.exprs[e];
    if (ir::reads_memory(x) || x.kind == ExprKind::Iota) along[e] = true;
    for (int o = 0; o < ir::operand_count(x); ++o) along[e] = along[e] || along[ir::operand(x, o)];
  }
  return along;
}

// Stores `v` into (or, with v null, loads from) e's stash at the row position.
Value* KernelEmitter::stash_access(uint32_t e, int w, Value* v) {
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

Value* KernelEmitter::eval_one(const ir::Expr& x, const std::vector<Value*>& v, int w) {
  Value* r = eval_value(x, v, w);
  return ir::is_computed(x) ? round_to(x.dtype, r) : r;
}

Value* KernelEmitter::eval_value(const ir::Expr& x, const std::vector<Value*>& v, int w) {
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
      const uint32_t e = static_cast<uint32_t>(&x - k_.exprs.data());
      if (sizes_.imm_slot(e) != ir::SizeArgs::kFixed) {  // a size argument
        Value* n = imm(e);
        return splat(is_floating_point(x.dtype) ? b_.CreateSIToFP(n, t) : b_.CreateSExtOrTrunc(n, t), w);
      }
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
bool KernelEmitter::minus_row_max(uint32_t e) const {
  const ir::Expr& s = k_.exprs[e];
  if (s.kind != ExprKind::Op || s.op != Op::Sub || (s.dtype != kFloat && s.dtype != kDouble)) return false;
  const ir::Expr& m = k_.exprs[s.b];
  if (m.kind != ExprKind::RowValue) return false;
  const ir::Phase& p = k_.phases[m.a];
  return p.kind == ir::Phase::Reduce && p.reduce_op == Op::Max && p.value == s.a;
}

// w random values, one call for the step (runtime_calls.h): counters
// and results pass through stack slots made once in the entry block.
Value* KernelEmitter::random(const ir::Expr& x, Value* counter, Value* seed, int w) {
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

Value* KernelEmitter::scalar_arg(uint32_t slot, ScalarType dt) {
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
    case kHalf: return b_.CreateFPTrunc(f, b_.getFloatTy());
    case kByte: return b_.CreateTrunc(i, b_.getInt8Ty());
    case kChar: return b_.CreateTrunc(i, b_.getInt8Ty());
    case kShort: return b_.CreateTrunc(i, b_.getInt16Ty());
  }
  return f;
}

// An op this generator has no case for: an op added to ir/ops.def but not
// here must fail where it is compiled, never compute something else.
[[noreturn]] void KernelEmitter::no_code(Op op, ScalarType dt) {
  throw loom::Error(std::string("loom: llvm: no code for ") + ir::op_name(op) + " on " + std::string(to_string(dt)) +
              " (jit/llvm/emit_expr.cpp has no case for it)");
}

Value* KernelEmitter::unary(Op op, Value* x, ScalarType in, ScalarType out) {
  if (op == Op::Cast) return cast(x, in, out);
  if (op == Op::LogicalNot) return b_.CreateNot(x);
  Type* ty = x->getType();
  if (in == kBool) return x;  // abs, relu, sign, floor ... of bool are the identity
  if (in == kByte) {  // unsigned: its own absolute value, relu and floor; sign is 0 or 1
    switch (op) {
      case Op::Neg: return b_.CreateNeg(x);
      case Op::Abs: case Op::Relu: case Op::Floor: case Op::Ceil: case Op::Round: case Op::Trunc: return x;
      case Op::Sign: return b_.CreateZExt(b_.CreateICmpNE(x, llvm::Constant::getNullValue(ty)), ty);
      default: no_code(op, in);
    }
  }
  if (!is_floating_point(in)) {
    Value* zero = llvm::Constant::getNullValue(ty);
    switch (op) {
      case Op::Neg: return b_.CreateNeg(x);
      case Op::Abs: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b_.getFalse());
      case Op::Relu: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, zero);
      case Op::Sign:
        return b_.CreateSub(b_.CreateZExt(b_.CreateICmpSGT(x, zero), ty), b_.CreateZExt(b_.CreateICmpSLT(x, zero), ty));
      case Op::Floor: case Op::Ceil: case Op::Round: case Op::Trunc: return x;  // an integer is its own floor
      default: no_code(op, in);
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
    case Op::Atan: return emit_atan(b_, x);
    case Op::Asin: return emit_asin(b_, x);
    case Op::Acos: return emit_acos(b_, x);
    case Op::Floor: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x);
    case Op::Ceil: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x);
    case Op::Round: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::rint, x);  // half to even
    case Op::Trunc: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, x);
    case Op::Sign:
      return b_.CreateSelect(b_.CreateFCmpOGT(x, c(0.0)), c(1.0), b_.CreateSelect(b_.CreateFCmpOLT(x, c(0.0)), c(-1.0), c(0.0)));
    case Op::Reciprocal: return b_.CreateFDiv(c(1.0), x);
    default: no_code(op, in);
  }
}

Value* KernelEmitter::cast(Value* x, ScalarType in, ScalarType out) {
  if (in == out) return x;
  Type* to = x->getType()->isVectorTy()
                 ? static_cast<Type*>(llvm::FixedVectorType::get(scalar_type(out), llvm::cast<llvm::FixedVectorType>(x->getType())->getNumElements()))
                 : scalar_type(out);
  if (out == kBool)
    return is_floating_point(in) ? b_.CreateFCmpUNE(x, llvm::Constant::getNullValue(x->getType()))
                                 : b_.CreateICmpNE(x, llvm::Constant::getNullValue(x->getType()));
  if (!is_signed_type(in)) return is_floating_point(out) ? b_.CreateUIToFP(x, to) : b_.CreateZExtOrTrunc(x, to);
  if (is_floating_point(in) && is_floating_point(out)) return b_.CreateFPCast(x, to);
  if (is_floating_point(in) && element_size(out) < 4)  // truncated to int64, then wrapped (scalar_ops.h: cast_value)
    return b_.CreateTrunc(b_.CreateFPToSI(x, int_like(x, b_.getInt64Ty())), to);
  if (is_floating_point(in)) return b_.CreateFPToSI(x, to);
  if (is_floating_point(out)) return b_.CreateSIToFP(x, to);
  return b_.CreateSExtOrTrunc(x, to);
}

Value* KernelEmitter::binary(Op op, Value* a, Value* c, ScalarType dt, uint32_t fail_node) {
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
      case Op::Add: case Op::Maximum: case Op::LogicalOr: return b_.CreateOr(a, c);
      default: no_code(op, dt);
    }
  }
  if (dt == kByte) return binary_unsigned(op, a, c, fail_node);
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
    case Op::Pow: return int_pow(a, c, true);
    case Op::Fmod: case Op::Remainder: return int_mod(op, a, c, fail_node);
    case Op::IndexCheck: return index_check(a, c, fail_node);
    default: no_code(op, dt);
  }
}

// uint8: wrapping arithmetic, unsigned order, division's remainder never
// adjusted (no operand is negative).
Value* KernelEmitter::binary_unsigned(Op op, Value* a, Value* c, uint32_t fail_node) {
  switch (op) {
    case Op::Add: return b_.CreateAdd(a, c);
    case Op::Sub: return b_.CreateSub(a, c);
    case Op::Mul: return b_.CreateMul(a, c);
    case Op::Maximum: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::umax, a, c);
    case Op::Minimum: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, a, c);
    case Op::Eq: return b_.CreateICmpEQ(a, c);
    case Op::Ne: return b_.CreateICmpNE(a, c);
    case Op::Lt: return b_.CreateICmpULT(a, c);
    case Op::Le: return b_.CreateICmpULE(a, c);
    case Op::Gt: return b_.CreateICmpUGT(a, c);
    case Op::Ge: return b_.CreateICmpUGE(a, c);
    case Op::Pow: return int_pow(a, c, false);
    case Op::Fmod: case Op::Remainder: {
      Value* zero = llvm::Constant::getNullValue(a->getType());
      Value* is0 = b_.CreateICmpEQ(c, zero);
      Value* r = b_.CreateSelect(is0, zero, b_.CreateURem(a, b_.CreateSelect(is0, llvm::ConstantInt::get(a->getType(), 1), c)));
      Value* any0 = a->getType()->isVectorTy() ? b_.CreateOrReduce(is0) : is0;
      Value* e = b_.CreateLoad(b_.getInt32Ty(), err_acc_);
      b_.CreateStore(b_.CreateSelect(any0, b_.getInt32(error_word(kErrorIntegerDivisionByZero, fail_node)), e), err_acc_);
      return r;
    }
    default: no_code(op, kByte);
  }
}

Value* KernelEmitter::binary_fp(Op op, Value* a, Value* c) {
  switch (op) {
    case Op::Add: return b_.CreateFAdd(a, c);
    case Op::Sub: return b_.CreateFSub(a, c);
    case Op::Mul: return b_.CreateFMul(a, c);
    case Op::Div: return b_.CreateFDiv(a, c);
    case Op::Pow: return emit_pow(b_, a, c);
    case Op::Atan2: return emit_atan2(b_, a, c);
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
    default: no_code(op, kFloat);
  }
}

// An index that must lie in [0, n): kept, and the error flag raised if
// any lane's does not. A lane out of range becomes 0, so a fused gather
// (ExprKind::Gather) reads inside its buffer while the run fails.
// The first bad index (the lowest bad lane) and its bound are kept for
// the message (KernelError).
Value* KernelEmitter::index_check(Value* i, Value* n, uint32_t fail_node) {
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
Value* KernelEmitter::int_mod(Op op, Value* a, Value* d, uint32_t fail_node) {
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
// exponents (of a signed type) give PyTorch's 1, -1 or 0.
Value* KernelEmitter::int_pow(Value* base, Value* e, bool is_signed) {
  Type* ty = base->getType();
  const unsigned bits = ty->getScalarSizeInBits();
  Value* zero = llvm::Constant::getNullValue(ty);
  Value* one = llvm::ConstantInt::get(ty, 1);
  Value* result = one;
  Value* p = base;
  for (unsigned bit = 0; bit + (is_signed ? 1 : 0) < bits; ++bit) {
    Value* set = b_.CreateICmpNE(b_.CreateAnd(b_.CreateLShr(e, llvm::ConstantInt::get(ty, bit)), one), zero);
    result = b_.CreateSelect(set, b_.CreateMul(result, p), result);
    p = b_.CreateMul(p, p);
  }
  if (!is_signed) return result;
  Value* odd = b_.CreateICmpNE(b_.CreateAnd(e, one), zero);
  Value* neg_result = b_.CreateSelect(b_.CreateICmpEQ(base, one), one,
                                      b_.CreateSelect(b_.CreateICmpEQ(base, llvm::ConstantInt::getSigned(ty, -1)),
                                                      b_.CreateSelect(odd, llvm::ConstantInt::getSigned(ty, -1), one), zero));
  return b_.CreateSelect(b_.CreateICmpSLT(e, zero), neg_result, result);
}

// ---------------------------------------------------------------- types
Type* KernelEmitter::scalar_type(ScalarType dt) {
  switch (dt) {
    case kBool: return b_.getInt1Ty();
    case kInt: return b_.getInt32Ty();
    case kLong: return b_.getInt64Ty();
    case kFloat: return b_.getFloatTy();
    case kDouble: return b_.getDoubleTy();
    case kBFloat16: return b_.getFloatTy();  // computed in float32, rounded per op (bf16_round)
    case kHalf: return b_.getFloatTy();      // the same (f16_round)
    case kByte: return b_.getInt8Ty();
    case kChar: return b_.getInt8Ty();
    case kShort: return b_.getInt16Ty();
  }
  return b_.getFloatTy();
}

Type* KernelEmitter::memory_type(ScalarType dt) {
  return dt == kBool ? b_.getInt8Ty() : is_reduced_floating_point(dt) ? b_.getInt16Ty() : scalar_type(dt);
}

// ---------------------------------------------------------------- bfloat16
// A bfloat16 value lives in a float register holding a number that
// bfloat16 represents exactly: a load widens (the bits are the float's
// high half), every op's result is rounded to nearest even, a store keeps
// the high half. Rounding per op is what the reference backend (and
// PyTorch eager) does, so a fused chain gives the unfused bits.
Type* KernelEmitter::int_like(Value* v, Type* scalar) {
  auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(v->getType());
  return vt ? static_cast<Type*>(llvm::FixedVectorType::get(scalar, vt->getNumElements())) : scalar;
}

Value* KernelEmitter::bf16_widen(Value* bits) {
  Type* i32 = int_like(bits, b_.getInt32Ty());
  return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(bits, i32), llvm::ConstantInt::get(i32, 16)), int_like(bits, b_.getFloatTy()));
}

// The float's bits rounded to the nearest bfloat16, in the high half
// (ties to even; a NaN becomes a quiet NaN of the same sign).
Value* KernelEmitter::bf16_rounded_bits(Value* f) {
  Type* i32 = int_like(f, b_.getInt32Ty());
  auto k = [&](uint32_t c) { return llvm::ConstantInt::get(i32, c); };
  Value* u = b_.CreateBitCast(f, i32);
  Value* odd = b_.CreateAnd(b_.CreateLShr(u, k(16)), k(1));
  Value* r = b_.CreateAnd(b_.CreateAdd(u, b_.CreateAdd(k(0x7fff), odd)), k(0xffff0000u));
  Value* nan = b_.CreateFCmpUNO(f, f);
  return b_.CreateSelect(nan, b_.CreateOr(b_.CreateAnd(u, k(0xffff0000u)), k(0x00400000u)), r);
}

Value* KernelEmitter::bf16_narrow(Value* f) {
  return b_.CreateTrunc(b_.CreateLShr(bf16_rounded_bits(f), llvm::ConstantInt::get(int_like(f, b_.getInt32Ty()), 16)),
                        int_like(f, b_.getInt16Ty()));
}

// ---------------------------------------------------------------- float16
// A float16 value lives in a float register the same way. The conversions
// are integer operations on the bits (loom::Half's, api/include/loom/half.h,
// lane by lane) rather than LLVM's `half` with fpext/fptrunc: without F16C
// those become calls to __extendhfsf2 / __truncsfhf2, which the JIT does not
// resolve, and the bits must not depend on the host CPU. Selects, not
// branches, so a step's lanes vectorize.
Value* KernelEmitter::f16_widen(Value* bits) {
  Type* i32 = int_like(bits, b_.getInt32Ty());
  Type* f32 = int_like(bits, b_.getFloatTy());
  auto k = [&](uint32_t c) { return llvm::ConstantInt::get(i32, c); };
  Value* h = b_.CreateZExt(bits, i32);
  Value* sign = b_.CreateShl(b_.CreateAnd(h, k(0x8000)), k(16));
  Value* e = b_.CreateAnd(h, k(0x7c00));
  Value* t = b_.CreateShl(b_.CreateAnd(h, k(0x7fff)), k(13));
  // Normal: the exponent rebiased by 112; inf and NaN: all ones; subnormal:
  // m units of 2^-24, exact as a float product.
  Value* normal = b_.CreateAdd(t, k(0x38000000));
  Value* special = b_.CreateAdd(t, k(0x70000000));
  Value* sub = b_.CreateBitCast(
      b_.CreateFMul(b_.CreateUIToFP(b_.CreateAnd(h, k(0x3ff)), f32), llvm::ConstantFP::get(f32, 5.9604644775390625e-08)), i32);
  Value* mag = b_.CreateSelect(b_.CreateICmpEQ(e, k(0x7c00)), special,
                               b_.CreateSelect(b_.CreateICmpEQ(e, k(0)), sub, normal));
  return b_.CreateBitCast(b_.CreateOr(mag, sign), f32);
}

// Round to nearest even: a NaN keeps its sign and upper payload, quieted;
// 65520 and up become inf; below 2^-14 the subnormal's units of 2^-24 are
// rounded (a carry reaches the smallest normal exactly).
Value* KernelEmitter::f16_narrow(Value* f) {
  Type* i32 = int_like(f, b_.getInt32Ty());
  auto k = [&](uint32_t c) { return llvm::ConstantInt::get(i32, c); };
  Value* u = b_.CreateBitCast(f, i32);
  Value* sign = b_.CreateAnd(b_.CreateLShr(u, k(16)), k(0x8000));
  Value* a = b_.CreateAnd(u, k(0x7fffffff));
  Value* nan = b_.CreateOr(k(0x7e00), b_.CreateAnd(b_.CreateLShr(a, k(13)), k(0x3ff)));
  Value* r = b_.CreateSub(a, k(0x38000000));
  Value* normal = b_.CreateLShr(b_.CreateAdd(b_.CreateAdd(r, k(0xfff)), b_.CreateAnd(b_.CreateLShr(r, k(13)), k(1))), k(13));
  // The shift is clamped to [14, 25] so it is defined in every lane; the
  // lanes it is clamped in take another branch (or round to 0 at 25).
  Value* shift = b_.CreateBinaryIntrinsic(
      llvm::Intrinsic::umax, b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, b_.CreateSub(k(126), b_.CreateLShr(a, k(23))), k(25)), k(14));
  Value* mant = b_.CreateOr(b_.CreateAnd(a, k(0x7fffff)), k(0x800000));
  Value* half_ulp = b_.CreateSub(b_.CreateShl(k(1), b_.CreateSub(shift, k(1))), k(1));
  Value* subnormal =
      b_.CreateLShr(b_.CreateAdd(b_.CreateAdd(mant, half_ulp), b_.CreateAnd(b_.CreateLShr(mant, shift), k(1))), shift);
  Value* mag = b_.CreateSelect(b_.CreateICmpUGT(a, k(0x7f800000)), nan,
                               b_.CreateSelect(b_.CreateICmpUGE(a, k(0x477ff000)), k(0x7c00),
                                               b_.CreateSelect(b_.CreateICmpUGE(a, k(0x38800000)), normal, subnormal)));
  return b_.CreateTrunc(b_.CreateOr(mag, sign), int_like(f, b_.getInt16Ty()));
}

Type* KernelEmitter::vec_type(ScalarType dt, int w) {
  return w == 1 ? scalar_type(dt) : static_cast<Type*>(llvm::FixedVectorType::get(scalar_type(dt), w));
}


}  // namespace loom::jit::llvm_cpu::detail
