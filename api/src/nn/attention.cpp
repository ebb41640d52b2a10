// The fused attention op: scaled_dot_product_attention's path when there is
// no mask tensor and no dropout. One Attention node computes the output and
// each row's logsumexp (one value: out [N, L, Dv], then the logsumexps
// [N, L], in float32, float64 for float64 inputs); its backward records
// delta = rowsum(dout * out) as ordinary ops and AttentionGradQ and
// AttentionGradKV, which recompute the probabilities from the logsumexp
// (ir/ops.def). The
// three are library kernels on every backend (runtime/reference/
// eval_attention.cpp, kernels/cpu/attention.cpp, kernels/cuda/attention.cu).
#include <loom/autograd.h>
#include <loom/functions.h>
#include <loom/nn/transformer.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "api/src/autocast.h"
#include "api/src/autograd/node.h"
#include "api/src/nn/attention.h"
#include "api/src/record.h"
#include "runtime/cuda/context.h"

namespace loom {

namespace {

using V = autograd::variable_list;

ir::Dims dims3(int64_t a, int64_t b, int64_t c) {
  const int64_t d[3] = {a, b, c};
  return ir::Dims(d, 3);
}

std::atomic<bool> g_flash{true};

// An attention node over q [N, L, D], k [N, S, D], v [N, S, Dv] (or, with
// `grad` inputs, one of its gradients), of `shape` in the accumulation dtype.
// The mask's kind is an attribute (other code); the scale and a sliding
// window's width are runtime scalars (a new value compiles nothing).
Tensor attention_node(ir::Op op, const std::vector<Tensor>& in, ir::Dims shape, const ir::AttentionMaskCode& mask,
                      const detail::MaskPlanes& planes, double scale, const SourceLoc& loc) {
  std::vector<ir::NodePtr> inputs;
  for (const Tensor& t : in) inputs.push_back(detail::read(t, loc));
  if (planes.divisor > 0) inputs.push_back(detail::read(planes.planes, loc));
  auto n = detail::new_node(op, ir::attention_acc(in[0].dtype()), in[0].device(), shape, std::move(inputs), loc);
  n->attr.push_back(static_cast<int64_t>(mask.kind));
  n->attr.push_back(planes.divisor);
  n->scalar[0] = detail::rt_scalar(Scalar(scale));
  n->scalar[1] = detail::rt_scalar(Scalar(mask.window));
  n->num_scalars = 2;
  return detail::wrap(std::move(n));
}

}  // namespace

// Which keys each query sees, as a [L, S] bool tensor computed from two
// ranges (for the written-out form; the fused op never makes it).
Tensor detail::visible_keys(const ir::AttentionMaskCode& mask, int64_t l, int64_t s, Device device, const SourceLoc& loc) {
  const TensorOptions idx = TensorOptions(kLong).device(device);
  const Tensor rows = loom::arange(0, l, idx, loc).unsqueeze(1, loc), cols = loom::arange(0, s, idx, loc);
  Tensor keep = cols.le(rows, loc);
  if (mask.kind == ir::AttentionMask::SlidingWindow) keep = keep.logical_and(cols.gt(rows.sub(mask.window, 1, loc), loc), loc);
  return keep;
}

Tensor detail::safe_softmax(const Tensor& scores, const SourceLoc& loc) {
  // The hidden rows' scores become 0 before the softmax, so neither it nor
  // its gradient meets -inf - -inf; the rows are then set to 0.
  const Tensor hidden = scores.amax(-1, true, loc).eq(-std::numeric_limits<double>::infinity(), loc);
  return loom::where(hidden, 0.0, loom::softmax(loom::where(hidden, 0.0, scores, loc), -1, std::nullopt, loc), loc);
}

namespace {

using detail::visible_keys;

// The written-out gradients, for a backward that is itself differentiated
// (create_graph): the fused gradient ops have no gradient of their own.
V written_out_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                       const ir::AttentionMaskCode& mask, const detail::MaskPlanes& planes, double scale,
                       const SourceLoc& loc) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  Tensor s = loom::matmul(q, k.transpose(1, 2, loc), loc).mul(scale, loc);
  if (mask.kind != ir::AttentionMask::None)
    s = loom::where(visible_keys(mask, q.size(1), k.size(1), q.device(), loc), s, neg_inf, loc);
  if (planes.divisor > 0) {  // batch n reads plane (n / divisor) % P: N = outer * P * divisor
    const int64_t p = planes.planes.size(0), r = planes.planes.size(1), sk = planes.planes.size(2);
    const Tensor each = planes.planes.view({1, p, 1, r, sk}, loc)
                            .expand({q.size(0) / (p * planes.divisor), p, planes.divisor, r, sk}, loc)
                            .reshape({q.size(0), r, sk}, loc);
    s = loom::where(each, s, neg_inf, loc);
  }
  const Tensor p = detail::safe_softmax(s, loc);
  const Tensor dv = loom::matmul(p.transpose(1, 2, loc), dout, loc);
  const Tensor dp = loom::matmul(dout, v.transpose(1, 2, loc), loc);
  const Tensor ds = p.mul(dp.sub(dp.mul(p, loc).sum({-1}, true, std::nullopt, loc), 1, loc), loc).mul(scale, loc);
  return {loom::matmul(ds, k, loc), loom::matmul(ds.transpose(1, 2, loc), q, loc), dv};
}

