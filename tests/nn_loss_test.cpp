// The losses against PyTorch's formulas written out in the test (plain
// loops), every reduction, and their gradients against finite differences.
#include "gradcheck.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::gradcheck;
using loom_test::input;
using T = std::vector<Tensor>;
using V = std::vector<double>;
namespace nn = loom::nn;
namespace F = loom::nn::functional;

class LossTest : public loom_test::BackendTest {};

double sum(const V& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double mean(const V& v) { return sum(v) / static_cast<double>(v.size()); }

// Elementwise loss `f(x, y)` under each reduction, against loom's.
void check_elementwise(const std::function<Tensor(const Tensor&, const Tensor&, loom::Reduction)>& loss,
                       const std::function<double(double, double)>& f, const Tensor& x, const Tensor& y) {
  V xv = x.to_vector<double>(), yv = y.to_vector<double>(), each;
  for (size_t i = 0; i < xv.size(); ++i) each.push_back(f(xv[i], yv[i]));
  EXPECT_TRUE(all_close(loss(x, y, loom::kNone), each, 1e-12));
  EXPECT_TRUE(all_close(loss(x, y, loom::kSum), {sum(each)}, 1e-12));
  EXPECT_TRUE(all_close(loss(x, y, loom::kMean), {mean(each)}, 1e-12));
  EXPECT_TRUE(gradcheck([&](const T& v) { return loss(v[0], v[1], loom::kMean); }, {x, y}));
}

TEST_P(LossTest, Regression) {
  Tensor x = input({3, 4}, 1), y = input({3, 4}, 2);
  check_elementwise([](const Tensor& a, const Tensor& b, loom::Reduction r) { return F::mse_loss(a, b, r); },
                    [](double a, double b) { return (a - b) * (a - b); }, x, y);
  check_elementwise([](const Tensor& a, const Tensor& b, loom::Reduction r) { return F::l1_loss(a, b, r); },
                    [](double a, double b) { return std::abs(a - b); }, x, y);
  check_elementwise(
      [](const Tensor& a, const Tensor& b, loom::Reduction r) {
        return F::smooth_l1_loss(a, b, F::SmoothL1LossFuncOptions(r).beta(0.7));
      },
      [](double a, double b) {
        const double d = std::abs(a - b);
        return d < 0.7 ? 0.5 * d * d / 0.7 : d - 0.35;
      },
      x, y);
  check_elementwise(
      [](const Tensor& a, const Tensor& b, loom::Reduction r) {
        return F::huber_loss(a, b, F::HuberLossFuncOptions(r).delta(1.3));
      },
      [](double a, double b) {
        const double d = std::abs(a - b);
        return d < 1.3 ? 0.5 * d * d : 1.3 * (d - 0.65);
      },
      x, y);
  EXPECT_TRUE(all_close(nn::MSELoss()(x, y), F::mse_loss(x, y).to_vector<double>(), 0, 0));
  EXPECT_TRUE(all_close(nn::L1Loss(loom::kSum)(x, y), F::l1_loss(x, y, loom::kSum).to_vector<double>(), 0, 0));
  EXPECT_LOOM_ERROR(F::mse_loss(x, y.narrow(0, 0, 2)), "mse_loss", "must be the same as the input's size");
}

TEST_P(LossTest, Binary) {
  Tensor p = input({2, 3}, 3, 0.05, 0.95), t = input({2, 3}, 4, 0, 1), w = input({3}, 5, 0.5, 2);
  V pv = p.to_vector<double>(), tv = t.to_vector<double>(), wv = w.to_vector<double>();
  check_elementwise(
      [&](const Tensor& a, const Tensor& b, loom::Reduction r) {
        return F::binary_cross_entropy(a, b, F::BinaryCrossEntropyFuncOptions(r));
      },
      [](double a, double b) { return -(b * std::log(a) + (1 - b) * std::log(1 - a)); }, p, t);
  V weighted;
  for (size_t i = 0; i < pv.size(); ++i)
    weighted.push_back(-wv[i % 3] * (tv[i] * std::log(pv[i]) + (1 - tv[i]) * std::log(1 - pv[i])));
  EXPECT_TRUE(all_close(nn::BCELoss(nn::BCELossOptions().weight(w))(p, t), {mean(weighted)}, 1e-12));
  // Probabilities of exactly 0 and 1 stay finite (log clamped at -100, as PyTorch).
  EXPECT_TRUE(all_close(F::binary_cross_entropy(loom::tensor({0.0, 1.0}, loom::kDouble),
                                                loom::tensor({1.0, 0.0}, loom::kDouble), loom::kSum), {200}));

  Tensor logits = input({2, 3}, 6, -4, 4), pos = input({3}, 7, 0.5, 3);
  V lv = logits.to_vector<double>(), posv = pos.to_vector<double>(), want;
  for (size_t i = 0; i < lv.size(); ++i) {
    const double log_sig = -std::log1p(std::exp(-lv[i]));
    const double log_one_minus = -std::log1p(std::exp(lv[i]));
    want.push_back(-wv[i % 3] * (posv[i % 3] * tv[i] * log_sig + (1 - tv[i]) * log_one_minus));
  }
  auto bce_logits = [&](const Tensor& a, const Tensor& b, loom::Reduction r) {
    return F::binary_cross_entropy_with_logits(a, b, F::BinaryCrossEntropyWithLogitsFuncOptions(r).weight(w).pos_weight(pos));
  };
  EXPECT_TRUE(all_close(bce_logits(logits, t, loom::kNone), want, 1e-12));
  EXPECT_TRUE(all_close(nn::BCEWithLogitsLoss(nn::BCEWithLogitsLossOptions(loom::kSum).weight(w).pos_weight(pos))(logits, t),
                        {sum(want)}, 1e-12));
  EXPECT_TRUE(gradcheck([&](const T& v) { return bce_logits(v[0], v[1], loom::kMean); }, {logits, t}));
  // Large logits stay finite.
  EXPECT_TRUE(all_close(F::binary_cross_entropy_with_logits(loom::tensor({800.0, -800.0}, loom::kDouble),
                                                            loom::tensor({0.0, 1.0}, loom::kDouble), loom::kSum), {1600}));
}

// PyTorch's cross_entropy with class indices, written out.
double cross_entropy_reference(const V& x, const std::vector<int64_t>& target, int classes, const V& weight,
                               int64_t ignore, double smoothing, loom::Reduction r, V* each) {
  const size_t n = target.size();
  double nll_sum = 0, smooth_sum = 0, weight_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    double m = -1e300, s = 0;
    for (int c = 0; c < classes; ++c) m = std::max(m, x[i * classes + c]);
    for (int c = 0; c < classes; ++c) s += std::exp(x[i * classes + c] - m);
    const double lse = m + std::log(s);
    if (target[i] == ignore) {
      if (each) each->push_back(0);
      continue;
    }
    const double w = weight.empty() ? 1 : weight[target[i]];
    const double nll = -w * (x[i * classes + target[i]] - lse);
    double smooth = 0;
    for (int c = 0; c < classes; ++c) smooth -= (weight.empty() ? 1 : weight[c]) * (x[i * classes + c] - lse);
    nll_sum += nll;
    smooth_sum += smooth;
    weight_sum += w;
    if (each) each->push_back((1 - smoothing) * nll + smoothing / classes * smooth);
  }
  const double denom = r == loom::kMean ? weight_sum : 1;
  return (1 - smoothing) * nll_sum / denom + smoothing / classes * smooth_sum / denom;
}

