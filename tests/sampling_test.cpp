// embedding_bag against bags summed here, multinomial and bernoulli by
// their frequencies over many draws, and their checks of bad arguments.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <cmath>
#include <set>
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

class SamplingTest : public loom_test::BackendTest {};

// Bags of `idx` starting at `offsets` (the last ending at `end`), reduced
// as PyTorch's embedding_bag; `pad` entries are left out.
V bags(const V& w, int64_t dim, const std::vector<int64_t>& idx, const std::vector<int64_t>& offsets, int64_t end,
       int mode, const V& psw = {}, int64_t pad = -1) {
  V out;
  for (size_t b = 0; b < offsets.size(); ++b) {
    const int64_t lo = offsets[b], hi = b + 1 < offsets.size() ? offsets[b + 1] : end;
    for (int64_t d = 0; d < dim; ++d) {
      double s = 0, m = -INFINITY;
      int64_t n = 0;
      for (int64_t i = lo; i < hi; ++i) {
        if (idx[static_cast<size_t>(i)] == pad) continue;
        const double v = w[static_cast<size_t>(idx[static_cast<size_t>(i)] * dim + d)];
        s += v * (psw.empty() ? 1.0 : psw[static_cast<size_t>(i)]);
        m = std::max(m, v);
        ++n;
      }
      out.push_back(mode == 0 ? s : mode == 1 ? (n ? s / n : 0.0) : (n ? m : 0.0));
    }
  }
  return out;
}

TEST_P(SamplingTest, EmbeddingBagSumsMeansAndMaxima) {
  Tensor w = input({6, 3}, 1);
  const V wv = w.to_vector<double>();
  const std::vector<int64_t> idx = {1, 2, 4, 5, 4, 3, 2, 0};
  const std::vector<int64_t> offsets = {0, 2, 2, 5};  // the second bag is empty
  Tensor in = loom::tensor(idx, loom::kLong), off = loom::tensor(offsets, loom::kLong);
  const loom::EmbeddingBagMode modes[] = {loom::kSum, loom::kMean, loom::kMax};
  for (int m = 0; m < 3; ++m) {
    SCOPED_TRACE(m);
    Tensor r = F::embedding_bag(in, w, F::EmbeddingBagFuncOptions().offsets(off).mode(modes[m]));
    EXPECT_EQ(r.sizes(), (std::vector<int64_t>{4, 3}));
    EXPECT_TRUE(all_close(r, bags(wv, 3, idx, offsets, 8, m), 1e-12, 1e-12));
    // include_last_offset: the last offset ends the last bag (elements past it are in none).
    Tensor r2 = F::embedding_bag(in, w, F::EmbeddingBagFuncOptions().offsets(loom::tensor({0, 2, 2, 5, 7}, loom::kLong))
                                            .mode(modes[m]).include_last_offset(true));
    EXPECT_TRUE(all_close(r2, bags(wv, 3, idx, offsets, 7, m), 1e-12, 1e-12));
    // padding_idx leaves its entries out (of the mean's count too).
    Tensor r3 = F::embedding_bag(in, w, F::EmbeddingBagFuncOptions().offsets(off).mode(modes[m]).padding_idx(4));
    EXPECT_TRUE(all_close(r3, bags(wv, 3, idx, offsets, 8, m, {}, 4), 1e-12, 1e-12));
  }
  // A 2-D input is one bag per row; per_sample_weights scale each row (sum only).
  Tensor in2 = in.view({2, 4});
  const V psw = {0.5, 2, -1, 1, 3, 0.25, 1, 2};
  Tensor r = F::embedding_bag(in2, w, F::EmbeddingBagFuncOptions().mode(loom::kSum).per_sample_weights(
                                          loom::tensor(psw, loom::kDouble).view({2, 4})));
  EXPECT_TRUE(all_close(r, bags(wv, 3, idx, {0, 4}, 8, 0, psw), 1e-12, 1e-12));
  EXPECT_LOOM_ERROR(F::embedding_bag(in2, w, F::EmbeddingBagFuncOptions().per_sample_weights(loom::ones({2, 4}, loom::kDouble))),
                    "embedding_bag", "only supported for mode kSum");
  EXPECT_LOOM_ERROR(F::embedding_bag(in, w), "embedding_bag", "offsets has to be a 1-D tensor");
  // Offsets that do not start at 0 fail when the result is read.
  EXPECT_THROW(F::embedding_bag(in, w, F::EmbeddingBagFuncOptions().offsets(loom::tensor({1, 3}, loom::kLong)))
                   .to_vector<double>(),
               loom::Error);
  // The module: weight [num, dim], mean by default.
  nn::EmbeddingBag bag(nn::EmbeddingBagOptions(6, 3).mode(loom::kSum));
  EXPECT_EQ(bag->weight.sizes(), (std::vector<int64_t>{6, 3}));
  EXPECT_TRUE(all_close(bag(in, off), bags(bag->weight.to_vector<double>(), 3, idx, offsets, 8, 0), 1e-6, 1e-6));
  for (int m = 0; m < 3; ++m)
    EXPECT_TRUE(gradcheck([&](const T& v) { return F::embedding_bag(in, v[0], F::EmbeddingBagFuncOptions().offsets(off).mode(modes[m])); },
                          {input({6, 3}, 2)}))
        << m;
  EXPECT_TRUE(gradcheck(
      [&](const T& v) { return F::embedding_bag(in2, v[0], F::EmbeddingBagFuncOptions().mode(loom::kSum).per_sample_weights(v[1])); },
      {input({6, 3}, 3), input({2, 4}, 4)}));
}

