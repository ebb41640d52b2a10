// bfloat16 tensors: the conversion (round to nearest even), PyTorch's
// promotion rules, and the per-op rounding every backend must share: each
// op computes in float32 and rounds its result once, so a fused chain gives
// the bits of the same ops run one at a time. Reductions and composites
// (softmax, layer norm, matmul) accumulate in float32 and round once.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "test_util.h"

namespace {

using loom::BFloat16;
using loom::Tensor;
using loom_test::BackendTest;
using V = std::vector<double>;

// The float32 value x takes once rounded to bfloat16 (the test's own model
// of the conversion, written independently of loom::BFloat16).
float bf(double x) {
  const float f = static_cast<float>(x);
  if (std::isnan(f)) return f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lsb = (u >> 16) & 1u;
  u = (u + 0x7fffu + lsb) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}
uint16_t bits_of(BFloat16 b) { return b.x; }

V randn_bf(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d(0.0, scale);
  V v(n);
  for (double& x : v) x = bf(d(g));
  return v;
}
Tensor bf16_tensor(const V& v, std::vector<int64_t> sizes) {
  return loom::tensor(v, loom::TensorOptions(loom::kBFloat16)).view(sizes);
}
// One unit in the last place of bfloat16 (8 significant bits), relative.
constexpr double kUlp = 1.0 / 128;

TEST(BFloat16Type, RoundsToNearestEven) {
  EXPECT_EQ(bits_of(BFloat16(1.0f)), 0x3f80);
  EXPECT_EQ(bits_of(BFloat16(-2.0f)), 0xc000);
  EXPECT_EQ(static_cast<float>(BFloat16::from_bits(0x3fc0)), 1.5f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 0x1p-8f)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: the even one is 1 + 2^-6.
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);  // above the tie: up
  EXPECT_TRUE(std::isinf(static_cast<float>(BFloat16(std::numeric_limits<float>::max()))));
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(-std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(static_cast<float>(BFloat16(0x1p-130f)), 0x1p-130f);  // subnormals keep their high bits
  std::mt19937 g(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 100000; ++i) {
    uint32_t u = any(g);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(static_cast<float>(BFloat16(f)), bf(f)) << std::hexfloat << f;
  }
}

TEST(BFloat16Type, PromotesAsPyTorch) {
  using loom::promote_types;
  EXPECT_EQ(promote_types(loom::kBFloat16, loom::kFloat), loom::kFloat);
  EXPECT_EQ(promote_types(loom::kFloat, loom::kBFloat16), loom::kFloat);
  EXPECT_EQ(promote_types(loom::kBFloat16, loom::kDouble), loom::kDouble);
  EXPECT_EQ(promote_types(loom::kBFloat16, loom::kLong), loom::kBFloat16);
  EXPECT_EQ(promote_types(loom::kInt, loom::kBFloat16), loom::kBFloat16);
  EXPECT_EQ(promote_types(loom::kBool, loom::kBFloat16), loom::kBFloat16);
  EXPECT_EQ(loom::element_size(loom::kBFloat16), 2u);
  EXPECT_TRUE(loom::is_floating_point(loom::kBFloat16));
  EXPECT_EQ(std::string(loom::to_string(loom::kBFloat16)), "BFloat16");
}

class BFloat16Test : public BackendTest {};

TEST_P(BFloat16Test, ConvertsAndPromotes) {
  const V x = {1.0, 1.0 + 1.0 / 256, -3.14159, 1e-3, 65504.0, 3e38};
  Tensor f = loom::tensor(x, loom::TensorOptions(loom::kFloat));
  Tensor b = f.to(loom::kBFloat16);
  EXPECT_EQ(b.dtype(), loom::kBFloat16);
  EXPECT_EQ(b.element_size(), 2);
  V want;
  for (double v : x) want.push_back(bf(static_cast<float>(v)));
  EXPECT_EQ(b.to_vector<double>(), want);
  EXPECT_EQ(b.to(loom::kFloat).to_vector<double>(), want);  // widening is exact
  EXPECT_EQ((b + f).dtype(), loom::kFloat);
  EXPECT_EQ((b * 2.5).dtype(), loom::kBFloat16);
  EXPECT_EQ((b + loom::ones({6}, loom::TensorOptions(loom::kLong))).dtype(), loom::kBFloat16);
  EXPECT_EQ(b.to(loom::kInt).to_vector<double>()[2], -3.0);
  EXPECT_FLOAT_EQ(b[2].item<float>(), bf(-3.14159));
}

// Every op rounds: the fused chain equals the model (float math, a rounding
// per op) exactly for +, *, and the one-at-a-time run of the same ops.
TEST_P(BFloat16Test, EachOpRoundsOnceAndFusionKeepsTheBits) {
  const V xs = randn_bf(4099, 1);
  Tensor x = bf16_tensor(xs, {4099});
  Tensor fused = (x * 3 + 1) * x - x * x * 0.5;
  V model;
  for (double v : xs) {
    const float a = bf(bf(static_cast<float>(v) * 3.0f) + 1.0f);
    const float p = bf(a * static_cast<float>(v));
    const float q = bf(bf(static_cast<float>(v) * static_cast<float>(v)) * 0.5f);
    model.push_back(bf(p - q));
  }
  EXPECT_EQ(fused.to_vector<double>(), model);
  // The same ops with a materialization after each: the same bits.
  Tensor a = x * 3; loom::sync();
  a = a + 1; loom::sync();
  a = a * x; loom::sync();
  Tensor q = x * x; loom::sync();
  q = q * 0.5; loom::sync();
  EXPECT_EQ((a - q).to_vector<double>(), model);
}

TEST_P(BFloat16Test, TranscendentalsWithinOneUlp) {
  const V xs = randn_bf(2000, 2, 2.0);
  Tensor x = bf16_tensor(xs, {2000});
  Tensor y = (x * 1.5 + 0.5).tanh().mul(x).sigmoid() + x.exp() * 0.25;
  EXPECT_EQ(y.dtype(), loom::kBFloat16);
  V want;
  for (double v : xs) {
    const float t = bf(std::tanh(bf(bf(static_cast<float>(v) * 1.5f) + 0.5f)));
    const float s = bf(1.0f / (1.0f + std::exp(-bf(t * static_cast<float>(v)))));
    want.push_back(bf(s + bf(bf(std::exp(static_cast<float>(v))) * 0.25f)));
  }
  EXPECT_TRUE(loom_test::all_close(y, want, 2 * kUlp, 1e-30));
}

// Sums accumulate in float32 and round once: 4096 values of ~1 summed in
// bfloat16 would lose everything past 256.
TEST_P(BFloat16Test, ReductionsAccumulateInFloat) {
  const V xs = randn_bf(4096 * 3, 3);
  V shifted;
  for (double v : xs) shifted.push_back(bf(v * 0.1 + 1.0));
  Tensor x = bf16_tensor(shifted, {3, 4096});
  Tensor s = x.sum({1});
  Tensor m = x.mean({1});
  Tensor mx = x.amax({1}, false);
  V want_s, want_m, want_max;
  for (int r = 0; r < 3; ++r) {
    double acc = 0, best = -1e30;
    for (int i = 0; i < 4096; ++i) acc += shifted[r * 4096 + i], best = std::max(best, shifted[r * 4096 + i]);
    want_s.push_back(bf(acc));
    want_m.push_back(bf(acc / 4096));
    want_max.push_back(best);
  }
  EXPECT_EQ(s.dtype(), loom::kBFloat16);
  EXPECT_TRUE(loom_test::all_close(s, want_s, kUlp, 0));
  EXPECT_TRUE(loom_test::all_close(m, want_m, kUlp, 0));
  EXPECT_EQ(mx.to_vector<double>(), want_max);
}

TEST_P(BFloat16Test, SoftmaxAndLayerNormComputeInFloat) {
  const V xs = randn_bf(8 * 300, 4, 3.0);
  Tensor x = bf16_tensor(xs, {8, 300});
  Tensor xf = x.to(loom::kFloat);
  Tensor sm = x.softmax(1);
  EXPECT_EQ(sm.dtype(), loom::kBFloat16);
  V want;
  for (double v : xf.softmax(1).to_vector<double>()) want.push_back(bf(v));
  EXPECT_TRUE(loom_test::all_close(sm, want, kUlp, 1e-30));
  Tensor ln = loom::nn::functional::layer_norm(x, loom::nn::functional::LayerNormFuncOptions({300}).eps(1e-5));
  want.clear();
  for (double v : loom::nn::functional::layer_norm(xf, loom::nn::functional::LayerNormFuncOptions({300}).eps(1e-5)).to_vector<double>())
    want.push_back(bf(v));
  EXPECT_EQ(ln.dtype(), loom::kBFloat16);
  EXPECT_TRUE(loom_test::all_close(ln, want, kUlp, 1e-6));
}

TEST_P(BFloat16Test, MatmulAccumulatesInFloatAndRoundsOnce) {
  for (auto [m, k, n] : {std::tuple{7, 65, 9}, std::tuple{64, 257, 33}, std::tuple{1, 1000, 63}}) {
    const V as = randn_bf(size_t(m) * k, 5), bs = randn_bf(size_t(k) * n, 6);
    Tensor a = bf16_tensor(as, {m, k}), b = bf16_tensor(bs, {k, n});
    Tensor c = a.matmul(b);
    Tensor ct = b.t().matmul(a.t());  // transposed operands
    EXPECT_EQ(c.dtype(), loom::kBFloat16);
    V want(size_t(m) * n), want_t(size_t(m) * n);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        for (int q = 0; q < k; ++q) acc += as[size_t(i) * k + q] * bs[size_t(q) * n + j];
        want[size_t(i) * n + j] = bf(acc);
        want_t[size_t(j) * m + i] = bf(acc);
      }
    // One bfloat16 ulp of the result, plus float32 accumulation error.
    EXPECT_TRUE(loom_test::all_close(c, want, kUlp, 1e-4 * std::sqrt(double(k))));
    EXPECT_TRUE(loom_test::all_close(ct, want_t, kUlp, 1e-4 * std::sqrt(double(k))));
  }
}

