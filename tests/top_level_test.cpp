// libtorch's top-level functions (torch::nll_loss, torch::max_pool2d with
// all six arguments, torch::dropout, ...) on every backend: each against
// PyTorch's formula written out, and its gradient.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "gradcheck.h"
#include "test_util.h"

namespace {

namespace F = loom::nn::functional;
namespace nn = loom::nn;
using loom::Tensor;
using loom_test::all_close;
using loom_test::gradcheck;
using loom_test::input;
using T = std::vector<Tensor>;
using V = std::vector<double>;

class TopLevelTest : public loom_test::BackendTest {};

// PyTorch's max_pool2d over one [H, W] plane, written out: output size
// floor or ceil((H + 2p - d(k - 1) - 1) / s) + 1 (less a last window that
// starts past the input and its left padding), max over the taps inside.
V max_pool_reference(const V& x, int64_t planes, int64_t h, int64_t w, int64_t k, int64_t s, int64_t p, int64_t d,
                     bool ceil_mode, int64_t* oh_out, int64_t* ow_out) {
  auto out_size = [&](int64_t in) {
    const int64_t span = d * (k - 1) + 1, num = in + 2 * p - span;
    int64_t o = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
    if (ceil_mode && (o - 1) * s >= in + p) --o;
    return o;
  };
  const int64_t oh = out_size(h), ow = out_size(w);
  V out;
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t u = 0; u < k; ++u)
          for (int64_t v = 0; v < k; ++v) {
            const int64_t r = i * s - p + u * d, col = j * s - p + v * d;
            if (r >= 0 && r < h && col >= 0 && col < w) m = std::max(m, x[(c * h + r) * w + col]);
          }
        out.push_back(m);
      }
  *oh_out = oh, *ow_out = ow;
  return out;
}

TEST_P(TopLevelTest, MaxPool2dWithDilationAndCeilMode) {
  struct Case {
    int64_t h, w, k, s, p, d;
    bool ceil;
  };
  for (const Case& c : {Case{7, 6, 2, 2, 0, 1, true}, Case{7, 7, 3, 2, 1, 2, false}, Case{8, 9, 3, 2, 1, 2, true},
                        Case{5, 5, 2, 3, 1, 1, true}, Case{6, 6, 3, 1, 0, 2, false}}) {
    Tensor x = input({2, 3, c.h, c.w}, 11 + c.h);
    int64_t oh = 0, ow = 0;
    const V want = max_pool_reference(x.to_vector<double>(), 6, c.h, c.w, c.k, c.s, c.p, c.d, c.ceil, &oh, &ow);
    Tensor y = loom::max_pool2d(x, c.k, c.s, c.p, c.d, c.ceil);
    EXPECT_EQ(y.sizes().vec(), (std::vector<int64_t>{2, 3, oh, ow})) << c.h << "x" << c.w << " k" << c.k;
    EXPECT_TRUE(all_close(y, want, 0, 0)) << c.h << "x" << c.w << " k" << c.k << " d" << c.d;
    EXPECT_TRUE(all_close(F::max_pool2d(x, F::MaxPool2dFuncOptions(c.k).stride(c.s).padding(c.p).dilation(c.d).ceil_mode(c.ceil)),
                          want, 0, 0));
  }
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::max_pool2d(v[0], {2, 2}, {2, 2}, 1, 2, true); },
                        {input({1, 2, 6, 5}, 3)}));
  EXPECT_LOOM_ERROR(loom::max_pool2d(input({1, 1, 4, 4}, 1), 2, 1, 2), "max_pool2d", "at most half");
  EXPECT_LOOM_ERROR(loom::max_pool2d(input({1, 1, 4, 4}, 1), {2, 2, 2}), "max_pool2d", "one int or two");
}

TEST_P(TopLevelTest, MaxPool2dIndicesNameTheFirstMaximum) {
  Tensor x = input({2, 1, 5, 6}, 17).round();  // rounded: ties, where the first maximum counts
  const V xv = x.to_vector<double>();
  auto [values, idx] = F::max_pool2d_with_indices(x, F::MaxPool2dFuncOptions(2).stride(2).padding(1).dilation(1));
  ASSERT_EQ(idx.sizes().vec(), values.sizes().vec());
  const std::vector<int64_t> iv = idx.to_vector<int64_t>();
  const V vv = values.to_vector<double>();
  const int64_t oh = values.size(2), ow = values.size(3);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        int64_t best = -1;
        for (int64_t u = 0; u < 2; ++u)
          for (int64_t v = 0; v < 2; ++v) {
            const int64_t r = i * 2 - 1 + u, c = j * 2 - 1 + v;
            if (r < 0 || r >= 5 || c < 0 || c >= 6) continue;
            if (best < 0 || xv[n * 30 + r * 6 + c] > xv[n * 30 + best]) best = r * 6 + c;
          }
        const size_t at = static_cast<size_t>((n * oh + i) * ow + j);
        EXPECT_EQ(iv[at], best) << n << " " << i << " " << j;
        EXPECT_EQ(vv[at], xv[n * 30 + best]);
      }
  nn::MaxPool2d pool(nn::MaxPool2dOptions(3).stride(2));
  auto [v2, i2] = pool->forward_with_indices(x);
  EXPECT_EQ(v2.to_vector<double>(), pool(x).to_vector<double>());
}

