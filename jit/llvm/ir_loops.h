// One counted loop and one software prefetch in LLVM IR, shared by the
// kernel emitter (kernel_emitter.cpp) and the GEMM tile emitter (gemm.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

namespace loom::jit::llvm_cpu {

// for (i = lo; i < hi; i += stride) body(i). The counter lives in an alloca
// of the function's entry block (promoted to a register by mem2reg); the
// blocks are named `name`_loop, `name`_body and `name`_after.
inline void for_range(llvm::IRBuilderBase& b, llvm::Function* fn, llvm::Value* lo, llvm::Value* hi, int64_t stride,
                      const std::string& name, const std::function<void(llvm::Value*)>& body) {
  llvm::LLVMContext& ctx = fn->getContext();
  llvm::IRBuilderBase::InsertPoint here = b.saveIP();
  b.SetInsertPoint(&fn->getEntryBlock(), fn->getEntryBlock().begin());
  llvm::AllocaInst* i = b.CreateAlloca(b.getInt64Ty());
  b.restoreIP(here);
  b.CreateStore(lo, i);
  auto* cond = llvm::BasicBlock::Create(ctx, name + "_loop", fn);
  auto* inner = llvm::BasicBlock::Create(ctx, name + "_body", fn);
  auto* after = llvm::BasicBlock::Create(ctx, name + "_after", fn);
  b.CreateBr(cond);
  b.SetInsertPoint(cond);
  llvm::Value* iv = b.CreateLoad(b.getInt64Ty(), i);
  b.CreateCondBr(b.CreateICmpSLT(iv, hi), inner, after);
  b.SetInsertPoint(inner);
  body(iv);
  b.CreateStore(b.CreateAdd(iv, b.getInt64(stride)), i);
  b.CreateBr(cond);
  b.SetInsertPoint(after);
}

// One llvm.prefetch of the line at `at`, for reading or writing; `locality`
// as llvm.prefetch's (3: every cache level, 2: L2 and below).
inline void prefetch(llvm::IRBuilderBase& b, llvm::Value* at, bool write, int locality) {
  b.CreateIntrinsic(llvm::Intrinsic::prefetch, {b.getPtrTy()},
                    {at, b.getInt32(write ? 1 : 0), b.getInt32(locality), b.getInt32(1)});
}

}  // namespace loom::jit::llvm_cpu
