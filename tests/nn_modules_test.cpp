// The normalization, activation, pooling and container modules: each
// against PyTorch's formula written out, with float64 gradient checks on
// every backend; BatchNorm's train/eval semantics, running statistics and
// agreement with a float64 copy over several training steps.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <cmath>
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

class NnModulesTest : public loom_test::BackendTest {};

// Per channel c of x [N, C, S] (S = the rest, flattened): mean and biased variance.
void channel_stats(const V& x, int64_t n, int64_t c, int64_t s, V& mean, V& var) {
  mean.assign(c, 0), var.assign(c, 0);
  for (int64_t k = 0; k < c; ++k) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) mean[k] += x[(i * c + k) * s + j];
    mean[k] /= static_cast<double>(n * s);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) var[k] += std::pow(x[(i * c + k) * s + j] - mean[k], 2);
    var[k] /= static_cast<double>(n * s);
  }
}

TEST_P(NnModulesTest, BatchNormTrainsOnBatchStatisticsAndEvaluatesOnRunningOnes) {
  nn::BatchNorm2d bn(nn::BatchNorm2dOptions(3).momentum(0.1));
  bn->to(loom::kDouble);
  V rm(3, 0.0), rv(3, 1.0);
  for (int step = 0; step < 3; ++step) {
    Tensor x = input({4, 3, 2, 5}, 100 + step);
    const V xv = x.to_vector<double>();
    V mean, var;
    channel_stats(xv, 4, 3, 10, mean, var);
    V want;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t k = 0; k < 3; ++k)
        for (int64_t j = 0; j < 10; ++j) want.push_back((xv[(i * 3 + k) * 10 + j] - mean[k]) / std::sqrt(var[k] + 1e-5));
    EXPECT_TRUE(all_close(bn(x), want, 1e-9, 1e-9)) << "step " << step;
    for (int k = 0; k < 3; ++k) {
      rm[k] = 0.9 * rm[k] + 0.1 * mean[k];
      rv[k] = 0.9 * rv[k] + 0.1 * var[k] * 40 / 39;  // the unbiased variance
    }
    EXPECT_TRUE(all_close(bn->running_mean, rm, 1e-9, 1e-12));
    EXPECT_TRUE(all_close(bn->running_var, rv, 1e-9, 1e-12));
  }
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 3);
  bn->eval();
  Tensor x = input({2, 3, 2, 2}, 7);
  const V xv = x.to_vector<double>();
  V want;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 3; ++k)
      for (int64_t j = 0; j < 4; ++j) want.push_back((xv[(i * 3 + k) * 4 + j] - rm[k]) / std::sqrt(rv[k] + 1e-5));
  EXPECT_TRUE(all_close(bn(x), want, 1e-9, 1e-9));
  EXPECT_TRUE(all_close(bn->running_mean, rm, 1e-9, 1e-12));  // eval leaves them alone

  // momentum unset: the cumulative average of the batches' means.
  nn::BatchNorm1d cumulative(nn::BatchNorm1dOptions(2).momentum(std::nullopt));
  cumulative->to(loom::kDouble);
  V sum(2, 0.0);
  for (int step = 0; step < 4; ++step) {
    Tensor b = input({6, 2}, 200 + step);
    cumulative(b);
    V mean, var;
    channel_stats(b.to_vector<double>(), 6, 2, 1, mean, var);
    for (int k = 0; k < 2; ++k) sum[k] += mean[k];
  }
  EXPECT_TRUE(all_close(cumulative->running_mean, V{sum[0] / 4, sum[1] / 4}, 1e-9, 1e-12));
  EXPECT_LOOM_ERROR(bn(input({2, 3, 4}, 1)), "BatchNorm2d", "4D");
  bn->train();
  EXPECT_LOOM_ERROR(bn(input({1, 3, 1, 1}, 1)), "batch_norm", "more than 1 value per channel");
}

