// cat, stack, index_select, gather, scatter_add, embedding, one_hot,
// softmax, log_softmax, tril, triu: values against loops written here,
// non-contiguous inputs, negative dims, and every error path (record time,
// and out-of-range indices at materialization).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::sizes_of;
using Shape = std::vector<int64_t>;
using Longs = std::vector<int64_t>;

class IndexTest : public loom_test::BackendTest {};

// 0, 1, 2, ... as a tensor of `shape` and dtype `dt`, with the values as doubles.
std::vector<double> iota(int64_t n, double scale = 1) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i * scale;
  return v;
}
Tensor make(const std::vector<double>& v, const Shape& shape, loom::ScalarType dt = loom::kFloat) {
  return loom::tensor(v, dt).reshape(shape);
}
Tensor longs(const Longs& v, const Shape& shape) { return loom::tensor(v).reshape(shape); }


// An out-of-range index fails the sync that computes `t`, and the next,
// unrelated sync still works. (A failed sync also fails every other tensor
// pending in it, so callers materialize their inputs first.)
void expect_bounds_error_then_recovery(const Tensor& t, const char* op) {
  std::string msg = loom_test::error_of([&] { t.to_vector<double>(); });
  EXPECT_NE(msg.find(op), std::string::npos) << msg;
  EXPECT_NE(msg.find("out of bounds"), std::string::npos) << msg;
  EXPECT_NE(msg.find("index_test.cpp"), std::string::npos) << msg;
  EXPECT_THROW(t.to_vector<double>(), loom::Error);  // the failed value stays failed
  Tensor fresh = loom::arange(4, loom::kFloat) * 2;
  EXPECT_TRUE(all_close(fresh.sum(), {12.0}));
  loom::sync();
}

const loom::ScalarType kDtypes[] = {loom::kFloat, loom::kDouble, loom::kLong};

// ---------------------------------------------------------------- cat, stack

TEST_P(IndexTest, CatAlongEveryDim) {
  for (loom::ScalarType dt : kDtypes) {
    Tensor a = make(iota(6), {2, 3}, dt), b = make(iota(4, 10), {2, 2}, dt);
    Tensor r = loom::cat({a, b}, 1);
    EXPECT_EQ(r.dtype(), dt);
    EXPECT_EQ(sizes_of(r), (Shape{2, 5}));
    EXPECT_TRUE(all_close(r, {0, 1, 2, 0, 10, 3, 4, 5, 20, 30}));
    EXPECT_TRUE(all_close(loom::cat({a, b}, -1), {0, 1, 2, 0, 10, 3, 4, 5, 20, 30}));
    Tensor c = make(iota(3, -1), {1, 3}, dt);
    Tensor r0 = loom::cat({a, c, a}, 0);
    EXPECT_EQ(sizes_of(r0), (Shape{5, 3}));
    EXPECT_TRUE(all_close(r0, {0, 1, 2, 3, 4, 5, 0, -1, -2, 0, 1, 2, 3, 4, 5}));
  }
}

TEST_P(IndexTest, CatPromotesNonContiguousAndOddSizes) {
  Tensor l = longs({1, 2, 3, 4}, {2, 2});
  Tensor f = make({0.5, 1.5, 2.5, 3.5}, {2, 2}).t();  // transposed: [[0.5, 2.5], [1.5, 3.5]]
  Tensor r = loom::cat({l, f}, 0);
  EXPECT_EQ(r.dtype(), loom::kFloat);
  EXPECT_TRUE(all_close(r, {1, 2, 3, 4, 0.5, 2.5, 1.5, 3.5}));
  EXPECT_EQ(loom::cat({l, make({1, 2}, {1, 2}, loom::kDouble)}).dtype(), loom::kDouble);
  Tensor row = make({5, 6}, {1, 2}).expand({2, 2});  // stride 0 rows
  EXPECT_TRUE(all_close(loom::cat({row, f}, 1), {5, 6, 0.5, 2.5, 5, 6, 1.5, 3.5}));

  Tensor a = make(iota(63), {63}), b = make(iota(65, -1), {65}), one = make({7}, {1});
  Tensor big = loom::cat({a, one, b});
  EXPECT_EQ(sizes_of(big), (Shape{129}));
  std::vector<double> want = iota(63);
  want.push_back(7);
  for (double x : iota(65, -1)) want.push_back(x);
  EXPECT_TRUE(all_close(big, want));

  // Legacy PyTorch rule: a 1-D empty tensor is skipped whatever its shape.
  EXPECT_TRUE(all_close(loom::cat({l, loom::zeros({0}, loom::kLong)}, 1), {1, 2, 3, 4}));
}

