// The fused attention op's recording (api/src/nn/attention.cpp), for
// scaled_dot_product_attention.
#pragma once
#include <optional>

#include <loom/tensor.h>

#include "ir/node.h"

namespace loom::detail {

// Whether q, k and v can take the fused op: one floating dtype and device,
// equal batch dims, nothing empty, and backends::flash_sdp_enabled().
bool fused_attention_applies(const Tensor& q, const Tensor& k, const Tensor& v);

// A bool mask tensor as the Attention op reads it (ir::AttentionMaskPlanes):
// planes [P, R, S] and the batch divisor; divisor 0 means no mask tensor.
struct MaskPlanes {
  Tensor planes;
  int64_t divisor = 0;
};
// matmul(a, b) as one fused Attention node when a is loom's softmax over a
// scaled, optionally masked product q kᵀ and nothing needs a gradient
// (api/src/nn/attention_pattern.cpp); nullopt otherwise.
std::optional<Tensor> recognize_attention(const Tensor& a, const Tensor& b, const SourceLoc& loc);

// Whether `mask` broadcasts to the scores, batch + [L, S]; check_mask
// throws naming `op` where it does not.
bool mask_broadcasts(const Tensor& mask, IntArrayRef batch, int64_t l, int64_t s);
void check_mask(const Tensor& mask, IntArrayRef batch, int64_t l, int64_t s, const char* op, const SourceLoc& loc);
// `mask` (bool, true: may attend; broadcastable to q's batch dims + [L, S])
// as planes: the batch dims it varies along become P, those after them the
// divisor, so a [B, 1, 1, S] padding mask stays B * S bytes.
MaskPlanes mask_planes(const Tensor& mask, IntArrayRef batch, int64_t l, int64_t s, const char* op, const SourceLoc& loc);

// softmax(q kᵀ · scale, keys hidden by `mask` and by `planes` at -inf) v as
// one Attention node, with its gradient rule. q [..., L, D], k [..., S, D],
// v [..., S, Dv].
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const ir::AttentionMaskCode& mask,
                       double scale, const SourceLoc& loc, const MaskPlanes& planes = {});
// Which keys each query row sees under `mask` (not None): a [L, S] bool
// tensor from two index ranges, for the written-out forms.
Tensor visible_keys(const ir::AttentionMaskCode& mask, int64_t l, int64_t s, Device device, const SourceLoc& loc);
// Softmax over the last dim, 0 on a row whose scores are all -inf (a query
// that sees no key): PyTorch's _safe_softmax, SDPA's math path, and what the
// fused op gives such a row.
Tensor safe_softmax(const Tensor& scores, const SourceLoc& loc);
// The same as two products and a softmax, the mask from two ranges.
Tensor written_out_attention(const Tensor& q, const Tensor& k, const Tensor& v, const ir::AttentionMaskCode& mask,
                             double scale, const SourceLoc& loc);

}  // namespace loom::detail
