// float16 tensors: the conversion (IEEE binary16, round to nearest even,
// subnormals, overflow to inf), checked exhaustively on every backend
// against the test's own model, PyTorch's promotion, and the per-op
// rounding every backend shares with bfloat16: each op computes in float32
// and rounds its result once. Reductions and composites (softmax, layer
// norm, matmul) accumulate in float32 and round once.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "test_util.h"

namespace {

using loom::Half;
using loom::Tensor;
using loom_test::BackendTest;
using V = std::vector<double>;

// The float32 value f takes once rounded to float16: the test's own model,
// scaled arithmetic rather than bits. The ulp of f's binade (never below
// the subnormals' 2^-24) divides f exactly; nearbyint rounds half to even.
float hf(double x) {
  const float f = static_cast<float>(x);
  if (std::isnan(f)) return f;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return std::copysign(std::numeric_limits<float>::infinity(), f);
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, std::max(e - 1, -14) - 10);
  return static_cast<float>(std::copysign(std::nearbyint(a / ulp) * ulp, static_cast<double>(f)));
}
// The value of float16 bits, decoded field by field.
float value_of_bits(uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(m, -24);
  else v = std::ldexp(1024 + m, e - 25);
  return static_cast<float>(sign ? -v : v);
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Float32 patterns that test a rounding: every float16 value, the midpoint
// of each neighbouring pair (a tie) and the floats on either side of it,
// the subnormal range's edges, the overflow threshold, and random bits.
std::vector<float> rounding_cases() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = value_of_bits(static_cast<uint16_t>(h)), hi = value_of_bits(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: 11 significant bits + 1
    for (float f : {static_cast<float>(lo), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      v.push_back(f);
      v.push_back(-f);
    }
  }
  for (float f : {65504.0f, 65519.996f, 65520.0f, 65536.0f, 1e30f, std::numeric_limits<float>::infinity(),
                  0x1p-24f, 0x1p-25f, std::nextafter(0x1p-25f, 1.0f), 0x1p-26f, 0x1p-14f, std::nextafter(0x1p-14f, 0.0f),
                  std::numeric_limits<float>::denorm_min(), 0.0f, 1e-40f})
    v.push_back(f), v.push_back(-f);
  std::mt19937 g(11);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200001; ++i) v.push_back(float_of(any(g)));  // odd count: a vector loop's scalar tail too
  return v;
}

V randn_hf(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d(0.0, scale);
  V v(n);
  for (double& x : v) x = hf(d(g));
  return v;
}
Tensor half_tensor(const V& v, std::vector<int64_t> sizes) {
  return loom::tensor(v, loom::TensorOptions(loom::kHalf)).view(sizes);
}
// One unit in the last place of float16 (11 significant bits), relative.
constexpr double kUlp = 1.0 / 1024;