TEST_P(NnModulesTest, NormalizationGradients) {
  EXPECT_TRUE(gradcheck(
      [](const T& v) {
        return F::batch_norm(v[0], Tensor(), Tensor(), F::BatchNormFuncOptions().weight(v[1]).bias(v[2]).training(true));
      },
      {input({3, 2, 2, 2}, 1), input({2}, 2), input({2}, 3)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return F::group_norm(v[0], F::GroupNormFuncOptions(2).weight(v[1]).bias(v[2])); },
                        {input({2, 4, 3}, 4), input({4}, 5), input({4}, 6)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return F::instance_norm(v[0], F::InstanceNormFuncOptions()); },
                        {input({2, 2, 3, 2}, 7)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return F::rms_norm(v[0], F::RMSNormFuncOptions({3}).weight(v[1])); },
                        {input({2, 3}, 8), input({3}, 9)}));
  // Affine instance norm (one weight per channel, normalized per sample) and
  // layer norm over two trailing dims (a weight that varies along them):
  // the two forms of the norms' one backward rule (api/src/nn/normalize.cpp).
  EXPECT_TRUE(gradcheck(
      [](const T& v) { return F::instance_norm(v[0], F::InstanceNormFuncOptions().weight(v[1]).bias(v[2])); },
      {input({2, 2, 3, 2}, 12), input({2}, 13), input({2}, 14)}));
  EXPECT_TRUE(gradcheck(
      [](const T& v) { return F::layer_norm(v[0], F::LayerNormFuncOptions({2, 3}).weight(v[1]).bias(v[2])); },
      {input({4, 2, 3}, 15), input({2, 3}, 16), input({2, 3}, 17)}));
  // A backward that is itself differentiated (create_graph) recomputes the
  // statistics with their history.
  EXPECT_TRUE(loom_test::gradgradcheck(
      [](const T& v) {
        return F::batch_norm(v[0], Tensor(), Tensor(), F::BatchNormFuncOptions().weight(v[1]).bias(v[2]).training(true));
      },
      {input({3, 2, 2, 2}, 18), input({2}, 19), input({2}, 20)}));
  EXPECT_TRUE(loom_test::gradgradcheck(
      [](const T& v) { return F::layer_norm(v[0], F::LayerNormFuncOptions({3}).weight(v[1]).bias(v[2])); },
      {input({2, 3}, 21), input({3}, 22), input({3}, 23)}));
  // One node for the whole normalization, named as libtorch's.
  const Tensor x = input({3, 2, 2, 2}, 24).requires_grad_(), w = input({2}, 25).requires_grad_();
  EXPECT_EQ(F::batch_norm(x, Tensor(), Tensor(), F::BatchNormFuncOptions().weight(w).training(true)).grad_fn()->name(),
            "NativeBatchNormBackward0");
  EXPECT_EQ(F::layer_norm(input({2, 3}, 26).requires_grad_(), F::LayerNormFuncOptions({3})).grad_fn()->name(), "NativeLayerNormBackward0");
}

TEST_P(NnModulesTest, GroupInstanceAndRmsNormFollowTheirFormulas) {
  Tensor x = input({2, 4, 3}, 11);
  const V xv = x.to_vector<double>();
  // GroupNorm with 2 groups: each sample's channels {0, 1} and {2, 3}.
  V want(xv.size());
  for (int i = 0; i < 2; ++i)
    for (int g = 0; g < 2; ++g) {
      double m = 0, v = 0;
      for (int j = 0; j < 6; ++j) m += xv[i * 12 + g * 6 + j];
      m /= 6;
      for (int j = 0; j < 6; ++j) v += std::pow(xv[i * 12 + g * 6 + j] - m, 2);
      v /= 6;
      for (int j = 0; j < 6; ++j) want[i * 12 + g * 6 + j] = (xv[i * 12 + g * 6 + j] - m) / std::sqrt(v + 1e-5);
    }
  nn::GroupNorm gn(nn::GroupNormOptions(2, 4));
  gn->to(loom::kDouble);
  EXPECT_TRUE(all_close(gn(x), want, 1e-9, 1e-9));
  // InstanceNorm: GroupNorm with a group per channel.
  nn::InstanceNorm2d in(nn::InstanceNorm2dOptions(4));
  EXPECT_TRUE(all_close(in(x.reshape({2, 4, 3, 1})), F::group_norm(x, F::GroupNormFuncOptions(4)).to_vector<double>(),
                        1e-9, 1e-9));
  // RMSNorm over the last dim, eps of float64 by default.
  nn::RMSNorm rms(nn::RMSNormOptions({3}));
  rms->to(loom::kDouble);
  V rwant;
  for (int r = 0; r < 8; ++r) {
    double ms = 0;
    for (int j = 0; j < 3; ++j) ms += xv[r * 3 + j] * xv[r * 3 + j] / 3;
    for (int j = 0; j < 3; ++j) rwant.push_back(xv[r * 3 + j] / std::sqrt(ms + 2.220446049250313e-16));
  }
  EXPECT_TRUE(all_close(rms(x), rwant, 1e-9, 1e-9));
  EXPECT_LOOM_ERROR(F::group_norm(x, F::GroupNormFuncOptions(3)), "group_norm", "divisible");
}

