// scaled_dot_product_attention against softmax(q kᵀ s + mask) v written out
// in float64, the fused op against the written-out one (masks as code and
// as bool tensors, FlexAttention's mask_mods), MultiheadAttention against
// its projections done by hand, the encoder layers against their
// definition; gradients; train/eval.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "gradcheck.h"
#include "test_util.h"

namespace {

namespace nn = loom::nn;
namespace F = loom::nn::functional;
using loom::Tensor;
using loom_test::all_close;
using loom_test::gradcheck;
using loom_test::input;
using T = std::vector<Tensor>;
using V = std::vector<double>;

class AttentionTest : public loom_test::BackendTest {};

// One head: q [L, E], k [S, E], v [S, Ev]; allowed(i, j) says which scores count.
template <class Allowed>
V attention_reference(const V& q, const V& k, const V& v, int64_t l, int64_t s, int64_t e, int64_t ev, double scale,
                      Allowed allowed) {
  V out;
  for (int64_t i = 0; i < l; ++i) {
    V w(s);
    double m = -std::numeric_limits<double>::infinity(), z = 0;
    for (int64_t j = 0; j < s; ++j) {
      double d = 0;
      for (int64_t c = 0; c < e; ++c) d += q[i * e + c] * k[j * e + c];
      w[j] = allowed(i, j) ? d * scale : -std::numeric_limits<double>::infinity();
      m = std::max(m, w[j]);
    }
    for (int64_t j = 0; j < s; ++j) z += w[j] = std::exp(w[j] - m);
    for (int64_t c = 0; c < ev; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < s; ++j) acc += w[j] / z * v[j * ev + c];
      out.push_back(acc);
    }
  }
  return out;
}

// `attend(q, k, v)` with the fused op on and then off (written out:
// backends::enable_flash_sdp(false)): the values and the three gradients
// against `go` agree within the dtype's tolerance, scaled by the largest
// written-out value. Returns the fused run's out, dq, dk, dv.
using Attend = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;
std::vector<Tensor> fused_matches_written(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& go,
                                          const Attend& attend) {
  auto run = [&](bool fused) {
    loom::backends::enable_flash_sdp(fused);
    Tensor out = attend(q, k, v);
    loom::backends::enable_flash_sdp(true);
    if (fused)  // the fused op's rule, under the view back to [B, H, L, Dv]
      EXPECT_EQ(out.grad_fn()->next_edge(0).function->name(), "ScaledDotProductFlashAttentionBackward0");
    auto g = loom::autograd::grad({out}, {q, k, v}, {go});
    return std::vector<Tensor>{out, g[0], g[1], g[2]};
  };
  const std::vector<Tensor> fused = run(true), written = run(false);
  const loom::ScalarType dt = q.dtype();
  const double tol = dt == loom::kDouble ? 1e-11 : dt == loom::kFloat ? 2e-5 : dt == loom::kHalf ? 1e-2 : 3e-2;
  const char* what[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < 4; ++i) {
    const double scale = std::max(1.0, written[i].abs().max().to(loom::kDouble).item<double>());
    EXPECT_FALSE(written[i].isnan().any().item<bool>()) << what[i];
    EXPECT_TRUE(all_close(fused[i].to(loom::kDouble), written[i].to_vector<double>(), 0.0, tol * scale)) << what[i];
  }
  return fused;
}

