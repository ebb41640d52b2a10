// Attention, as torch's: scaled_dot_product_attention (top level and in
// nn::functional), MultiheadAttention, TransformerEncoderLayer and
// TransformerEncoder. scaled_dot_product_attention without a mask tensor
// and without dropout records one fused attention op (flash-style kernels
// on every backend: keys in blocks with an online softmax, never the
// [L, S] scores; the causal mask is code), and its gradient two more;
// otherwise it is written out as two products and a softmax (the causal
// mask compared, not stored; a mask tensor added or selected).
#pragma once
#include <functional>
#include <optional>
#include <tuple>

#include <loom/arg.h>
#include <loom/nn/containers.h>
#include <loom/nn/init.h>
#include <loom/nn/layers.h>
#include <loom/nn/module.h>

#pragma GCC visibility push(default)
namespace loom {

// softmax(q kᵀ · scale + mask) v over the last two dims: q [..., L, E],
// k [..., S, E], v [..., S, Ev]. attn_mask: bool (true: may attend) or
// added to the scores; is_causal: position i attends to j <= i; scale
// defaults to 1/sqrt(E); enable_gqa repeats k and v heads (dim -3) to q's.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const std::optional<Tensor>& attn_mask = std::nullopt, double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = std::nullopt,
                                    bool enable_gqa = false, LOOM_LOC);

// Causal attention over each query's last `window` keys (key j is seen by
// query i when i - window < j <= i: Mistral's sliding window, FlexAttention's
// sliding-window mask), with q, k, v as scaled_dot_product_attention's.
// loom's own: libtorch has no such function. The fused op where it applies
// (the window is code and a runtime scalar: no mask tensor, and a new width
// compiles nothing), else written out. window >= 1.
Tensor sliding_window_attention(const Tensor& query, const Tensor& key, const Tensor& value, int64_t window,
                                std::optional<double> scale = std::nullopt, LOOM_LOC);

namespace nn::attention {

// FlexAttention's masks, as torch.nn.attention.flex_attention's: a mask_mod
// says whether query q_idx of batch b and head h may attend to key kv_idx.
// It is called once, with int64 index tensors b [B, 1, 1, 1], h [1, H, 1, 1],
// q_idx [1, 1, L, 1] and kv_idx [1, 1, 1, S] (of size 1 where B or H is
// not given), and must return a bool tensor broadcastable to [B, H, L, S]:
// written with loom's ops on those indices (comparisons, arithmetic,
// logical_and, indexing a per-batch length tensor, ...), it is code.
using MaskMod = std::function<Tensor(const Tensor& b, const Tensor& h, const Tensor& q_idx, const Tensor& kv_idx)>;

// The mask a mask_mod gives, at the shape it varies in: a causal mask_mod
// gives [1, 1, L, S] bytes, a padding one [B, 1, 1, S]. It is recorded, not
// run: the bytes are computed in the graph that reads them, once per call.
struct BlockMask {
  Tensor mask;  // bool, broadcastable to [B, H, L, S]
  int64_t q_len = 0, kv_len = 0;
};
// B, H: std::nullopt for "the same for every batch" or "every head", as
// PyTorch's None.
BlockMask create_block_mask(const MaskMod& mask_mod, std::optional<int64_t> B, std::optional<int64_t> H, int64_t Q_LEN,
                            int64_t KV_LEN, Device device = Device(kCPU), LOOM_LOC);

// softmax(q kᵀ · scale, keys the block mask hides at -inf) v: q [B, H, L, E],
// k [B, Hk, S, E], v [B, Hk, S, Ev] (enable_gqa: Hk divides H). The fused
// attention op where it applies (the mask read as bytes beside the code),
// else written out. A query that sees no key gives 0. score_mod is not
// supported.
Tensor flex_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                      const std::optional<BlockMask>& block_mask = std::nullopt,
                      std::optional<double> scale = std::nullopt, bool enable_gqa = false, LOOM_LOC);

}  // namespace nn::attention

// Whether scaled_dot_product_attention may use the fused attention op (on
// by default; off, it is always written out), as
// torch.backends.cuda.enable_flash_sdp, here for every device.
namespace backends {
void enable_flash_sdp(bool enabled);
bool flash_sdp_enabled();
}  // namespace backends

namespace nn {

namespace functional {
using loom::scaled_dot_product_attention;
}  // namespace functional

struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads) : embed_dim_(embed_dim), num_heads_(num_heads) {}
  LOOM_ARG(MultiheadAttentionOptions, int64_t, embed_dim, 0)
  LOOM_ARG(MultiheadAttentionOptions, int64_t, num_heads, 1)
  LOOM_ARG(MultiheadAttentionOptions, double, dropout, 0.0)
  LOOM_ARG(MultiheadAttentionOptions, bool, bias, true)
};

