// scatter (assign, value, legacy reduce), scatter_reduce (every reduction,
// include_self both ways), index_add, index_copy, index_fill and their
// in-place forms: values against a fold written out here, duplicates,
// negative dims, empty indices, non-contiguous inputs, integer, bool and
// bfloat16 dtypes, and the errors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using Shape = std::vector<int64_t>;
using Longs = std::vector<int64_t>;
using Doubles = std::vector<double>;

class ScatterTest : public loom_test::BackendTest {};

Tensor make(const Doubles& v, const Shape& shape, loom::ScalarType dt = loom::kFloat) {
  return loom::tensor(v, dt).reshape(shape);
}
Tensor longs(const Longs& v, const Shape& shape) { return loom::tensor(v).reshape(shape); }

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

// PyTorch's scatter_reduce written out: every src element the index reads
// joins the list of its target in the index's row-major order, then each
// target folds its list (self first when include_self).
Doubles reference(const Doubles& self, const Shape& ss, int64_t dim, const Longs& idx, const Shape& is,
                  const Doubles& src, const Shape& srcs, const std::string& reduce, bool include_self, bool integer) {
  const int nd = static_cast<int>(ss.size());
  if (dim < 0) dim += nd;
  std::vector<Doubles> lists(self.size());
  std::vector<int64_t> c(is.size(), 0);
  for (int64_t i = 0; i < numel(is); ++i) {
    int64_t t = 0, s = 0;
    for (int d = 0; d < nd; ++d) {
      t = t * ss[d] + (d == dim ? idx[i] : c[d]);
      s = s * srcs[d] + c[d];
    }
    lists[t].push_back(src[s]);
    for (int d = nd - 1; d >= 0; --d) {
      if (++c[d] < is[d]) break;
      c[d] = 0;
    }
  }
  Doubles out = self;
  for (size_t t = 0; t < self.size(); ++t) {
    if (lists[t].empty()) continue;
    Doubles v = lists[t];
    if (include_self && reduce != "assign") v.insert(v.begin(), self[t]);
    double r = v[0];
    if (reduce == "assign") r = v.back();
    for (size_t k = 1; k < v.size(); ++k) {
      if (reduce == "sum" || reduce == "mean") r += v[k];
      if (reduce == "prod") r *= v[k];
      if (reduce == "amax") r = (std::isnan(v[k]) || v[k] > r) ? v[k] : r;
      if (reduce == "amin") r = (std::isnan(v[k]) || v[k] < r) ? v[k] : r;
    }
    if (reduce == "mean") r = integer ? std::floor(r / v.size()) : r / v.size();
    out[t] = r;
  }
  return out;
}

const char* kReduces[] = {"sum", "prod", "mean", "amax", "amin"};

TEST_P(ScatterTest, ScatterReduceEveryKindBothIncludeSelfAndDims) {
  const Doubles self = {3, -1, 4, 1, -5, 9, 2, -6, 5, 3, 5, -8};  // [3, 4]
  const Doubles src = {2, -7, 1, 8, -2, 8, 1, 8, 2, -8, 4, 5, -9, 0, 4, 5};  // [4, 4]
  // dim 0 (and -2): duplicates in every column; the index is smaller than src.
  const Longs i0 = {2, 0, 1, 1, 2, 2, 1, 0, 0, 2, 1, 1};  // [3, 4] of rows
  // dim 1 (and -1): [3, 3] of columns, with repeats.
  const Longs i1 = {3, 3, 0, 1, 2, 1, 0, 0, 0};
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble, loom::kLong, loom::kInt}) {
    const bool integer = !loom::is_floating_point(dt);
    for (const char* r : kReduces)
      for (bool inc : {true, false}) {
        SCOPED_TRACE(::testing::Message() << r << (inc ? " include_self " : " exclude_self ") << dt);
        Tensor a = make(self, {3, 4}, dt), s = make(src, {4, 4}, dt);
        Tensor got0 = a.scatter_reduce(0, longs(i0, {3, 4}), s, r, inc);
        EXPECT_EQ(got0.dtype(), dt);
        EXPECT_TRUE(all_close(got0, reference(self, {3, 4}, 0, i0, {3, 4}, src, {4, 4}, r, inc, integer)));
        Tensor got1 = loom::scatter_reduce(a, -1, longs(i1, {3, 3}), s, r, inc);
        EXPECT_TRUE(all_close(got1, reference(self, {3, 4}, 1, i1, {3, 3}, src, {4, 4}, r, inc, integer)));
      }
  }
}