TEST_P(AttentionTest, ScaledDotProductAttentionFollowsItsFormula) {
  Tensor q = input({2, 5, 4}, 61), k = input({2, 6, 4}, 62), v = input({2, 6, 3}, 63);
  const V qv = q.to_vector<double>(), kv = k.to_vector<double>(), vv = v.to_vector<double>();
  auto per_head = [&](auto allowed, double scale) {
    V out;
    for (int h = 0; h < 2; ++h) {
      V r = attention_reference(V(qv.begin() + h * 20, qv.begin() + h * 20 + 20), V(kv.begin() + h * 24, kv.begin() + h * 24 + 24),
                                V(vv.begin() + h * 18, vv.begin() + h * 18 + 18), 5, 6, 4, 3, scale, allowed);
      out.insert(out.end(), r.begin(), r.end());
    }
    return out;
  };
  const double s = 0.5;
  EXPECT_TRUE(all_close(loom::scaled_dot_product_attention(q, k, v), per_head([](int64_t, int64_t) { return true; }, s)));
  EXPECT_TRUE(all_close(loom::scaled_dot_product_attention(q, k, v, std::nullopt, 0, /*is_causal=*/true),
                        per_head([](int64_t i, int64_t j) { return j <= i; }, s)));
  Tensor mask = loom::tensor(std::vector<int64_t>{1, 0, 1, 1, 0, 1}).gt(0);  // keys 1 and 4 masked out
  EXPECT_TRUE(all_close(F::scaled_dot_product_attention(q, k, v, mask, 0, false, 0.3),
                        per_head([](int64_t, int64_t j) { return j != 1 && j != 4; }, 0.3)));
  Tensor additive = loom::where(mask, loom::zeros({6}, loom::kDouble), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(all_close(loom::scaled_dot_product_attention(q, k, v, additive),
                        per_head([](int64_t, int64_t j) { return j != 1 && j != 4; }, s)));
  // Grouped-query attention: 4 query heads over 2 key/value heads.
  Tensor q4 = input({4, 5, 4}, 64);
  Tensor gqa = loom::scaled_dot_product_attention(q4, k, v, std::nullopt, 0, false, std::nullopt, true);
  Tensor by_hand = loom::scaled_dot_product_attention(
      q4, loom::stack({k[0], k[0], k[1], k[1]}), loom::stack({v[0], v[0], v[1], v[1]}));
  EXPECT_TRUE(all_close(gqa, by_hand.to_vector<double>(), 1e-12, 1e-12));
  EXPECT_TRUE(gradcheck(
      [](const T& t) { return loom::scaled_dot_product_attention(t[0], t[1], t[2], std::nullopt, 0, true); },
      {input({1, 3, 2}, 65), input({1, 3, 2}, 66), input({1, 3, 2}, 67)}));
  EXPECT_LOOM_ERROR(loom::scaled_dot_product_attention(q, input({2, 6, 3}, 1), v), "scaled_dot_product_attention",
                    "expected query");
}

// The fused attention op (one Attention node forward, AttentionGradQ and
// AttentionGradKV backward) against the same attention written out
// (backends::enable_flash_sdp(false)): values and gradients, over sizes that
// are not multiples of the kernels' blocks, L above and below S, Dv != D.
TEST_P(AttentionTest, FusedOpMatchesTheWrittenOutOne) {
  struct Case {
    int64_t b, h, l, s, d, dv;
    bool causal;
  };
  const std::vector<loom::ScalarType> dtypes =
      on_gpu() ? std::vector<loom::ScalarType>{loom::kBFloat16, loom::kHalf}
               : std::vector<loom::ScalarType>{loom::kDouble, loom::kFloat, loom::kBFloat16, loom::kHalf};
  // On a GPU the fused op takes bfloat16 or float16 with equal head dims of 32, 64 or 128.
  for (const Case c : {Case{1, 1, 1, 1, 8, 8, true}, Case{2, 3, 70, 70, 16, 16, true}, Case{1, 2, 45, 100, 8, 4, false},
                       Case{1, 2, 100, 45, 8, 8, true}, Case{2, 1, 65, 130, 64, 64, false}, Case{1, 2, 200, 130, 32, 32, true},
                       Case{2, 2, 129, 129, 128, 128, true}, Case{1, 1, 1, 1, 64, 64, true}}) {
    for (loom::ScalarType dt : dtypes) {
      const bool gpu_shape = c.d == c.dv && (c.d == 32 || c.d == 64 || c.d == 128);
      if (on_gpu() && !gpu_shape) continue;
      SCOPED_TRACE(::testing::Message() << "[" << c.b << ", " << c.h << ", " << c.l << "/" << c.s << ", " << c.d << "/"
                                        << c.dv << "] causal " << c.causal << " " << dt);
      auto leaf = [&](std::vector<int64_t> shape, uint32_t seed) {
        return input(shape, seed).to(dt).detach().requires_grad_();
      };
      const Tensor q = leaf({c.b, c.h, c.l, c.d}, 1), k = leaf({c.b, c.h, c.s, c.d}, 2), v = leaf({c.b, c.h, c.s, c.dv}, 3);
      const Tensor go = input({c.b, c.h, c.l, c.dv}, 4).to(dt);
      fused_matches_written(q, k, v, go, [&](const Tensor& query, const Tensor& key, const Tensor& value) {
        return loom::scaled_dot_product_attention(query, key, value, std::nullopt, 0.0, c.causal);
      });
    }
  }
}

// sliding_window_attention: key j seen by query i when i - w < j <= i. The
// fused op against the same mask written out, values and gradients; a
// window of 1 is each row's own value; a new width compiles nothing.
TEST_P(AttentionTest, SlidingWindowIsCodeAndARuntimeScalar) {
  const loom::ScalarType dt = on_gpu() ? loom::kBFloat16 : loom::kFloat;
  const int64_t d = on_gpu() ? 64 : 16;
  for (const int64_t w : {1, 5, 40, 200}) {
    for (const int64_t s : {100, 130}) {  // S >= L: every row sees a key
      SCOPED_TRACE(::testing::Message() << "window " << w << ", S " << s);
      auto leaf = [&](std::vector<int64_t> shape, uint32_t seed) { return input(shape, seed).to(dt).detach().requires_grad_(); };
      const Tensor q = leaf({2, 2, 100, d}, 11), k = leaf({2, 2, s, d}, 12), v = leaf({2, 2, s, d}, 13);
      const Tensor go = input({2, 2, 100, d}, 14).to(dt);
      const std::vector<Tensor> fused =
          fused_matches_written(q, k, v, go, [&](const Tensor& query, const Tensor& key, const Tensor& value) {
            return loom::sliding_window_attention(query, key, value, w);
          });
      if (w == 1 && s >= 100)  // each query sees only its own key: out is v's row
        EXPECT_TRUE(all_close(fused[0].to(loom::kDouble), v.slice(2, 0, 100).to(loom::kDouble).to_vector<double>(), 0.0, 1e-6));
    }
  }
  // Another width of the same shapes replays what the first compiled.
  const Tensor q = input({1, 2, 64, d}, 15).to(dt), k = input({1, 2, 64, d}, 16).to(dt);
  loom::sync();
  loom::sliding_window_attention(q, k, k, 3).sum().item<double>();
  const int64_t compiles = loom::metrics().cache_misses;
  loom::sliding_window_attention(q, k, k, 9).sum().item<double>();
  EXPECT_EQ(loom::metrics().cache_misses, compiles);
  EXPECT_LOOM_ERROR(loom::sliding_window_attention(q, k, k, 0), "sliding_window_attention", "at least 1");
}

TEST_P(AttentionTest, FusedOpsGradientsAgainstFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const T& t) { return loom::scaled_dot_product_attention(t[0], t[1], t[2]); },
                        {input({2, 4, 3}, 81), input({2, 6, 3}, 82), input({2, 6, 2}, 83)}));
  EXPECT_TRUE(gradcheck(
      [](const T& t) { return loom::scaled_dot_product_attention(t[0], t[1], t[2], std::nullopt, 0, true, 0.7); },
      {input({1, 2, 5, 3}, 84), input({1, 2, 4, 3}, 85), input({1, 2, 4, 3}, 86)}));
  // A backward that is itself differentiated takes the written-out rule.
  EXPECT_TRUE(loom_test::gradgradcheck(
      [](const T& t) { return loom::scaled_dot_product_attention(t[0], t[1], t[2], std::nullopt, 0, true); },
      {input({1, 3, 2}, 87), input({1, 3, 2}, 88), input({1, 3, 2}, 89)}));
}

