// sort, argsort, msort, topk and kthvalue: values and positions against a
// std::stable_sort written here with PyTorch's comparison (NaN greater than
// every number), along every dim, with ties, NaN, empty and one-element
// rows, views, every dtype, the error paths, and float64 gradients.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "gradcheck.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::sizes_of;
using Shape = std::vector<int64_t>;

class SortTest : public loom_test::BackendTest {};

// Whether a comes before b in a stable sort, as PyTorch orders values.
bool before(double a, double b, bool descending) {
  if (descending) std::swap(a, b);
  if (std::isnan(a)) return false;
  return std::isnan(b) || a < b;
}

struct Sorted {
  std::vector<double> values;
  std::vector<double> positions;
};

// Each row of x (contiguous, `shape`) along `dim` stably sorted.
Sorted stable_sorted(const std::vector<double>& x, const Shape& shape, int64_t dim, bool descending) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t len = shape[dim];
  Sorted s{std::vector<double>(x.size()), std::vector<double>(x.size())};
  std::vector<int64_t> pos(len);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t q = 0; q < inner; ++q) {
      auto at = [&](int64_t k) { return (o * len + k) * inner + q; };
      std::iota(pos.begin(), pos.end(), int64_t{0});
      std::stable_sort(pos.begin(), pos.end(),
                       [&](int64_t a, int64_t b) { return before(x[at(a)], x[at(b)], descending); });
      for (int64_t k = 0; k < len; ++k) {
        s.values[at(k)] = x[at(pos[k])];
        s.positions[at(k)] = static_cast<double>(pos[k]);
      }
    }
  return s;
}

// Values with many ties, exact in every dtype: -1.5 .. 1.5 in halves for
// floating types, -3 .. 3 for integers, 0/1 for bool.
std::vector<double> tied_values(int64_t n, loom::ScalarType dt, uint64_t seed) {
  std::vector<double> v = loom_test::values(static_cast<size_t>(n), seed, 0, 7);
  for (double& x : v) {
    const double k = std::floor(x);
    x = dt == loom::kBool ? std::fmod(k, 2) : loom::is_floating_point(dt) ? (k - 3) * 0.5 : k - 3;
  }
  return v;
}

void expect_sorted(const Tensor& x, int64_t dim, bool descending, const std::string& what) {
  SCOPED_TRACE(what);
  const Shape shape = sizes_of(x);
  const int64_t d = dim < 0 ? dim + static_cast<int64_t>(shape.size()) : dim;
  const Sorted want = stable_sorted(x.contiguous().to_vector<double>(), shape, d, descending);
  auto [values, positions] = loom::sort(x, dim, descending);
  EXPECT_EQ(values.dtype(), x.dtype());
  EXPECT_EQ(positions.dtype(), loom::kLong);
  EXPECT_EQ(sizes_of(values), shape);
  EXPECT_EQ(sizes_of(positions), shape);
  EXPECT_TRUE(all_close(values, want.values, 0, 0));
  EXPECT_TRUE(all_close(positions, want.positions, 0, 0));
  EXPECT_TRUE(all_close(loom::argsort(x, dim, descending), want.positions, 0, 0));
}

const loom::ScalarType kDtypes[] = {loom::kFloat, loom::kDouble, loom::kBFloat16, loom::kInt, loom::kLong, loom::kBool};

TEST_P(SortTest, StableAlongEveryDimInEveryDtype) {
  const Shape shape{4, 5, 6};
  for (loom::ScalarType dt : kDtypes) {
    Tensor x = loom::tensor(tied_values(120, dt, 3), loom::kDouble).reshape(shape).to(dt);
    for (int64_t dim : {0, 1, 2, -1, -3})
      for (bool descending : {false, true})
        expect_sorted(x, dim, descending,
                      std::string(loom::to_string(dt)) + " dim " + std::to_string(dim) + (descending ? " desc" : ""));
  }
}