TEST_P(SamplingTest, MultinomialDrawsInProportionToTheWeights) {
  loom::manual_seed(11);
  const V p = {1, 0, 2, 7};  // unnormalized, one impossible category
  Tensor w = loom::tensor(p, loom::kFloat);
  const int64_t n = 20000;
  Tensor s = loom::multinomial(w, n, true);
  EXPECT_EQ(s.dtype(), loom::kLong);
  EXPECT_EQ(s.sizes(), (std::vector<int64_t>{n}));
  const std::vector<int64_t> v = s.to_vector<int64_t>();
  V freq(4, 0);
  for (int64_t k : v) freq[static_cast<size_t>(k)] += 1.0 / n;
  EXPECT_EQ(freq[1], 0);
  for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(freq[k], p[k] / 10, 0.015) << k;
  // Without replacement: distinct categories; all of them is a permutation of the possible ones.
  Tensor rows = loom::tensor({1.0, 1.0, 1.0, 1.0, 5.0, 0.0, 1.0, 1.0}, loom::kDouble).view({2, 4});
  Tensor d = rows.multinomial(3);
  EXPECT_EQ(d.sizes(), (std::vector<int64_t>{2, 3}));
  const std::vector<int64_t> dv = d.to_vector<int64_t>();
  EXPECT_EQ(std::set<int64_t>(dv.begin(), dv.begin() + 3).size(), 3u);
  EXPECT_EQ((std::set<int64_t>(dv.begin() + 3, dv.end())), (std::set<int64_t>{0, 2, 3}));
  // The first draw without replacement follows the weights: category 0 of row 1 most often.
  int first_zero = 0;
  for (int r = 0; r < 400; ++r) first_zero += rows.multinomial(1).to_vector<int64_t>()[1] == 0;
  EXPECT_NEAR(first_zero / 400.0, 5.0 / 7.0, 0.08);
  EXPECT_LOOM_ERROR(loom::multinomial(w, 5), "multinomial", "without replacement");
  EXPECT_LOOM_ERROR(loom::multinomial(loom::tensor({1, 2}), 1), "multinomial", "floating-point");
  // A bad distribution fails when the samples are read.
  EXPECT_THROW(loom::multinomial(loom::tensor({0.5, -0.1}), 1).to_vector<int64_t>(), loom::Error);
  EXPECT_THROW(loom::multinomial(loom::tensor({0.0, 0.0}), 1, true).to_vector<int64_t>(), loom::Error);
  EXPECT_THROW(loom::multinomial(loom::tensor({0.0, 1.0, 0.0}), 2).to_vector<int64_t>(), loom::Error);
}

TEST_P(SamplingTest, BernoulliOfATensorOfProbabilities) {
  loom::manual_seed(5);
  Tensor p = loom::full({100000}, 0.3, loom::kFloat);
  Tensor b = loom::bernoulli(p);
  EXPECT_EQ(b.dtype(), loom::kFloat);
  EXPECT_NEAR(b.mean().item<double>(), 0.3, 0.01);
  EXPECT_EQ(loom::bernoulli(loom::tensor({0.0, 1.0, 0.0, 1.0})).to_vector<double>(), (V{0, 1, 0, 1}));
  EXPECT_NEAR(loom::bernoulli(loom::zeros({50000}), 0.75).mean().item<double>(), 0.75, 0.01);
  EXPECT_THROW(loom::bernoulli(loom::tensor({0.5, 1.5})).to_vector<double>(), loom::Error);
}

LOOM_INSTANTIATE_BACKENDS(SamplingTest);

}  // namespace