TEST_P(AttentionTest, MultiheadAttentionProjectsAttendsAndMasks) {
  loom::manual_seed(7);
  nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(4, 2));
  mha->to(loom::kDouble);
  Tensor x = input({3, 2, 4}, 71);  // [L, N, E]
  Tensor pad = loom::tensor(std::vector<int64_t>{0, 0, 1, 0, 0, 0}).reshape({2, 3}).gt(0);  // sample 0: key 2 ignored
  auto [out, weights] = mha(x, x, x, pad);
  ASSERT_EQ(out.sizes().vec(), (std::vector<int64_t>{3, 2, 4}));
  ASSERT_EQ(weights.sizes().vec(), (std::vector<int64_t>{2, 3, 3}));
  // By hand: per sample and head, softmax of scaled scores over allowed keys.
  const Tensor w = mha->in_proj_weight, b = mha->in_proj_bias;
  std::vector<Tensor> samples;
  for (int64_t n = 0; n < 2; ++n) {
    Tensor xs = x.select(1, n);  // [L, E]
    Tensor q = F::linear(xs, w.slice(0, 0, 4), b.slice(0, 0, 4)), k = F::linear(xs, w.slice(0, 4, 8), b.slice(0, 4, 8)),
           v = F::linear(xs, w.slice(0, 8, 12), b.slice(0, 8, 12));
    std::vector<Tensor> heads;
    for (int64_t h = 0; h < 2; ++h) {
      Tensor keep = n == 0 ? loom::tensor(std::vector<int64_t>{1, 1, 0}).gt(0) : loom::ones({3}, loom::kBool);
      heads.push_back(loom::scaled_dot_product_attention(q.slice(1, 2 * h, 2 * h + 2), k.slice(1, 2 * h, 2 * h + 2),
                                                         v.slice(1, 2 * h, 2 * h + 2), keep));
    }
    samples.push_back(mha->out_proj(loom::cat(heads, 1)));
  }
  EXPECT_TRUE(all_close(out, loom::stack(samples, 1).to_vector<double>(), 1e-9, 1e-12));
  const V wv = weights.to_vector<double>();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(wv[i * 3 + 2], 0.0);  // the padded key of sample 0
  auto [single, single_w] = mha(x.select(1, 1), x.select(1, 1), x.select(1, 1));
  EXPECT_TRUE(all_close(single, samples[1].to_vector<double>(), 1e-9, 1e-12));
  EXPECT_TRUE(gradcheck([&](const T& t) { return std::get<0>(mha(t[0], t[0], t[0])); }, {input({2, 1, 4}, 72)}));
}