TEST_P(SortTest, NanIsGreaterThanEveryNumber) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> v{3, nan, 1, nan, -inf, inf, 0, -0.0, 1, nan};
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble, loom::kBFloat16}) {
    Tensor x = loom::tensor(v, loom::kDouble).to(dt);
    expect_sorted(x, 0, false, "ascending");
    expect_sorted(x, 0, true, "descending");
    auto [asc, i] = x.sort();
    std::vector<double> a = asc.to_vector<double>();
    EXPECT_TRUE(std::isnan(a[7]) && std::isnan(a[8]) && std::isnan(a[9]) && a[0] == -inf);  // NaN last
    auto [desc, j] = x.sort(-1, true);
    std::vector<double> b = desc.to_vector<double>();
    EXPECT_TRUE(std::isnan(b[0]) && std::isnan(b[2]) && b[3] == inf);  // NaN first
    // -0.0 and 0.0 are equal: they keep their order.
    EXPECT_TRUE(all_close(loom::argsort(x).narrow(0, 1, 2), {6, 7}, 0, 0));
  }
}

TEST_P(SortTest, EmptyOneElementAndZeroDimRows) {
  for (const Shape& shape : {Shape{3, 0}, Shape{0, 4}, Shape{4, 1}, Shape{1, 1}, Shape{0}}) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    Tensor x = loom::tensor(tied_values(n, loom::kFloat, 5), loom::kDouble).reshape(shape).to(loom::kFloat);
    for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) expect_sorted(x, dim, true, "empty or one");
  }
  Tensor s = loom::tensor(2.5);
  auto [v, i] = loom::sort(s);
  EXPECT_EQ(v.dim(), 0);
  EXPECT_EQ(i.dim(), 0);
  EXPECT_EQ(v.item<double>(), 2.5);
  EXPECT_EQ(i.item<int64_t>(), 0);
}

TEST_P(SortTest, ViewsAndLongRows) {
  Tensor m = loom::tensor(tied_values(8 * 9, loom::kDouble, 7), loom::kDouble).reshape({8, 9});
  expect_sorted(m.t(), 1, false, "transposed");
  expect_sorted(m.slice(1, 1, 9, 3), 0, true, "sliced");
  expect_sorted(m.t().slice(0, 0, 9, 2), -1, false, "transposed and sliced");
  // Rows longer than a GPU block's shared tile, and many short ones.
  Tensor lng = loom::tensor(tied_values(2 * 5000, loom::kFloat, 9), loom::kDouble).reshape({2, 5000}).to(loom::kFloat);
  expect_sorted(lng, 1, false, "long rows");
  expect_sorted(lng, 0, true, "many rows of two");
}

TEST_P(SortTest, StableOverloadsMethodsAndMsort) {
  Tensor x = loom::tensor(tied_values(24, loom::kFloat, 11), loom::kDouble).reshape({4, 6}).to(loom::kFloat);
  const Sorted rows = stable_sorted(x.to_vector<double>(), {4, 6}, 1, true);
  const Sorted cols = stable_sorted(x.to_vector<double>(), {4, 6}, 0, false);
  EXPECT_TRUE(all_close(std::get<1>(loom::sort(x, std::optional<bool>(true), 1, true)), rows.positions, 0, 0));
  EXPECT_TRUE(all_close(std::get<1>(x.sort(std::optional<bool>(false), -1, true)), rows.positions, 0, 0));
  EXPECT_TRUE(all_close(loom::argsort(x, true, 1, true), rows.positions, 0, 0));
  EXPECT_TRUE(all_close(x.argsort(true, 0), cols.positions, 0, 0));
  EXPECT_TRUE(all_close(x.argsort(0), cols.positions, 0, 0));
  EXPECT_TRUE(all_close(loom::msort(x), cols.values, 0, 0));
  EXPECT_TRUE(all_close(x.msort(), cols.values, 0, 0));
}