TEST_P(BFloat16Test, GradientsKeepTheDtype) {
  const V xs = randn_bf(64, 8);
  Tensor x = bf16_tensor(xs, {8, 8}).detach().requires_grad_();
  Tensor w = bf16_tensor(randn_bf(64, 9), {8, 8}).detach().requires_grad_();
  Tensor loss = (x.matmul(w).tanh() * x).sum();
  loss.backward();
  EXPECT_EQ(x.grad().dtype(), loom::kBFloat16);
  EXPECT_EQ(w.grad().dtype(), loom::kBFloat16);
  // The same in float32 from the same values: bfloat16's gradient is close.
  Tensor xf = x.detach().to(loom::kFloat).requires_grad_();
  Tensor wf = w.detach().to(loom::kFloat).requires_grad_();
  (xf.matmul(wf).tanh() * xf).sum().backward();
  EXPECT_TRUE(loom_test::all_close(x.grad(), xf.grad().to_vector<double>(), 0.05, 0.05));
  EXPECT_TRUE(loom_test::all_close(w.grad(), wf.grad().to_vector<double>(), 0.05, 0.05));
}

TEST_P(BFloat16Test, ViewsIndexingAndRandomNumbers) {
  const V xs = randn_bf(6 * 5, 10);
  Tensor x = bf16_tensor(xs, {6, 5});
  Tensor col = x.t()[2];  // a strided view
  V want;
  for (int r = 0; r < 6; ++r) want.push_back(xs[r * 5 + 2]);
  EXPECT_EQ(col.to_vector<double>(), want);
  Tensor picked = x.index_select(0, loom::tensor(std::vector<int64_t>{4, 0}).to(x.device()));
  EXPECT_EQ(picked[0][1].item<double>(), xs[4 * 5 + 1]);
  Tensor c = loom::cat({x, x * 2}, 0);
  EXPECT_EQ(c.size(0), 12);
  EXPECT_EQ(c[7][3].item<double>(), bf(xs[1 * 5 + 3] * 2));
  x.mul_(0.5);  // in place, through the storage
  EXPECT_EQ(x[1][1].item<double>(), bf(xs[6] * 0.5));
  loom::manual_seed(3);
  Tensor u = loom::rand({1000}, loom::TensorOptions(loom::kBFloat16));
  loom::manual_seed(3);
  Tensor uf = loom::rand({1000}, loom::TensorOptions(loom::kFloat));
  V uf_b;
  for (double v : uf.to_vector<double>()) uf_b.push_back(bf(v));
  EXPECT_EQ(u.to_vector<double>(), uf_b);  // float32's numbers, rounded
}

