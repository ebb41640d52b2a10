// loom/nn/transformer.h: scaled_dot_product_attention (the fused op of
// api/src/nn/attention.cpp where it applies, else two products and a
// softmax) and the modules around it.
#include <loom/autograd.h>
#include <loom/functions.h>
#include <loom/nn/functional.h>
#include <loom/nn/transformer.h>

#include <cmath>
#include <limits>

#include "api/src/autocast.h"
#include "api/src/nn/attention.h"
#include "api/src/record.h"

namespace loom {

using detail::describe;

namespace {
// [..., Hk, S, E] -> [..., Hk * groups, S, E], each head repeated in place.
Tensor repeat_heads(const Tensor& t, int64_t groups, const SourceLoc& loc) {
  if (groups == 1) return t;
  std::vector<int64_t> expanded = t.sizes().vec(), merged = t.sizes().vec();
  expanded.insert(expanded.end() - 2, groups);
  merged[merged.size() - 3] *= groups;
  return t.unsqueeze(-3, loc).expand(expanded, loc).reshape(merged, loc);
}
}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query_in, const Tensor& key_in, const Tensor& value_in,
                                    const std::optional<Tensor>& attn_mask_in, double dropout_p, bool is_causal,
                                    std::optional<double> scale, bool enable_gqa, SourceLoc loc) {
  const char* op = "scaled_dot_product_attention";
  detail::impl_of(query_in, op, loc), detail::impl_of(key_in, op, loc), detail::impl_of(value_in, op, loc);
  const Tensor query = detail::autocast::lower(query_in, loc), key = detail::autocast::lower(key_in, loc),
               value = detail::autocast::lower(value_in, loc);
  std::optional<Tensor> attn_mask = attn_mask_in;
  if (attn_mask && attn_mask->defined()) attn_mask = detail::autocast::lower(*attn_mask, loc);
  LOOM_CHECK(query.dim() >= 2 && key.dim() >= 2 && value.dim() >= 2, op, loc,
             "query, key and value need at least 2 dims, got ", describe(query), ", ", describe(key), ", ",
             describe(value));
  LOOM_CHECK(query.size(-1) == key.size(-1) && key.size(-2) == value.size(-2), op, loc,
             "expected query [..., L, E], key [..., S, E] and value [..., S, Ev], got ", describe(query), ", ",
             describe(key), ", ", describe(value));
  LOOM_CHECK(!(is_causal && attn_mask && attn_mask->defined()), op, loc,
             "attn_mask and is_causal cannot both be set");
  Tensor k = key, v = value;
  if (enable_gqa && query.dim() >= 3 && key.dim() >= 3 && query.size(-3) != key.size(-3)) {
    LOOM_CHECK(query.size(-3) % key.size(-3) == 0, op, loc, "query heads (", query.size(-3),
               ") must be a multiple of key heads (", key.size(-3), ")");
    k = repeat_heads(key, query.size(-3) / key.size(-3), loc);
    v = repeat_heads(value, query.size(-3) / value.size(-3), loc);
  }
  const int64_t l = query.size(-2), s = k.size(-2);
  const double sc = scale.value_or(1.0 / std::sqrt(static_cast<double>(query.size(-1))));
  const bool has_mask = attn_mask && attn_mask->defined();
  if (has_mask) {  // the scores' batch dims: q's and k's broadcast
    const IntArrayRef qs = query.sizes(), ks = k.sizes();
    const ir::Dims batch =
        detail::broadcast_shapes(detail::to_dims(IntArrayRef(qs.data(), qs.size() - 2), op, loc),
                                 detail::to_dims(IntArrayRef(ks.data(), ks.size() - 2), op, loc), op, loc);
    detail::check_mask(*attn_mask, detail::to_ref(batch), l, s, op, loc);
  }
  if (dropout_p == 0 && (!has_mask || attn_mask->dtype() == kBool) && detail::fused_attention_applies(query, k, v)) {
    // A bool mask goes to the fused op as planes (api/src/nn/attention.cpp
    // mask_planes); a float one is added to the written-out scores.
    const IntArrayRef sizes = query.sizes();
    const detail::MaskPlanes planes =
        has_mask ? detail::mask_planes(*attn_mask, IntArrayRef(sizes.data(), sizes.size() - 2), l, s, op, loc)
                 : detail::MaskPlanes{};
    return detail::fused_attention(query, k, v, {is_causal ? ir::AttentionMask::Causal : ir::AttentionMask::None, 0}, sc,
                                   loc, planes);
  }
  Tensor scores = loom::matmul(query, k.transpose(-2, -1, loc), loc).mul(sc, loc);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    scores = loom::where(detail::visible_keys({ir::AttentionMask::Causal, 0}, l, s, query.device(), loc), scores, neg_inf,
                         loc);
  } else if (attn_mask && attn_mask->defined()) {
    scores = attn_mask->dtype() == kBool ? loom::where(*attn_mask, scores, neg_inf, loc)
                                         : scores.add(attn_mask->to(scores.dtype(), loc), 1, loc);
  }
  // With a mask, a row may see no key: 0 there, as PyTorch's math path.
  Tensor weights = is_causal || has_mask ? detail::safe_softmax(scores, loc) : loom::softmax(scores, -1, std::nullopt, loc);
  if (dropout_p > 0) weights = nn::functional::dropout(weights, nn::functional::DropoutFuncOptions().p(dropout_p), loc);
  return loom::matmul(weights, v, loc);
}