TEST_P(ScatterTest, IntegerMeanFloorsNegativeSums) {
  Tensor a = make({-3, 4}, {2}, loom::kLong);
  Tensor got = a.scatter_reduce(0, longs({0, 0, 1}, {3}), make({-2, 0, 1}, {3}, loom::kLong), "mean");
  EXPECT_TRUE(all_close(got, {std::floor(-5.0 / 3), std::floor(5.0 / 2)}));
  EXPECT_TRUE(all_close(a.scatter_reduce(0, longs({0}, {1}), make({-7}, {1}, loom::kLong), "mean", false), {-7, 4}));
}

TEST_P(ScatterTest, AmaxAndAminPropagateNaN) {
  const double nan = std::nan("");
  Tensor a = make({0, 0, nan}, {3});
  Tensor s = make({nan, 1, 2, 5}, {4});
  Tensor idx = longs({0, 0, 1, 2}, {4});
  EXPECT_TRUE(all_close(a.scatter_reduce(0, idx, s, "amax"), {nan, 2, nan}));
  EXPECT_TRUE(all_close(a.scatter_reduce(0, idx, s, "amin", false), {nan, 2, 5}));
}

TEST_P(ScatterTest, ScatterAssignsWithTheLastDuplicateWinning) {
  const Doubles self = {1, 2, 3, 4, 5, 6};
  const Doubles src = {10, 20, 30, 40, 50, 60};
  const Longs idx = {1, 0, 1, 1, 1, 1};  // rows 0 and 1 both write row 1 in columns 0, 2
  for (loom::ScalarType dt : {loom::kFloat, loom::kLong, loom::kInt, loom::kBFloat16}) {
    Tensor got = make(self, {2, 3}, dt).scatter(0, longs(idx, {2, 3}), make(src, {2, 3}, dt));
    EXPECT_TRUE(all_close(got, reference(self, {2, 3}, 0, idx, {2, 3}, src, {2, 3}, "assign", true, false)));
  }
  // A long fiber, so the CPU splits the work: the last writer still wins.
  const int64_t n = 1 << 12;
  Longs big(2 * n);
  Doubles bsrc(2 * n);
  for (int64_t i = 0; i < 2 * n; ++i) big[i] = (i * 7) % 5, bsrc[i] = static_cast<double>(i);
  Tensor got = loom::zeros({5, 2}).scatter(0, longs(big, {n, 2}), make(bsrc, {n, 2}));
  EXPECT_TRUE(all_close(got, reference(Doubles(10, 0), {5, 2}, 0, big, {n, 2}, bsrc, {n, 2}, "assign", true, false)));
  // The value form and negative dims.
  EXPECT_TRUE(all_close(make(self, {2, 3}).scatter(-1, longs({2, 0}, {2, 1}), 7.5), {1, 2, 7.5, 7.5, 5, 6}));
  EXPECT_TRUE(all_close(loom::scatter(make(self, {2, 3}), 1, longs({1}, {1, 1}), -1), {1, -1, 3, 4, 5, 6}));
}

TEST_P(ScatterTest, LegacyReduceStringsAddAndMultiply) {
  const Doubles self = {1, 2, 3, 4};
  const Longs idx = {1, 1, 0};
  const Doubles src = {2, 3, 5};
  Tensor a = make(self, {4}), s = make(src, {3});
  EXPECT_TRUE(all_close(a.scatter(0, longs(idx, {3}), s, "add"),
                        reference(self, {4}, 0, idx, {3}, src, {3}, "sum", true, false)));
  EXPECT_TRUE(all_close(loom::scatter(a, 0, longs(idx, {3}), s, "multiply"),
                        reference(self, {4}, 0, idx, {3}, src, {3}, "prod", true, false)));
  EXPECT_TRUE(all_close(a.scatter(0, longs(idx, {3}), 2.0, "multiply"), {2, 8, 3, 4}));
  EXPECT_TRUE(all_close(a.scatter(0, longs(idx, {3}), 2.0, "add"), {3, 6, 3, 4}));
}