TEST_P(IndexTest, StackInsertsADim) {
  for (loom::ScalarType dt : kDtypes) {
    Tensor a = make(iota(3), {3}, dt), b = make(iota(3, 10), {3}, dt);
    Tensor s0 = loom::stack({a, b});
    EXPECT_EQ(sizes_of(s0), (Shape{2, 3}));
    EXPECT_TRUE(all_close(s0, {0, 1, 2, 0, 10, 20}));
    Tensor s1 = loom::stack({a, b}, -1);
    EXPECT_EQ(sizes_of(s1), (Shape{3, 2}));
    EXPECT_TRUE(all_close(s1, {0, 0, 1, 10, 2, 20}));
  }
  Tensor m = make(iota(6), {2, 3});
  Tensor s = loom::stack({m, m.mul(2)}, 1);  // [2, 2, 3]
  EXPECT_EQ(sizes_of(s), (Shape{2, 2, 3}));
  EXPECT_TRUE(all_close(s, {0, 1, 2, 0, 2, 4, 3, 4, 5, 6, 8, 10}));
  Tensor sc = loom::stack({loom::scalar_tensor(1), loom::scalar_tensor(2)});
  EXPECT_TRUE(all_close(sc, {1, 2}));
}

TEST_P(IndexTest, CatAndStackErrors) {
  Tensor a = loom::ones({2, 3}), b = loom::ones({2, 4});
  EXPECT_LOOM_ERROR(loom::cat({a, b}, 0), "cat", "Sizes of tensors must match except in dimension 0");
  EXPECT_LOOM_ERROR(loom::cat({a, loom::ones({2, 3, 1})}), "cat", "Tensors must have same number of dimensions: got 2 and 3");
  EXPECT_LOOM_ERROR(loom::cat({loom::ones({})}), "cat", "zero-dimensional tensor");
  EXPECT_LOOM_ERROR(loom::cat(std::vector<Tensor>{}), "cat", "non-empty");
  EXPECT_LOOM_ERROR(loom::cat({a, a}, 2), "cat", "dimension out of range");
  EXPECT_LOOM_ERROR(loom::cat({a, Tensor()}), "cat", "undefined");
  EXPECT_LOOM_ERROR(loom::stack({a, b}), "stack", "stack expects each tensor to be equal size");
  EXPECT_LOOM_ERROR(loom::stack({a, a}, 3), "stack", "dimension out of range");
  EXPECT_LOOM_ERROR(loom::stack(std::vector<Tensor>{}), "stack", "non-empty");
}

// ---------------------------------------------------------------- index_select

TEST_P(IndexTest, IndexSelectEveryDim) {
  for (loom::ScalarType dt : kDtypes) {
    Tensor x = make(iota(12), {3, 4}, dt);
    Tensor r0 = loom::index_select(x, 0, longs({2, 0, 2}, {3}));
    EXPECT_EQ(r0.dtype(), dt);
    EXPECT_EQ(sizes_of(r0), (Shape{3, 4}));
    EXPECT_TRUE(all_close(r0, {8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}));
    Tensor r1 = x.index_select(-1, longs({3, 1}, {2}));
    EXPECT_EQ(sizes_of(r1), (Shape{3, 2}));
    EXPECT_TRUE(all_close(r1, {3, 1, 7, 5, 11, 9}));
  }
}

