// Data-dependent sizes: nonzero, argwhere, where(cond), masked_select,
// masked_scatter, _unique, _unique2, unique_dim, unique_consecutive:
// values against loops written here, broadcasting, empty and 0-d inputs,
// NaN, dtypes, gradients and errors.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "gradcheck.h"
#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::sizes_of;
using Shape = std::vector<int64_t>;
using Doubles = std::vector<double>;

class SelectTest : public loom_test::BackendTest {};

Tensor make(const Doubles& v, const Shape& shape, loom::ScalarType dt = loom::kFloat) {
  return loom::tensor(v, dt).reshape(shape);
}
Doubles as_doubles(const std::vector<int64_t>& v) { return Doubles(v.begin(), v.end()); }

TEST_P(SelectTest, NonzeroArgwhereAndWhere) {
  const Doubles v = {0, 2, 0, -1, 0, 0, 3, 5, 0, 0, 0, 7};  // [2, 3, 2]
  for (loom::ScalarType dt : {loom::kFloat, loom::kLong, loom::kInt, loom::kBool, loom::kBFloat16}) {
    Tensor x = make(v, {2, 3, 2}, dt);
    std::vector<int64_t> want;
    for (int64_t i = 0; i < 12; ++i)
      if (v[i] != 0) want.insert(want.end(), {i / 6, (i / 2) % 3, i % 2});
    Tensor nz = loom::nonzero(x);
    EXPECT_EQ(nz.dtype(), loom::kLong);
    EXPECT_EQ(sizes_of(nz), (Shape{static_cast<int64_t>(want.size() / 3), 3}));
    EXPECT_TRUE(all_close(nz, as_doubles(want)));
    EXPECT_TRUE(all_close(x.argwhere(), as_doubles(want)));
    std::vector<Tensor> w = loom::where(x);
    ASSERT_EQ(w.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      Doubles col;
      for (size_t r = k; r < want.size(); r += 3) col.push_back(static_cast<double>(want[r]));
      EXPECT_TRUE(all_close(w[k], col));
    }
  }
  // Non-contiguous input, empty results, 0-d inputs.
  Tensor t = make({0, 1, 2, 0}, {2, 2}).t();  // [[0, 2], [1, 0]]
  EXPECT_TRUE(all_close(t.nonzero(), {0, 1, 1, 0}));
  EXPECT_EQ(sizes_of(loom::zeros({3, 2}).nonzero()), (Shape{0, 2}));
  EXPECT_EQ(sizes_of(loom::scalar_tensor(5).nonzero()), (Shape{1, 0}));
  EXPECT_EQ(sizes_of(loom::scalar_tensor(0).nonzero()), (Shape{0, 0}));
  std::vector<Tensor> w0 = loom::where(loom::scalar_tensor(true));
  ASSERT_EQ(w0.size(), 1u);
  EXPECT_TRUE(all_close(w0[0], {0}));
}

TEST_P(SelectTest, MaskedSelectBroadcastsAndHasAGradient) {
  const Doubles xv = {1, 2, 3, 4, 5, 6};  // [2, 3]
  Tensor mask = make({1, 0, 1}, {3}, loom::kBool);
  Tensor x = make(xv, {2, 3});
  EXPECT_TRUE(all_close(loom::masked_select(x, mask), {1, 3, 4, 6}));
  // Both broadcast: x [2, 1] against a mask [3].
  EXPECT_TRUE(all_close(make({7, 8}, {2, 1}).masked_select(mask), {7, 7, 8, 8}));
  EXPECT_EQ(make(xv, {2, 3}, loom::kLong).masked_select(mask).dtype(), loom::kLong);
  EXPECT_EQ(x.masked_select(make({0, 0, 0}, {3}, loom::kBool)).numel(), 0);
  // Gradient: ones where selected (twice where broadcasting read it twice).
  Tensor a = make({7, 8}, {2, 1}, loom::kDouble).requires_grad_();
  (a.masked_select(mask) * make({1, 2, 3, 4}, {4}, loom::kDouble)).sum().backward();
  EXPECT_TRUE(all_close(a.grad(), {1 + 2, 3 + 4}));
  EXPECT_TRUE(loom_test::gradcheck([&](const std::vector<Tensor>& v) { return v[0].masked_select(mask); },
                                   {loom_test::input({2, 3}, 141)}));
  EXPECT_LOOM_ERROR(x.masked_select(make({1, 0, 1}, {3})), "masked_select", "Bool");
  EXPECT_LOOM_ERROR(x.masked_select(make({1, 0}, {2}, loom::kBool)), "masked_select", "");
}