TEST_P(AttentionTest, EncoderLayersFollowTheirDefinition) {
  loom::manual_seed(8);
  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(4, 2).dim_feedforward(8).dropout(0.5));
  layer->to(loom::kDouble);
  layer->eval();  // dropout off
  Tensor x = input({3, 2, 4}, 81);
  Tensor attended = std::get<0>(layer->self_attn(x, x, x));
  Tensor h = layer->norm1(x + attended);
  Tensor want = layer->norm2(h + layer->linear2(loom::relu(layer->linear1(h))));
  EXPECT_TRUE(all_close(layer(x), want.to_vector<double>(), 1e-9, 1e-12));
  nn::TransformerEncoder encoder(nn::TransformerEncoderOptions(layer, 2));
  encoder->to(loom::kDouble);
  encoder->eval();
  EXPECT_EQ(encoder->layers->size(), 2u);
  // Both copies start with the layer's parameters, so twice the layer.
  EXPECT_TRUE(all_close(encoder(x), layer(layer(x)).to_vector<double>(), 1e-9, 1e-12));
  EXPECT_EQ(encoder->named_parameters().size(), 2 * layer->named_parameters().size());
  layer->train();
  loom::manual_seed(1);
  const V a = layer(x).to_vector<double>();
  loom::manual_seed(2);
  EXPECT_FALSE(all_close(layer(x), a, 1e-9, 1e-12));  // dropout is on in training
}

