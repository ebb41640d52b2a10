// Tensor::index and index_put_ with torch::indexing: basic indices as
// views, advanced indices by PyTorch's rules (broadcasting, the position of
// the result dims, bool masks), negative and out-of-range indices,
// accumulate, views written through, gradients and errors.
#include <vector>

#include "gradcheck.h"
#include "test_util.h"

namespace {

using loom::Tensor;
using loom::indexing::Ellipsis;
using loom::indexing::None;
using loom::indexing::Slice;
using loom_test::all_close;
using loom_test::sizes_of;
using Shape = std::vector<int64_t>;
using Doubles = std::vector<double>;

class IndexingTest : public loom_test::BackendTest {};

// x[i][j][k] = 100 i + 10 j + k over [2, 3, 4].
Tensor cube(loom::ScalarType dt = loom::kFloat) {
  Doubles v;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) v.push_back(100 * i + 10 * j + k);
  return loom::tensor(v, dt).reshape({2, 3, 4});
}
double at(int i, int j, int k) { return 100 * i + 10 * j + k; }
Tensor longs(const std::vector<int64_t>& v) { return loom::tensor(v); }

TEST_P(IndexingTest, BasicIndicesAreViews) {
  Tensor x = cube();
  Tensor y = x.index({1, Slice(None, None, 2), None, Ellipsis});
  EXPECT_EQ(sizes_of(y), (Shape{2, 1, 4}));
  Doubles want;
  for (int j = 0; j < 3; j += 2)
    for (int k = 0; k < 4; ++k) want.push_back(at(1, j, k));
  EXPECT_TRUE(all_close(y, want));
  EXPECT_TRUE(all_close(x.index({-1, -2, Slice(1, -1)}), {at(1, 1, 1), at(1, 1, 2)}));
  EXPECT_EQ(sizes_of(x.index({Ellipsis, None})), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(sizes_of(x.index({"...", 0})), (Shape{2, 3}));
  // A view: writing through it changes x.
  x.index({0, Slice(), 0}).fill_(-1);
  EXPECT_TRUE(all_close(x.select(0, 0).select(1, 0), {-1, -1, -1}));
}

TEST_P(IndexingTest, TensorIndicesBroadcastAndPlaceTheirDims) {
  Tensor x = cube();
  Tensor i = longs({1, 0, -1});  // -1 wraps
  // One tensor index in the middle: its dims replace dim 1.
  Tensor a = x.index({Slice(), i});
  EXPECT_EQ(sizes_of(a), (Shape{2, 3, 4}));
  Doubles want;
  for (int p = 0; p < 2; ++p)
    for (int j : {1, 0, 2})
      for (int k = 0; k < 4; ++k) want.push_back(at(p, j, k));
  EXPECT_TRUE(all_close(a, want));
  // Adjacent tensor indices broadcast ([2, 1] with [3]) and stay in place.
  Tensor r = loom::tensor({0, 2}, loom::kLong).reshape({2, 1});
  Tensor b = x.index({Slice(), r, longs({3, 0, 1})});
  EXPECT_EQ(sizes_of(b), (Shape{2, 2, 3}));
  want.clear();
  for (int p = 0; p < 2; ++p)
    for (int j : {0, 2})
      for (int k : {3, 0, 1}) want.push_back(at(p, j, k));
  EXPECT_TRUE(all_close(b, want));
  // Separated by a slice: the broadcast dims go first.
  Tensor c = x.index({longs({1, 0}), Slice(), longs({2, 3})});
  EXPECT_EQ(sizes_of(c), (Shape{2, 3}));
  want.clear();
  for (int q = 0; q < 2; ++q)
    for (int j = 0; j < 3; ++j) want.push_back(at(q == 0 ? 1 : 0, j, q == 0 ? 2 : 3));
  EXPECT_TRUE(all_close(c, want));
  // An int32 index, a 0-d index, and an empty one.
  EXPECT_TRUE(all_close(x.index({0, 0, loom::tensor({3, 1}, loom::kInt)}), {3, 1}));
  EXPECT_EQ(sizes_of(x.index({loom::scalar_tensor(1, loom::kLong)})), (Shape{3, 4}));
  EXPECT_EQ(sizes_of(x.index({Slice(), longs({})})), (Shape{2, 0, 4}));
}

TEST_P(IndexingTest, BoolMasksAndBoolScalars) {
  Tensor x = cube(loom::kLong);
  Tensor m = loom::tensor({1, 0, 1}, loom::kBool);
  Tensor a = x.index({Slice(), m});
  EXPECT_EQ(sizes_of(a), (Shape{2, 2, 4}));
  EXPECT_EQ(a.dtype(), loom::kLong);
  Doubles want;
  for (int p = 0; p < 2; ++p)
    for (int j : {0, 2})
      for (int k = 0; k < 4; ++k) want.push_back(at(p, j, k));
  EXPECT_TRUE(all_close(a, want));
  // A 2-D mask covering dims 0 and 1.
  Tensor m2 = loom::tensor({0, 1, 0, 1, 0, 0}, loom::kBool).reshape({2, 3});
  Tensor b = x.index({m2, 2});
  EXPECT_TRUE(all_close(b, {at(0, 1, 2), at(1, 0, 2)}));
  EXPECT_EQ(sizes_of(x.index({true})), (Shape{1, 2, 3, 4}));
  EXPECT_EQ(sizes_of(x.index({false})), (Shape{0, 2, 3, 4}));
  EXPECT_LOOM_ERROR(x.index({Slice(), loom::tensor({1, 0}, loom::kBool)}), "index", "shape of the mask");
}

TEST_P(IndexingTest, IndexPutAssignsOrAccumulates) {
  Tensor x = loom::zeros({3, 4});
  x.index_put_({longs({0, 2, 0}), longs({1, 3, 1})}, loom::tensor({1.0f, 2.0f, 3.0f}));
  Doubles want(12, 0);
  want[0 * 4 + 1] = 3;  // the last duplicate wins
  want[2 * 4 + 3] = 2;
  EXPECT_TRUE(all_close(x, want));
  x.index_put_({longs({0, 2, 0}), longs({1, 3, 1})}, loom::tensor({1.0f, 2.0f, 3.0f}), true);
  want[1] += 1 + 3;
  want[11] += 2;
  EXPECT_TRUE(all_close(x, want));
  // A scalar into a slice and a mask; broadcast values over a row index.
  x.index_put_({Slice(), 0}, 7.0);
  for (int r = 0; r < 3; ++r) want[r * 4] = 7;
  x.index_put_({x.lt(0.5)}, -1.0);
  for (double& w : want)
    if (w < 0.5) w = -1;
  EXPECT_TRUE(all_close(x, want));
  x.index_put_({longs({-1})}, loom::tensor({5.0f, 6.0f, 7.0f, 8.0f}));
  for (int k = 0; k < 4; ++k) want[8 + k] = 5 + k;
  EXPECT_TRUE(all_close(x, want));
  // Through a non-contiguous view of another tensor, and the libtorch list form.
  Tensor base = loom::zeros({4, 3});
  Tensor view = base.t();
  view.index_put_(std::vector<std::optional<Tensor>>{std::nullopt, longs({3, 3})}, loom::ones({3, 2}), true);
  EXPECT_TRUE(all_close(base.select(0, 3), {2, 2, 2}));
  EXPECT_TRUE(all_close(base.sum(), {6}));
  Tensor out = loom::index_put(base, {longs({0})}, loom::full({3}, 9.0));
  EXPECT_TRUE(all_close(out.select(0, 0), {9, 9, 9}));
  EXPECT_TRUE(all_close(base.select(0, 0), {0, 0, 0}));
}

TEST_P(IndexingTest, Errors) {
  Tensor x = cube();
  loom::sync();
  EXPECT_LOOM_ERROR(x.index({0, 0, 0, 0}), "index", "too many indices");
  EXPECT_LOOM_ERROR(x.index({Ellipsis, 0, Ellipsis}), "index", "single ellipsis");
  EXPECT_LOOM_ERROR(x.index({Slice(0, 2, -1)}), "index", "step");
  EXPECT_LOOM_ERROR(x.index({loom::tensor({0.5f})}), "index", "long, int or bool");
  EXPECT_LOOM_ERROR(x.index({5}), "select", "out of range");
  EXPECT_LOOM_ERROR(x.index({"..x"}), "index", "\"...\"");
  EXPECT_LOOM_ERROR(x.index_put_({longs({0})}, loom::ones({3, 4}, loom::kDouble)), "index_put_", "dtypes match");
  EXPECT_LOOM_ERROR(x.index({longs({0, 1}), longs({0, 1, 2})}), "index", "");
  std::string msg = loom_test::error_of([&] { x.index({Slice(), longs({3})}).to_vector<double>(); });
  EXPECT_NE(msg.find("out of bounds"), std::string::npos) << msg;
  EXPECT_NE(msg.find("indexing_test.cpp"), std::string::npos) << msg;
  msg = loom_test::error_of([&] { x.index({longs({-3})}).to_vector<double>(); });
  EXPECT_NE(msg.find("out of bounds"), std::string::npos) << msg;
  Tensor y = x.clone();
  loom::sync();
  msg = loom_test::error_of([&] {
    y.index_put_({longs({2})}, loom::zeros({3, 4}));
    y.to_vector<double>();
  });
  EXPECT_NE(msg.find("out of bounds"), std::string::npos) << msg;
}

TEST_P(IndexingTest, Gradients) {
  using T = std::vector<Tensor>;
  Tensor i = longs({1, 0, 1});
  Tensor m = loom::tensor({1, 0, 1, 1}, loom::kBool);
  EXPECT_TRUE(loom_test::gradcheck([&](const T& v) { return v[0].index({Slice(), i, Slice(1, None, 2)}); },
                                   {loom_test::input({2, 3, 4}, 151)}));
  EXPECT_TRUE(loom_test::gradcheck([&](const T& v) { return v[0].index({i, Slice(), longs({3, 0, 3})}); },
                                   {loom_test::input({2, 3, 4}, 152)}));
  EXPECT_TRUE(loom_test::gradcheck([&](const T& v) { return v[0].index({Ellipsis, m}); }, {loom_test::input({2, 4}, 153)}));
  // Without accumulate the rule is PyTorch's (values' gradient read at
  // every index, a duplicate that lost included): distinct indices there.
  for (bool acc : {false, true})
    EXPECT_TRUE(loom_test::gradcheck([&](const T& v) {
      Tensor y = v[0] * 1;
      y.index_put_({Slice(), acc ? i : longs({2, 0, 1})}, v[1], acc);
      return y;
    }, {loom_test::input({2, 3}, 154), loom_test::input({2, 3}, 155)}));
}

LOOM_INSTANTIATE_BACKENDS(IndexingTest);

}  // namespace