namespace nn {

// ---------------------------------------------------------------- MultiheadAttention
MultiheadAttentionImpl::MultiheadAttentionImpl(const MultiheadAttentionOptions& o) : options(o) {
  const int64_t e = o.embed_dim(), h = o.num_heads();
  LOOM_CHECK(e > 0 && h > 0 && e % h == 0, "MultiheadAttention", SourceLoc::current(), "embed_dim (", e,
             ") must be divisible by num_heads (", h, ")");
  in_proj_weight = register_parameter("in_proj_weight", loom::empty({3 * e, e}));
  if (o.bias()) in_proj_bias = register_parameter("in_proj_bias", loom::empty({3 * e}));
  out_proj = register_module("out_proj", Linear(LinearOptions(e, e).bias(o.bias())));
  reset_parameters();
}

void MultiheadAttentionImpl::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
}

std::tuple<Tensor, Tensor> MultiheadAttentionImpl::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                           const Tensor& key_padding_mask, bool need_weights,
                                                           const Tensor& attn_mask, bool average_attn_weights,
                                                           SourceLoc loc) {
  const char* op = "MultiheadAttention";
  detail::impl_of(query, op, loc), detail::impl_of(key, op, loc), detail::impl_of(value, op, loc);
  const int64_t e = options.embed_dim(), h = options.num_heads(), hd = e / h;
  const bool batched = query.dim() == 3;
  LOOM_CHECK((query.dim() == 3 || query.dim() == 2) && key.dim() == query.dim() && value.dim() == query.dim() &&
                 query.size(-1) == e && key.size(-1) == e && value.size(-1) == e,
             op, loc, "expected query [L, N, ", e, "] and key, value [S, N, ", e, "] (or unbatched), got ",
             describe(query), ", ", describe(key), ", ", describe(value));
  const Tensor q_in = batched ? query : query.unsqueeze(1, loc);
  const Tensor k_in = batched ? key : key.unsqueeze(1, loc);
  const Tensor v_in = batched ? value : value.unsqueeze(1, loc);
  const int64_t l = q_in.size(0), n = q_in.size(1), s = k_in.size(0);
  auto project = [&](const Tensor& x, int64_t part) {
    const Tensor w = in_proj_weight.slice(0, part * e, (part + 1) * e, 1, loc);
    const Tensor b = in_proj_bias.defined() ? in_proj_bias.slice(0, part * e, (part + 1) * e, 1, loc) : Tensor();
    // [T, N, E] -> [N, H, T, hd]
    const Tensor y = functional::linear(x, w, b, loc);
    return y.reshape({x.size(0), n, h, hd}, loc).permute({1, 2, 0, 3}, loc);
  };
  const Tensor q = project(q_in, 0), k = project(k_in, 1), v = project(v_in, 2);
  const bool dropping = options.dropout() > 0 && is_training();
  const bool bool_masks = (!attn_mask.defined() || attn_mask.dtype() == kBool) &&
                          (!key_padding_mask.defined() || key_padding_mask.dtype() == kBool);
  const Tensor kpm = key_padding_mask.defined() && !batched ? key_padding_mask.unsqueeze(0, loc) : key_padding_mask;
  if (attn_mask.defined())
    LOOM_CHECK((attn_mask.dim() == 2 && attn_mask.size(0) == l && attn_mask.size(1) == s) ||
                   (attn_mask.dim() == 3 && attn_mask.size(0) == n * h && attn_mask.size(1) == l &&
                    attn_mask.size(2) == s),
               op, loc, "attn_mask must be [", l, ", ", s, "] or [", n * h, ", ", l, ", ", s, "], got ",
               describe(attn_mask));
  if (kpm.defined())
    LOOM_CHECK(kpm.dim() == 2 && kpm.size(0) == n && kpm.size(1) == s, op, loc, "key_padding_mask must be [", n, ", ",
               s, "], got ", describe(key_padding_mask));
  if (!need_weights && !dropping && bool_masks && detail::fused_attention_applies(q, k, v)) {
    // The fused op, the masks (true: hidden) as one bool tensor of the keys
    // each query may see, at the shape they vary in (mask_planes).
    Tensor visible;
    if (attn_mask.defined())
      visible = (attn_mask.dim() == 2 ? attn_mask : attn_mask.reshape({n, h, l, s}, loc)).logical_not(loc);
    if (kpm.defined()) {
      const Tensor keys = kpm.reshape({n, 1, 1, s}, loc).logical_not(loc);
      visible = visible.defined() ? visible.logical_and(keys, loc) : keys;
    }
    const int64_t batch[2] = {n, h};
    const detail::MaskPlanes planes =
        visible.defined() ? detail::mask_planes(visible, IntArrayRef(batch, 2), l, s, op, loc) : detail::MaskPlanes{};
    Tensor out = detail::fused_attention(q, k, v, {ir::AttentionMask::None, 0}, 1.0 / std::sqrt(static_cast<double>(hd)),
                                         loc, planes);
    out = out_proj->forward(out.permute({2, 0, 1, 3}, loc).reshape({l, n, e}, loc), loc);
    return {batched ? out : out.squeeze(1, loc), Tensor()};
  }
  Tensor scores = loom::matmul(q, k.transpose(-2, -1, loc), loc).mul(1.0 / std::sqrt(static_cast<double>(hd)), loc);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  auto apply_mask = [&](const Tensor& mask, const Tensor& shaped) {
    return mask.dtype() == kBool ? loom::where(shaped, neg_inf, scores, loc)
                                 : scores.add(shaped.to(scores.dtype(), loc), 1, loc);
  };
  if (attn_mask.defined())
    scores = apply_mask(attn_mask, attn_mask.dim() == 2 ? attn_mask : attn_mask.reshape({n, h, l, s}, loc));
  if (kpm.defined()) scores = apply_mask(kpm, kpm.reshape({n, 1, 1, s}, loc));
  Tensor weights = loom::softmax(scores, -1, std::nullopt, loc);
  Tensor attended = weights;
  if (dropping)
    attended = functional::dropout(weights, functional::DropoutFuncOptions().p(options.dropout()), loc);
  // [N, H, L, hd] -> [L, N, E]
  Tensor out = loom::matmul(attended, v, loc).permute({2, 0, 1, 3}, loc).reshape({l, n, e}, loc);
  out = out_proj->forward(out, loc);
  Tensor returned;
  if (need_weights) returned = average_attn_weights ? weights.mean({1}, false, loc) : weights;
  if (!batched) {
    out = out.squeeze(1, loc);
    if (returned.defined()) returned = returned.squeeze(0, loc);
  }
  return {out, returned};
}