// fused_matches_written for scaled_dot_product_attention with a bool
// `mask`, q [b, h, l, d], k and v [b, h, s, d] (sizes in that order).
std::vector<Tensor> fused_and_written_agree(const std::vector<int64_t>& bhlsd, const Tensor& mask, loom::ScalarType dt) {
  const int64_t b = bhlsd[0], h = bhlsd[1], l = bhlsd[2], s = bhlsd[3], d = bhlsd[4];
  auto leaf = [&](std::vector<int64_t> shape, uint32_t seed) { return input(shape, seed).to(dt).detach().requires_grad_(); };
  return fused_matches_written(leaf({b, h, l, d}, 22), leaf({b, h, s, d}, 23), leaf({b, h, s, d}, 24),
                               input({b, h, l, d}, 25).to(dt),
                               [&](const Tensor& query, const Tensor& key, const Tensor& value) {
                                 return loom::scaled_dot_product_attention(query, key, value, mask);
                               });
}

// A bool mask tensor takes the fused op (the mask read as [P, R, S] planes
// beside the code, api/src/nn/attention.cpp mask_planes): values and
// gradients against the same mask written out, for masks that vary along
// every batch dim, some of them, or none; a row whose keys are all hidden
// gives 0 both ways (PyTorch's safe softmax).
TEST_P(AttentionTest, BoolMasksTakeTheFusedOp) {
  const int64_t b = 2, h = 3, l = 37, s = 70;
  const int64_t d = on_gpu() ? 64 : 8;
  const std::vector<loom::ScalarType> dtypes =
      on_gpu() ? std::vector<loom::ScalarType>{loom::kBFloat16, loom::kHalf}
               : std::vector<loom::ScalarType>{loom::kDouble, loom::kFloat, loom::kBFloat16};
  const Tensor random = input({b, h, l, s}, 21).gt(0.3);  // about a third of the pairs visible
  Tensor lengths = loom::tensor(std::vector<int64_t>{s, 0}).view({b, 1, 1, 1});  // sample 1 sees no key
  const Tensor padding = loom::arange(s).view({1, 1, 1, s}).lt(lengths);
  Tensor banded = loom::arange(s).sub(loom::arange(l).unsqueeze(1)).abs().le(9);  // [L, S]
  const std::vector<std::pair<const char*, Tensor>> masks = {
      {"[B,H,L,S]", random}, {"[B,1,1,S] padding, one sample all hidden", padding}, {"[L,S] band", banded},
      {"[1,H,1,S]", random.select(0, 0).select(1, 0).unsqueeze(1)}, {"[S]", random[0][0][0]},
      {"[B,1,L,S]", random.select(1, 2).unsqueeze(1)}};
  for (loom::ScalarType dt : dtypes)
    for (const auto& [name, mask] : masks) {
      SCOPED_TRACE(::testing::Message() << name << " " << dt);
      const std::vector<Tensor> fused = fused_and_written_agree({b, h, l, s, d}, mask, dt);
      if (mask.dim() == 4 && mask.size(0) == b && mask.size(2) == 1)  // the padding mask: sample 1 is all 0
        EXPECT_EQ(fused[0][1].abs().max().to(loom::kDouble).item<double>(), 0.0);
    }
  // Longer rows: whole key tiles (and, backward, query tiles) that the mask
  // hides from a block are skipped, and the rest still agree.
  const int64_t l2 = 200, s2 = 300;
  Tensor lengths2 = loom::tensor(std::vector<int64_t>{100, 300}).view({b, 1, 1, 1});
  const Tensor band2 = loom::arange(s2).sub(loom::arange(l2).unsqueeze(1)).abs().le(20);
  for (const auto& [name, mask] : std::vector<std::pair<const char*, Tensor>>{
           {"[L,S] narrow band", band2}, {"[B,1,1,S] padding", loom::arange(s2).view({1, 1, 1, s2}).lt(lengths2)}}) {
    SCOPED_TRACE(name);
    fused_and_written_agree({b, h, l2, s2, d}, mask, dtypes.front() == loom::kDouble ? loom::kFloat : dtypes.front());
  }
  const Tensor q = input({b, h, l, d}, 26), k = input({b, h, s, d}, 27);
  EXPECT_LOOM_ERROR(loom::scaled_dot_product_attention(q, k, k, input({b, 2, 1, s}, 28).gt(0)), "scaled_dot_product_attention",
                    "does not broadcast");
}