TEST_P(NnModulesTest, ActivationsFollowTheirFormulas) {
  Tensor x = input({2, 3, 4}, 21, -4, 4);
  const V xv = x.to_vector<double>();
  auto each = [&](double (*f)(double)) {
    V out;
    for (double v : xv) out.push_back(f(v));
    return out;
  };
  const double sa = 1.6732632423543772848170429916717, ss = 1.0507009873554804934193349852946;
  EXPECT_TRUE(all_close(nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2))(x),
                        each([](double v) { return v > 0 ? v : 0.2 * v; })));
  EXPECT_TRUE(all_close(nn::ELU()(x), each([](double v) { return v > 0 ? v : std::expm1(v); })));
  EXPECT_TRUE(all_close(F::selu(x), each([](double v) {
                          return 1.0507009873554804934193349852946 *
                                 (v > 0 ? v : 1.6732632423543772848170429916717 * std::expm1(v));
                        })));
  (void)sa, (void)ss;
  EXPECT_TRUE(all_close(F::celu(x, F::CELUFuncOptions().alpha(2)), each([](double v) { return v > 0 ? v : 2 * std::expm1(v / 2); })));
  EXPECT_TRUE(all_close(nn::Softplus(nn::SoftplusOptions().beta(2).threshold(3))(x),
                        each([](double v) { return 2 * v > 3 ? v : std::log1p(std::exp(2 * v)) / 2; })));
  EXPECT_TRUE(all_close(nn::Hardswish()(x), each([](double v) { return v * std::min(std::max(v + 3, 0.0), 6.0) / 6; })));
  EXPECT_TRUE(all_close(nn::Hardsigmoid()(x), each([](double v) { return std::min(std::max(v + 3, 0.0), 6.0) / 6; })));
  EXPECT_TRUE(all_close(nn::Mish()(x), each([](double v) { return v * std::tanh(std::log1p(std::exp(v))); })));
  EXPECT_TRUE(all_close(nn::SiLU()(x), each([](double v) { return v / (1 + std::exp(-v)); })));
  nn::PReLU prelu(nn::PReLUOptions().num_parameters(3).init(0.1));
  prelu->to(loom::kDouble);
  V pwant;
  for (size_t i = 0; i < xv.size(); ++i) pwant.push_back(xv[i] > 0 ? xv[i] : 0.1 * xv[i]);
  EXPECT_TRUE(all_close(prelu(x), pwant));
  EXPECT_TRUE(all_close(nn::Softmax(1)(x), loom::softmax(x, 1).to_vector<double>()));
  EXPECT_TRUE(all_close(nn::LogSoftmax(2)(x), loom::log_softmax(x, 2).to_vector<double>()));
  // inplace writes into the input
  Tensor y = x.clone();
  F::leaky_relu(y, F::LeakyReLUFuncOptions().inplace(true));
  EXPECT_TRUE(all_close(y, each([](double v) { return v > 0 ? v : 0.01 * v; })));
  for (auto f : std::vector<std::function<Tensor(const Tensor&)>>{
           [](const Tensor& t) { return F::elu(t); }, [](const Tensor& t) { return F::selu(t); },
           [](const Tensor& t) { return F::softplus(t); }, [](const Tensor& t) { return F::mish(t); },
           [](const Tensor& t) { return F::hardswish(t); }, [](const Tensor& t) { return F::leaky_relu(t); }})
    EXPECT_TRUE(gradcheck([&](const T& v) { return f(v[0]); }, {input({7}, 22, -3, 3)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return F::prelu(v[0], v[1]); }, {input({2, 3, 2}, 23), input({3}, 24, 0, 1)}));
}