void MultiheadAttentionImpl::pretty_print(std::ostream& os) const {
  os << "MultiheadAttention(embed_dim=" << options.embed_dim() << ", num_heads=" << options.num_heads() << ")";
}

// ---------------------------------------------------------------- TransformerEncoderLayer
TransformerActivation::TransformerActivation(Nonlinearity n) {
  if (n == kReLU) {
    f_ = [](const Tensor& x) { return loom::relu(x); };
    name_ = "relu";
  } else if (n == kGELU) {
    f_ = [](const Tensor& x) { return loom::gelu(x); };
    name_ = "gelu";
  } else {
    throw Error("TransformerEncoderLayer: activation must be kReLU, kGELU or a function");
  }
}

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& o) : options(o) {
  const int64_t d = o.d_model();
  self_attn = register_module("self_attn", MultiheadAttention(MultiheadAttentionOptions(d, o.nhead()).dropout(o.dropout())));
  linear1 = register_module("linear1", Linear(d, o.dim_feedforward()));
  dropout = register_module("dropout", Dropout(o.dropout()));
  linear2 = register_module("linear2", Linear(o.dim_feedforward(), d));
  norm1 = register_module("norm1", LayerNorm(LayerNormOptions({d})));
  norm2 = register_module("norm2", LayerNorm(LayerNormOptions({d})));
  dropout1 = register_module("dropout1", Dropout(o.dropout()));
  dropout2 = register_module("dropout2", Dropout(o.dropout()));
}

