// loom/nn/transformer.h's nn::attention: FlexAttention's mask_mod and block
// mask (torch.nn.attention.flex_attention's names). A mask_mod is recorded
// once over index tensors, so the mask is code in the graph: its bytes are
// computed where the attention reads them, at the shape the mask varies in
// (a causal mask_mod gives [1, 1, L, S], a padding one [B, 1, 1, S]), and a
// new length records the same code again. The attention itself is
// scaled_dot_product_attention's with that bool mask: the fused op where it
// applies (api/src/nn/attention.cpp), else written out.
#include <loom/functions.h>
#include <loom/nn/transformer.h>

#include "api/src/nn/attention.h"
#include "api/src/record.h"

namespace loom::nn::attention {

BlockMask create_block_mask(const MaskMod& mask_mod, std::optional<int64_t> B, std::optional<int64_t> H, int64_t Q_LEN,
                            int64_t KV_LEN, Device device, SourceLoc loc) {
  const char* op = "create_block_mask";
  LOOM_CHECK(static_cast<bool>(mask_mod), op, loc, "mask_mod is empty");
  LOOM_CHECK(Q_LEN >= 1 && KV_LEN >= 1 && B.value_or(1) >= 1 && H.value_or(1) >= 1, op, loc,
             "expected positive sizes, got B=", B.value_or(1), ", H=", H.value_or(1), ", Q_LEN=", Q_LEN,
             ", KV_LEN=", KV_LEN);
  const TensorOptions idx = TensorOptions(kLong).device(device);
  const Tensor b = loom::arange(B.value_or(1), idx, loc).view({-1, 1, 1, 1}, loc);
  const Tensor h = loom::arange(H.value_or(1), idx, loc).view({1, -1, 1, 1}, loc);
  const Tensor q_idx = loom::arange(Q_LEN, idx, loc).view({1, 1, -1, 1}, loc);
  const Tensor kv_idx = loom::arange(KV_LEN, idx, loc).view({1, 1, 1, -1}, loc);
  Tensor mask = mask_mod(b, h, q_idx, kv_idx);
  LOOM_CHECK(mask.defined() && mask.dtype() == kBool && mask.dim() <= 4, op, loc,
             "mask_mod must return a bool tensor of at most 4 dims, got ",
             mask.defined() ? detail::describe(mask) : std::string("an undefined tensor"));
  const int64_t batch[2] = {B.value_or(1), H.value_or(1)};
  detail::check_mask(mask, IntArrayRef(batch, 2), Q_LEN, KV_LEN, op, loc);
  return {mask, Q_LEN, KV_LEN};
}

Tensor flex_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                      const std::optional<BlockMask>& block_mask, std::optional<double> scale, bool enable_gqa,
                      SourceLoc loc) {
  const char* op = "flex_attention";
  detail::impl_of(query, op, loc), detail::impl_of(key, op, loc), detail::impl_of(value, op, loc);
  LOOM_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4, op, loc,
             "expected query [B, H, L, E], key [B, Hk, S, E] and value [B, Hk, S, Ev], got ", detail::describe(query),
             ", ", detail::describe(key), ", ", detail::describe(value));
  if (!block_mask) return scaled_dot_product_attention(query, key, value, std::nullopt, 0.0, false, scale, enable_gqa, loc);
  LOOM_CHECK(block_mask->q_len == query.size(2) && block_mask->kv_len == key.size(2), op, loc,
             "the block mask was made for Q_LEN=", block_mask->q_len, " and KV_LEN=", block_mask->kv_len,
             ", but query has ", query.size(2), " rows and key ", key.size(2));
  LOOM_CHECK(block_mask->mask.device() == query.device(), op, loc, "the block mask is on ", block_mask->mask.device(),
             " and query on ", query.device());
  return scaled_dot_product_attention(query, key, value, block_mask->mask, 0.0, false, scale, enable_gqa, loc);
}

}  // namespace loom::nn::attention
