// The composite tensor ops (repeat, repeat_interleave, flip, roll,
// masked_fill, isnan/isinf/isfinite, clamp with tensor bounds, outer, diag,
// diagonal, baddbmm) against PyTorch's definitions written out, with
// float64 gradient checks, on every backend.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <cmath>
#include <limits>
#include <vector>

#include "gradcheck.h"
#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::gradcheck;
using loom_test::input;
using T = std::vector<Tensor>;
using V = std::vector<double>;

class CompositeTest : public loom_test::BackendTest {};

TEST_P(CompositeTest, RepeatFlipRoll) {
  Tensor x = input({2, 3}, 91);
  const V v = x.to_vector<double>();
  // repeat({2, 1, 2}): a new leading dim of 2, rows once, columns twice.
  Tensor r = x.repeat({2, 1, 2});
  ASSERT_EQ(r.sizes().vec(), (std::vector<int64_t>{2, 2, 6}));
  V want;
  for (int a = 0; a < 2; ++a)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 6; ++j) want.push_back(v[i * 3 + j % 3]);
  EXPECT_TRUE(all_close(r, want, 0, 0));
  // repeat_interleave(2, 1): each column twice in place.
  want.clear();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 6; ++j) want.push_back(v[i * 3 + j / 2]);
  EXPECT_TRUE(all_close(x.repeat_interleave(2, 1), want, 0, 0));
  EXPECT_EQ(loom::repeat_interleave(x, 3).sizes().vec(), (std::vector<int64_t>{18}));
  // A tensor of counts: row 0 none, row 1 twice; flattened, each element its count.
  EXPECT_TRUE(all_close(x.repeat_interleave(loom::tensor({0, 2}), 0), {v[3], v[4], v[5], v[3], v[4], v[5]}, 0, 0));
  EXPECT_TRUE(all_close(loom::repeat_interleave(x, loom::tensor({1, 0, 2, 0, 0, 1})), {v[0], v[2], v[2], v[5]}, 0, 0));
  EXPECT_EQ(loom::repeat_interleave(loom::tensor({1, 2, 0, 1})).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1, 3}));
  EXPECT_TRUE(gradcheck([](const T& t) { return t[0].repeat_interleave(loom::tensor({2, 1, 0}), 1); }, {input({2, 3}, 93)}));
  EXPECT_LOOM_ERROR(x.repeat_interleave(loom::tensor({1, 2, 3}), 0), "repeat_interleave", "same size as input");
  EXPECT_LOOM_ERROR(x.repeat_interleave(loom::tensor({1, -1}), 0), "repeat_interleave", "can not be negative");
  // flip both dims: element (i, j) from (1 - i, 2 - j).
  want.clear();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) want.push_back(v[(1 - i) * 3 + (2 - j)]);
  EXPECT_TRUE(all_close(loom::flip(x, {0, -1}), want, 0, 0));
  // roll by 1 along dim 1, and by -4 flattened.
  want.clear();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) want.push_back(v[i * 3 + (j + 2) % 3]);
  EXPECT_TRUE(all_close(x.roll({1}, {1}), want, 0, 0));
  want.clear();
  for (int k = 0; k < 6; ++k) want.push_back(v[(k + 4) % 6]);
  EXPECT_TRUE(all_close(loom::roll(x, {-4}), want, 0, 0));
  EXPECT_TRUE(gradcheck([](const T& t) { return t[0].repeat({2, 2}).flip({1}).roll({1, -1}, {0, 1}); },
                        {input({2, 3}, 92)}));
  EXPECT_LOOM_ERROR(x.repeat({2}), "repeat", "can not be smaller");
}