TEST(HalfType, ConvertsExactlyAsTheModel) {
  EXPECT_EQ(Half(1.0f).x, 0x3c00);
  EXPECT_EQ(Half(-2.0f).x, 0xc000);
  EXPECT_EQ(Half(65504.0f).x, 0x7bff);
  EXPECT_EQ(Half(65520.0f).x, 0x7c00);  // the tie with 2^16 rounds to even: inf
  EXPECT_EQ(Half(0x1p-24f).x, 0x0001);
  EXPECT_EQ(Half(0x1p-25f).x, 0x0000);  // the tie with 0: to even
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::signbit(static_cast<float>(Half(-std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = value_of_bits(static_cast<uint16_t>(h)), got = static_cast<float>(Half::from_bits(static_cast<uint16_t>(h)));
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << h;
    else ASSERT_EQ(bits_of(got), bits_of(want)) << h;
  }
  for (float f : rounding_cases()) {
    const float got = value_of_bits(Half(f).x);
    if (std::isnan(f)) ASSERT_TRUE(std::isnan(got)) << std::hexfloat << f;
    else ASSERT_EQ(bits_of(got), bits_of(hf(f))) << std::hexfloat << f;
  }
}

TEST(HalfType, PromotesAsPyTorch) {
  using loom::promote_types;
  EXPECT_EQ(promote_types(loom::kHalf, loom::kFloat), loom::kFloat);
  EXPECT_EQ(promote_types(loom::kHalf, loom::kBFloat16), loom::kFloat);
  EXPECT_EQ(promote_types(loom::kBFloat16, loom::kHalf), loom::kFloat);
  EXPECT_EQ(promote_types(loom::kHalf, loom::kDouble), loom::kDouble);
  EXPECT_EQ(promote_types(loom::kChar, loom::kHalf), loom::kHalf);
  EXPECT_EQ(promote_types(loom::kHalf, loom::kLong), loom::kHalf);
  EXPECT_EQ(loom::element_size(loom::kHalf), 2u);
  EXPECT_TRUE(loom::is_floating_point(loom::kF16));
  EXPECT_EQ(loom::kFloat16, loom::kHalf);
  EXPECT_EQ(std::string(loom::to_string(loom::kHalf)), "Half");
}

class HalfTest : public BackendTest {};

// Every float16 bit pattern widened by the backend's kernel, and the
// rounding cases narrowed by it: the model's values, bit for bit.
TEST_P(HalfTest, ConversionsAreExactOnEveryPattern) {
  std::vector<Half> all(65536 + 3);
  for (size_t i = 0; i < all.size(); ++i) all[i] = Half::from_bits(static_cast<uint16_t>(i));
  Tensor h = loom::from_blob(all.data(), {static_cast<int64_t>(all.size())}, loom::TensorOptions(loom::kHalf));
  const std::vector<float> wide = h.to(loom::kFloat).cpu().to_vector<float>();
  for (size_t i = 0; i < all.size(); ++i) {
    const float want = value_of_bits(static_cast<uint16_t>(i));
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(wide[i])) << i;
    else ASSERT_EQ(bits_of(wide[i]), bits_of(want)) << i;
  }
  std::vector<float> fs = rounding_cases();
  Tensor f = loom::from_blob(fs.data(), {static_cast<int64_t>(fs.size())}, loom::TensorOptions(loom::kFloat));
  Tensor n = f.to(loom::kHalf).cpu();
  const Half* got = n.data_ptr<Half>();
  for (size_t i = 0; i < fs.size(); ++i) {
    const float v = value_of_bits(got[i].x);
    if (std::isnan(fs[i])) ASSERT_TRUE(std::isnan(v)) << std::hexfloat << fs[i];
    else ASSERT_EQ(bits_of(v), bits_of(hf(fs[i]))) << std::hexfloat << fs[i];
  }
  // From float64: through float32, as c10::Half converts a double.
  Tensor d = loom::tensor(V{1.0 + 0x1p-11 + 0x1p-40, 65519.9, -0x1p-25 - 0x1p-60}, loom::TensorOptions(loom::kDouble));
  EXPECT_EQ(d.to(loom::kHalf).to_vector<double>(), (V{hf(1.0 + 0x1p-11 + 0x1p-40), hf(65519.9), hf(-0x1p-25 - 0x1p-60)}));
}

TEST_P(HalfTest, ConvertsAndPromotes) {
  const V x = {1.0, 1.0 + 1.0 / 4096, -3.14159, 1e-3, 65504.0, 7e4, 3e-6};
  Tensor f = loom::tensor(x, loom::TensorOptions(loom::kFloat));
  Tensor b = f.to(loom::kHalf);
  EXPECT_EQ(b.dtype(), loom::kHalf);
  EXPECT_EQ(b.element_size(), 2);
  V want;
  for (double v : x) want.push_back(hf(v));
  EXPECT_EQ(b.to_vector<double>(), want);
  EXPECT_EQ(b.to(loom::kFloat).to_vector<double>(), want);  // widening is exact
  EXPECT_EQ((b + f).dtype(), loom::kFloat);
  EXPECT_EQ((b * 2.5).dtype(), loom::kHalf);
  EXPECT_EQ((b + loom::ones({7}, loom::TensorOptions(loom::kChar))).dtype(), loom::kHalf);
  EXPECT_EQ((b + loom::ones({7}, loom::TensorOptions(loom::kBFloat16))).dtype(), loom::kFloat);
  EXPECT_EQ(b.to(loom::kInt).to_vector<double>()[2], -3.0);
  EXPECT_FLOAT_EQ(b[2].item<float>(), hf(-3.14159));
  EXPECT_EQ(static_cast<float>(b[0].item<Half>()), 1.0f);
}

// Every op rounds: the fused chain equals the model (float math, a rounding
// per op) exactly, and so does the one-at-a-time run of the same ops.
TEST_P(HalfTest, EachOpRoundsOnceAndFusionKeepsTheBits) {
  const V xs = randn_hf(4099, 1, 30.0);
  Tensor x = half_tensor(xs, {4099});
  Tensor fused = (x * 3 + 1) * x - x * x * 0.5;
  V model;
  for (double v : xs) {
    const float a = hf(hf(static_cast<float>(v) * 3.0f) + 1.0f);
    const float p = hf(a * static_cast<float>(v));
    const float q = hf(hf(static_cast<float>(v) * static_cast<float>(v)) * 0.5f);
    model.push_back(hf(p - q));
  }
  EXPECT_EQ(fused.to_vector<double>(), model);
  Tensor a = x * 3; loom::sync();
  a = a + 1; loom::sync();
  a = a * x; loom::sync();
  Tensor q = x * x; loom::sync();
  q = q * 0.5; loom::sync();
  EXPECT_EQ((a - q).to_vector<double>(), model);
  // Overflow gives inf as the model does (x * x past 65504).
  EXPECT_TRUE(std::isinf((half_tensor({300.0}, {1}) * 300).item<double>()));
  EXPECT_EQ((half_tensor({0x1p-14}, {1}) * 0.25).item<double>(), 0x1p-16);  // a subnormal result
}

TEST_P(HalfTest, PointwiseMathWithinOneUlp) {
  const V xs = randn_hf(2000, 2, 2.0);
  Tensor x = half_tensor(xs, {2000});
  Tensor y = (x * 1.5 + 0.5).tanh().mul(x).sigmoid() + x.exp() * 0.25 + x.abs().sqrt() - x.sin();
  EXPECT_EQ(y.dtype(), loom::kHalf);
  V want;
  for (double v : xs) {
    const float f = static_cast<float>(v);
    const float t = hf(std::tanh(hf(hf(f * 1.5f) + 0.5f)));
    const float s = hf(1.0f / (1.0f + std::exp(-hf(t * f))));
    const float e = hf(hf(std::exp(f)) * 0.25f);
    want.push_back(hf(hf(hf(s + e) + hf(std::sqrt(std::fabs(f)))) - hf(std::sin(f))));
  }
  EXPECT_TRUE(loom_test::all_close(y, want, 2 * kUlp, 1e-6));
  Tensor r = half_tensor({0.5, 1.5, 2.5, -0.5, 1023.5}, {5}).round();
  EXPECT_EQ(r.to_vector<double>(), (V{0, 2, 2, -0.0, 1024}));
}

// Sums accumulate in float32 and round once: 4096 values of ~1 summed in
// float16 would stall at 2048.
TEST_P(HalfTest, ReductionsAccumulateInFloat) {
  const V xs = randn_hf(4096 * 3, 3);
  V shifted;
  for (double v : xs) shifted.push_back(hf(v * 0.1 + 1.0));
  Tensor x = half_tensor(shifted, {3, 4096});
  Tensor s = x.sum({1});
  Tensor m = x.mean({1});
  Tensor mx = x.amax({1}, false);
  V want_s, want_m, want_max;
  for (int r = 0; r < 3; ++r) {
    double acc = 0, best = -1e30;
    for (int i = 0; i < 4096; ++i) acc += shifted[r * 4096 + i], best = std::max(best, shifted[r * 4096 + i]);
    want_s.push_back(hf(acc));
    want_m.push_back(hf(acc / 4096));
    want_max.push_back(best);
  }
  EXPECT_EQ(s.dtype(), loom::kHalf);
  EXPECT_TRUE(loom_test::all_close(s, want_s, kUlp, 0));
  EXPECT_TRUE(loom_test::all_close(m, want_m, kUlp, 0));
  EXPECT_EQ(mx.to_vector<double>(), want_max);
  EXPECT_EQ(x.argmax(1).to_vector<double>(), x.to(loom::kFloat).argmax(1).to_vector<double>());
}

TEST_P(HalfTest, SoftmaxAndLayerNormComputeInFloat) {
  const V xs = randn_hf(8 * 300, 4, 3.0);
  Tensor x = half_tensor(xs, {8, 300});
  Tensor xf = x.to(loom::kFloat);
  Tensor sm = x.softmax(1);
  EXPECT_EQ(sm.dtype(), loom::kHalf);
  V want;
  for (double v : xf.softmax(1).to_vector<double>()) want.push_back(hf(v));
  EXPECT_TRUE(loom_test::all_close(sm, want, kUlp, 1e-7));
  Tensor ln = loom::nn::functional::layer_norm(x, loom::nn::functional::LayerNormFuncOptions({300}).eps(1e-5));
  want.clear();
  for (double v : loom::nn::functional::layer_norm(xf, loom::nn::functional::LayerNormFuncOptions({300}).eps(1e-5)).to_vector<double>())
    want.push_back(hf(v));
  EXPECT_EQ(ln.dtype(), loom::kHalf);
  EXPECT_TRUE(loom_test::all_close(ln, want, kUlp, 1e-6));
}

TEST_P(HalfTest, MatmulAccumulatesInFloatAndRoundsOnce) {
  for (auto [m, k, n] : {std::tuple{7, 65, 9}, std::tuple{64, 257, 33}, std::tuple{1, 1000, 63}}) {
    const V as = randn_hf(size_t(m) * k, 5), bs = randn_hf(size_t(k) * n, 6);
    Tensor a = half_tensor(as, {m, k}), b = half_tensor(bs, {k, n});
    Tensor c = a.matmul(b);
    Tensor ct = b.t().matmul(a.t());
    EXPECT_EQ(c.dtype(), loom::kHalf);
    V want(size_t(m) * n), want_t(size_t(m) * n);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        for (int q = 0; q < k; ++q) acc += as[size_t(i) * k + q] * bs[size_t(q) * n + j];
        want[size_t(i) * n + j] = hf(acc);
        want_t[size_t(j) * m + i] = hf(acc);
      }
    EXPECT_TRUE(loom_test::all_close(c, want, kUlp, 1e-4 * std::sqrt(double(k))));
    EXPECT_TRUE(loom_test::all_close(ct, want_t, kUlp, 1e-4 * std::sqrt(double(k))));
  }
}