TEST_P(AttentionTest, MaskedFusedOpsGradientsAgainstFiniteDifferences) {
  const Tensor keys = loom::tensor(std::vector<int64_t>{1, 0, 1, 1, 1, 0, 0, 1}).gt(0).view({2, 1, 1, 4});
  EXPECT_TRUE(gradcheck([&](const T& t) { return loom::scaled_dot_product_attention(t[0], t[1], t[2], keys); },
                        {input({2, 2, 3, 3}, 91), input({2, 2, 4, 3}, 92), input({2, 2, 4, 2}, 93)}));
  const Tensor pairs = input({3, 4}, 94).gt(-0.2);
  EXPECT_TRUE(gradcheck([&](const T& t) { return loom::scaled_dot_product_attention(t[0], t[1], t[2], pairs); },
                        {input({2, 3, 3}, 95), input({2, 4, 3}, 96), input({2, 4, 3}, 97)}));
  EXPECT_TRUE(loom_test::gradgradcheck(
      [&](const T& t) { return loom::scaled_dot_product_attention(t[0], t[1], t[2], keys.select(0, 0)); },
      {input({1, 3, 2}, 98), input({1, 4, 2}, 99), input({1, 4, 2}, 100)}));
}

// FlexAttention's mask_mod: a function of (b, h, q_idx, kv_idx) recorded
// over index tensors, so the mask is code kept at the shape it varies in.
TEST_P(AttentionTest, FlexAttentionMaskModsAreCode) {
  namespace A = loom::nn::attention;
  const loom::Device dev = loom::default_device();
  const int64_t b = 2, h = 2, l = 33, s = 33;
  const int64_t d = on_gpu() ? 32 : 4;
  const loom::ScalarType dt = on_gpu() ? loom::kBFloat16 : loom::kDouble;
  const Tensor q = input({b, h, l, d}, 31).to(dt), k = input({b, h, s, d}, 32).to(dt), v = input({b, h, s, d}, 33).to(dt);
  auto causal = [](const Tensor&, const Tensor&, const Tensor& qi, const Tensor& kj) { return kj.le(qi); };
  const A::BlockMask cm = A::create_block_mask(causal, std::nullopt, std::nullopt, l, s, dev);
  EXPECT_EQ(cm.mask.sizes().vec(), (std::vector<int64_t>{1, 1, l, s}));
  const double tol = on_gpu() ? 2e-2 : 1e-12;
  EXPECT_TRUE(all_close(A::flex_attention(q, k, v, cm).to(loom::kDouble),
                        loom::scaled_dot_product_attention(q, k, v, std::nullopt, 0, true).to(loom::kDouble).to_vector<double>(),
                        tol, tol));
  // Per-sample lengths and a bidirectional prefix: the mask follows b.
  const Tensor lengths = loom::tensor(std::vector<int64_t>{20, 33}).to(dev);
  auto prefix_lm = [&](const Tensor& bi, const Tensor&, const Tensor& qi, const Tensor& kj) {
    const Tensor len = lengths.index_select(0, bi.flatten()).view({-1, 1, 1, 1});
    return kj.le(qi).logical_or(kj.lt(5)).logical_and(kj.lt(len));
  };
  const A::BlockMask pm = A::create_block_mask(prefix_lm, b, std::nullopt, l, s, dev);
  EXPECT_EQ(pm.mask.sizes().vec(), (std::vector<int64_t>{b, 1, l, s}));
  const Tensor out = A::flex_attention(q, k, v, pm, 0.4);
  const V qv = q.to(loom::kDouble).to_vector<double>(), kv = k.to(loom::kDouble).to_vector<double>(),
          vv = v.to(loom::kDouble).to_vector<double>();
  V want;
  for (int64_t n = 0; n < b * h; ++n) {
    const int64_t len = n / h == 0 ? 20 : 33;
    V r = attention_reference(V(qv.begin() + n * l * d, qv.begin() + (n + 1) * l * d),
                              V(kv.begin() + n * s * d, kv.begin() + (n + 1) * s * d),
                              V(vv.begin() + n * s * d, vv.begin() + (n + 1) * s * d), l, s, d, d, 0.4,
                              [&](int64_t i, int64_t j) { return (j <= i || j < 5) && j < len; });
    want.insert(want.end(), r.begin(), r.end());
  }
  EXPECT_TRUE(all_close(out.to(loom::kDouble), want, tol, tol));
  // The same mask_mod again at the same length replays; at a new length it
  // is the same code, no mask tensor to make.
  loom::sync();
  A::flex_attention(q, k, v, A::create_block_mask(prefix_lm, b, std::nullopt, l, s, dev), 0.4).sum().item<double>();
  const int64_t compiles = loom::metrics().cache_misses;
  A::flex_attention(q, k, v, A::create_block_mask(prefix_lm, b, std::nullopt, l, s, dev), 0.4).sum().item<double>();
  EXPECT_EQ(loom::metrics().cache_misses, compiles);
  const Tensor q2 = input({b, h, 17, d}, 34).to(dt);
  EXPECT_EQ(A::flex_attention(q2, q2, q2, A::create_block_mask(prefix_lm, b, std::nullopt, 17, 17, dev)).size(2), 17);
  EXPECT_LOOM_ERROR(A::flex_attention(q2, q2, q2, pm), "flex_attention", "Q_LEN");
  EXPECT_LOOM_ERROR(A::create_block_mask([](const Tensor& bi, const Tensor&, const Tensor&, const Tensor&) { return bi; },
                                         b, h, l, s, dev),
                    "create_block_mask", "bool");
}

