// The layout of each CUDA library kernel's meta block: the int64 parameters that
// plan_library (library.cpp) writes and the kernels (library_kernels.cu)
// read, by position. One text for both sides: the build embeds this file
// into the NVRTC source after ir/philox.h, so host and device can never
// disagree about a position. Plain C++17, no #include (NVRTC has no std
// headers).
//
// Buffer fields hold buffer ids (indices into the kernels' `bufs`); offsets
// and strides are in elements of the buffer's dtype, never bytes. An offset
// field holds the offset itself (>= 0), or, for a view of a stored tensor
// whose offset is a run argument (ir/node.h), -(slot + 1): the offset is
// then the run's int64 scalar in that slot (element_offset).
#pragma once

#ifndef LOOM_HOST_DEVICE
#define LOOM_HOST_DEVICE
#endif

namespace loom::kernels::cuda::meta_layout {

// An offset field's elements, given the run's int64 scalars.
LOOM_HOST_DEVICE inline long long element_offset(long long field, const long long* int_scalars) {
  return field >= 0 ? field : int_scalars[-field - 1];
}
// The field for an offset of `offset` elements plus the scalar in `slot`
// (no_slot: none). A view's offset is one or the other, never both.
constexpr unsigned kNoSlot = ~0u;
LOOM_HOST_DEVICE inline long long offset_field(long long offset, unsigned slot) {
  return slot == kNoSlot ? offset : -static_cast<long long>(slot) - 1;
}

// Per-dim arrays have this many slots: ir::kMaxDims.
constexpr int kMaxRank = 8;

// err[0] after a kernel met bad data; err[1] is then the failing node.
constexpr long long kIndexOutOfRange = 2;

// loom_copy_2d: rows x cols elements, each row contiguous:
//   dst[dst_offset + r * dst_row_stride + c] = src[src_offset + r * src_row_stride + c].
// Does nothing when dst and src are one address (an update of its own base).
namespace copy2d {
enum : int { kDst, kDstOffset, kDstRowStride, kSrc, kSrcOffset, kSrcRowStride, kRows, kCols, kElementSize, kCount };
}

// loom_index_select: x viewed as [outer, dim_size, inner], the 1-D int64
// index of num_indices entries; out is [outer, num_indices, inner].
namespace index_select {
enum : int { kOut, kX, kXOffset, kIndex, kIndexOffset, kOuter, kDimSize, kInner, kNumIndices, kElementSize, kNode,
             kCount };
}

// loom_gather (out[i] = x[...]) and loom_scatter_add_<dtype>
// (out[...] += src[i], after a copy_2d of x into out): one thread per
// element of the int64 index, whose shape (rank dims) is the iteration
// space. x_strides are x's row-major strides, src_strides src's; dim_size =
// x's size along `dim`, the bound every index value is checked against.
// loom_scatter_reduce_<dtype> reads the same fields plus `reduce` (an
// ir::ScatterKind), with one thread per fiber along `dim` instead.
namespace gather_scatter {
enum : int {
  kOut, kX, kXOffset, kIndex, kIndexOffset, kSrc, kSrcOffset, kElementSize, kNode,
  kRank, kDim, kDimSize, kNumel, kReduce,
  kIndexShape,
  kXStrides = kIndexShape + kMaxRank,
  kSrcStrides = kXStrides + kMaxRank,
  kCount = kSrcStrides + kMaxRank
};
}

// loom_check_index: only checks num_indices int64 values against dim_size.
// For index_select and scatter_add with an empty output, where the main
// kernel has nothing to visit but the reference still checks every index.
namespace check_index {
enum : int { kIndex, kIndexOffset, kNumIndices, kDimSize, kNode, kCount };
}

// loom_scatter_strided: out[view_offset + sum_d coord_d * strides[d]] =
// value[i] for every element i (coordinates in `sizes`, row-major), after a
// copy_2d of the base into out. Launched as one thread when the view
// overlaps itself, so the last write in row-major order wins.
namespace scatter_strided {
enum : int {
  kOut, kValue, kValueOffset, kElementSize, kRank, kViewOffset, kNumel,
  kSizes,
  kStrides = kSizes + kMaxRank,
  kCount = kStrides + kMaxRank
};
}

// loom_matmul_<dtype>: [batch, m, k] x [batch, k, n] -> [batch, m, n],
// blocks of kTile x kTile threads, one output tile per block.
namespace matmul {
constexpr int kTile = 16;
enum : int { kOut, kA, kAOffset, kB, kBOffset, kBatch, kM, kN, kK, kCount };
}

// loom_argsort_<dtype of x>: the int64 positions of a stable sort of each
// of the `rows` rows of x (viewed as [outer, len, inner]: a row is `len`
// elements `inner` apart, row r starting at r / inner * len * inner +
// r % inner), written into out at the same places. One block per row: a
// row of at most kTile elements is sorted in shared memory, a longer one in
// place in out (the same network over global memory).
namespace argsort {
constexpr int kTile = 2048;
enum : int { kOut, kX, kXOffset, kLen, kInner, kRows, kDescending, kCount };
}

// loom_scan_<dtype of x>: the inclusive scan of each of the `rows` rows of
// x (laid out as argsort's) into out at the same places; kind is an
// ir::ScanKind (0 sum, 1 product: out in x's dtype; 2 argmax, 3 argmin:
// int64 positions). One thread per row, walking it in order.
namespace scan {
enum : int { kOut, kX, kXOffset, kLen, kInner, kRows, kKind, kCount };
enum : int { kSum = 0, kProd = 1, kArgMax = 2, kArgMin = 3 };
}

// loom_attention_{fwd,grad_q,grad_kv}_bf16_d<D>_{none,causal}
// (kernels/cuda/attention_entry.cu): Attention and its gradients for
// bfloat16 q, k, v of N = batch * heads rows of L queries and S keys, head
// dim D = Dv. fwd reads q, k, v and writes the float32 value (out [N,L,D],
// then the logsumexps [N,L]); grad_q and grad_kv also read dout (bfloat16),
// the logsumexps and delta (float32 [N,L]) and write dq [N,L,D] or
// [N,S,2D] (dk, then dv) in float32. The scale is the double runtime scalar
// at kScalarBegin, a sliding window's width the int64 one after it. Grid, block and shared memory: launch_* below, which the
// kernels' tile sizes are written against.
namespace attention {
enum : int {
  kOut, kQ, kQOffset, kK, kKOffset, kV, kVOffset, kDout, kDoutOffset, kLse, kLseOffset, kDelta, kDeltaOffset,
  kN, kL, kS, kScalarBegin,
  kMask, kMaskOffset, kMaskPlanes, kMaskRows, kMaskDivisor,  // the bool mask tensor [P, R, S] (ir::AttentionMaskPlanes)
  kCount
};
// Rows per block (query rows for fwd and grad_q, keys for grad_kv),
// threads and dynamic shared memory per block, by head dim D: the tiles of
// LoomAttnFwd (8 warps), LoomAttnBwdKV and LoomAttnBwdQ (4 warps each);
// attention_library.cu checks them against the kernels' own enums.
constexpr int kFwdRows = 128, kFwdThreads = 256, kBwdRows = 64, kBwdThreads = 128;
LOOM_HOST_DEVICE constexpr int fwd_shared_bytes(int d) { return 2 * (128 * (d + 8) + 4 * 64 * (d + 8)); }
LOOM_HOST_DEVICE constexpr int grad_kv_shared_bytes(int d) { return 2 * (2 * 64 * (d + 8) + 4 * 64 * (d + 8)) + 4 * 4 * 64; }
LOOM_HOST_DEVICE constexpr int grad_q_shared_bytes(int d) { return 2 * (2 * 64 * (d + 8) + 4 * 64 * (d + 8)); }
}  // namespace attention

// loom_conv2d_{fwd,grad_input,grad_weight}_{f32,f64,bf16,f16}
// (kernels/cuda/conv.cu): Conv2d and its two gradients (ir/ops.def) as
// implicit GEMMs: the operands are read where they lie in x, w and dout,
// never copied into an im2col buffer. Tensors are whole contiguous buffers
// of the call's dtype: x [N,C,H,W], w [O,C/G,KH,KW], dout [N,O,OH,OW].
//   fwd:         a = x, b = w        -> out [N,O,OH,OW] in the dtype
//   grad_input:  a = dout, b = w     -> out [N,C,H,W] in the dtype
//   grad_weight: a = x, b = dout     -> out [S,O,C/G,KH,KW] in float32
//                (float64 for f64): split s sums the samples
//                n in [s*N/S, (s+1)*N/S) (integer division)
// Sums are float32 (float64 for f64); bfloat16 and float16 run on the tensor
// cores and round once. Every kernel: block kThreads, grid (ceil(M/kTileM),
// ceil(cols/kTileN), G*S) with z = g + G*s (S = 1 but for grad_weight), where
//   fwd:         M = N*OH*OW,       cols = O/G, K = (C/G)*KH*KW
//   grad_input:  M = N*H*W,         cols = C/G, K = (O/G)*KH*KW
//   grad_weight: M = (C/G)*KH*KW,   cols = O/G, K = (samples of the split)*OH*OW
namespace conv {
enum : int {
  kOut, kA, kAOffset, kB, kBOffset,
  kN, kC, kH, kW, kO, kOH, kOW, kKH, kKW, kStrideH, kStrideW, kPadH, kPadW, kDilH, kDilW, kGroups, kSplits, kCount
};
constexpr int kTileM = 128, kTileN = 64, kThreads = 256;
// The kernels index within one sample of x or dout (C*H*W, O*OH*OW
// elements) and within the weight in 32 bits: each must stay below this.
constexpr long long kMaxPerSample = 2147483647LL;
// How many sample splits (1..most) a weight gradient takes: the count that
// finishes soonest by a model of the kernel. Its blocks (`tiles` output
// tiles a split, times the splits) run in waves of `slots` (the blocks
// resident at once), a wave as long as its largest split, each of whose
// samples costs `positions` output positions at kNsPerPosition; every
// split writes `partial_bytes` of partial gradient that the sum reads back,
// at kPartialBytesPerNs. A count whose last wave holds a block or two
// doubles the time (ResNet-18's 64-channel 3x3 layer on an H200: 53
// splits of 5 tiles, 265 blocks for 264 slots, 0.196 ms). The constants
// are an H200's (bfloat16, 128 x 64 tiles); only the choice, never a
// result, depends on them.
constexpr double kNsPerPosition = 38, kPartialBytesPerNs = 3000;
LOOM_HOST_DEVICE inline long long weight_splits(long long n, long long most, long long tiles, long long positions,
                                                double partial_bytes, long long slots) {
  long long best = 1;
  double best_ns = 0;
  for (long long s = 1; s <= most && s <= n; ++s) {
    const long long waves = (tiles * s + slots - 1) / slots, per_split = (n + s - 1) / s;
    const double ns = (double)(waves * per_split) * (double)positions * kNsPerPosition +
                      (double)s * 2.0 * partial_bytes / kPartialBytesPerNs;
    if (s == 1 || ns < best_ns) best = s, best_ns = ns;
  }
  return best;
}
}  // namespace conv

// loom_linspace_<dtype>, loom_rand_uniform_<dtype>, loom_rand_normal_<dtype>:
// numel elements of out from the call's two runtime scalars at
// scalar_begin (linspace: start, end; rand: seed, offset).
namespace leaf {
enum : int { kOut, kNumel, kScalarBegin, kCount };
}

}  // namespace loom::kernels::cuda::meta_layout