// A float16 model's gradient is the float32 model's, rounded: each
// gradient op rounds, so within a few float16 ulps of it.
TEST_P(HalfTest, GradientsMatchFloat32Rounded) {
  const V xs = randn_hf(64, 8);
  Tensor x = half_tensor(xs, {8, 8}).detach().requires_grad_();
  Tensor w = half_tensor(randn_hf(64, 9), {8, 8}).detach().requires_grad_();
  Tensor loss = (x.matmul(w).tanh() * x).sum();
  loss.backward();
  EXPECT_EQ(x.grad().dtype(), loom::kHalf);
  EXPECT_EQ(w.grad().dtype(), loom::kHalf);
  Tensor xf = x.detach().to(loom::kFloat).requires_grad_();
  Tensor wf = w.detach().to(loom::kFloat).requires_grad_();
  (xf.matmul(wf).tanh() * xf).sum().backward();
  EXPECT_TRUE(loom_test::all_close(x.grad(), xf.grad().to_vector<double>(), 8 * kUlp, 4e-3));
  EXPECT_TRUE(loom_test::all_close(w.grad(), wf.grad().to_vector<double>(), 8 * kUlp, 4e-3));
  // A layer's parameters in float16 train through the same rule.
  Tensor s = half_tensor({0.5, -1.25, 2.0}, {3}).detach().requires_grad_();
  (s.sigmoid() * s).sum().backward();
  V want;
  for (double v : {0.5, -1.25, 2.0}) {
    const double sg = 1 / (1 + std::exp(-v));
    want.push_back(hf(sg + v * sg * (1 - sg)));
  }
  EXPECT_TRUE(loom_test::all_close(s.grad(), want, 8 * kUlp, 0));
}