// The typed library ops (scatter_add, and through it index_select's
// gradient; linspace) on every backend, CUDA's own bfloat16 kernels included.
TEST_P(BFloat16Test, ScatterAddIndexGradientAndLinspace) {
  // Small integers add exactly in bfloat16 in any order (CUDA's atomics
  // pick one); the half-ulp case checks each add is rounded.
  const V xs = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  Tensor x = bf16_tensor(xs, {4, 3});
  Tensor index = loom::tensor(std::vector<int64_t>{3, 0, 3, 3, 1, 0}).view({2, 3}).to(x.device());
  Tensor src = bf16_tensor({1, 2, 4, 8, 16, 32}, {2, 3});
  Tensor y = x.scatter_add(0, index, src);
  EXPECT_EQ(y.dtype(), loom::kBFloat16);
  // y[index[r][c]][c] += src[r][c]: row 3 of column 0 gets two adds.
  EXPECT_EQ(y.to_vector<double>(), (V{1, 2 + 2, 3 + 32, 4, 5 + 16, 6, 7, 8, 9, 10 + 1 + 8, 11, 12 + 4}));
  Tensor big = bf16_tensor({256}, {1});
  Tensor half_ulp = big.scatter_add(0, loom::tensor(std::vector<int64_t>{0}).to(x.device()), bf16_tensor({1}, {1}));
  EXPECT_EQ(half_ulp.item<double>(), bf(256.0 + 1.0));  // 257 ties to even: 256

  // index_select's gradient sums into the rows it picked.
  Tensor w = bf16_tensor(randn_bf(5 * 2, 11), {5, 2}).detach().requires_grad_();
  w.index_select(0, loom::tensor(std::vector<int64_t>{4, 1, 4, 4, 0}).to(x.device())).sum().backward();
  EXPECT_EQ(w.grad().dtype(), loom::kBFloat16);
  EXPECT_EQ(w.grad().to_vector<double>(), (V{1, 1, 1, 1, 0, 0, 0, 0, 3, 3}));

  // linspace: the ends rounded to bfloat16, the steps in float32 from both
  // ends (PyTorch's symmetric rule), each value rounded once.
  for (int64_t n : {1, 2, 7, 100}) {
    Tensor l = loom::linspace(-1.3, 2.7, n, loom::TensorOptions(loom::kBFloat16).device(x.device()));
    const float a = bf(-1.3), b = bf(2.7), step = n > 1 ? (b - a) / static_cast<float>(n - 1) : 0.f;
    V want;
    for (int64_t i = 0; i < n; ++i) {
      const float v = n == 1 ? a : i < n / 2 ? a + step * static_cast<float>(i) : b - step * static_cast<float>(n - 1 - i);
      want.push_back(bf(v));
    }
    EXPECT_EQ(l.to_vector<double>(), want) << "linspace of " << n;
  }
}

LOOM_INSTANTIATE_BACKENDS(BFloat16Test);

}  // namespace
