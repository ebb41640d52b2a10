// The fused attention op's recording (api/src/nn/attention.cpp), for
// scaled_dot_product_attention.
#pragma once
#include <loom/tensor.h>

#include "ir/node.h"

namespace loom::detail {

// Whether q, k and v can take the fused op: one floating dtype and device,
// equal batch dims, nothing empty, and backends::flash_sdp_enabled().
bool fused_attention_applies(const Tensor& q, const Tensor& k, const Tensor& v);
// softmax(q kᵀ · scale, keys hidden by `mask` at -inf) v as one Attention
// node, with its gradient rule. q [..., L, D], k [..., S, D], v [..., S, Dv].
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const ir::AttentionMaskCode& mask,
                       double scale, const SourceLoc& loc);
// Which keys each query row sees under `mask` (not None): a [L, S] bool
// tensor from two index ranges, for the written-out forms.
Tensor visible_keys(const ir::AttentionMaskCode& mask, int64_t l, int64_t s, Device device, const SourceLoc& loc);
// The same as two products and a softmax, the mask from two ranges.
Tensor written_out_attention(const Tensor& q, const Tensor& k, const Tensor& v, const ir::AttentionMaskCode& mask,
                             double scale, const SourceLoc& loc);

}  // namespace loom::detail