TEST_P(NnModulesTest, AvgAndAdaptivePooling) {
  Tensor x = input({1, 2, 5, 6}, 31);
  const V xv = x.to_vector<double>();
  // avg_pool2d 3x3, stride 2, padding 1, ceil mode, without the padding in the divisor.
  nn::AvgPool2d pool(nn::AvgPool2dOptions(3).stride(2).padding(1).ceil_mode(true).count_include_pad(false));
  Tensor y = pool(x);
  ASSERT_EQ(y.sizes().vec(), (std::vector<int64_t>{1, 2, 3, 4}));
  V want;
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) {
        double s = 0;
        int n = 0;
        for (int u = i * 2 - 1; u < i * 2 + 2; ++u)
          for (int v = j * 2 - 1; v < j * 2 + 2; ++v)
            if (u >= 0 && u < 5 && v >= 0 && v < 6) s += xv[(c * 5 + u) * 6 + v], ++n;
        want.push_back(s / n);
      }
  EXPECT_TRUE(all_close(y, want));
  // adaptive pooling to 2x4 from 5x6: uneven windows.
  auto adaptive = [&](bool max) {
    V out;
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) {
          const int r0 = i * 5 / 2, r1 = ((i + 1) * 5 + 1) / 2, c0 = j * 6 / 4, c1 = ((j + 1) * 6 + 3) / 4;
          double s = 0, m = -1e300;
          for (int u = r0; u < r1; ++u)
            for (int v = c0; v < c1; ++v) s += xv[(c * 5 + u) * 6 + v], m = std::max(m, xv[(c * 5 + u) * 6 + v]);
          out.push_back(max ? m : s / ((r1 - r0) * (c1 - c0)));
        }
    return out;
  };
  EXPECT_TRUE(all_close(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({2, 4}))(x), adaptive(false)));
  EXPECT_TRUE(all_close(nn::AdaptiveMaxPool2d(nn::AdaptiveMaxPool2dOptions({2, 4}))(x), adaptive(true)));
  EXPECT_TRUE(all_close(nn::AdaptiveAvgPool2d(1)(x), x.mean({2, 3}, true).to_vector<double>()));
  EXPECT_TRUE(gradcheck([](const T& v) { return F::avg_pool2d(v[0], F::AvgPool2dFuncOptions(2).padding(1)); },
                        {input({1, 1, 3, 4}, 32)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return F::adaptive_avg_pool2d(v[0], F::AdaptiveAvgPool2dFuncOptions({2, 3})); },
                        {input({1, 1, 3, 4}, 33)}));
}