TEST_P(HalfTest, ViewsIndexingAndRandomNumbers) {
  const V xs = randn_hf(6 * 5, 10);
  Tensor x = half_tensor(xs, {6, 5});
  Tensor col = x.t()[2];
  V want;
  for (int r = 0; r < 6; ++r) want.push_back(xs[r * 5 + 2]);
  EXPECT_EQ(col.to_vector<double>(), want);
  Tensor picked = x.index_select(0, loom::tensor(std::vector<int64_t>{4, 0}).to(x.device()));
  EXPECT_EQ(picked[0][1].item<double>(), xs[4 * 5 + 1]);
  Tensor c = loom::cat({x, x * 2}, 0);
  EXPECT_EQ(c[7][3].item<double>(), hf(xs[1 * 5 + 3] * 2));
  x.mul_(0.5);
  EXPECT_EQ(x[1][1].item<double>(), hf(xs[6] * 0.5));
  loom::manual_seed(3);
  Tensor u = loom::rand({1000}, loom::TensorOptions(loom::kHalf));
  loom::manual_seed(3);
  Tensor uf = loom::rand({1000}, loom::TensorOptions(loom::kFloat));
  V uf_h;
  for (double v : uf.to_vector<double>()) uf_h.push_back(hf(v));
  EXPECT_EQ(u.to_vector<double>(), uf_h);
}