TEST_P(IndexTest, IndexSelectInt32ScalarIndexAndNonContiguous) {
  Tensor x = make(iota(12), {3, 4});
  Tensor i32 = loom::tensor(std::vector<int32_t>{1}, loom::kInt);
  EXPECT_TRUE(all_close(x.index_select(0, i32), {4, 5, 6, 7}));
  Tensor i0 = loom::scalar_tensor(2, loom::kLong);  // 0-D index: the dim keeps size 1
  Tensor r = x.index_select(1, i0);
  EXPECT_EQ(sizes_of(r), (Shape{3, 1}));
  EXPECT_TRUE(all_close(r, {2, 6, 10}));
  Tensor xt = x.t();  // [4, 3]
  EXPECT_TRUE(all_close(xt.index_select(0, longs({3, 0}, {2})), {3, 7, 11, 0, 4, 8}));
  Tensor sliced = x.slice(1, 1, 4, 2);  // columns 1 and 3
  EXPECT_TRUE(all_close(sliced.index_select(0, longs({2}, {1})), {9, 11}));
  Tensor big = make(iota(65), {65});
  EXPECT_TRUE(all_close(big.index_select(0, longs({64, 0, 63}, {3})), {64, 0, 63}));
  EXPECT_EQ(sizes_of(x.index_select(0, loom::zeros({0}, loom::kLong))), (Shape{0, 4}));
}

TEST_P(IndexTest, IndexSelectErrors) {
  Tensor x = loom::ones({3, 4});
  loom::sync();
  EXPECT_LOOM_ERROR(x.index_select(0, longs({0, 1, 2, 0}, {2, 2})), "index_select", "supposed to be a vector");
  EXPECT_LOOM_ERROR(x.index_select(0, loom::ones({2})), "index_select", "int32/int64");
  EXPECT_LOOM_ERROR(x.index_select(2, longs({0}, {1})), "index_select", "dimension out of range");
  expect_bounds_error_then_recovery(x.index_select(0, longs({1, 3}, {2})), "index_select");
  expect_bounds_error_then_recovery(x.index_select(1, longs({-1}, {1})), "index_select");
  EXPECT_TRUE(all_close(x.sum(), {12.0}));  // materialized before the failures: intact
}

// ---------------------------------------------------------------- gather, scatter_add

TEST_P(IndexTest, GatherBothDims) {
  for (loom::ScalarType dt : kDtypes) {
    Tensor x = make(iota(6), {2, 3}, dt);  // [[0,1,2],[3,4,5]]
    Tensor g1 = x.gather(1, longs({2, 0, 1, 1}, {2, 2}));
    EXPECT_EQ(g1.dtype(), dt);
    EXPECT_TRUE(all_close(g1, {2, 0, 4, 4}));
    Tensor g0 = loom::gather(x, -2, longs({1, 0, 1}, {1, 3}));
    EXPECT_EQ(sizes_of(g0), (Shape{1, 3}));
    EXPECT_TRUE(all_close(g0, {3, 1, 5}));
  }
  // Non-contiguous self: gather along dim 1 of the transpose.
  Tensor xt = make(iota(6), {2, 3}).t();  // [[0,3],[1,4],[2,5]]
  EXPECT_TRUE(all_close(xt.gather(1, longs({1, 0, 1}, {3, 1})), {3, 1, 5}));
  // 1-D, size 63.
  Tensor v = make(iota(63), {63});
  EXPECT_TRUE(all_close(v.gather(0, longs({62, 7, 7}, {3})), {62, 7, 7}));
}

