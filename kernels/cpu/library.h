// Precompiled CPU kernels for the ops the code generator does not emit
// (ir::LibraryCall, see ir/kernel.h): integer matmul, cat, gathers and scatters,
// strided writes, copies, random numbers, linspace, sorting (argsort),
// scans (cumsum, cumprod, cummax, cummin), attention and convolution.
//
// Each kernel reads whole contiguous buffers and writes one. The semantics
// are those of the reference backend (runtime/reference/eval_move.cpp,
// eval_leaf.cpp), reimplemented here without sharing its code, because the
// reference is the oracle these kernels are tested against. Work larger than
// about 32K elements is split across cores with TBB; no kernel keeps state.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include <loom/dtype.h>

#include "ir/kernel.h"

namespace loom::kernels::cpu {

// A contiguous tensor: `shape` elements of `dtype`, row-major, at `data`.
struct View {
  void* data;
  ScalarType dtype;
  ir::Dims shape;
};

// Thrown for bad data the graph's shapes could not rule out (an index out of
// range); the caller adds the node it came from.
struct LibraryError {
  std::string message;
};

// Runs `call` on `inputs` (in call.inputs order) into `out`. `scalars` are the
// call's own runtime scalars (call.num_scalars of them, from scalar_begin).
// `out` may alias inputs[0] for ScatterStrided and ScatterAdd (in-place
// update of the base); no other aliasing is allowed.
void run_library(const ir::LibraryCall& call, std::span<const View> inputs, const View& out,
                 std::span<const ir::RtScalar> scalars);

// Attention and its two gradients (ir/ops.def: Attention, AttentionGradQ,
// AttentionGradKV), flash-style over key blocks (attention.cpp); `scale` and
// `window` (a sliding window's width) are the call's runtime scalars.
void attention(const ir::LibraryCall& call, std::span<const View> inputs, const View& out, double scale,
               int64_t window);

// Conv2d and its two gradients (ir/conv.h) as sums of small GEMMs over a
// sample and group, the input under the kernel built a band at a time (conv.cpp).
void conv(const ir::LibraryCall& call, std::span<const View> inputs, const View& out);

// [B,M,K] x [B,K,N] -> [B,M,N], all of one integer or bool dtype
// (matmul.cpp): integers in their own type with wrap-around, bool as an or
// of ands. Floating-point products are GEMM kernels (jit/llvm/gemm.h); a
// float dtype here is a LibraryError.
void matmul(const View& a, const View& b, const View& out);

}  // namespace loom::kernels::cpu