// libtorch's layout: query [L, N, E], key and value [S, N, E] (or unbatched
// [L, E]). Parameters in_proj_weight [3E, E], in_proj_bias [3E], out_proj.
class MultiheadAttentionImpl : public Module {
 public:
  explicit MultiheadAttentionImpl(const MultiheadAttentionOptions& options);
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttentionImpl(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  void reset_parameters();
  // key_padding_mask [N, S] and attn_mask [L, S] or [N H, L, S]: a true
  // element masks its position out; a float one is added to the scores.
  // Returns the output and, with need_weights, the attention weights
  // ([N, L, S] averaged over heads, or [N, H, L, S]).
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = true,
                                     const Tensor& attn_mask = {}, bool average_attn_weights = true, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  MultiheadAttentionOptions options;
  Tensor in_proj_weight, in_proj_bias;
  Linear out_proj{nullptr};
};
LOOM_MODULE(MultiheadAttention);

// ReLU, GELU (kReLU, kGELU) or any function of a tensor.
class TransformerActivation {
 public:
  TransformerActivation(Nonlinearity n);  // NOLINT: as libtorch's activation_t
  TransformerActivation(std::function<Tensor(const Tensor&)> f) : f_(std::move(f)) {}  // NOLINT
  Tensor operator()(const Tensor& x) const { return f_(x); }
  const char* name() const { return name_; }

 private:
  std::function<Tensor(const Tensor&)> f_;
  const char* name_ = "function";
};

struct TransformerEncoderLayerOptions {
  TransformerEncoderLayerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  LOOM_ARG(TransformerEncoderLayerOptions, int64_t, d_model, 0)
  LOOM_ARG(TransformerEncoderLayerOptions, int64_t, nhead, 1)
  LOOM_ARG(TransformerEncoderLayerOptions, int64_t, dim_feedforward, 2048)
  LOOM_ARG(TransformerEncoderLayerOptions, double, dropout, 0.1)
  LOOM_ARG(TransformerEncoderLayerOptions, TransformerActivation, activation, kReLU)
};

// Post-norm, as libtorch's: x = norm1(x + dropout1(self_attn(x))); x =
// norm2(x + dropout2(linear2(dropout(activation(linear1(x)))))). src [S, N, E].
class TransformerEncoderLayerImpl : public Module {
 public:
  explicit TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& options);
  TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead)
      : TransformerEncoderLayerImpl(TransformerEncoderLayerOptions(d_model, nhead)) {}
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {}, LOOM_LOC);
  Tensor forward(const Tensor& src, SourceLoc loc) { return forward(src, Tensor(), Tensor(), loc); }
  void pretty_print(std::ostream& os) const override;
  TransformerEncoderLayerOptions options;
  MultiheadAttention self_attn{nullptr};
  Linear linear1{nullptr}, linear2{nullptr};
  Dropout dropout{nullptr}, dropout1{nullptr}, dropout2{nullptr};
  LayerNorm norm1{nullptr}, norm2{nullptr};
};
LOOM_MODULE(TransformerEncoderLayer);

struct TransformerEncoderOptions {
  TransformerEncoderOptions(TransformerEncoderLayer encoder_layer, int64_t num_layers)
      : encoder_layer_(std::move(encoder_layer)), num_layers_(num_layers) {}
  LOOM_ARG(TransformerEncoderOptions, TransformerEncoderLayer, encoder_layer, nullptr)
  LOOM_ARG(TransformerEncoderOptions, int64_t, num_layers, 1)
  // A final normalization (LayerNorm), or none.
  LOOM_ARG(TransformerEncoderOptions, LayerNorm, norm, nullptr)
};

// num_layers copies of encoder_layer (same options, its parameters copied,
// as libtorch's clone), applied in order, then norm.
class TransformerEncoderImpl : public Module {
 public:
  explicit TransformerEncoderImpl(const TransformerEncoderOptions& options);
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {}, LOOM_LOC);
  Tensor forward(const Tensor& src, SourceLoc loc) { return forward(src, Tensor(), Tensor(), loc); }
  void pretty_print(std::ostream& os) const override { os << "TransformerEncoder"; }
  TransformerEncoderOptions options;
  ModuleList layers{nullptr};
  LayerNorm norm{nullptr};
};
LOOM_MODULE(TransformerEncoder);

}  // namespace nn
}  // namespace loom
#pragma GCC visibility pop