TEST_P(SortTest, TopkIsTheFirstKOfTheSortedRow) {
  const Shape shape{3, 7};
  Tensor x = loom::tensor(tied_values(21, loom::kDouble, 13), loom::kDouble).reshape(shape);
  const std::vector<double> xv = x.to_vector<double>();
  for (bool largest : {true, false}) {
    const Sorted s = stable_sorted(xv, shape, 1, largest);
    for (int64_t k : {0, 1, 3, 7}) {
      auto [values, positions] = loom::topk(x, k, 1, largest);
      EXPECT_EQ(sizes_of(values), (Shape{3, k}));
      EXPECT_EQ(positions.dtype(), loom::kLong);
      std::vector<double> want;
      for (int64_t r = 0; r < 3; ++r) want.insert(want.end(), s.values.begin() + r * 7, s.values.begin() + r * 7 + k);
      EXPECT_TRUE(all_close(values, want, 0, 0)) << "k " << k;
      // The positions are distinct and hold those values.
      EXPECT_TRUE(all_close(x.gather(1, positions), want, 0, 0));
      std::vector<double> p = positions.to_vector<double>();
      for (int64_t r = 0; r < 3; ++r) {
        std::vector<double> row(p.begin() + r * k, p.begin() + (r + 1) * k);
        std::sort(row.begin(), row.end());
        EXPECT_EQ(std::unique(row.begin(), row.end()), row.end());
      }
    }
  }
  auto [v0, i0] = x.t().topk(2, 0, false, false);  // a view, dim 0, smallest
  EXPECT_EQ(sizes_of(v0), (Shape{2, 3}));
  EXPECT_TRUE(all_close(v0, std::get<0>(loom::topk(x, 2, 1, false)).t().contiguous().to_vector<double>(), 0, 0));
  auto [vs, is] = loom::topk(loom::tensor(4.0), 1);
  EXPECT_EQ(vs.dim(), 0);
  EXPECT_EQ(vs.item<double>(), 4.0);
}

TEST_P(SortTest, KthvalueIsTheKthSmallest) {
  const Shape shape{4, 5};
  Tensor x = loom::tensor(tied_values(20, loom::kFloat, 17), loom::kDouble).reshape(shape).to(loom::kFloat);
  const Sorted s = stable_sorted(x.to_vector<double>(), shape, 1, false);
  for (int64_t k = 1; k <= 5; ++k) {
    auto [v, i] = loom::kthvalue(x, k, 1);
    EXPECT_EQ(sizes_of(v), (Shape{4}));
    std::vector<double> want;
    for (int64_t r = 0; r < 4; ++r) want.push_back(s.values[r * 5 + k - 1]);
    EXPECT_TRUE(all_close(v, want, 0, 0));
    EXPECT_TRUE(all_close(x.gather(1, i.unsqueeze(1)), want, 0, 0));
    auto [vk, ik] = x.kthvalue(k, -1, true);
    EXPECT_EQ(sizes_of(vk), (Shape{4, 1}));
    EXPECT_TRUE(all_close(vk, want, 0, 0));
  }
}

TEST_P(SortTest, Errors) {
  Tensor x = loom::ones({2, 3});
  EXPECT_LOOM_ERROR(loom::sort(x, 2), "sort", "dimension out of range");
  EXPECT_LOOM_ERROR(loom::argsort(x, -3), "argsort", "dimension out of range");
  EXPECT_LOOM_ERROR(loom::topk(x, 4), "topk", "k out of range");
  EXPECT_LOOM_ERROR(loom::topk(x, -1), "topk", "k out of range");
  EXPECT_LOOM_ERROR(loom::topk(x.to(loom::kBool), 1), "topk", "Bool");
  EXPECT_LOOM_ERROR(loom::kthvalue(x, 0), "kthvalue", "k out of range");
  EXPECT_LOOM_ERROR(loom::kthvalue(x, 4), "kthvalue", "k out of range");
  EXPECT_LOOM_ERROR(loom::sort(Tensor()), "sort", "undefined");
}

TEST_P(SortTest, GradientsOfValuesFloat64) {
  using T = std::vector<Tensor>;
  using loom_test::gradcheck;
  Tensor x = loom_test::input({4, 5}, 21);  // distinct values: no ties
  EXPECT_TRUE(gradcheck([](const T& v) { return std::get<0>(loom::sort(v[0], 1)); }, {x}));
  EXPECT_TRUE(gradcheck([](const T& v) { return std::get<0>(loom::sort(v[0].t(), -1, true)); }, {x}));
  EXPECT_TRUE(gradcheck([](const T& v) { return std::get<0>(loom::topk(v[0], 3, 1)); }, {x}));
  EXPECT_TRUE(gradcheck([](const T& v) { return std::get<0>(loom::topk(v[0], 2, 0, false)); }, {x}));
  EXPECT_TRUE(gradcheck([](const T& v) { return std::get<0>(loom::kthvalue(v[0], 2, 1)); }, {x}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::msort(v[0]); }, {x}));
  Tensor leaf = x.detach().clone().requires_grad_();
  EXPECT_FALSE(std::get<1>(loom::sort(leaf)).requires_grad());
  EXPECT_TRUE(std::get<0>(loom::sort(leaf)).requires_grad());
}

LOOM_INSTANTIATE_BACKENDS(SortTest);

}  // namespace