// The two parts of Attention's value: out [N, L, Dv] and the logsumexps [N, L].
Tensor out_part(const Tensor& packed, int64_t n, int64_t l, int64_t dv, const SourceLoc& loc) {
  return packed.slice(0, 0, n * l * dv, 1, loc).view({n, l, dv}, loc);
}
Tensor lse_part(const Tensor& packed, int64_t n, int64_t l, int64_t dv, const SourceLoc& loc) {
  return packed.slice(0, n * l * dv, n * l * (dv + 1), 1, loc).view({n, l}, loc);
}

// q [N,L,D], k [N,S,D], v [N,S,Dv] -> out [..., L, Dv]; saved: q, k, v and
// Attention's value; ints: the mask's kind and window; scalar: the scale.
V attention_b(const detail::OpGrad& node, const Tensor& g) {
  const SourceLoc loc = SourceLoc::current();
  const Tensor q = node.saved(0), k = node.saved(1), v = node.saved(2), packed = node.saved(3);
  const ir::AttentionMaskCode mask{static_cast<ir::AttentionMask>(node.ints[0]), node.ints[1]};
  const detail::MaskPlanes planes{node.ints[2] > 0 ? node.saved(4) : Tensor(), node.ints[2]};
  const double scale = node.scalar.toDouble();
  const int64_t n = q.size(0), l = q.size(1), s = k.size(1), d = q.size(2), dv = v.size(2);
  const Tensor dout = g.reshape({n, l, dv}, loc).to(q.dtype(), loc).contiguous(loc);  // g: the caller's [..., L, Dv]
  if (GradMode::is_enabled()) return written_out_backward(q, k, v, dout, mask, planes, scale, loc);
  const Tensor out = out_part(packed, n, l, dv, loc);
  const Tensor delta = dout.to(out.dtype(), loc).mul(out, loc).sum({-1}, false, std::nullopt, loc);
  const std::vector<Tensor> in = {q, k, v, dout, lse_part(packed, n, l, dv, loc), delta};
  Tensor dq, dk, dvv;
  if (node.needs(0))
    dq = attention_node(ir::Op::AttentionGradQ, in, dims3(n, l, d), mask, planes, scale, loc).to(q.dtype(), loc);
  if (node.needs(1) || node.needs(2)) {
    const Tensor dkv = attention_node(ir::Op::AttentionGradKV, in, dims3(n, s, d + dv), mask, planes, scale, loc);
    dk = dkv.slice(2, 0, d, 1, loc).to(k.dtype(), loc);
    dvv = dkv.slice(2, d, d + dv, 1, loc).to(v.dtype(), loc);
  }
  return {dq, dk, dvv};
}

}  // namespace

namespace backends {
void enable_flash_sdp(bool enabled) { g_flash.store(enabled, std::memory_order_relaxed); }
bool flash_sdp_enabled() { return g_flash.load(std::memory_order_relaxed); }
}  // namespace backends