TEST_P(TopLevelTest, LossesTakeAtensPositionalArguments) {
  Tensor logits = input({5, 4}, 21), target = loom::tensor(std::vector<int64_t>{0, 3, 1, 3, 2});
  Tensor logp = loom::log_softmax(logits, 1);
  const V lp = logp.to_vector<double>();
  const std::vector<int64_t> t = target.to_vector<int64_t>();
  const V w = {1.0, 0.5, 2.0, 0.25};
  double sum = 0, wsum = 0, plain = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    sum += -w[t[i]] * lp[i * 4 + t[i]];
    wsum += w[t[i]];
    plain += -lp[i * 4 + t[i]];
  }
  EXPECT_TRUE(all_close(loom::nll_loss(logp, target), V{plain / 5}));
  EXPECT_TRUE(all_close(loom::nll_loss(logp, target, loom::tensor(w), loom::Reduction::Mean), V{sum / wsum}));
  EXPECT_TRUE(all_close(loom::nll_loss(logp, target, std::nullopt, loom::Reduction::Sum), V{plain}));
  EXPECT_TRUE(all_close(loom::nll_loss(logp, target, std::nullopt, loom::Reduction::Mean, 3),
                        V{-(lp[0] + lp[2 * 4 + 1] + lp[4 * 4 + 2]) / 3}));
  EXPECT_TRUE(all_close(loom::cross_entropy_loss(logits, target), V{plain / 5}));

  Tensor a = input({6}, 22), b = input({6}, 23);
  const V av = a.to_vector<double>(), bv = b.to_vector<double>();
  double mse = 0, l1 = 0, smooth = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    const double d = av[i] - bv[i], ad = std::abs(d);
    mse += d * d, l1 += ad, smooth += ad < 0.5 ? 0.5 * d * d / 0.5 : ad - 0.25;
  }
  EXPECT_TRUE(all_close(loom::mse_loss(a, b), V{mse / 6}));
  EXPECT_TRUE(all_close(loom::l1_loss(a, b, loom::Reduction::Sum), V{l1}));
  EXPECT_TRUE(all_close(loom::smooth_l1_loss(a, b, loom::Reduction::Mean, 0.5), V{smooth / 6}));
  Tensor prob = loom::sigmoid(a), goal = loom::sigmoid(b);
  const V pv = prob.to_vector<double>(), gv = goal.to_vector<double>();
  double bce = 0;
  for (size_t i = 0; i < pv.size(); ++i) bce += -(gv[i] * std::log(pv[i]) + (1 - gv[i]) * std::log(1 - pv[i]));
  EXPECT_TRUE(all_close(loom::binary_cross_entropy(prob, goal), V{bce / 6}));
  EXPECT_TRUE(gradcheck([&](const T& v) { return loom::nll_loss(v[0], target, loom::tensor(w)); }, {input({5, 4}, 24)}));
}

TEST_P(TopLevelTest, DropoutFlattenReshape) {
  Tensor x = input({2, 3, 4}, 31);
  EXPECT_TRUE(all_close(loom::dropout(x, 0.5, /*train=*/false), x.to_vector<double>(), 0, 0));
  loom::manual_seed(1);
  const V kept = loom::dropout(loom::ones({1000}, loom::kDouble), 0.25, true).to_vector<double>();
  size_t zeros = 0;
  for (double v : kept) {
    EXPECT_TRUE(v == 0 || std::abs(v - 1 / 0.75) < 1e-12) << v;
    zeros += v == 0;
  }
  EXPECT_GT(zeros, 180u);
  EXPECT_LT(zeros, 320u);
  EXPECT_EQ(loom::flatten(x).sizes().vec(), (std::vector<int64_t>{24}));
  EXPECT_EQ(loom::flatten(x, 1).sizes().vec(), (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(loom::reshape(x, {4, -1}).sizes().vec(), (std::vector<int64_t>{4, 6}));
}

TEST_P(TopLevelTest, ScalarTensorsInplaceReluAndFunctional) {
  Tensor a = loom::tensor(3.5), b = loom::tensor(2, loom::kDouble), c = loom::tensor(true);
  EXPECT_EQ(a.dim(), 0);
  EXPECT_EQ(a.dtype(), loom::kFloat);
  EXPECT_EQ(b.dtype(), loom::kDouble);
  EXPECT_EQ(c.dtype(), loom::kBool);
  EXPECT_EQ(loom::tensor(int64_t{7}).dtype(), loom::kLong);
  EXPECT_DOUBLE_EQ((a * b).item<double>(), 7.0);
  Tensor x = input({6}, 41);
  Tensor y = x.clone();
  loom::nn::ReLU inplace(loom::nn::ReLUOptions().inplace(true));
  Tensor r = inplace(y);
  EXPECT_TRUE(all_close(y, loom::relu(x).to_vector<double>(), 0, 0));  // written into its input
  EXPECT_TRUE(all_close(r, loom::relu(x).to_vector<double>(), 0, 0));
  loom::nn::Sequential seq(loom::nn::Functional(loom::tanh), loom::nn::Functional([](const Tensor& t) { return t * 2; }));
  EXPECT_TRUE(all_close(seq->forward(x), (loom::tanh(x) * 2).to_vector<double>()));
}

LOOM_INSTANTIATE_BACKENDS(TopLevelTest);

}  // namespace