TEST_P(NnModulesTest, PadModesAndConv1d) {
  Tensor x = input({1, 2, 3, 4}, 41);
  const V xv = x.to_vector<double>();
  // pad (left 1, right 2) of the last dim, (top 2, bottom 1) of the one before.
  auto padded = [&](loom::PadMode mode) {
    auto src = [&](int64_t i, int64_t n) -> int64_t {  // the source index of padded position i, or -1 (constant)
      if (i >= 0 && i < n) return i;
      switch (mode) {
        case loom::kReflect: return i < 0 ? -i : 2 * (n - 1) - i;
        case loom::kReplicate: return i < 0 ? 0 : n - 1;
        case loom::kCircular: return (i + n) % n;
        case loom::kConstant: return -1;
      }
      return -1;
    };
    V out;
    for (int c = 0; c < 2; ++c)
      for (int64_t i = -2; i < 3 + 1; ++i)
        for (int64_t j = -1; j < 4 + 2; ++j) {
          const int64_t r = src(i, 3), q = src(j, 4);
          out.push_back(r < 0 || q < 0 ? 0.5 : xv[(c * 3 + r) * 4 + q]);
        }
    return out;
  };
  for (loom::PadMode mode : {loom::kConstant, loom::kReflect, loom::kReplicate, loom::kCircular}) {
    Tensor y = F::pad(x, F::PadFuncOptions({1, 2, 2, 1}).mode(mode).value(0.5));
    ASSERT_EQ(y.sizes().vec(), (std::vector<int64_t>{1, 2, 6, 7}));
    EXPECT_TRUE(all_close(y, padded(mode), 0, 0)) << static_cast<int>(mode);
  }
  EXPECT_EQ(F::pad(x, F::PadFuncOptions({-1, -1})).sizes().vec(), (std::vector<int64_t>{1, 2, 3, 2}));
  EXPECT_TRUE(gradcheck([](const T& v) { return F::pad(v[0], F::PadFuncOptions({2, 1}).mode(loom::kReflect)); },
                        {input({2, 4}, 42)}));
  EXPECT_LOOM_ERROR(F::pad(x, F::PadFuncOptions({4, 0}).mode(loom::kReflect)), "pad", "reflect padding");
  // conv1d written out: y[o, t] = b[o] + sum_c,k w[o, c, k] x[c, t s + k d - p].
  Tensor in = input({2, 5}, 43), w = input({3, 2, 2}, 44), b = input({3}, 45);
  const V iv = in.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  V want;
  for (int o = 0; o < 3; ++o)
    for (int t = 0; t < 3; ++t) {
      double acc = bv[o];
      for (int c = 0; c < 2; ++c)
        for (int k = 0; k < 2; ++k) {
          const int pos = t * 2 + k * 2 - 1;
          if (pos >= 0 && pos < 5) acc += wv[(o * 2 + c) * 2 + k] * iv[c * 5 + pos];
        }
      want.push_back(acc);
    }
  EXPECT_TRUE(all_close(F::conv1d(in, w, F::Conv1dFuncOptions().bias(b).stride(2).padding(1).dilation(2)), want));
  nn::Conv1d conv(nn::Conv1dOptions(2, 4, 3).padding(1));
  EXPECT_EQ(conv(loom::randn({6, 2, 10})).sizes().vec(), (std::vector<int64_t>{6, 4, 10}));
  EXPECT_TRUE(gradcheck([](const T& v) { return F::conv1d(v[0], v[1]); }, {input({1, 2, 4}, 46), input({2, 2, 2}, 47)}));
}

TEST_P(NnModulesTest, ConvTranspose2dScattersEachInputThroughTheKernel) {
  struct Case {
    int64_t s, p, op, d;
  };
  for (const Case& c : {Case{1, 0, 0, 1}, Case{2, 1, 1, 1}, Case{2, 0, 0, 2}, Case{3, 2, 1, 1}}) {
    Tensor x = input({1, 2, 3, 4}, 61), w = input({2, 3, 2, 3}, 62), b = input({3}, 63);
    const V xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
    const int64_t oh = (3 - 1) * c.s - 2 * c.p + c.d * (2 - 1) + c.op + 1, ow = (4 - 1) * c.s - 2 * c.p + c.d * (3 - 1) + c.op + 1;
    V want(static_cast<size_t>(3 * oh * ow));
    for (int64_t o = 0; o < 3; ++o)
      for (int64_t i = 0; i < oh * ow; ++i) want[o * oh * ow + i] = bv[o];
    for (int64_t ci = 0; ci < 2; ++ci)
      for (int64_t a = 0; a < 3; ++a)
        for (int64_t q = 0; q < 4; ++q)
          for (int64_t o = 0; o < 3; ++o)
            for (int64_t u = 0; u < 2; ++u)
              for (int64_t v = 0; v < 3; ++v) {
                const int64_t i = a * c.s - c.p + u * c.d, j = q * c.s - c.p + v * c.d;
                if (i >= 0 && i < oh && j >= 0 && j < ow)
                  want[(o * oh + i) * ow + j] += xv[(ci * 3 + a) * 4 + q] * wv[((ci * 3 + o) * 2 + u) * 3 + v];
              }
    Tensor y = F::conv_transpose2d(x, w,
                                   F::ConvTranspose2dFuncOptions().bias(b).stride(c.s).padding(c.p).output_padding(c.op).dilation(c.d));
    ASSERT_EQ(y.sizes().vec(), (std::vector<int64_t>{1, 3, oh, ow})) << c.s << c.p << c.op << c.d;
    EXPECT_TRUE(all_close(y, want, 1e-9, 1e-9)) << c.s << c.p << c.op << c.d;
  }
  nn::ConvTranspose2d up(nn::ConvTranspose2dOptions(4, 2, 4).stride(2).padding(1));
  EXPECT_EQ(up(loom::randn({2, 4, 5, 5})).sizes().vec(), (std::vector<int64_t>{2, 2, 10, 10}));
  EXPECT_TRUE(gradcheck([](const T& v) { return F::conv_transpose2d(v[0], v[1], F::ConvTranspose2dFuncOptions().stride(2)); },
                        {input({1, 1, 2, 2}, 64), input({1, 2, 2, 2}, 65)}));
}