// A gather is computed inside the kernel that uses it (ir::ExprKind::Gather):
// rows long enough for vector steps, along either dim, from a computed
// tensor and from a transposed view, summed where it is read, in every
// dtype (bool and bfloat16 too), against loops written here.
TEST_P(IndexTest, GathersInsideTheirConsumersMatchALoop) {
  const int64_t R = 5, C = 67, L = 40;
  std::vector<double> xv(R * C);
  for (int64_t i = 0; i < R * C; ++i) xv[i] = static_cast<double>((i * 7) % 23) - 11;
  Longs i1(R * L), i0(3 * C);
  for (int64_t i = 0; i < R * L; ++i) i1[i] = (i * 13 + 5) % C;
  for (int64_t i = 0; i < 3 * C; ++i) i0[i] = (i * 3 + 1) % R;
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble, loom::kLong, loom::kBool, loom::kBFloat16}) {
    Tensor x = (make(xv, {R, C}) * 1).to(dt);  // computed in the same graph as the gathers
    std::vector<double> want1(R * L), want0(3 * C), sums(R, 0.0);
    auto value = [&](int64_t at) { return dt == loom::kBool ? (xv[at] != 0 ? 1.0 : 0.0) : xv[at]; };
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < L; ++j) want1[r * L + j] = value(r * C + i1[r * L + j]), sums[r] += want1[r * L + j];
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < C; ++c) want0[r * C + c] = value(i0[r * C + c] * C + c);
    Tensor g1 = x.gather(1, longs(i1, {R, L}));
    Tensor g0 = x.gather(0, longs(i0, {3, C}));
    EXPECT_EQ(g1.dtype(), dt);
    EXPECT_TRUE(all_close(g1, want1)) << loom::to_string(dt);
    EXPECT_TRUE(all_close(g0, want0)) << loom::to_string(dt);
    if (dt != loom::kBool && dt != loom::kBFloat16) EXPECT_TRUE(all_close(g1.sum({1}), sums)) << loom::to_string(dt);
  }
  // A transposed view: xt[c, r] = x[r, c], gathered along its rows.
  Tensor xt = make(xv, {R, C}).t();
  Longs it(C * 2);
  for (int64_t i = 0; i < C * 2; ++i) it[i] = (i * 5 + 2) % R;
  std::vector<double> want(C * 2);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < 2; ++j) want[c * 2 + j] = xv[it[c * 2 + j] * C + c];
  EXPECT_TRUE(all_close((xt.gather(1, longs(it, {C, 2})) + 1) - 1, want));
}

// Fused gathers from what is not a plain buffer: a constant, an expanded
// (stride 0) view, an empty index; and one feeding a matrix product.
TEST_P(IndexTest, GathersFromConstantsBroadcastsAndIntoProducts) {
  const Longs iv = {2, 0, 3, 1, 1, 0};
  EXPECT_TRUE(all_close(loom::full({2, 4}, 2.5).gather(1, longs(iv, {2, 3})), std::vector<double>(6, 2.5)));
  Tensor row = make(iota(4), {1, 4}).expand({2, 4});  // both rows [0, 1, 2, 3]
  EXPECT_TRUE(all_close(row.gather(1, longs(iv, {2, 3})) * 1, {2, 0, 3, 1, 1, 0}));
  Tensor empty = make(iota(8), {2, 4}).gather(1, loom::zeros({2, 0}, loom::kLong));
  EXPECT_EQ(sizes_of(empty), (Shape{2, 0}));
  EXPECT_TRUE(all_close(empty.sum(), {0.0}));
  // [2, 3] picked from iota(8) as [2, 4] ([2, 0, 3], [5, 5, 4]), times ones [3, 2]: row sums, twice.
  Tensor picked = make(iota(8), {2, 4}).gather(1, longs(iv, {2, 3}));
  EXPECT_TRUE(all_close(picked.matmul(loom::ones({3, 2})), {5, 5, 14, 14}));
}

// A bad index in the middle of a long row, far outside the buffer, fails
// the run (naming gather) without reading there.
TEST_P(IndexTest, AFusedGatherWithAFarIndexFailsWithoutReadingThere) {
  Tensor x = loom::ones({4, 100});
  loom::sync();
  Longs idx(4 * 64, 3);
  idx[2 * 64 + 17] = int64_t{1} << 40;
  // Later in row-major order: the CPU reports the first (on a GPU the first
  // thread to fail wins, as in PyTorch).
  if (GetParam() != "cuda") idx[3 * 64 + 5] = -2;
  Tensor y = x.gather(1, longs(idx, {4, 64})).sum({1}) * 2;
  std::string msg = loom_test::error_of([&] { y.to_vector<double>(); });
  EXPECT_NE(msg.find("index 1099511627776 is out of bounds for dimension of size 100"), std::string::npos) << msg;
  expect_bounds_error_then_recovery(y, "gather");
}