TEST_P(ScatterTest, BoolAndBFloat16) {
  Tensor b = make({0, 1, 0}, {3}, loom::kBool);
  Tensor bs = make({1, 0, 1}, {3}, loom::kBool);
  Tensor idx = longs({0, 1, 1}, {3});
  EXPECT_EQ(b.scatter_reduce(0, idx, bs, "amax").dtype(), loom::kBool);
  EXPECT_TRUE(all_close(b.scatter_reduce(0, idx, bs, "amax"), {1, 1, 0}));  // or
  EXPECT_TRUE(all_close(b.scatter_reduce(0, idx, bs, "prod"), {0, 0, 0}));  // and
  EXPECT_TRUE(all_close(b.scatter_reduce(0, idx, bs, "amin", false), {1, 0, 0}));
  EXPECT_TRUE(all_close(b.scatter(0, idx, bs), {1, 1, 0}));
  // bfloat16: each fold rounded to bfloat16, as every backend computes it.
  Tensor h = make({1, 3}, {2}, loom::kBFloat16);
  Tensor hs = make({1.0078125, 1.0078125, 7}, {3}, loom::kBFloat16);
  Tensor got = h.scatter_reduce(0, longs({0, 0, 1}, {3}), hs, "prod");
  EXPECT_EQ(got.dtype(), loom::kBFloat16);
  const float once = static_cast<float>(loom::BFloat16(1.0078125f * 1.0078125f));
  EXPECT_TRUE(all_close(got, {once, 21}));
}