// MultiheadAttention without weights takes the fused op with its masks
// (true: hidden) folded into one; with weights it is written out. Both agree.
TEST_P(AttentionTest, MultiheadAttentionWithoutWeightsIsFused) {
  loom::manual_seed(17);
  const int64_t e = on_gpu() ? 128 : 8, heads = 2, l = 6, n = 3;
  const loom::ScalarType dt = on_gpu() ? loom::kBFloat16 : loom::kDouble;
  nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(e, heads));
  mha->to(dt);
  const Tensor x = input({l, n, e}, 41).to(dt).detach().requires_grad_();
  const Tensor pad = loom::tensor(std::vector<int64_t>{0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}).view({n, l}).gt(0);
  const Tensor future = loom::ones({l, l}, loom::kBool).triu(1);  // true: not allowed
  auto [fused, no_weights] = mha(x, x, x, pad, /*need_weights=*/false, future);
  EXPECT_FALSE(no_weights.defined());
  auto [written, weights] = mha(x, x, x, pad, /*need_weights=*/true, future);
  const double tol = on_gpu() ? 3e-2 : 1e-10;
  EXPECT_TRUE(all_close(fused.to(loom::kDouble), written.to(loom::kDouble).to_vector<double>(), tol, tol));
  const Tensor gf = loom::autograd::grad({fused.sum()}, {x})[0], gw = loom::autograd::grad({written.sum()}, {x})[0];
  const double gscale = std::max(1.0, gw.abs().max().to(loom::kDouble).item<double>());
  EXPECT_TRUE(all_close(gf.to(loom::kDouble), gw.to(loom::kDouble).to_vector<double>(), 0.0, tol * gscale));
}