TEST_P(LossTest, CrossEntropyAndNll) {
  Tensor x = input({5, 4}, 8, -3, 3);
  const std::vector<int64_t> tv = {2, 0, 3, -100, 1};
  Tensor target = loom::tensor(tv, loom::kLong);
  Tensor w = loom::tensor({0.5, 2.0, 1.0, 1.5}, loom::kDouble);
  V xv = x.to_vector<double>();
  for (double smoothing : {0.0, 0.2})
    for (bool weighted : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "label_smoothing " << smoothing << " weighted " << weighted);
      auto options = [&](loom::Reduction r) {
        auto o = F::CrossEntropyFuncOptions(r).label_smoothing(smoothing);
        if (weighted) o.weight(w);
        return o;
      };
      const V wv = weighted ? w.to_vector<double>() : V{};
      V each;
      cross_entropy_reference(xv, tv, 4, wv, -100, smoothing, loom::kNone, &each);
      EXPECT_TRUE(all_close(F::cross_entropy(x, target, options(loom::kNone)), each, 1e-12));
      EXPECT_TRUE(all_close(F::cross_entropy(x, target, options(loom::kSum)),
                            {cross_entropy_reference(xv, tv, 4, wv, -100, smoothing, loom::kSum, nullptr)}, 1e-12));
      EXPECT_TRUE(all_close(F::cross_entropy(x, target, options(loom::kMean)),
                            {cross_entropy_reference(xv, tv, 4, wv, -100, smoothing, loom::kMean, nullptr)}, 1e-12));
      EXPECT_TRUE(gradcheck([&](const T& v) { return F::cross_entropy(v[0], target, options(loom::kMean)); }, {x}));
    }
  // nll_loss on log-probabilities is cross_entropy without the log_softmax.
  Tensor logp = x.log_softmax(1);
  EXPECT_TRUE(all_close(F::nll_loss(logp, target, F::NLLLossFuncOptions().weight(w)),
                        F::cross_entropy(x, target, F::CrossEntropyFuncOptions().weight(w)).to_vector<double>(), 1e-12));
  EXPECT_TRUE(all_close(nn::NLLLoss()(logp, target), nn::CrossEntropyLoss()(x, target).to_vector<double>(), 1e-12));
  // [N, C, d] inputs with [N, d] targets: the class dim is dim 1.
  Tensor x3 = input({2, 4, 3}, 9);
  Tensor t3 = loom::tensor({0, 3, 1, 2, 2, 0}, loom::kLong).reshape({2, 3});
  Tensor flat = x3.permute({0, 2, 1}).reshape({6, 4});
  EXPECT_TRUE(all_close(F::cross_entropy(x3, t3), F::cross_entropy(flat, t3.reshape({6})).to_vector<double>(), 1e-12));
  EXPECT_EQ(F::cross_entropy(x3, t3, loom::kNone).sizes().vec(), (std::vector<int64_t>{2, 3}));
  // Class probabilities as target.
  Tensor probs = input({5, 4}, 10, 0.1, 1).softmax(1);
  V pv = probs.to_vector<double>(), lp = logp.to_vector<double>();
  double want = 0;
  for (size_t i = 0; i < pv.size(); ++i) want -= pv[i] * lp[i] / 5;
  EXPECT_TRUE(all_close(F::cross_entropy(x, probs), {want}, 1e-12));
  EXPECT_TRUE(gradcheck([&](const T& v) { return F::cross_entropy(v[0], v[1].softmax(1)); }, {x, input({5, 4}, 11)}));
  EXPECT_LOOM_ERROR(F::cross_entropy(x, target.to(loom::kInt)), "cross_entropy", "dtype Long");
  EXPECT_LOOM_ERROR(F::cross_entropy(x, target.narrow(0, 0, 3)), "cross_entropy", "expected a target of shape");
}