Tensor TransformerEncoderLayerImpl::forward(const Tensor& src, const Tensor& src_mask,
                                            const Tensor& src_key_padding_mask, SourceLoc loc) {
  Tensor attended = std::get<0>(self_attn->forward(src, src, src, src_key_padding_mask, false, src_mask, true, loc));
  Tensor x = norm1->forward(src.add(dropout1->forward(attended, loc), 1, loc), loc);
  Tensor ff = linear2->forward(dropout->forward(options.activation()(linear1->forward(x, loc)), loc), loc);
  return norm2->forward(x.add(dropout2->forward(ff, loc), 1, loc), loc);
}

void TransformerEncoderLayerImpl::pretty_print(std::ostream& os) const {
  os << "TransformerEncoderLayer(d_model=" << options.d_model() << ", nhead=" << options.nhead()
     << ", dim_feedforward=" << options.dim_feedforward() << ", dropout=" << options.dropout()
     << ", activation=" << options.activation().name() << ")";
}

// ---------------------------------------------------------------- TransformerEncoder
TransformerEncoderImpl::TransformerEncoderImpl(const TransformerEncoderOptions& o) : options(o) {
  LOOM_CHECK(o.encoder_layer() && o.num_layers() > 0, "TransformerEncoder", SourceLoc::current(),
             "needs an encoder layer and num_layers > 0");
  layers = register_module("layers", ModuleList());
  const auto source = o.encoder_layer()->named_parameters();
  for (int64_t i = 0; i < o.num_layers(); ++i) {
    TransformerEncoderLayer copy(o.encoder_layer()->options);
    {
      NoGradGuard no_grad;
      for (auto& item : copy->named_parameters()) {
        Tensor dst = item.value();
        dst.copy_(source[item.key()]);
      }
    }
    layers->push_back(copy);
  }
  if (o.norm()) norm = register_module("norm", o.norm());
}

Tensor TransformerEncoderImpl::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                       SourceLoc loc) {
  Tensor x = src;
  for (size_t i = 0; i < layers->size(); ++i)
    x = layers->ptr<TransformerEncoderLayerImpl>(i)->forward(x, src_mask, src_key_padding_mask, loc);
  return norm ? norm->forward(x, loc) : x;
}

}  // namespace nn
}  // namespace loom