namespace detail {

namespace {
// The tensor-core kernels use mma.sync on bfloat16 and float16: compute capability 8.0 on.
bool cuda_attention_kernels_ready(const Device& device) {
  return runtime::cuda::context(std::max<int>(device.index(), 0)).sm_major >= 8;
}
}  // namespace

bool fused_attention_applies(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!backends::flash_sdp_enabled()) return false;
  if (!is_floating_point(q.dtype()) || k.dtype() != q.dtype() || v.dtype() != q.dtype()) return false;
  if (q.device() != k.device() || q.device() != v.device() || q.dim() < 2 || k.dim() != q.dim() || v.dim() != q.dim())
    return false;
  for (int64_t d = 0; d + 2 < q.dim(); ++d)
    if (k.size(d) != q.size(d) || v.size(d) != q.size(d)) return false;  // broadcast batch dims: written out
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0) return false;
  // On a GPU the fused kernels are the tensor-core ones (kernels/cuda/
  // attention.cu): bfloat16 or float16 and equal head dims of 32, 64 or 128.
  // float32 and float64 there are written out on the GEMM kernels.
  if (q.device().is_cuda())
    return (q.dtype() == kBFloat16 || q.dtype() == kHalf) && q.size(-1) == v.size(-1) &&
           (q.size(-1) == 32 || q.size(-1) == 64 || q.size(-1) == 128) && cuda_attention_kernels_ready(q.device());
  return true;
}

namespace {
// The scores' shape: batch, then [L, S].
std::vector<int64_t> scores_shape(IntArrayRef batch, int64_t l, int64_t s) {
  std::vector<int64_t> want(batch.begin(), batch.end());
  want.push_back(l), want.push_back(s);
  return want;
}
}  // namespace

bool mask_broadcasts(const Tensor& mask, IntArrayRef batch, int64_t l, int64_t s) {
  const std::vector<int64_t> want = scores_shape(batch, l, s);
  const int64_t n = static_cast<int64_t>(want.size());
  if (mask.dim() > n) return false;
  for (int64_t d = 0; d < mask.dim(); ++d)
    if (mask.size(d) != 1 && mask.size(d) != want[static_cast<size_t>(n - mask.dim() + d)]) return false;
  return true;
}

void check_mask(const Tensor& mask, IntArrayRef batch, int64_t l, int64_t s, const char* op, const SourceLoc& loc) {
  const std::vector<int64_t> want = scores_shape(batch, l, s);
  LOOM_CHECK(mask_broadcasts(mask, batch, l, s), op, loc, "the mask ", describe(mask),
             " does not broadcast to the scores' ", shape_str(ir::Dims(want.data(), want.size())));
}

MaskPlanes mask_planes(const Tensor& mask_in, IntArrayRef batch, int64_t l, int64_t s, const char* op,
                       const SourceLoc& loc) {
  const int64_t k = static_cast<int64_t>(batch.size());
  LOOM_CHECK(mask_in.dtype() == kBool, op, loc, "expected a bool mask, got ", describe(mask_in));
  check_mask(mask_in, batch, l, s, op, loc);
  std::vector<int64_t> padded(static_cast<size_t>(k + 2 - mask_in.dim()), 1);
  for (int64_t d : mask_in.sizes()) padded.push_back(d);
  // The batch dims the mask varies along, [first, last]; those between that
  // it does not vary along are expanded (copied), those outside are not.
  int64_t first = k, last = -1;
  for (int64_t d = 0; d < k; ++d)
    if (padded[d] != 1) first = std::min(first, d), last = d;
  std::vector<int64_t> expanded = padded;
  int64_t planes = 1, divisor = 1;
  for (int64_t d = 0; d < k; ++d) {
    if (d >= first && d <= last) expanded[d] = batch[d], planes *= batch[d];
    if (d > last) divisor *= batch[d];
  }
  expanded[k + 1] = s;  // a mask that is the same for every key is written out along S
  const int64_t rows = padded[k];
  const Tensor p = mask_in.reshape(padded, loc).expand(expanded, loc).reshape({planes, rows, s}, loc).contiguous(loc);
  return {p, divisor};
}