TEST_P(ScatterTest, EmptyIndexAndNonContiguousOperands) {
  Tensor a = make({1, 2, 3, 4, 5, 6}, {2, 3});
  for (const char* r : kReduces)
    EXPECT_TRUE(all_close(a.scatter_reduce(1, longs({}, {2, 0}), a, r, false), {1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(loom::zeros({0, 3}).scatter(0, longs({}, {0, 3}), loom::zeros({0, 3})).numel(), 0);
  // Transposed self and src, and a strided index.
  Tensor self_t = make({1, 2, 3, 4, 5, 6}, {3, 2}).t();  // [[1,3,5],[2,4,6]]
  Tensor src_t = make({10, 20, 30, 40, 50, 60}, {3, 2}).t();  // [[10,30,50],[20,40,60]]
  Tensor idx = longs({1, 9, 0, 9, 1, 9, 0, 9, 0, 9, 0, 9}, {2, 6}).slice(1, 0, 6, 2);  // [[1,0,1],[0,0,0]]
  Tensor got = self_t.scatter_reduce(0, idx, src_t, "amax");
  EXPECT_TRUE(all_close(got, {20, 40, 60, 10, 4, 50}));
}

TEST_P(ScatterTest, InPlaceFormsWriteThroughViews) {
  Tensor base = loom::zeros({3, 4});
  Tensor col = base.select(1, 2);  // non-contiguous view
  col.scatter_(0, longs({2, 0}, {2}), make({5, 6}, {2}));
  EXPECT_TRUE(all_close(base.select(1, 2), {6, 0, 5}));
  col.scatter_reduce_(0, longs({0, 0}, {2}), make({2, 3}, {2}), "sum");
  col.scatter_add_(0, longs({1}, {1}), make({4}, {1}));
  col.scatter_(0, longs({2}, {1}), 2.0, "multiply");
  EXPECT_TRUE(all_close(base.select(1, 2), {11, 4, 10}));
  EXPECT_TRUE(all_close(base.sum(), {25}));
  Tensor x = make({1, 2, 3, 4, 5, 6}, {3, 2});
  x.index_add_(0, longs({2, 2}, {2}), make({1, 1, 2, 2}, {2, 2}), 3);
  x.index_fill_(1, longs({-1}, {1}), -1);
  x.index_copy_(0, longs({0}, {1}), make({7, 8}, {1, 2}));
  EXPECT_TRUE(all_close(x, {7, 8, 3, -1, 5 + 3 + 6, -1}));
}

TEST_P(ScatterTest, IndexAddCopyAndFill) {
  const Doubles x = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};  // [3, 4]
  const Doubles s = {1, 2, 3, 4, 5, 6, 7, 8, 9};             // [3, 3]
  const Longs idx = {3, 0, 3};
  for (loom::ScalarType dt : {loom::kFloat, loom::kLong}) {
    Tensor a = make(x, {3, 4}, dt), src = make(s, {3, 3}, dt);
    // index_add along dim 1: column idx[k] += alpha * src[:, k].
    Doubles want = x;
    for (int r = 0; r < 3; ++r)
      for (int k = 0; k < 3; ++k) want[r * 4 + idx[k]] += 2 * s[r * 3 + k];
    EXPECT_TRUE(all_close(a.index_add(-1, longs(idx, {3}), src, 2), want));
    EXPECT_TRUE(all_close(loom::index_add(a, 1, longs(idx, {3}).to(loom::kInt), src), reference(
        x, {3, 4}, 1, {3, 0, 3, 3, 0, 3, 3, 0, 3}, {3, 3}, s, {3, 3}, "sum", true, false)));
    // index_copy: the last duplicate wins.
    Doubles copied = x;
    for (int r = 0; r < 3; ++r)
      for (int k = 0; k < 3; ++k) copied[r * 4 + idx[k]] = s[r * 3 + k];
    EXPECT_TRUE(all_close(a.index_copy(1, longs(idx, {3}), src), copied));
    // index_fill with negative indices, a scalar and a 0-d tensor.
    Doubles filled = x;
    for (int c = 0; c < 4; ++c) filled[4 + c] = filled[8 + c] = -3;
    EXPECT_TRUE(all_close(a.index_fill(0, longs({-1, 1}, {2}), -3), filled));
    EXPECT_TRUE(all_close(loom::index_fill(a, 0, longs({2, -2}, {2}), loom::scalar_tensor(-3, dt)), filled));
  }
}

TEST_P(ScatterTest, Errors) {
  Tensor x = loom::ones({2, 3});
  loom::sync();
  Tensor i = longs({0, 1}, {1, 2});
  EXPECT_LOOM_ERROR(x.scatter_reduce(0, i, x, "max"), "scatter_reduce", "sum, prod, mean, amax or amin");
  EXPECT_LOOM_ERROR(x.scatter(0, i, x, "sum"), "scatter", "add or multiply");
  EXPECT_LOOM_ERROR(x.scatter(0, i, loom::ones({2, 3}, loom::kDouble)), "scatter", "src.dtype");
  EXPECT_LOOM_ERROR(x.scatter(0, i.to(loom::kInt), x), "scatter", "int64");
  EXPECT_LOOM_ERROR(x.scatter(2, i, x), "scatter", "dimension out of range");
  EXPECT_LOOM_ERROR(x.scatter(0, longs({0, 1}, {2}), x), "scatter", "same number of dimensions");
  EXPECT_LOOM_ERROR(x.scatter(0, longs({0, 0, 0, 0}, {1, 4}), 1.0), "scatter", "smaller than self");
  EXPECT_LOOM_ERROR(x.scatter_reduce(0, longs({0, 0, 0}, {1, 3}), loom::ones({1, 2}), "sum"), "scatter_reduce",
                    "smaller size than src");
  EXPECT_LOOM_ERROR(loom::ones({2}, loom::kBool).scatter_reduce(0, longs({0}, {1}), loom::ones({1}, loom::kBool), "mean"),
                    "scatter_reduce", "mean");
  EXPECT_LOOM_ERROR(x.index_add(0, longs({0}, {1}), loom::ones({2, 3})), "index_add", "Number of indices");
  EXPECT_LOOM_ERROR(x.index_add(0, longs({0, 1}, {1, 2}), loom::ones({2, 3})), "index_add", "vector");
  EXPECT_LOOM_ERROR(x.index_copy(1, longs({0}, {1}), loom::ones({3, 1})), "index_copy", "must match");
  EXPECT_LOOM_ERROR(x.index_fill(0, longs({0}, {1}), loom::ones({1})), "index_fill", "0-dimensional");
  for (const char* r : kReduces) {
    std::string msg = loom_test::error_of([&] { x.scatter_reduce(1, i.add(2), x, r).to_vector<double>(); });
    EXPECT_NE(msg.find("index 3 is out of bounds for dimension of size 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("scatter_test.cpp"), std::string::npos) << msg;
  }
  std::string msg = loom_test::error_of([&] { x.index_fill(0, longs({-3}, {1}), 0).to_vector<double>(); });
  EXPECT_NE(msg.find("out of bounds"), std::string::npos) << msg;
  EXPECT_TRUE(all_close(x.sum(), {6}));  // a failed run leaves x as it was
}

// The gradient splits equally among the values equal to an amax's result.
TEST_P(ScatterTest, AmaxGradientSplitsAmongTies) {
  Tensor self = make({3, 1}, {2}, loom::kDouble).requires_grad_();
  Tensor src = make({3, 2, 3, 5}, {4}, loom::kDouble).requires_grad_();
  Tensor out = self.scatter_reduce(0, longs({0, 0, 0, 1}, {4}), src, "amax");
  (out * make({6, 10}, {2}, loom::kDouble)).sum().backward();
  EXPECT_TRUE(all_close(self.grad(), {2, 0}));  // three tie at 3: 6 / 3 each
  EXPECT_TRUE(all_close(src.grad(), {2, 0, 2, 10}));
}

LOOM_INSTANTIATE_BACKENDS(ScatterTest);

}  // namespace