// Attention written out by hand (minGPT's masked_fill form, and under
// autocast) is recorded as the fused op in inference: the same values as
// with the fused op off, where it stays two products and a softmax.
TEST_P(AttentionTest, WrittenOutAttentionInInferenceMatches) {
  const int64_t b = 2, h = 3, t = 70, d = on_gpu() ? 64 : 8;
  const loom::ScalarType dt = on_gpu() ? loom::kBFloat16 : loom::kFloat;
  const Tensor q = input({b, h, t, d}, 51).to(dt), k = input({b, h, t, d}, 52).to(dt), v = input({b, h, t, d}, 53).to(dt);
  const Tensor bias = loom::ones({t, t}).tril().view({1, 1, t, t});
  const Tensor qf = q.to(loom::kFloat), kf = k.to(loom::kFloat), vf = v.to(loom::kFloat);
  auto attend = [&](bool autocast) {
    loom::NoGradGuard no_grad;
    std::optional<loom::autocast::AutocastMode> amp;
    if (autocast) amp.emplace(loom::default_device().type(), loom::kBFloat16);
    const Tensor& qq = autocast ? qf : q;
    Tensor att = loom::matmul(qq, (autocast ? kf : k).transpose(-2, -1)) * (1.0 / std::sqrt(double(d)));
    att = att.masked_fill(bias.eq(0), -std::numeric_limits<double>::infinity());
    return loom::matmul(loom::softmax(att, -1), autocast ? vf : v).to(loom::kDouble);
  };
  for (const bool autocast : {false, true}) {
    SCOPED_TRACE(autocast ? "autocast" : "plain");
    const Tensor fused = attend(autocast);
    loom::backends::enable_flash_sdp(false);
    const Tensor written = attend(autocast);
    loom::backends::enable_flash_sdp(true);
    const double tol = on_gpu() || autocast ? 3e-2 : 1e-5;
    EXPECT_TRUE(all_close(fused, written.to_vector<double>(), tol, tol));
  }
}

LOOM_INSTANTIATE_BACKENDS(AttentionTest);

// A small causal self-attention classifier trains, and its step compiles once.
TEST(Attention, ACausalModelsTrainingStepCompilesOnce) {
  loom::manual_seed(9);
  nn::Linear embed(3, 8), head(8, 2);
  nn::TransformerEncoderLayer block(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0));
  std::vector<Tensor> params;
  for (auto* m : std::vector<nn::Module*>{embed.get(), head.get(), block.get()})
    for (const Tensor& p : m->parameters()) params.push_back(p);
  loom::optim::AdamW opt(params, loom::optim::AdamWOptions(3e-3));
  Tensor x = loom::randn({5, 16, 3});  // [S, N, 3]
  Tensor y = x.sum({0, 2}).gt(0).to(loom::kLong);
  const loom_test::TrainingRun run = loom_test::train_for(40, [&] {
    opt.zero_grad();
    Tensor h = block(embed(x));
    auto loss = loom::cross_entropy_loss(head(h.mean({0})), y);
    loss.backward();
    opt.step();
    return loss.item<float>();
  });
  EXPECT_EQ(run.compiles_after_two, 0);
  EXPECT_LT(run.losses.back(), run.losses.front() * 0.7);
}

}  // namespace
