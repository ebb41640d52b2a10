// cumsum, cumprod, cummax, cummin and logcumsumexp: values against prefix
// loops written here, along every dim, with empty and one-element rows,
// views, the dtype rules (integers and bool in int64, dtype=), NaN and
// ties for cummax / cummin, errors, and float64 gradients (cumprod's with
// zeros in the input).
#include <cmath>
#include <limits>
#include <vector>

#include "gradcheck.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::sizes_of;
using Shape = std::vector<int64_t>;

class ScanTest : public loom_test::BackendTest {};

enum class Kind { Sum, Prod, Max, Min, LogSumExp };

// Each prefix of each row along dim of x (contiguous, `shape`): its sum,
// product, extreme or log-sum-exp, and for the extremes the position (the
// last of a tie; a NaN, once met, is the extreme, and the latest NaN).
struct Prefixes {
  std::vector<double> values, positions;
};
Prefixes prefixes(const std::vector<double>& x, const Shape& shape, int64_t dim, Kind kind) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t len = shape[dim];
  Prefixes p{std::vector<double>(x.size()), std::vector<double>(x.size())};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t q = 0; q < inner; ++q) {
      auto at = [&](int64_t k) { return (o * len + k) * inner + q; };
      double acc = kind == Kind::Prod ? 1 : 0, best = 0;
      int64_t pos = 0;
      for (int64_t k = 0; k < len; ++k) {
        const double v = x[at(k)];
        if (kind == Kind::Sum) acc += v;
        if (kind == Kind::Prod) acc *= v;
        if (kind == Kind::LogSumExp) {
          double m = -INFINITY;
          for (int64_t j = 0; j <= k; ++j) m = std::max(m, x[at(j)]);
          double s = 0;
          for (int64_t j = 0; j <= k; ++j) s += std::exp(x[at(j)] - m);
          acc = m + std::log(s);
        }
        if (kind == Kind::Max || kind == Kind::Min) {
          const bool better = kind == Kind::Max ? v >= best : v <= best;
          if (k == 0 || std::isnan(v) || (!std::isnan(best) && better)) best = v, pos = k;
          acc = best;
        }
        p.values[at(k)] = acc;
        p.positions[at(k)] = static_cast<double>(pos);
      }
    }
  return p;
}

// Small integers (and halves for floating types): exact prefix sums and
// products in every dtype.
std::vector<double> small_values(int64_t n, loom::ScalarType dt, uint64_t seed) {
  std::vector<double> v = loom_test::values(static_cast<size_t>(n), seed, 0, 5);
  for (double& x : v) {
    const double k = std::floor(x);
    x = dt == loom::kBool ? std::fmod(k, 2) : loom::is_floating_point(dt) ? (k - 2) * 0.5 : k - 2;
  }
  return v;
}

TEST_P(ScanTest, CumsumAndCumprodAlongEveryDim) {
  const Shape shape{3, 4, 5};
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble, loom::kBFloat16, loom::kInt, loom::kLong, loom::kBool}) {
    const std::vector<double> v = small_values(60, dt, 3);
    Tensor x = loom::tensor(v, loom::kDouble).reshape(shape).to(dt);
    const loom::ScalarType want_dt = loom::is_floating_point(dt) ? dt : loom::kLong;
    for (int64_t dim : {0, 1, 2, -1}) {
      SCOPED_TRACE(std::string(loom::to_string(dt)) + " dim " + std::to_string(dim));
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Tensor s = loom::cumsum(x, dim), p = x.cumprod(dim);
      EXPECT_EQ(s.dtype(), want_dt);
      EXPECT_EQ(p.dtype(), want_dt);
      EXPECT_EQ(sizes_of(s), shape);
      // bfloat16 rounds each prefix to 8 bits: within its precision.
      const double tol = dt == loom::kBFloat16 ? 1e-2 : 0;
      EXPECT_TRUE(all_close(s, prefixes(v, shape, d, Kind::Sum).values, tol, 0));
      EXPECT_TRUE(all_close(p, prefixes(v, shape, d, Kind::Prod).values, tol, 0));
    }
  }
}

TEST_P(ScanTest, DtypeArgumentViewsAndOddShapes) {
  const std::vector<double> iv = small_values(24, loom::kInt, 5);
  Tensor x = loom::tensor(iv, loom::kDouble).reshape({4, 6}).to(loom::kInt);
  Tensor s = loom::cumsum(x, 1, loom::kDouble);
  EXPECT_EQ(s.dtype(), loom::kDouble);
  EXPECT_TRUE(all_close(s, prefixes(iv, {4, 6}, 1, Kind::Sum).values, 0, 0));
  const std::vector<double> v = small_values(24, loom::kFloat, 5);
  EXPECT_EQ(x.cumprod(0, loom::kFloat).dtype(), loom::kFloat);
  // A transposed and a sliced view.
  Tensor m = loom::tensor(v, loom::kDouble).reshape({4, 6});
  EXPECT_TRUE(all_close(m.t().cumsum(1), prefixes(m.t().contiguous().to_vector<double>(), {6, 4}, 1, Kind::Sum).values, 0, 0));
  Tensor sl = m.slice(1, 1, 6, 2);
  EXPECT_TRUE(all_close(sl.cumprod(0), prefixes(sl.contiguous().to_vector<double>(), {4, 3}, 0, Kind::Prod).values, 0, 0));
  // Empty, one-element and 0-d.
  EXPECT_EQ(sizes_of(loom::cumsum(loom::zeros({3, 0}), 1)), (Shape{3, 0}));
  EXPECT_EQ(sizes_of(loom::cumprod(loom::zeros({0, 4}), 1)), (Shape{0, 4}));
  EXPECT_TRUE(all_close(loom::cumsum(m.narrow(1, 2, 1), 1), m.narrow(1, 2, 1).contiguous().to_vector<double>(), 0, 0));
  Tensor z = loom::cumsum(loom::tensor(3.5), 0);
  EXPECT_EQ(z.dim(), 0);
  EXPECT_EQ(z.item<double>(), 3.5);
  // A long row: sums accumulate in double for float32, as PyTorch's CPU does.
  std::vector<double> ones(100000, 0.1);
  Tensor big = loom::tensor(ones, loom::kDouble).to(loom::kFloat).cumsum(0);
  double acc = 0;
  for (double& o : ones) o = static_cast<float>(acc += static_cast<double>(static_cast<float>(o)));
  EXPECT_TRUE(all_close(big, ones, 0, 0));
}