TEST_P(LossTest, KlDiv) {
  Tensor logp = input({3, 4}, 12).log_softmax(1);
  Tensor q = input({3, 4}, 13).softmax(1);
  V lp = logp.to_vector<double>(), qv = q.to_vector<double>(), each;
  for (size_t i = 0; i < lp.size(); ++i) each.push_back(qv[i] * (std::log(qv[i]) - lp[i]));
  EXPECT_TRUE(all_close(F::kl_div(logp, q, loom::kNone), each, 1e-12));
  EXPECT_TRUE(all_close(F::kl_div(logp, q, loom::kBatchMean), {sum(each) / 3}, 1e-12));
  EXPECT_TRUE(all_close(nn::KLDivLoss(nn::KLDivLossOptions(loom::kSum).log_target(true))(logp, q.log()), {sum(each)}, 1e-12));
  // 0 * log 0 = 0.
  EXPECT_TRUE(all_close(F::kl_div(loom::tensor({-1.0, -2.0}, loom::kDouble), loom::tensor({0.0, 1.0}, loom::kDouble),
                                  loom::kSum), {2}));
  EXPECT_TRUE(gradcheck([](const T& v) { return F::kl_div(v[0].log_softmax(1), v[1].softmax(1), loom::kBatchMean); },
                        {input({3, 4}, 14), input({3, 4}, 15)}));
  EXPECT_LOOM_ERROR(F::mse_loss(logp, q, loom::kBatchMean), "mse_loss", "only for kl_div");
}

LOOM_INSTANTIATE_BACKENDS(LossTest);

}  // namespace