TEST_P(IndexTest, ScatterAddAccumulatesDuplicates) {
  for (loom::ScalarType dt : kDtypes) {
    Tensor self = make(std::vector<double>(6, 1), {2, 3}, dt);
    Tensor src = make(iota(6, 2), {2, 3}, dt);  // [[0,2,4],[6,8,10]]
    // dim 0: src[i][j] goes to row index[i][j], column j.
    Tensor r0 = self.scatter_add(0, longs({1, 0, 1, 1, 1, 0}, {2, 3}), src);
    EXPECT_EQ(r0.dtype(), dt);
    std::vector<double> want(6, 1);
    const Longs idx0 = {1, 0, 1, 1, 1, 0};
    const std::vector<double> sv = iota(6, 2);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) want[idx0[i * 3 + j] * 3 + j] += sv[i * 3 + j];
    EXPECT_TRUE(all_close(r0, want));
    // dim -1 with an index smaller than src: only src[:, :2] is used.
    Tensor r1 = loom::scatter_add(self, -1, longs({2, 2, 0, 1}, {2, 2}), src);
    EXPECT_TRUE(all_close(r1, {1, 1, 1 + 0 + 2, 1 + 6, 1 + 8, 1}));
  }
  // Non-contiguous src (a transpose).
  Tensor z = loom::zeros({3});
  Tensor srct = make(iota(4), {2, 2}).t().reshape({4});
  EXPECT_TRUE(all_close(z.scatter_add(0, longs({0, 0, 2, 2}, {4}), srct), {0 + 2, 0, 1 + 3}));
}

TEST_P(IndexTest, GatherScatterErrors) {
  Tensor x = loom::ones({2, 3});
  loom::sync();
  EXPECT_LOOM_ERROR(x.gather(0, longs({0, 0, 0, 0, 0, 0, 0, 0}, {2, 4})), "gather", "Size does not match at dimension 1");
  EXPECT_LOOM_ERROR(x.gather(0, longs({0, 0}, {2})), "gather", "same number of dimensions");
  EXPECT_LOOM_ERROR(x.gather(0, loom::tensor(std::vector<int32_t>{0, 0}, loom::kInt).reshape({1, 2})), "gather", "int64");
  EXPECT_LOOM_ERROR(x.gather(-3, longs({0}, {1, 1})), "gather", "dimension out of range");
  Tensor src = loom::ones({1, 3});
  EXPECT_LOOM_ERROR(x.scatter_add(0, longs({0, 0, 0, 0, 0, 0}, {2, 3}), src), "scatter_add", "smaller size than src");
  EXPECT_LOOM_ERROR(x.scatter_add(0, longs({0, 0, 0, 0}, {1, 4}), loom::ones({1, 4})), "scatter_add", "smaller than self");
  EXPECT_LOOM_ERROR(x.scatter_add(0, longs({0}, {1, 1}), loom::ones({1, 1}, loom::kDouble)), "scatter_add", "src.dtype");
  EXPECT_LOOM_ERROR(x.scatter_add(0, longs({0}, {1}), loom::ones({1})), "scatter_add", "same number of dimensions");
  expect_bounds_error_then_recovery(x.gather(1, longs({0, 3}, {1, 2})), "gather");
  expect_bounds_error_then_recovery(x.scatter_add(0, longs({2}, {1, 1}), loom::ones({1, 1})), "scatter_add");
  expect_bounds_error_then_recovery(x.gather(0, longs({-1}, {1, 1})), "gather");
  EXPECT_TRUE(all_close(x.gather(1, longs({2}, {1, 1})), {1.0}));
}