TEST_P(NnModulesTest, InterpolateNearestAndBilinear) {
  Tensor x = input({1, 2, 3, 4}, 51);
  const V xv = x.to_vector<double>();
  // nearest to 5x6: src = floor(dst * in / out)
  Tensor near = F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{5, 6}));
  ASSERT_EQ(near.sizes().vec(), (std::vector<int64_t>{1, 2, 5, 6}));
  V want;
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 6; ++j) want.push_back(xv[(c * 3 + i * 3 / 5) * 4 + j * 4 / 6]);
  EXPECT_TRUE(all_close(near, want, 0, 0));
  // bilinear x2, with and without align_corners, against PyTorch's source coordinates.
  for (bool corners : {false, true}) {
    Tensor up = nn::Upsample(nn::UpsampleOptions()
                                 .scale_factor(std::vector<double>{2.0})
                                 .mode(loom::kBilinear)
                                 .align_corners(corners))(x);
    ASSERT_EQ(up.sizes().vec(), (std::vector<int64_t>{1, 2, 6, 8}));
    auto src = [&](int64_t i, int64_t in, int64_t out) {
      return corners ? static_cast<double>(i) * (in - 1) / (out - 1) : std::max((i + 0.5) * in / out - 0.5, 0.0);
    };
    V bw;
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 8; ++j) {
          const double sy = src(i, 3, 6), sx = src(j, 4, 8);
          const int y0 = static_cast<int>(sy), x0 = static_cast<int>(sx);
          const int y1 = std::min(y0 + 1, 2), x1 = std::min(x0 + 1, 3);
          const double fy = sy - y0, fx = sx - x0;
          auto at = [&](int r, int q) { return xv[(c * 3 + r) * 4 + q]; };
          bw.push_back((1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x1)) + fy * ((1 - fx) * at(y1, x0) + fx * at(y1, x1)));
        }
    EXPECT_TRUE(all_close(up, bw, 1e-12, 1e-12)) << corners;
  }
  Tensor seq = input({1, 1, 4}, 52);
  EXPECT_EQ(F::interpolate(seq, F::InterpolateFuncOptions().size(std::vector<int64_t>{7}).mode(loom::kLinear)).sizes().vec(),
            (std::vector<int64_t>{1, 1, 7}));
  EXPECT_TRUE(gradcheck(
      [](const T& v) {
        return F::interpolate(v[0], F::InterpolateFuncOptions().size(std::vector<int64_t>{3, 5}).mode(loom::kBilinear));
      },
      {input({1, 1, 2, 3}, 53)}));
  EXPECT_TRUE(all_close(F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{2, 3}).mode(loom::kArea)),
                        F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions({2, 3})).to_vector<double>(), 0, 0));
  const V sv = seq.to_vector<double>();
  EXPECT_TRUE(all_close(F::interpolate(seq, F::InterpolateFuncOptions().size(std::vector<int64_t>{2}).mode(loom::kArea)),
                        V{(sv[0] + sv[1]) / 2, (sv[2] + sv[3]) / 2}));
  EXPECT_LOOM_ERROR(F::interpolate(seq, F::InterpolateFuncOptions().size(std::vector<int64_t>{7}).mode(loom::kBilinear)),
                    "interpolate", "bilinear and bicubic a 4-D");
}

LOOM_INSTANTIATE_BACKENDS(NnModulesTest);