TEST_P(HalfTest, ScatterAddIndexGradientAndLinspace) {
  Tensor x = half_tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 3});
  Tensor index = loom::tensor(std::vector<int64_t>{3, 0, 3, 3, 1, 0}).view({2, 3}).to(x.device());
  Tensor y = x.scatter_add(0, index, half_tensor({1, 2, 4, 8, 16, 32}, {2, 3}));
  EXPECT_EQ(y.dtype(), loom::kHalf);
  EXPECT_EQ(y.to_vector<double>(), (V{1, 2 + 2, 3 + 32, 4, 5 + 16, 6, 7, 8, 9, 10 + 1 + 8, 11, 12 + 4}));
  Tensor big = half_tensor({2048}, {1});
  Tensor tie = big.scatter_add(0, loom::tensor(std::vector<int64_t>{0}).to(x.device()), half_tensor({1}, {1}));
  EXPECT_EQ(tie.item<double>(), hf(2048.0 + 1.0));  // 2049 ties to even: 2048
  Tensor w = half_tensor(randn_hf(5 * 2, 11), {5, 2}).detach().requires_grad_();
  w.index_select(0, loom::tensor(std::vector<int64_t>{4, 1, 4, 4, 0}).to(x.device())).sum().backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (V{1, 1, 1, 1, 0, 0, 0, 0, 3, 3}));
  for (int64_t n : {1, 2, 7, 100}) {
    Tensor l = loom::linspace(-1.3, 2.7, n, loom::TensorOptions(loom::kHalf).device(x.device()));
    const float a = hf(-1.3), b = hf(2.7), step = n > 1 ? (b - a) / static_cast<float>(n - 1) : 0.f;
    V want;
    for (int64_t i = 0; i < n; ++i) {
      const float v = n == 1 ? a : i < n / 2 ? a + step * static_cast<float>(i) : b - step * static_cast<float>(n - 1 - i);
      want.push_back(hf(v));
    }
    EXPECT_EQ(l.to_vector<double>(), want) << "linspace of " << n;
  }
}

LOOM_INSTANTIATE_BACKENDS(HalfTest);

}  // namespace