// A gather of one element per row (cross_entropy's target) has a select
// for its gradient, not a scatter_add: the same values, and an index out of
// range still fails when only the gradient is read (the gather itself,
// unread, is not run).
TEST_P(IndexTest, GatherOfOnePerLineGradientSelectsAndChecksTheIndex) {
  Tensor x = make(iota(12), {3, 4}).requires_grad_();
  Tensor w = make({1, 2, 3}, {3, 1});  // weights the rows' picks
  (x.gather(1, longs({2, 0, 3}, {3, 1})) * w).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 3}));
  // Along dim 0, which is not the last dim: one row index per column.
  Tensor y = make(iota(12), {3, 4}).requires_grad_();
  y.gather(0, longs({2, 0, 1, 2}, {1, 4})).sum().backward();
  EXPECT_TRUE(all_close(y.grad(), {0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 1}));
  for (int64_t bad : {4, -1}) {
    Tensor z = make(iota(12), {3, 4}).requires_grad_();
    z.gather(1, longs({1, bad, 0}, {3, 1})).sum().backward();
    std::string msg = loom_test::error_of([&] { z.grad().to_vector<double>(); });
    EXPECT_NE(msg.find("out of bounds"), std::string::npos) << msg;
  }
  EXPECT_TRUE(all_close(loom::arange(4, loom::kFloat).sum(), {6.0}));  // the runtime is still usable
}

// ---------------------------------------------------------------- embedding, one_hot

TEST_P(IndexTest, EmbeddingLooksUpRows) {
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble}) {
    Tensor w = make(iota(15, 0.5), {5, 3}, dt);
    Tensor r = loom::embedding(w, longs({4, 0, 1, 4}, {2, 2}));
    EXPECT_EQ(r.dtype(), dt);
    EXPECT_EQ(sizes_of(r), (Shape{2, 2, 3}));
    std::vector<double> want;
    for (int64_t i : Longs{4, 0, 1, 4})
      for (int j = 0; j < 3; ++j) want.push_back((i * 3 + j) * 0.5);
    EXPECT_TRUE(all_close(r, want));
  }
  Tensor w = make(iota(6), {2, 3});
  Tensor r32 = loom::embedding(w, loom::tensor(std::vector<int32_t>{1}, loom::kInt));
  EXPECT_EQ(sizes_of(r32), (Shape{1, 3}));
  EXPECT_TRUE(all_close(r32, {3, 4, 5}));
  EXPECT_EQ(sizes_of(loom::embedding(w, loom::scalar_tensor(0, loom::kLong))), (Shape{3}));
  EXPECT_LOOM_ERROR(loom::embedding(loom::ones({3}), longs({0}, {1})), "embedding", "must be 2-D");
  EXPECT_LOOM_ERROR(loom::embedding(w, loom::ones({1})), "embedding", "Long or Int");
  expect_bounds_error_then_recovery(loom::embedding(w, longs({0, 2}, {2})), "index_select");
}

TEST_P(IndexTest, OneHotExplicitAndInferred) {
  Tensor r = loom::one_hot(longs({2, 0, 1, 2}, {2, 2}), 4);
  EXPECT_EQ(r.dtype(), loom::kLong);
  EXPECT_EQ(sizes_of(r), (Shape{2, 2, 4}));
  EXPECT_TRUE(all_close(r, {0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}));
  Tensor inferred = loom::one_hot(longs({1, 3}, {2}));  // num_classes = 4
  EXPECT_EQ(sizes_of(inferred), (Shape{2, 4}));
  EXPECT_TRUE(all_close(inferred, {0, 1, 0, 0, 0, 0, 0, 1}));
  Tensor strided = longs({0, 9, 1, 9, 2}, {5}).slice(0, 0, 5, 2);  // [0, 1, 2]
  EXPECT_TRUE(all_close(loom::one_hot(strided, 3), {1, 0, 0, 0, 1, 0, 0, 0, 1}));
}

