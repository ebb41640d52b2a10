// plan_library: which kernels of library_kernels.cu compute a LibraryCall,
// with what grid and what meta. Mirrors kernels/cpu/library.cpp's
// run_library op by op; every decision here (grid sizes, the overlap check)
// is host arithmetic, testable without a GPU.
#include "kernels/cuda/library.h"

#include <loom/error.h>

#include <algorithm>
#include <array>
#include <utility>

#include "ir/conv.h"
#include "kernels/cuda/meta_layout.h"

namespace loom::kernels::cuda {

namespace detail {
// The embedded text of ir/philox.h, meta_layout.h and library_kernels.cu,
// written at build time by embed_source.cmake.
extern const char kLibrarySource[];
extern const char kAttentionSource[];
extern const char kConvSource[];
}  // namespace detail

const std::string& library_source() {
  static const std::string source(detail::kLibrarySource);
  return source;
}

const std::string& attention_source() {
  static const std::string source(detail::kAttentionSource);
  return source;
}

const std::string& attention_f16_source() {
  static const std::string source = std::string("#define LOOM_ATTENTION_F16 1\n") + detail::kAttentionSource;
  return source;
}

std::string library_function_source(const std::string& name) {
  static const char* const fixed[][2] = {{"loom_copy_2d", "LOOM_LIBRARY_COPY_2D"},
                                         {"loom_index_select", "LOOM_LIBRARY_INDEX_SELECT"},
                                         {"loom_gather", "LOOM_LIBRARY_GATHER"},
                                         {"loom_check_index", "LOOM_LIBRARY_CHECK_INDEX"},
                                         {"loom_scatter_strided", "LOOM_LIBRARY_SCATTER_STRIDED"}};
  // loom_<op>_<suffix> (library_kernels.cu's entry points): every dtype has
  // the first five ops, the full-width ones (the first five suffixes) all.
  static const char* const ops[][2] = {{"scatter_add", "SCATTER_ADD"}, {"scatter_reduce", "SCATTER_REDUCE"},
                                       {"linspace", "LINSPACE"},       {"argsort", "ARGSORT"},
                                       {"scan", "SCAN"},               {"matmul", "MATMUL"},
                                       {"rand_uniform", "RAND_UNIFORM"}, {"rand_normal", "RAND_NORMAL"}};
  static const char* const types[][2] = {{"b8", "unsigned char"}, {"i32", "int"},         {"i64", "long long"},
                                         {"f32", "float"},        {"f64", "double"},      {"bf16", "device::Bf16"},
                                         {"f16", "device::F16"}};
  std::string entry;
  for (const auto& f : fixed)
    if (name == f[0]) entry = f[1];
  for (size_t o = 0; o < std::size(ops) && entry.empty(); ++o)
    for (size_t t = 0; t < std::size(types) && entry.empty(); ++t)
      if ((o < 5 || t < 5) && name == std::string("loom_") + ops[o][0] + "_" + types[t][0])
        entry = std::string("LOOM_LIBRARY_") + ops[o][1] + "(" + types[t][0] + ", " + types[t][1] + ")";
  if (entry.empty()) throw Error("loom: no CUDA library kernel is called " + name);
  return "#define LOOM_LIBRARY_ENTRY " + entry + "\n" + library_source();
}

std::string conv_function_source(const std::string& name) {
  static const char* const ops[][2] = {
      {"fwd", "kLoomConvFwd"}, {"grad_input", "kLoomConvGradInput"}, {"grad_weight", "kLoomConvGradWeight"}};
  static const char* const types[][3] = {
      {"f32", "LoomConvF32", "1"}, {"f64", "LoomConvF64", "1"}, {"bf16", "LoomConvBf16", "2"}, {"f16", "LoomConvF16", "2"}};
  for (const auto& op : ops)
    for (const auto& t : types)
      if (name == std::string("loom_conv2d_") + op[0] + "_" + t[0])
        return std::string("#define LOOM_CONV_ONLY LOOM_CONV_ENTRY(") + op[0] + ", " + t[0] + ", " + t[1] + ", " + t[2] +
               ", " + op[1] + ")\n" + conv_source();
  throw Error("loom: no CUDA convolution kernel is called " + name);
}

std::string function_source(const std::string& name) {
  if (name.rfind("loom_attention_", 0) == 0) return attention_function_source(name);
  if (name.rfind("loom_conv2d_", 0) == 0) return conv_function_source(name);
  return library_function_source(name);
}

std::string attention_function_source(const std::string& name) {
  // loom_attention_<kind>_<dtype>_d<D>_<mask>, as attention() below names them.
  static const char* const kinds[][2] = {
      {"fwd", "FWD"}, {"grad_q", "GRAD_Q"}, {"grad_kv", "GRAD_KV"}};
  static const char* const masks[][2] = {{"none", "LoomAttnNoMask"},
                                         {"causal", "LoomAttnCausal"},
                                         {"window", "LoomAttnWindow"},
                                         {"tensor", "LoomAttnPlanes<LoomAttnNoMask>"}};
  const std::string prefix = "loom_attention_";
  for (const auto& kind : kinds)
    for (const char* dtype : {"bf16", "f16"})
      for (const char* d : {"32", "64", "128"})
        for (const auto& mask : masks) {
          const std::string entry = std::string(kind[0]) + "_" + dtype + "_d" + d + "_" + mask[0];
          if (name != prefix + entry) continue;
          const bool f16 = std::string(dtype) == "f16";
          return std::string(f16 ? "#define LOOM_ATTENTION_F16 1\n" : "") + "#define LOOM_ATTENTION_ENTRY LOOM_ATTENTION_LIBRARY_" +
                 kind[1] + "(" + d + ", " + mask[0] + ", " + mask[1] + ", LOOM_ATTENTION_DT, LOOM_ATTENTION_IS_F16)\n" +
                 detail::kAttentionSource;
        }
  throw Error("loom: no CUDA attention kernel is called " + name);
}

const std::string& conv_source() {
  static const std::string source(detail::kConvSource);
  return source;
}

namespace {

namespace ml = meta_layout;
using ir::Op;

// Threads per block of the one-thread-per-element kernels.
constexpr uint32_t kThreads = 256;
// Enough blocks to fill any current GPU several times over; beyond this the
// kernels' grid-stride loops take the rest.
constexpr int64_t kMaxBlocks = 8192;
constexpr int64_t kMaxGridX = 2147483647;  // a grid's x extent
// CUDA's bound on grid.y and grid.z; matmul's grid.x uses it too (any
// bound is correct, the kernel loops over the tiles beyond it).
constexpr int64_t kMaxGrid = 65535;

[[noreturn]] void fail(const ir::LibraryCall& call, uint32_t call_index, const std::string& what) {
  throw Error("cuda library call #" + std::to_string(call_index) + " (" + ir::op_name(call.op) + ", node %" +
              std::to_string(call.node) + "): " + what);
}

int64_t prod(const ir::Dims& s, int from, int to) {
  int64_t p = 1;
  for (int d = from; d < to; ++d) p *= s[d];
  return p;
}

const char* dtype_suffix(ScalarType t) {
  switch (t) {
    case ScalarType::Bool: return "b8";
    case ScalarType::Int: return "i32";
    case ScalarType::Long: return "i64";
    case ScalarType::Float: return "f32";
    case ScalarType::Double: return "f64";
    case ScalarType::BFloat16: return "bf16";
    case ScalarType::Half: return "f16";
    case ScalarType::Byte: return "u8";
    case ScalarType::Char: return "i8";
    case ScalarType::Short: return "i16";
  }
  return "?";
}
// The suffix of a typed library kernel for the call's dtype. bfloat16 and
// float16 have scatter_add, scatter_reduce and linspace only (and argsort
// and scan by their input's dtype): their products are GEMM kernels and
// their random numbers are generated in place, so any other call is a
// planning error, reported as one rather than as a missing symbol. uint8,
// int8 and int16 have no typed library kernel on the GPU yet (an integer
// product, scatter_add, scatter_reduce, linspace, argsort or scan of them):
// reported the same way.
std::string typed_suffix(const ir::LibraryCall& call) {
  const bool half_float = call.dtype == ScalarType::BFloat16 || call.dtype == ScalarType::Half;
  const bool narrow_int = call.dtype == ScalarType::Byte || call.dtype == ScalarType::Char || call.dtype == ScalarType::Short;
  if ((half_float && call.op != Op::ScatterAdd && call.op != Op::ScatterReduce && call.op != Op::Linspace) || narrow_int)
    throw Error(std::string("cuda library: ") + ir::op_name(call.op) + " (node %" + std::to_string(call.node) +
                ") has no " + std::string(to_string(call.dtype)) + " library kernel on the GPU");
  return dtype_suffix(call.dtype);
}

// The suffix of argsort's and scan's kernels: their input's dtype. uint8,
// int8 and int16 have none on the GPU yet: a planning error naming them.
std::string input_suffix(const ir::LibraryCall& call) {
  const ScalarType t = call.input_dtypes[0];
  if (t == ScalarType::Byte || t == ScalarType::Char || t == ScalarType::Short)
    throw Error(std::string("cuda library: ") + ir::op_name(call.op) + " (node %" + std::to_string(call.node) +
                ") has no " + std::string(to_string(t)) + " library kernel on the GPU");
  return dtype_suffix(t);
}

// Input i's offset field (meta_layout.h): its offset, or its runtime scalar.
int64_t input_offset_field(const ir::LibraryCall& call, size_t i) {
  return ml::offset_field(call.input_offsets[i], call.input_offset_scalar(i));
}

// One thread per item, kThreads per block, at most kMaxBlocks blocks.
Launch per_element(std::string function, int64_t items, std::vector<int64_t> meta) {
  Launch l;
  l.function = std::move(function);
  l.grid[0] = static_cast<uint32_t>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
  l.block[0] = kThreads;
  l.meta = std::move(meta);
  return l;
}

// rows x cols elements from src (row stride src_stride) to dst (row stride
// dst_stride); offsets and strides in elements.
Launch copy_2d(uint32_t dst, int64_t dst_offset, int64_t dst_stride, uint32_t src, int64_t src_offset,
               int64_t src_stride, int64_t rows, int64_t cols, size_t element_size) {
  std::vector<int64_t> m(ml::copy2d::kCount);
  m[ml::copy2d::kDst] = dst;
  m[ml::copy2d::kDstOffset] = dst_offset;
  m[ml::copy2d::kDstRowStride] = dst_stride;
  m[ml::copy2d::kSrc] = src;
  m[ml::copy2d::kSrcOffset] = src_offset;
  m[ml::copy2d::kSrcRowStride] = src_stride;
  m[ml::copy2d::kRows] = rows;
  m[ml::copy2d::kCols] = cols;
  m[ml::copy2d::kElementSize] = static_cast<int64_t>(element_size);
  return per_element("loom_copy_2d", rows * cols, std::move(m));
}

// A contiguous copy of n elements: out = input `i` of the call.
Launch copy_input(const ir::LibraryCall& call, size_t i, int64_t n) {
  return copy_2d(call.output, 0, n, call.inputs[i], input_offset_field(call, i), n, 1, n, element_size(call.dtype));
}

Launch matmul(const ir::LibraryCall& call, uint32_t call_index) {
  // [B,M,K] x [B,K,N], or a plain [M,K] x [K,N] (batch 1).
  auto batched = [](const ir::Dims& d) {
    if (d.n != 2) return d;
    const int64_t v[3] = {1, d[0], d[1]};
    return ir::Dims(v, 3);
  };
  const ir::Dims as = batched(call.input_shapes[0]);
  const ir::Dims bs = batched(call.input_shapes[1]);
  if (as.n != 3 || bs.n != 3 || as[0] != bs[0] || as[2] != bs[1])
    fail(call, call_index, "expects [B,M,K] x [B,K,N] or [M,K] x [K,N]");
  const int64_t batch = as[0], M = as[1], K = as[2], N = bs[2];
  std::vector<int64_t> m(ml::matmul::kCount);
  m[ml::matmul::kOut] = call.output;
  m[ml::matmul::kA] = call.inputs[0];
  m[ml::matmul::kAOffset] = input_offset_field(call, 0);
  m[ml::matmul::kB] = call.inputs[1];
  m[ml::matmul::kBOffset] = input_offset_field(call, 1);
  m[ml::matmul::kBatch] = batch;
  m[ml::matmul::kM] = M;
  m[ml::matmul::kN] = N;
  m[ml::matmul::kK] = K;
  constexpr int64_t tile = ml::matmul::kTile;
  Launch l;
  l.function = std::string("loom_matmul_") + typed_suffix(call);
  l.grid[0] = static_cast<uint32_t>(std::min<int64_t>((N + tile - 1) / tile, kMaxGrid));
  l.grid[1] = static_cast<uint32_t>(std::min<int64_t>((M + tile - 1) / tile, kMaxGrid));
  l.grid[2] = static_cast<uint32_t>(std::min<int64_t>(batch, kMaxGrid));
  l.block[0] = l.block[1] = tile;
  l.meta = std::move(m);
  return l;
}

Launch index_select(const ir::LibraryCall& call) {
  const ir::Dims& xs = call.input_shapes[0];
  const int dim = static_cast<int>(call.attr[0]);
  std::vector<int64_t> m(ml::index_select::kCount);
  m[ml::index_select::kOut] = call.output;
  m[ml::index_select::kX] = call.inputs[0];
  m[ml::index_select::kXOffset] = input_offset_field(call, 0);
  m[ml::index_select::kIndex] = call.inputs[1];
  m[ml::index_select::kIndexOffset] = input_offset_field(call, 1);
  m[ml::index_select::kOuter] = prod(xs, 0, dim);
  m[ml::index_select::kDimSize] = xs[dim];
  m[ml::index_select::kInner] = prod(xs, dim + 1, xs.n);
  m[ml::index_select::kNumIndices] = call.input_shapes[1].numel();
  m[ml::index_select::kElementSize] = static_cast<int64_t>(element_size(call.dtype));
  m[ml::index_select::kNode] = call.node;
  return per_element("loom_index_select", call.shape.numel(), std::move(m));
}

// Gather reads x; ScatterAdd and ScatterReduce update out (already a copy
// of x) from src, ScatterReduce with one thread per fiber along dim.
Launch gather_scatter(const ir::LibraryCall& call, bool scatter) {
  const ir::Dims& xs = call.input_shapes[0];
  const ir::Dims& is = call.input_shapes[1];
  const ir::Dims x_strides = ir::contiguous_strides(xs);
  const ir::Dims src_strides = scatter ? ir::contiguous_strides(call.input_shapes[2]) : ir::Dims{};
  const int dim = static_cast<int>(call.attr[0]);
  std::vector<int64_t> m(ml::gather_scatter::kCount);
  m[ml::gather_scatter::kOut] = call.output;
  m[ml::gather_scatter::kX] = call.inputs[0];
  m[ml::gather_scatter::kXOffset] = input_offset_field(call, 0);
  m[ml::gather_scatter::kIndex] = call.inputs[1];
  m[ml::gather_scatter::kIndexOffset] = input_offset_field(call, 1);
  m[ml::gather_scatter::kSrc] = scatter ? call.inputs[2] : 0;
  m[ml::gather_scatter::kSrcOffset] = scatter ? input_offset_field(call, 2) : 0;
  m[ml::gather_scatter::kElementSize] = static_cast<int64_t>(element_size(call.dtype));
  m[ml::gather_scatter::kNode] = call.node;
  m[ml::gather_scatter::kRank] = is.n;
  m[ml::gather_scatter::kDim] = dim;
  m[ml::gather_scatter::kDimSize] = is.n > 0 ? xs[dim] : 1;
  m[ml::gather_scatter::kNumel] = is.numel();
  m[ml::gather_scatter::kReduce] = call.op == Op::ScatterReduce ? call.attr[1] : 0;
  for (int d = 0; d < is.n; ++d) {
    m[ml::gather_scatter::kIndexShape + d] = is[d];
    m[ml::gather_scatter::kXStrides + d] = x_strides[d];
    m[ml::gather_scatter::kSrcStrides + d] = scatter ? src_strides[d] : 0;
  }
  if (call.op == Op::ScatterReduce) {
    const int64_t fibers = is.n > 0 && is[dim] > 0 ? is.numel() / is[dim] : is.numel();
    return per_element(std::string("loom_scatter_reduce_") + typed_suffix(call), fibers, std::move(m));
  }
  const std::string function = scatter ? std::string("loom_scatter_add_") + typed_suffix(call) : "loom_gather";
  return per_element(function, is.numel(), std::move(m));
}

// The value's writes, after the base was copied; one thread when the view
// overlaps itself, so the last write in row-major order wins.
Launch scatter_strided(const ir::LibraryCall& call) {
  const ir::Dims& vs = call.input_shapes[1];
  const int nd = vs.n;
  std::vector<int64_t> m(ml::scatter_strided::kCount);
  m[ml::scatter_strided::kOut] = call.output;
  m[ml::scatter_strided::kValue] = call.inputs[1];
  m[ml::scatter_strided::kValueOffset] = input_offset_field(call, 1);
  m[ml::scatter_strided::kElementSize] = static_cast<int64_t>(element_size(call.dtype));
  m[ml::scatter_strided::kRank] = nd;
  // The view's offset: its last attribute, or the call's runtime scalar (ir/node.h).
  m[ml::scatter_strided::kViewOffset] =
      call.num_scalars == 1 ? ml::offset_field(0, call.scalar_begin) : call.attr[nd];
  m[ml::scatter_strided::kNumel] = vs.numel();
  for (int d = 0; d < nd; ++d) {
    m[ml::scatter_strided::kSizes + d] = vs[d];
    m[ml::scatter_strided::kStrides + d] = call.attr[d];
  }
  if (ir::never_overlaps(vs, call.attr.data())) return per_element("loom_scatter_strided", vs.numel(), std::move(m));
  Launch one_thread;
  one_thread.function = "loom_scatter_strided";
  one_thread.meta = std::move(m);
  return one_thread;
}

// The rows along attr[0] of input 0 (a 0-d input is one row of one), and
// the meta fields argsort and scan share (the first six of both layouts).
struct Rows {
  int64_t len, inner, rows;
};
static_assert(ml::argsort::kOut == ml::scan::kOut && ml::argsort::kX == ml::scan::kX &&
              ml::argsort::kXOffset == ml::scan::kXOffset && ml::argsort::kLen == ml::scan::kLen &&
              ml::argsort::kInner == ml::scan::kInner && ml::argsort::kRows == ml::scan::kRows);
std::vector<int64_t> row_meta(const ir::LibraryCall& call, int count, Rows* r) {
  const ir::Dims& xs = call.input_shapes[0];
  const int dim = static_cast<int>(call.attr[0]);
  r->len = xs.n == 0 ? 1 : xs[dim];
  r->inner = xs.n == 0 ? 1 : prod(xs, dim + 1, xs.n);
  r->rows = xs.n == 0 ? 1 : prod(xs, 0, dim) * r->inner;
  std::vector<int64_t> m(static_cast<size_t>(count));
  m[ml::scan::kOut] = call.output;
  m[ml::scan::kX] = call.inputs[0];
  m[ml::scan::kXOffset] = input_offset_field(call, 0);
  m[ml::scan::kLen] = r->len;
  m[ml::scan::kInner] = r->inner;
  m[ml::scan::kRows] = r->rows;
  return m;
}

// One block per row (meta_layout.h argsort). A row that fits the shared
// tile gets a block of about one thread per comparator; a longer row, whose
// network runs over global memory, the largest block.
Launch argsort(const ir::LibraryCall& call) {
  Rows r;
  std::vector<int64_t> m = row_meta(call, ml::argsort::kCount, &r);
  const int64_t len = r.len, rows = r.rows;
  m[ml::argsort::kDescending] = call.attr[1] != 0;
  int64_t padded = 1;
  while (padded < len) padded *= 2;
  Launch l;
  l.function = std::string("loom_argsort_") + input_suffix(call);
  l.grid[0] = static_cast<uint32_t>(std::clamp<int64_t>(rows, 1, kMaxBlocks));
  l.block[0] = len <= ml::argsort::kTile ? static_cast<uint32_t>(std::clamp<int64_t>(padded / 2, 32, 256)) : 1024;
  l.meta = std::move(m);
  return l;
}

// One thread per row, walking it in order: the CPU's order of operations,
// so sums and products equal its bits. (A row's elements are `inner`
// apart, so neighbouring threads read neighbouring elements when inner > 1.)
Launch scan(const ir::LibraryCall& call) {
  Rows r;
  std::vector<int64_t> m = row_meta(call, ml::scan::kCount, &r);
  m[ml::scan::kKind] = call.attr[1];
  return per_element(std::string("loom_scan_") + input_suffix(call), r.rows, std::move(m));
}

// Attention and its gradients: the tensor-core kernels of attention.cu for
// bfloat16 or float16 with D = Dv of 32, 64 or 128 (the API takes the fused op on a
// GPU only then; anything else is a planning error naming what it got),
// with the mask as code or as a bool tensor (not both: the API never makes
// that pair).
// N (batch * heads) rows of blocks; grad_kv's blocks run over keys.
Launch attention(const ir::LibraryCall& call, uint32_t call_index) {
  namespace ma = ml::attention;
  const ir::Dims& q = call.input_shapes[0];
  const ir::Dims& k = call.input_shapes[1];
  const ir::Dims& v = call.input_shapes[2];
  const int64_t n = q[0], l = q[1], s = k[1], d = q[2];
  const ScalarType t = call.input_dtypes[0];
  if ((t != ScalarType::BFloat16 && t != ScalarType::Half) || v[2] != d || (d != 32 && d != 64 && d != 128))
    fail(call, call_index,
         "has tensor-core kernels for bfloat16 or float16 q, k, v with equal head dims of 32, 64 or 128, got " +
                               std::string(to_string(call.input_dtypes[0])) + " with head dims " + std::to_string(d) +
                               " and " + std::to_string(v[2]));
  const auto mask = static_cast<ir::AttentionMask>(call.attr[0]);
  const bool tensor = call.attr[ir::kAttentionMaskDivisorAttr] > 0;
  if (tensor && mask != ir::AttentionMask::None)
    fail(call, call_index, "has kernels for a mask tensor or a mask as code, not both");
  const char* mask_name = tensor                                     ? "tensor"
                          : mask == ir::AttentionMask::Causal        ? "causal"
                          : mask == ir::AttentionMask::SlidingWindow ? "window"
                                                                     : "none";
  std::vector<int64_t> m(ma::kCount, 0);
  m[ma::kOut] = call.output;
  const int fields[][2] = {{ma::kQ, ma::kQOffset}, {ma::kK, ma::kKOffset}, {ma::kV, ma::kVOffset},
                           {ma::kDout, ma::kDoutOffset}, {ma::kLse, ma::kLseOffset}, {ma::kDelta, ma::kDeltaOffset}};
  const size_t first_mask = ir::attention_mask_input(call.op == Op::Attention);
  for (size_t i = 0; i < first_mask; ++i) {
    m[fields[i][0]] = call.inputs[i];
    m[fields[i][1]] = input_offset_field(call, i);
  }
  if (tensor) {
    const ir::Dims& p = call.input_shapes[first_mask];
    if (call.input_dtypes[first_mask] != ScalarType::Bool || p.n != 3 || p[0] < 1 || (p[1] != 1 && p[1] != l) ||
        p[2] != s)
      fail(call, call_index, "expects its mask tensor as bool [P, 1 or L, S]");
    m[ma::kMask] = call.inputs[first_mask], m[ma::kMaskOffset] = input_offset_field(call, first_mask);
    m[ma::kMaskPlanes] = p[0], m[ma::kMaskRows] = p[1], m[ma::kMaskDivisor] = call.attr[ir::kAttentionMaskDivisorAttr];
  }
  m[ma::kN] = n, m[ma::kL] = l, m[ma::kS] = s, m[ma::kScalarBegin] = call.scalar_begin;
  Launch launch;
  const std::string suffix =
      std::string(t == ScalarType::Half ? "_f16_d" : "_bf16_d") + std::to_string(d) + "_" + mask_name;
  const int di = static_cast<int>(d);
  if (call.op == Op::Attention) {
    launch.function = "loom_attention_fwd" + suffix;
    launch.grid[1] = static_cast<uint32_t>((l + ma::kFwdRows - 1) / ma::kFwdRows);
    launch.block[0] = ma::kFwdThreads;
    launch.shared_bytes = static_cast<uint32_t>(ma::fwd_shared_bytes(di));
  } else {
    const bool grad_q = call.op == Op::AttentionGradQ;
    launch.function = std::string(grad_q ? "loom_attention_grad_q" : "loom_attention_grad_kv") + suffix;
    launch.grid[1] = static_cast<uint32_t>(((grad_q ? l : s) + ma::kBwdRows - 1) / ma::kBwdRows);
    launch.block[0] = ma::kBwdThreads;
    launch.shared_bytes = static_cast<uint32_t>(grad_q ? ma::grad_q_shared_bytes(di) : ma::grad_kv_shared_bytes(di));
  }
  if (n > kMaxGridX || launch.grid[1] > 65535u)
    fail(call, call_index, "is too large for one launch (" + std::to_string(n) + " heads of " + std::to_string(l) + " rows)");
  launch.grid[0] = static_cast<uint32_t>(n);
  launch.meta = std::move(m);
  return launch;
}

// Conv2d and its gradients: the implicit-GEMM kernels of conv.cu, one per
// op and floating dtype; the GEMM's rows and columns (ir/conv.h, meta_layout.h)
// in tiles, groups * splits along z.
Launch conv(const ir::LibraryCall& call, uint32_t call_index) {
  namespace mc = ml::conv;
  ir::ConvGeometry g;
  const std::string why = ir::conv_geometry(call.op, call.input_shapes[0], call.input_shapes[1], call.shape, call.attr, &g);
  if (!why.empty()) fail(call, call_index, why);
  const ScalarType t = call.input_dtypes[0];
  if (!is_floating_point(t) || call.input_dtypes[1] != t)
    fail(call, call_index, "has kernels for two inputs of one floating dtype, got " + std::string(to_string(t)) + " and " +
                               std::string(to_string(call.input_dtypes[1])));
  if (g.c * g.h * g.w >= mc::kMaxPerSample || g.o * g.oh * g.ow >= mc::kMaxPerSample ||
      g.o * g.cg() * g.kh * g.kw >= mc::kMaxPerSample)
    fail(call, call_index, "has a sample or weight of 2^31 elements or more, past the kernels' 32-bit offsets");
  std::vector<int64_t> m(mc::kCount, 0);
  m[mc::kOut] = call.output;
  m[mc::kA] = call.inputs[0], m[mc::kAOffset] = input_offset_field(call, 0);
  m[mc::kB] = call.inputs[1], m[mc::kBOffset] = input_offset_field(call, 1);
  m[mc::kN] = g.n, m[mc::kC] = g.c, m[mc::kH] = g.h, m[mc::kW] = g.w, m[mc::kO] = g.o, m[mc::kOH] = g.oh,
  m[mc::kOW] = g.ow, m[mc::kKH] = g.kh, m[mc::kKW] = g.kw;
  m[mc::kStrideH] = g.stride_h, m[mc::kStrideW] = g.stride_w, m[mc::kPadH] = g.pad_h, m[mc::kPadW] = g.pad_w;
  m[mc::kDilH] = g.dil_h, m[mc::kDilW] = g.dil_w, m[mc::kGroups] = g.groups, m[mc::kSplits] = g.splits;
  const char* kind = call.op == Op::Conv2d ? "fwd" : call.op == Op::Conv2dGradInput ? "grad_input" : "grad_weight";
  const int64_t rows = call.op == Op::Conv2d            ? g.n * g.oh * g.ow
                       : call.op == Op::Conv2dGradInput ? g.n * g.h * g.w
                                                        : g.cg() * g.kh * g.kw;
  const int64_t cols = call.op == Op::Conv2dGradInput ? g.cg() : g.og();
  const int64_t tiles_m = (rows + mc::kTileM - 1) / mc::kTileM, tiles_n = (cols + mc::kTileN - 1) / mc::kTileN;
  if (tiles_m > kMaxGridX || tiles_n > 65535 || g.groups * g.splits > 65535)
    fail(call, call_index, "is too large for one launch (" + std::to_string(rows) + " x " + std::to_string(cols) +
                               " outputs in " + std::to_string(g.groups * g.splits) + " groups and splits)");
  Launch l;
  l.function = std::string("loom_conv2d_") + kind + "_" +
               (t == ScalarType::BFloat16 ? "bf16" : t == ScalarType::Half ? "f16" : t == ScalarType::Double ? "f64" : "f32");
  l.grid[0] = static_cast<uint32_t>(tiles_m);
  l.grid[1] = static_cast<uint32_t>(tiles_n);
  l.grid[2] = static_cast<uint32_t>(g.groups * g.splits);
  l.block[0] = mc::kThreads;
  l.meta = std::move(m);
  return l;
}

// Checks index input 1 against dim_size, writing nothing.
Launch check_index(const ir::LibraryCall& call, int64_t dim_size) {
  std::vector<int64_t> m(ml::check_index::kCount);
  m[ml::check_index::kIndex] = call.inputs[1];
  m[ml::check_index::kIndexOffset] = input_offset_field(call, 1);
  m[ml::check_index::kNumIndices] = call.input_shapes[1].numel();
  m[ml::check_index::kDimSize] = dim_size;
  m[ml::check_index::kNode] = call.node;
  return per_element("loom_check_index", call.input_shapes[1].numel(), std::move(m));
}

// An empty output has nothing to compute, but as in the reference a
// non-empty index is still checked (index_select checks every index first;
// scatter_add into an empty x finds every index out of range).
std::vector<Launch> empty_output(const ir::LibraryCall& call) {
  const bool checks = call.op == Op::IndexSelect || call.op == Op::ScatterAdd || call.op == Op::ScatterReduce;
  if (!checks || call.input_shapes[1].numel() == 0) return {};
  return {check_index(call, call.input_shapes[0][static_cast<int>(call.attr[0])])};
}

Launch leaf(const ir::LibraryCall& call, const char* name) {
  std::vector<int64_t> m(ml::leaf::kCount);
  m[ml::leaf::kOut] = call.output;
  m[ml::leaf::kNumel] = call.shape.numel();
  m[ml::leaf::kScalarBegin] = call.scalar_begin;
  return per_element(std::string(name) + typed_suffix(call), call.shape.numel(), std::move(m));
}

}  // namespace

std::vector<Launch> plan_library(const ir::LibraryCall& call, const ir::KernelProgram& p, uint32_t call_index) {
  auto check_buffer = [&](uint32_t b) {
    if (b >= p.buffers.size()) fail(call, call_index, "buffer " + std::to_string(b) + " is not in the program");
  };
  check_buffer(call.output);
  for (uint32_t b : call.inputs) check_buffer(b);
  if (call.input_offsets.size() != call.inputs.size() || call.input_shapes.size() != call.inputs.size() ||
      (call.op == Op::ScatterStrided && call.attr.n != call.input_shapes[1].n + 1))
    fail(call, call_index, "inputs, input_offsets and input_shapes differ in length, or a view's attributes from its rank");

  switch (call.op) {
    case Op::MatMul: case Op::ToDevice: case Op::Concat: case Op::IndexSelect: case Op::Gather:
    case Op::ScatterAdd: case Op::ScatterStrided:
      break;
    case Op::ArgSort:
      if (call.inputs.size() != 1 || call.attr.n != 2) fail(call, call_index, "expects one input and (dim, descending)");
      break;
    case Op::Scan:
      if (call.inputs.size() != 1 || call.attr.n != 2 || call.attr[1] < ml::scan::kSum || call.attr[1] > ml::scan::kArgMin)
        fail(call, call_index, "expects one input and (dim, kind)");
      break;
    case Op::ScatterReduce:
      if (call.attr.n < 2 || call.attr[1] < 0 || call.attr[1] > 3) fail(call, call_index, "needs dim and a scatter kind");
      break;
    case Op::Linspace: case Op::RandUniform: case Op::RandNormal:
      if (call.num_scalars < 2) fail(call, call_index, "needs 2 runtime scalars");
      break;
    case Op::Attention: case Op::AttentionGradQ: case Op::AttentionGradKV:
      if (call.attr.n != 2 || call.num_scalars != 2 || call.attr[0] < static_cast<int64_t>(ir::AttentionMask::None) ||
          call.attr[0] > static_cast<int64_t>(ir::AttentionMask::SlidingWindow) || call.attr[1] < 0 ||
          call.inputs.size() != ir::attention_mask_input(call.op == Op::Attention) + (call.attr[1] > 0 ? 1 : 0))
        fail(call, call_index,
             "expects q, k, v (and dout, logsumexp, delta), a mask tensor where attr[1] > 0, a mask kind, its scale "
             "and window");
      break;
    case Op::Conv2d: case Op::Conv2dGradInput: case Op::Conv2dGradWeight:
      if (call.inputs.size() != 2) fail(call, call_index, "expects two inputs");
      break;
    default:
      fail(call, call_index, std::string("no CUDA library kernel for ") + ir::op_name(call.op));
  }
  const int64_t n = call.shape.numel();
  if (n == 0) return empty_output(call);  // an empty buffer may not even have an address

  switch (call.op) {
    case Op::MatMul: return {matmul(call, call_index)};
    case Op::ToDevice: return {copy_input(call, 0, n)};
    case Op::Concat: {
      // One copy per input, into its band of columns of out viewed as [outer, out_row].
      const int dim = static_cast<int>(call.attr[0]);
      const int64_t outer = prod(call.shape, 0, dim), inner = prod(call.shape, dim + 1, call.shape.n);
      const int64_t out_row = call.shape[dim] * inner;
      std::vector<Launch> launches;
      int64_t col = 0;
      for (size_t i = 0; i < call.inputs.size(); ++i) {
        const int64_t row = call.input_shapes[i][dim] * inner;
        if (row > 0)
          launches.push_back(copy_2d(call.output, col, out_row, call.inputs[i], input_offset_field(call, i), row, outer, row,
                                     element_size(call.dtype)));
        col += row;
      }
      return launches;
    }
    case Op::IndexSelect: return {index_select(call)};
    case Op::Gather: return {gather_scatter(call, false)};
    case Op::ScatterAdd:
    case Op::ScatterReduce: {
      std::vector<Launch> launches{copy_input(call, 0, n)};
      if (call.input_shapes[1].numel() > 0) launches.push_back(gather_scatter(call, true));
      return launches;
    }
    case Op::ScatterStrided: {
      std::vector<Launch> launches{copy_input(call, 0, n)};
      if (call.input_shapes[1].numel() > 0) launches.push_back(scatter_strided(call));
      return launches;
    }
    case Op::ArgSort: return {argsort(call)};
    case Op::Scan: return {scan(call)};
    case Op::Attention: case Op::AttentionGradQ: case Op::AttentionGradKV: return {attention(call, call_index)};
    case Op::Conv2d: case Op::Conv2dGradInput: case Op::Conv2dGradWeight: return {conv(call, call_index)};
    case Op::Linspace: return {leaf(call, "loom_linspace_")};
    case Op::RandUniform: return {leaf(call, "loom_rand_uniform_")};
    case Op::RandNormal: return {leaf(call, "loom_rand_normal_")};
    default: return {};  // unreachable: the first switch threw
  }
}

}  // namespace loom::kernels::cuda