TEST_P(ScanTest, CummaxAndCumminWithTiesAndNan) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> v{1, 3, 3, 2, nan, 5, nan, 0, -1, 4, 4, -2};
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble, loom::kBFloat16}) {
    Tensor x = loom::tensor(v, loom::kDouble).to(dt);
    for (Kind kind : {Kind::Max, Kind::Min}) {
      auto [values, positions] = kind == Kind::Max ? loom::cummax(x, 0) : x.cummin(0);
      const Prefixes want = prefixes(v, {12}, 0, kind);
      EXPECT_EQ(values.dtype(), dt);
      EXPECT_EQ(positions.dtype(), loom::kLong);
      EXPECT_TRUE(all_close(values, want.values, 0, 0));
      EXPECT_TRUE(all_close(positions, want.positions, 0, 0));
    }
  }
  const std::vector<double> w = small_values(30, loom::kLong, 9);
  for (loom::ScalarType dt : {loom::kLong, loom::kInt, loom::kBool}) {
    const std::vector<double> wv = dt == loom::kBool ? small_values(30, loom::kBool, 9) : w;
    Tensor x = loom::tensor(wv, loom::kDouble).reshape({5, 6}).to(dt);
    for (int64_t dim : {0, -1}) {
      const int64_t d = dim < 0 ? 1 : 0;
      auto [values, positions] = x.cummax(dim);
      EXPECT_TRUE(all_close(values, prefixes(wv, {5, 6}, d, Kind::Max).values, 0, 0));
      EXPECT_TRUE(all_close(positions, prefixes(wv, {5, 6}, d, Kind::Max).positions, 0, 0));
      auto [mins, at] = loom::cummin(x, dim);
      EXPECT_TRUE(all_close(mins, prefixes(wv, {5, 6}, d, Kind::Min).values, 0, 0));
      EXPECT_TRUE(all_close(at, prefixes(wv, {5, 6}, d, Kind::Min).positions, 0, 0));
    }
  }
}

TEST_P(ScanTest, Logcumsumexp) {
  std::vector<double> v = loom_test::values(20, 7, -3, 3);
  v[3] = -1000;  // far below a later maximum: must not underflow to -inf
  Tensor x = loom::tensor(v, loom::kDouble).reshape({4, 5});
  for (int64_t dim : {0, 1})
    EXPECT_TRUE(all_close(x.logcumsumexp(dim), prefixes(v, {4, 5}, dim, Kind::LogSumExp).values, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(loom::logcumsumexp(x.to(loom::kFloat), 1), prefixes(v, {4, 5}, 1, Kind::LogSumExp).values,
                        1e-5, 1e-5));
}

TEST_P(ScanTest, Errors) {
  Tensor x = loom::ones({2, 3});
  EXPECT_LOOM_ERROR(loom::cumsum(x, 2), "cumsum", "dimension out of range");
  EXPECT_LOOM_ERROR(x.cumprod(-3), "cumprod", "dimension out of range");
  EXPECT_LOOM_ERROR(loom::cummax(x, 5), "cummax", "dimension out of range");
  EXPECT_LOOM_ERROR(loom::logcumsumexp(x.to(loom::kLong), 0), "logcumsumexp", "not implemented");
}

TEST_P(ScanTest, GradientsFloat64) {
  using T = std::vector<Tensor>;
  using loom_test::gradcheck;
  Tensor x = loom_test::input({3, 5}, 31);
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::cumsum(v[0], 1); }, {x}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::cumsum(v[0].t(), -1); }, {x}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::cumprod(v[0], 1); }, {x}));
  EXPECT_TRUE(gradcheck([](const T& v) { return v[0].cumprod(0); }, {x}));
  // Zeros: one, two, and at the ends of rows (the first zero's gradient is
  // the product of the rest, later zeros' is 0 unless before the first).
  std::vector<double> zv = loom_test::values(20, 33, 0.5, 2);
  for (int i : {2, 5, 8, 9, 14, 19}) zv[i] = 0;
  Tensor zx = loom::tensor(zv, loom::kDouble).reshape({4, 5});
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::cumprod(v[0], 1); }, {zx}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::cumprod(v[0], 0); }, {zx}));
  EXPECT_TRUE(gradcheck([](const T& v) { return std::get<0>(loom::cummax(v[0], 1)); }, {x}));
  EXPECT_TRUE(gradcheck([](const T& v) { return std::get<0>(loom::cummin(v[0], 0)); }, {x}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::logcumsumexp(v[0], 1); }, {x}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::cumsum(v[0], 1, loom::kDouble) * v[0]; }, {x}));
  EXPECT_TRUE(loom_test::gradgradcheck([](const T& v) { return loom::cumprod(v[0], 1); }, {x}));
}

LOOM_INSTANTIATE_BACKENDS(ScanTest);

}  // namespace