TEST_P(IndexTest, OneHotOutOfRangeRaises) {
  EXPECT_LOOM_ERROR(loom::one_hot(loom::tensor(std::vector<int32_t>{0}, loom::kInt)), "one_hot", "Long");
  EXPECT_LOOM_ERROR(loom::one_hot(longs({0, -1}, {2})), "one_hot", "non-negative");
  EXPECT_LOOM_ERROR(loom::one_hot(loom::zeros({0}, loom::kLong)), "one_hot", "empty tensor");
  EXPECT_LOOM_ERROR(loom::one_hot(longs({0}, {1}), -2), "one_hot", "num_classes");
  // A class value >= num_classes, or negative, must not silently give a zero
  // row: the identity-row lookup fails its bounds check (named index_select).
  expect_bounds_error_then_recovery(loom::one_hot(longs({0, 3}, {2}), 3), "index_select");
  expect_bounds_error_then_recovery(loom::one_hot(longs({-1}, {1}), 3), "index_select");
}

// ---------------------------------------------------------------- softmax, log_softmax

// Softmax of each row of a [rows, cols] matrix (or its log), in double.
std::vector<double> ref_softmax(const std::vector<double>& x, int64_t rows, int64_t cols, bool log) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, x[i * cols + j]);
    for (int64_t j = 0; j < cols; ++j) s += std::exp(x[i * cols + j] - m);
    for (int64_t j = 0; j < cols; ++j)
      out[i * cols + j] = log ? x[i * cols + j] - m - std::log(s) : std::exp(x[i * cols + j] - m) / s;
  }
  return out;
}

TEST_P(IndexTest, SoftmaxAndLogSoftmaxRows) {
  for (int64_t cols : {1, 7, 63, 65}) {
    std::vector<double> x(2 * cols);
    for (int64_t i = 0; i < 2 * cols; ++i) x[i] = std::sin(0.7 * i) * 3;
    for (loom::ScalarType dt : {loom::kFloat, loom::kDouble}) {
      Tensor t = make(x, {2, cols}, dt);
      Tensor s = loom::softmax(t, -1);
      EXPECT_EQ(s.dtype(), dt);
      EXPECT_TRUE(all_close(s, ref_softmax(x, 2, cols, false), 1e-5, 1e-7)) << cols;
      EXPECT_TRUE(all_close(t.log_softmax(1), ref_softmax(x, 2, cols, true), 1e-5, 1e-6)) << cols;
    }
  }
}

TEST_P(IndexTest, SoftmaxOverDimZeroAndNonContiguous) {
  std::vector<double> x = {1, 2, 3, 4, 0, -1};  // [2, 3]
  std::vector<double> xt = {1, 4, 2, 0, 3, -1};  // its transpose, [3, 2]
  // softmax over dim 0 of x == row softmax of x^T, transposed back.
  std::vector<double> rt = ref_softmax(xt, 3, 2, false), want(6);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) want[j * 3 + i] = rt[i * 2 + j];
  EXPECT_TRUE(all_close(make(x, {2, 3}).softmax(0), want));
  EXPECT_TRUE(all_close(make(x, {2, 3}).t().softmax(-1), rt));  // a transposed input
  EXPECT_TRUE(all_close(make(x, {2, 3}).t().log_softmax(1), ref_softmax(xt, 3, 2, true)));
}

TEST_P(IndexTest, SoftmaxIsStableAndHandlesInfinity) {
  const double inf = std::numeric_limits<double>::infinity();
  // exp(1000) overflows; shifting by the row max must not.
  EXPECT_TRUE(all_close(loom::softmax(make({1000, 1001, 1002}, {3}), 0), ref_softmax({0, 1, 2}, 1, 3, false)));
  EXPECT_TRUE(all_close(loom::log_softmax(make({-1000, -1001}, {2}), 0), ref_softmax({0, -1}, 1, 2, true)));
  EXPECT_TRUE(all_close(loom::softmax(make({-inf, 0, -inf}, {3}), 0), {0, 1, 0}));
  Tensor ls = loom::log_softmax(make({-inf, 0}, {2}), 0);
  EXPECT_TRUE(all_close(ls, {-inf, 0}));
}