TEST_P(SelectTest, MaskedScatterFillsInOrder) {
  Tensor x = make({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor mask = make({0, 1, 1, 1, 0, 1}, {2, 3}, loom::kBool);
  Tensor src = make({10, 20, 30, 40, 50}, {5});
  EXPECT_TRUE(all_close(x.masked_scatter(mask, src), {1, 10, 20, 30, 5, 40}));
  Tensor y = x.clone();
  y.masked_scatter_(make({1, 0, 0}, {3}, loom::kBool), src);  // broadcast over rows
  EXPECT_TRUE(all_close(y, {10, 2, 3, 20, 5, 6}));
  EXPECT_TRUE(loom_test::gradcheck(
      [&](const std::vector<Tensor>& v) { return v[0].masked_scatter(mask, v[1]); },
      {loom_test::input({2, 3}, 142), loom_test::input({5}, 143)}));
  EXPECT_LOOM_ERROR(x.masked_scatter(mask, make({1, 2}, {2})), "masked_scatter", "source");
  EXPECT_LOOM_ERROR(x.masked_scatter(mask, make({1, 2, 3, 4}, {4}, loom::kDouble)), "masked_scatter", "dtypes");
}

TEST_P(SelectTest, UniqueSortsCountsAndInverts) {
  const Doubles v = {3, 1, 2, 3, 3, 1, -4, 2};
  for (loom::ScalarType dt : {loom::kFloat, loom::kLong, loom::kInt}) {
    Tensor x = make(v, {2, 4}, dt);
    auto [values, inverse, counts] = loom::_unique2(x, true, true, true);
    std::map<double, int64_t> seen;
    for (double e : v) ++seen[e];
    Doubles want_values, want_counts, want_inverse;
    for (auto [k, c] : seen) want_values.push_back(k), want_counts.push_back(static_cast<double>(c));
    for (double e : v)
      want_inverse.push_back(static_cast<double>(std::find(want_values.begin(), want_values.end(), e) - want_values.begin()));
    EXPECT_EQ(values.dtype(), dt);
    EXPECT_TRUE(all_close(values, want_values));
    EXPECT_TRUE(all_close(counts, want_counts));
    EXPECT_EQ(sizes_of(inverse), (Shape{2, 4}));
    EXPECT_TRUE(all_close(inverse, want_inverse));
    auto [only, none] = loom::_unique(x);
    EXPECT_TRUE(all_close(only, want_values));
    EXPECT_EQ(none.numel(), 0);
  }
  // Each NaN stays apart and sorts last.
  const double nan = std::nan("");
  auto [u, i, c] = loom::_unique2(make({nan, 1, nan, 1}, {4}), true, false, true);
  EXPECT_TRUE(all_close(u, {1, nan, nan}));
  EXPECT_TRUE(all_close(c, {2, 1, 1}));
  EXPECT_EQ(i.numel(), 0);
}

TEST_P(SelectTest, UniqueConsecutiveAndAlongADim) {
  Tensor x = make({1, 1, 2, 2, 3, 1, 1, 2}, {8}, loom::kLong);
  auto [v, inv, cnt] = loom::unique_consecutive(x, true, true);
  EXPECT_TRUE(all_close(v, {1, 2, 3, 1, 2}));
  EXPECT_TRUE(all_close(inv, {0, 0, 1, 1, 2, 3, 3, 4}));
  EXPECT_TRUE(all_close(cnt, {2, 2, 1, 2, 1}));
  // Rows of a [4, 2]: (1,2) (0,5) (1,2) (0,5) -> sorted unique rows (0,5) (1,2).
  Tensor m = make({1, 2, 0, 5, 1, 2, 0, 5}, {4, 2});
  auto [rows, rinv, rcnt] = loom::unique_dim(m, 0, true, true, true);
  EXPECT_TRUE(all_close(rows, {0, 5, 1, 2}));
  EXPECT_TRUE(all_close(rinv, {1, 0, 1, 0}));
  EXPECT_TRUE(all_close(rcnt, {2, 2}));
  // Columns (dim -1) of its transpose, and consecutive columns.
  auto [cols, cinv, ccnt] = loom::unique_dim(m.t(), -1, true, true, false);
  EXPECT_EQ(sizes_of(cols), (Shape{2, 2}));
  EXPECT_TRUE(all_close(cols, {0, 1, 5, 2}));
  EXPECT_EQ(ccnt.numel(), 0);
  auto [cc, ccinv, cccnt] = loom::unique_consecutive(m, false, true, 0);
  EXPECT_TRUE(all_close(cccnt, {1, 1, 1, 1}));
  EXPECT_LOOM_ERROR(loom::unique_dim(m, 2), "unique_dim", "dimension out of range");
}

LOOM_INSTANTIATE_BACKENDS(SelectTest);

}  // namespace
