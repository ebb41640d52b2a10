// softmax(q kᵀ · s, masked) v written out by hand is recorded as one fused
// Attention node when nothing needs a gradient (api/src/nn/
// attention_pattern.cpp), with the same values as the two products and the
// softmax; in training, or with the fused op off, it stays written out.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <cmath>
#include <limits>

#include "tests/internal/lower_util.h"

namespace {

using loom::Tensor;
using loom::ir::Op;
using loom_test::ops_of;

// minGPT's attention: q, k, v split from one projection, the causal mask a
// stored [T, T] buffer compared with 0 and filled with -inf, or selected.
struct Written {
  int64_t b = 2, h = 3, t = 19, d = 8;
  Tensor x = loom::randn({b, t, 3 * h * d});
  Tensor bias = loom::ones({t, t}).tril().view({1, 1, t, t});
  Tensor forward(int style) const {
    auto parts = x.split(h * d, 2);
    const Tensor q = parts[0].view({b, t, h, d}).transpose(1, 2), k = parts[1].view({b, t, h, d}).transpose(1, 2),
                 v = parts[2].view({b, t, h, d}).transpose(1, 2);
    const double inf = std::numeric_limits<double>::infinity();
    Tensor att = loom::matmul(q, k.transpose(-2, -1));
    switch (style) {
      case 0: att = (att * (1.0 / std::sqrt(double(d)))).masked_fill(bias.eq(0), -inf); break;
      case 1: att = loom::where(bias.gt(0), att, -inf) / std::sqrt(double(d)); break;
      case 2: att = att * 0.3; break;  // no mask
      case 3: att = att * 0.3 + loom::zeros({t, t}); break;  // an added tensor: not the pattern
    }
    return loom::matmul(loom::softmax(att, -1), v).transpose(1, 2).reshape({b, t, h * d});
  }
};

TEST(AttentionPattern, WrittenOutAttentionInInferenceIsOneFusedNode) {
  loom::manual_seed(3);
  Written w;
  for (int style : {0, 1, 2, 3}) {
    SCOPED_TRACE(style);
    loom::NoGradGuard no_grad;
    const Tensor fused = w.forward(style);
    EXPECT_EQ(ops_of(fused).count(Op::Attention), style == 3 ? 0u : 1u);
    EXPECT_EQ(ops_of(fused).count(Op::Exp), style == 3 ? 1u : 0u);  // the softmax is not computed
    loom::backends::enable_flash_sdp(false);  // the fused op off: written out
    const Tensor written = w.forward(style);
    loom::backends::enable_flash_sdp(true);
    EXPECT_EQ(ops_of(written).count(Op::Attention), 0u);
    const std::vector<double> a = fused.to_vector<double>(), b = written.to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << i;
  }
}

TEST(AttentionPattern, TrainingKeepsTheWrittenOutForm) {
  loom::manual_seed(4);
  Written w;
  w.x.requires_grad_();
  const Tensor y = w.forward(0);
  EXPECT_EQ(ops_of(y).count(Op::Attention), 0u);  // autograd saved the probabilities already
  y.sum().backward();
  EXPECT_TRUE(w.x.grad().defined());
}

// A row the mask hides wholly is NaN written out; recognized, it stays NaN.
TEST(AttentionPattern, ARowThatSeesNoKeyStaysNaN) {
  loom::NoGradGuard no_grad;
  const Tensor q = loom::randn({1, 2, 3, 4}), k = loom::randn({1, 2, 5, 4}), v = loom::randn({1, 2, 5, 4});
  const Tensor hide = loom::arange(3).view({3, 1}).eq(1).expand({3, 5});  // query 1 sees nothing
  const Tensor att = loom::matmul(q, k.transpose(-2, -1)).masked_fill(hide, -std::numeric_limits<double>::infinity());
  const Tensor y = loom::matmul(loom::softmax(att, -1), v);
  EXPECT_EQ(ops_of(y).count(Op::Attention), 1u);
  const std::vector<double> out = y.to_vector<double>();
  for (int64_t hh = 0; hh < 2; ++hh)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t e = 0; e < 4; ++e) EXPECT_EQ(std::isnan(out[(hh * 3 + i) * 4 + e]), i == 1) << hh << " " << i;
}

}  // namespace