TEST_P(IndexTest, SoftmaxDtypeArgument) {
  Tensor l = longs({0, 1, 2}, {3});
  Tensor s = loom::softmax(l, 0, loom::kFloat);
  EXPECT_EQ(s.dtype(), loom::kFloat);
  EXPECT_TRUE(all_close(s, ref_softmax({0, 1, 2}, 1, 3, false)));
  Tensor d = make({0, 1, 2}, {3}).log_softmax(0, loom::kDouble);
  EXPECT_EQ(d.dtype(), loom::kDouble);
  EXPECT_TRUE(all_close(d, ref_softmax({0, 1, 2}, 1, 3, true), 1e-12, 1e-12));
  EXPECT_LOOM_ERROR(loom::softmax(l, 0), "softmax", "floating-point");
  EXPECT_LOOM_ERROR(l.log_softmax(0), "log_softmax", "floating-point");
  EXPECT_LOOM_ERROR(loom::softmax(make({1}, {1}), 0, loom::kLong), "softmax", "floating-point");
  EXPECT_LOOM_ERROR(loom::softmax(make({1}, {1}), 1), "softmax", "dimension out of range");
}

// ---------------------------------------------------------------- tril, triu

// Keeps element (i, j) of each trailing [rows, cols] matrix when keep(j - i).
template <class Keep>
std::vector<double> ref_tri(const std::vector<double>& x, int64_t rows, int64_t cols, Keep keep) {
  std::vector<double> out(x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    int64_t i = (k / cols) % rows, j = k % cols;
    out[k] = keep(j - i) ? x[k] : 0;
  }
  return out;
}

TEST_P(IndexTest, TrilTriuDiagonals) {
  for (loom::ScalarType dt : kDtypes)
    for (int64_t diag : {0, 1, -1, 5, -5}) {
      std::vector<double> x = iota(3 * 4, 1);
      for (double& v : x) v += 1;
      Tensor t = make(x, {3, 4}, dt);
      Tensor lo = loom::tril(t, diag), up = t.triu(diag);
      EXPECT_EQ(lo.dtype(), dt);
      EXPECT_TRUE(all_close(lo, ref_tri(x, 3, 4, [&](int64_t o) { return o <= diag; }))) << diag;
      EXPECT_TRUE(all_close(up, ref_tri(x, 3, 4, [&](int64_t o) { return o >= diag; }))) << diag;
    }
}

TEST_P(IndexTest, TrilTriuBatchedNonContiguous) {
  std::vector<double> x = iota(2 * 3 * 3);
  for (double& v : x) v += 1;
  Tensor t = make(x, {2, 3, 3});
  EXPECT_TRUE(all_close(t.tril(), ref_tri(x, 3, 3, [](int64_t o) { return o <= 0; })));
  EXPECT_TRUE(all_close(loom::triu(t, 1), ref_tri(x, 3, 3, [](int64_t o) { return o >= 1; })));
  // A transposed [4, 3] input (non-contiguous, non-square).
  std::vector<double> m = iota(12);
  for (double& v : m) v += 1;
  std::vector<double> mt(12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) mt[j * 3 + i] = m[i * 4 + j];
  Tensor tt = make(m, {3, 4}).t();
  EXPECT_TRUE(all_close(tt.triu(-1), ref_tri(mt, 4, 3, [](int64_t o) { return o >= -1; })));
  Tensor b = loom::ones({2, 2}, loom::kBool).tril();
  EXPECT_EQ(b.dtype(), loom::kBool);
  EXPECT_TRUE(all_close(b, {1, 0, 1, 1}));
  EXPECT_LOOM_ERROR(loom::tril(loom::ones({3})), "tril", "at least 2 dimensions");
  EXPECT_LOOM_ERROR(loom::ones({}).triu(), "triu", "at least 2 dimensions");
}

}  // namespace

LOOM_INSTANTIATE_BACKENDS(IndexTest);