TEST_P(CompositeTest, MasksAndChecks) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  Tensor x = loom::tensor(std::vector<double>{1, -inf, nan, 4, inf, -2});
  auto bools = [](const Tensor& t) { return t.to(loom::kLong).to_vector<int64_t>(); };
  EXPECT_EQ(bools(x.isnan()), (std::vector<int64_t>{0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(bools(loom::isinf(x)), (std::vector<int64_t>{0, 1, 0, 0, 1, 0}));
  EXPECT_EQ(bools(loom::isfinite(x)), (std::vector<int64_t>{1, 0, 0, 1, 0, 1}));
  EXPECT_EQ(bools(loom::isfinite(loom::arange(3))), (std::vector<int64_t>{1, 1, 1}));
  Tensor filled = x.masked_fill(x.isnan().logical_or(x.isinf()), 0.0);
  EXPECT_TRUE(all_close(filled, V{1, 0, 0, 4, 0, -2}, 0, 0));
  Tensor y = input({2, 3}, 93);
  Tensor lo = input({3}, 94, -1, 0), hi = input({2, 1}, 95, 0, 1);
  const V yv = y.to_vector<double>(), lv = lo.to_vector<double>(), hv = hi.to_vector<double>();
  V want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) want.push_back(std::min(std::max(yv[i * 3 + j], lv[j]), hv[i]));
  EXPECT_TRUE(all_close(y.clamp(lo, hi), want, 0, 0));
  Tensor z = y.clone();
  z.masked_fill_(y.gt(0), -1.0);
  for (double e : z.to_vector<double>()) EXPECT_LE(e, 0);
  EXPECT_TRUE(gradcheck([](const T& t) { return t[0].masked_fill(t[0].gt(0.5), 0.0).clamp(t[1], Tensor()); },
                        {input({4}, 96), input({4}, 97, -1, 0)}));
  EXPECT_LOOM_ERROR(y.masked_fill(y, 1.0), "masked_fill", "Bool mask");
}

TEST_P(CompositeTest, OuterDiagBaddbmm) {
  Tensor a = input({3}, 101), b = input({2}, 102);
  const V av = a.to_vector<double>(), bv = b.to_vector<double>();
  V want;
  for (double p : av)
    for (double q : bv) want.push_back(p * q);
  EXPECT_TRUE(all_close(loom::outer(a, b), want));
  // diag of a vector with offsets, and back.
  for (int64_t k : {0, 1, -2}) {
    Tensor d = loom::diag(a, k);
    const int64_t n = 3 + std::abs(k);
    ASSERT_EQ(d.sizes().vec(), (std::vector<int64_t>{n, n})) << k;
    const V dv = d.to_vector<double>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const bool on = j - i == k;
        EXPECT_EQ(dv[i * n + j], on ? av[k >= 0 ? i : j] : 0.0) << k << ": " << i << "," << j;
      }
    EXPECT_TRUE(all_close(d.diag(k), av, 0, 0)) << k;
  }
  Tensor m = input({3, 4}, 103);
  const V mv = m.to_vector<double>();
  EXPECT_TRUE(all_close(m.diagonal(1), V{mv[1], mv[6], mv[11]}, 0, 0));
  EXPECT_TRUE(all_close(m.diagonal(-1), V{mv[4], mv[9]}, 0, 0));
  Tensor s = input({2, 2, 2}, 104), b1 = input({2, 2, 3}, 105), b2 = input({2, 3, 2}, 106);
  EXPECT_TRUE(all_close(loom::baddbmm(s, b1, b2, 0.5, 2.0), (s * 0.5 + b1.bmm(b2) * 2.0).to_vector<double>()));
  EXPECT_TRUE(gradcheck([](const T& t) { return loom::diag(t[0], 1).diagonal(1) + loom::outer(t[0], t[0]).diagonal(); },
                        {input({3}, 107)}));
}

TEST_P(CompositeTest, HyperbolicAndTangent) {
  Tensor x = loom::tensor(std::vector<double>{-3, -1e-9, 0, 2e-8, 0.5, 1.2}, loom::kDouble);
  const V xv = x.to_vector<double>();
  V sh, ch, tn;
  for (double v : xv) sh.push_back(std::sinh(v)), ch.push_back(std::cosh(v)), tn.push_back(std::tan(v));
  EXPECT_TRUE(all_close(loom::sinh(x), sh, 1e-13, 1e-300));  // relative, even at 1e-9
  EXPECT_TRUE(all_close(x.cosh(), ch, 1e-13, 0));
  EXPECT_TRUE(all_close(loom::tan(x), tn, 1e-13, 1e-300));
  EXPECT_TRUE(gradcheck([](const T& t) { return t[0].sinh() + t[0].cosh() + t[0].tan(); }, {input({5}, 108, -1, 1)}));
}

LOOM_INSTANTIATE_BACKENDS(CompositeTest);

}  // namespace