Tensor fused_attention(const Tensor& query, const Tensor& key, const Tensor& value, const ir::AttentionMaskCode& mask,
                       double scale, const SourceLoc& loc, const MaskPlanes& planes) {
  const int64_t l = query.size(-2), s = key.size(-2), d = query.size(-1), dv = value.size(-1);
  const int64_t n = query.numel() / (l * d);
  // The kernels read whole [N, rows, D] buffers: a view of a fused qkv
  // projection is copied here (the copy fuses into the projection's kernel).
  const Tensor q = query.reshape({n, l, d}, loc).contiguous(loc), k = key.reshape({n, s, d}, loc).contiguous(loc),
               v = value.reshape({n, s, dv}, loc).contiguous(loc);
  std::vector<int64_t> out_shape = query.sizes().vec();
  out_shape.back() = dv;
  Tensor packed, out;
  {
    NoGradGuard no_grad;
    const int64_t numel = n * l * (dv + 1);
    packed = attention_node(ir::Op::Attention, {q, k, v}, ir::Dims(&numel, 1), mask, planes, scale, loc);
    // A tensor of its own, not a view of packed: the gradient rule attaches to it.
    const Tensor part = out_part(packed, n, l, dv, loc);
    out = part.dtype() == q.dtype() ? part.clone(loc) : part.to(q.dtype(), loc);
  }
  if (GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad()))
    if (auto node = detail::attach("ScaledDotProductFlashAttentionBackward0", attention_b, {&q, &k, &v}, out, loc)) {
      node->save(q);
      node->save(k);
      node->save(v);
      node->save(packed);
      node->ints.push_back(static_cast<int64_t>(mask.kind));
      node->ints.push_back(mask.window);
      node->ints.push_back(planes.divisor);
      if (planes.divisor > 0) node->save(planes.planes);
      node->scalar = Scalar(scale);
    }
  return out.view(out_shape, loc);
}

Tensor written_out_attention(const Tensor& q, const Tensor& k, const Tensor& v, const ir::AttentionMaskCode& mask,
                             double scale, const SourceLoc& loc) {
  Tensor scores = loom::matmul(q, k.transpose(-2, -1, loc), loc).mul(scale, loc);
  if (mask.kind != ir::AttentionMask::None)
    scores = loom::where(visible_keys(mask, q.size(-2), k.size(-2), q.device(), loc), scores,
                         -std::numeric_limits<double>::infinity(), loc);
  return loom::matmul(mask.kind == ir::AttentionMask::None ? loom::softmax(scores, -1, std::nullopt, loc)
                                                            : safe_softmax(scores, loc),
                      v, loc);
}

}  // namespace detail

Tensor sliding_window_attention(const Tensor& query_in, const Tensor& key_in, const Tensor& value_in, int64_t window,
                                std::optional<double> scale, SourceLoc loc) {
  const char* op = "sliding_window_attention";
  detail::impl_of(query_in, op, loc), detail::impl_of(key_in, op, loc), detail::impl_of(value_in, op, loc);
  const Tensor query = detail::autocast::lower(query_in, loc), key = detail::autocast::lower(key_in, loc),
               value = detail::autocast::lower(value_in, loc);
  LOOM_CHECK(query.dim() >= 2 && key.dim() == query.dim() && value.dim() == query.dim(), op, loc,
             "expected query [..., L, E], key [..., S, E] and value [..., S, Ev] of one rank, got ",
             detail::describe(query), ", ", detail::describe(key), ", ", detail::describe(value));
  LOOM_CHECK(query.size(-1) == key.size(-1) && key.size(-2) == value.size(-2), op, loc,
             "expected query [..., L, E], key [..., S, E] and value [..., S, Ev], got ", detail::describe(query), ", ",
             detail::describe(key), ", ", detail::describe(value));
  LOOM_CHECK(window >= 1, op, loc, "window must be at least 1 (a query sees itself), got ", window);
  const ir::AttentionMaskCode mask{ir::AttentionMask::SlidingWindow, window};
  const double sc = scale.value_or(1.0 / std::sqrt(static_cast<double>(query.size(-1))));
  if (detail::fused_attention_applies(query, key, value)) return detail::fused_attention(query, key, value, mask, sc, loc);
  return detail::written_out_attention(query, key, value, mask, sc, loc);
}

}  // namespace loom