// A float32 BatchNorm net trained for a few steps stays with a float64 copy.
TEST(NnModules, BatchNormTrainingAgreesWithFloat64AndReplays) {
  loom::manual_seed(4);
  auto make = [] { return nn::Sequential(nn::Linear(6, 8), nn::BatchNorm1d(8), nn::ReLU(), nn::Linear(8, 3)); };
  auto single = make();
  auto twin = make();
  twin->to(loom::kDouble);
  {
    loom::NoGradGuard no_grad;
    auto a = single->parameters(), b = twin->parameters();
    for (size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
  }
  loom::optim::SGD o1(single->parameters(), loom::optim::SGDOptions(0.1).momentum(0.9));
  loom::optim::SGD o2(twin->parameters(), loom::optim::SGDOptions(0.1).momentum(0.9));
  Tensor x = loom::randn({16, 6}), y = loom::randn({16, 3});
  int64_t misses_after_two = 0;
  for (int step = 0; step < 6; ++step) {
    const int64_t before = loom::metrics().cache_misses;
    o1.zero_grad();
    auto l1 = loom::mse_loss(single->forward(x), y);
    l1.backward();
    o1.step();
    const float loss = l1.item<float>();
    if (step >= 2) misses_after_two += loom::metrics().cache_misses - before;
    o2.zero_grad();
    auto l2 = loom::mse_loss(twin->forward(x.to(loom::kDouble)), y.to(loom::kDouble));
    l2.backward();
    o2.step();
    EXPECT_NEAR(loss, l2.item<double>(), 1e-4 * (1 + std::abs(l2.item<double>()))) << "step " << step;
  }
  EXPECT_EQ(misses_after_two, 0);
  auto bn1 = single->ptr<nn::BatchNorm1dImpl>(1), bn2 = twin->ptr<nn::BatchNorm1dImpl>(1);
  EXPECT_TRUE(all_close(bn1->running_var, bn2->running_var.to_vector<double>(), 1e-4, 1e-5));
  single->eval(), twin->eval();
  EXPECT_TRUE(all_close(single->forward(x), twin->forward(x.to(loom::kDouble)).to_vector<double>(), 1e-3, 1e-4));
}

TEST(NnModules, ContainersRegisterAndFindTheirModules) {
  struct Net : nn::Module {
    Net() {
      blocks = register_module("blocks", nn::ModuleList(nn::Linear(4, 4), nn::ReLU(), nn::Linear(4, 2)));
      heads = register_module("heads", nn::ModuleDict());
      heads->insert("a", nn::Linear(2, 1));
      heads->insert("b", nn::Identity());
    }
    std::shared_ptr<nn::ModuleListImpl> blocks;
    std::shared_ptr<nn::ModuleDictImpl> heads;
  };
  auto net = std::make_shared<Net>();
  EXPECT_EQ(net->blocks->size(), 3u);
  EXPECT_NE(net->blocks->ptr(0)->as<nn::Linear>(), nullptr);
  EXPECT_EQ(net->blocks->ptr(1)->as<nn::Linear>(), nullptr);
  EXPECT_EQ(net->blocks->at<nn::Linear>(2).weight.size(0), 2);
  EXPECT_TRUE(net->heads->contains("b"));
  EXPECT_EQ(net->heads->keys(), (std::vector<std::string>{"a", "b"}));
  EXPECT_THROW(net->heads->insert("a", nn::Identity()), loom::Error);
  EXPECT_EQ(net->named_parameters().keys(),
            (std::vector<std::string>{"blocks.0.weight", "blocks.0.bias", "blocks.2.weight", "blocks.2.bias",
                                      "heads.a.weight", "heads.a.bias"}));
  Tensor x = loom::randn({3, 4});
  for (const auto& m : *net->blocks) {
    if (auto* l = m->as<nn::Linear>()) x = l->forward(x);
    else if (auto* r = m->as<nn::ReLU>()) x = r->forward(x);
  }
  EXPECT_EQ(x.sizes().vec(), (std::vector<int64_t>{3, 2}));
  int linears = 0;
  net->apply([&](nn::Module& m) { linears += m.as<nn::Linear>() != nullptr; });
  EXPECT_EQ(linears, 3);
  std::vector<std::string> names;
  net->apply([&](const std::string& name, nn::Module&) { names.push_back(name); });
  EXPECT_EQ(names.size(), 8u);  // "", blocks, blocks.0-2, heads, heads.a, heads.b
  EXPECT_EQ(names[1], "blocks");
  nn::Unflatten unflatten(1, std::vector<int64_t>{2, -1});
  EXPECT_EQ(unflatten(loom::zeros({5, 12})).sizes().vec(), (std::vector<int64_t>{5, 2, 6}));
  nn::Linear empty(nullptr);
  EXPECT_FALSE(empty);
  EXPECT_TRUE(nn::Linear(2, 2));
}

}  // namespace
