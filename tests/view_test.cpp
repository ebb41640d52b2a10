// Views share storage: sizes, strides and storage offsets equal PyTorch's
// (the expected triples were read off torch 2.x), and writes through a view
// reach the base and every sibling view.
#include "test_util.h"

#include <functional>

namespace {

using loom::Tensor;
using loom_test::BackendTest;
using loom_test::sizes_of;
using Shape = std::vector<int64_t>;
using V = std::vector<double>;

// sizes, strides, storage_offset, is_contiguous: as PyTorch reports them.
::testing::AssertionResult layout(const Tensor& t, Shape sizes, Shape strides, int64_t offset, bool contiguous) {
  if (t.sizes().vec() == sizes && t.strides().vec() == strides && t.storage_offset() == offset &&
      t.is_contiguous() == contiguous)
    return ::testing::AssertionSuccess();
  using ::testing::PrintToString;
  return ::testing::AssertionFailure() << "got sizes " << PrintToString(t.sizes().vec()) << " strides "
                                       << PrintToString(t.strides().vec()) << " offset " << t.storage_offset()
                                       << " contiguous " << t.is_contiguous();
}

class ViewTest : public BackendTest {
 protected:
  Tensor x = loom::arange(24, loom::kFloat).reshape({2, 3, 4});  // x[i][j][k] = 12i + 4j + k
  Tensor m = loom::arange(24, loom::kFloat).reshape({4, 6});     // m[i][j] = 6i + j
};

TEST_P(ViewTest, ViewAndReshapeOfContiguousTensorsAlias) {
  Tensor v = x.view({6, -1});
  EXPECT_TRUE(layout(v, {6, 4}, {4, 1}, 0, true));
  EXPECT_TRUE(v.is_alias_of(x));
  EXPECT_TRUE(x.reshape({4, 6}).is_alias_of(x));
  EXPECT_EQ(x.view({-1}).to_vector<float>()[13], 13.f);
  EXPECT_THROW(x.view({-1, -1}), loom::Error);
  EXPECT_THROW(x.view({5, 5}), loom::Error);
  EXPECT_TRUE(layout(x.view_as(m), {4, 6}, {6, 1}, 0, true));
}

TEST_P(ViewTest, StridesOfPermuteTransposeExpandSqueezeUnsqueeze) {
  EXPECT_TRUE(layout(x.permute({2, 0, 1}), {4, 2, 3}, {1, 12, 4}, 0, false));
  EXPECT_TRUE(layout(x.transpose(1, 2), {2, 4, 3}, {12, 1, 4}, 0, false));
  EXPECT_TRUE(layout(x.transpose(-1, 0), {4, 3, 2}, {1, 4, 12}, 0, false));
  EXPECT_TRUE(layout(m.t(), {6, 4}, {1, 6}, 0, false));
  EXPECT_TRUE(layout(loom::zeros({2, 3}).expand({4, 2, 3}), {4, 2, 3}, {0, 3, 1}, 0, false));
  EXPECT_TRUE(layout(loom::zeros({2, 1}).expand({-1, 3}), {2, 3}, {1, 0}, 0, false));
  EXPECT_TRUE(layout(x.unsqueeze(-1), {2, 3, 4, 1}, {12, 4, 1, 1}, 0, true));
  EXPECT_TRUE(layout(x.unsqueeze(0), {1, 2, 3, 4}, {24, 12, 4, 1}, 0, true));
  EXPECT_TRUE(layout(x.unsqueeze(1), {2, 1, 3, 4}, {12, 12, 4, 1}, 0, true));
  Tensor s = loom::zeros({2, 1, 4});
  EXPECT_TRUE(layout(s.squeeze(), {2, 4}, {4, 1}, 0, true));
  EXPECT_TRUE(layout(s.squeeze(1), {2, 4}, {4, 1}, 0, true));
  EXPECT_TRUE(layout(s.squeeze(0), {2, 1, 4}, {4, 4, 1}, 0, true));  // not size 1: unchanged
  EXPECT_TRUE(layout(x.flatten(1), {2, 12}, {12, 1}, 0, true));
  EXPECT_TRUE(layout(x.flatten(0, 1), {6, 4}, {4, 1}, 0, true));
  EXPECT_TRUE(layout(loom::scalar_tensor(1.0).flatten(), {1}, {1}, 0, true));
  // Values follow the strides.
  EXPECT_EQ(m.t().to_vector<float>()[1], 6.f);
  EXPECT_EQ(x.permute({2, 0, 1}).to_vector<float>()[1], 4.f);
}

TEST_P(ViewTest, SlicesNarrowSelect) {
  Tensor a = m.slice(0, 1, 3).slice(1, 2, 5);  // m[1:3, 2:5]
  EXPECT_TRUE(layout(a, {2, 3}, {6, 1}, 8, false));
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{8, 9, 10, 14, 15, 16}));
  EXPECT_TRUE(layout(m.slice(1, std::nullopt, std::nullopt, 2), {4, 3}, {6, 2}, 0, false));
  Tensor odd = m.slice(1, 1, std::nullopt, 2);
  EXPECT_TRUE(layout(odd, {4, 3}, {6, 2}, 1, false));
  EXPECT_EQ(odd.select(0, 0).to_vector<float>(), (std::vector<float>{1, 3, 5}));
  EXPECT_TRUE(layout(m.slice(0, -3, -1), {2, 6}, {6, 1}, 6, true));
  EXPECT_EQ(m.select(0, 0).slice(0, -10, 10, 3).to_vector<float>(), (std::vector<float>{0, 3}));  // clamped ends
  EXPECT_EQ(m.slice(0, 3, 1).numel(), 0);  // end before start: empty
  EXPECT_TRUE(layout(m.narrow(1, -3, 2), {4, 2}, {6, 1}, 3, false));
  EXPECT_TRUE(layout(m.select(1, -1), {4}, {6}, 5, false));
  EXPECT_TRUE(layout(m[1], {6}, {1}, 6, true));
  EXPECT_EQ(m.select(1, -1).to_vector<float>(), (std::vector<float>{5, 11, 17, 23}));
  EXPECT_THROW(m.select(1, 6), loom::Error);
  EXPECT_THROW(m.narrow(1, 4, 3), loom::Error);
}

TEST_P(ViewTest, ChunkSplitUnbind) {
  Tensor t = loom::arange(12, loom::kFloat).reshape({3, 4});
  auto c = t.chunk(3, 1);  // split size ceil(4 / 3) = 2: two chunks
  ASSERT_EQ(c.size(), 2u);
  EXPECT_TRUE(layout(c[1], {3, 2}, {4, 1}, 2, false));
  EXPECT_EQ(c[1].to_vector<float>(), (std::vector<float>{2, 3, 6, 7, 10, 11}));
  auto c5 = loom::zeros({5, 2}).chunk(3);
  ASSERT_EQ(c5.size(), 3u);
  EXPECT_EQ(sizes_of(c5[2]), (Shape{1, 2}));
  EXPECT_EQ(loom::zeros({0, 2}).chunk(4).size(), 4u);  // an empty dim still gives `chunks` pieces
  auto s = t.split({1, 3}, 1);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].to_vector<float>(), (std::vector<float>{0, 4, 8}));
  EXPECT_EQ(sizes_of(s[1]), (Shape{3, 3}));
  auto s2 = t.split(2);
  ASSERT_EQ(s2.size(), 2u);
  EXPECT_EQ(sizes_of(s2[1]), (Shape{1, 4}));
  EXPECT_THROW(t.split({1, 2}, 1), loom::Error);  // sizes must add up to 4
  auto u = t.unbind(1);
  ASSERT_EQ(u.size(), 4u);
  EXPECT_EQ(u[3].to_vector<float>(), (std::vector<float>{3, 7, 11}));
  for (const Tensor& piece : u) EXPECT_TRUE(piece.is_alias_of(t));
}

TEST_P(ViewTest, WritesThroughAViewOfAViewOfAViewReachBaseAndSiblings) {
  Tensor base = loom::zeros({4, 6});
  Tensor rows = base.slice(0, 1, 3);  // rows 1, 2
  Tensor cols = rows.t();             // [6, 2]
  Tensor v = cols.select(0, 2);       // base[1][2], base[2][2]
  EXPECT_TRUE(layout(v, {2}, {6}, 8, false));
  Tensor column2 = base.select(1, 2);  // a sibling view of the same elements
  Tensor row1 = base[1];
  v.fill_(7);
  EXPECT_EQ(column2.to_vector<float>(), (std::vector<float>{0, 7, 7, 0}));
  EXPECT_EQ(row1.to_vector<float>(), (std::vector<float>{0, 0, 7, 0, 0, 0}));
  column2.add_(1);  // and back the other way
  EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{8, 8}));
  EXPECT_EQ(rows.sum().item<float>(), 16.f);
  std::vector<float> want(24, 0.f);
  want[2] = 1, want[8] = 8, want[14] = 8, want[20] = 1;
  EXPECT_EQ(base.to_vector<float>(), want);
  // Two writes through overlapping views, in order.
  base.slice(1, 0, 3).mul_(2);
  row1.sub_(1);
  EXPECT_EQ(base.select(0, 1).to_vector<float>(), (std::vector<float>{-1, -1, 15, -1, -1, -1}));
}

TEST_P(ViewTest, ViewOfNonContiguousMustFailReshapeCopies) {
  Tensor t = loom::arange(6, loom::kFloat).reshape({2, 3}).t();  // [3, 2]
  EXPECT_THROW(t.view({6}), loom::Error);
  EXPECT_THROW(m.slice(1, 0, 3).view({12}), loom::Error);
  EXPECT_THROW(loom::zeros({1, 4}).expand({3, 4}).view({12}), loom::Error);
  Tensor r = t.reshape({6});
  EXPECT_FALSE(r.is_alias_of(t));
  EXPECT_TRUE(layout(r, {6}, {1}, 0, true));
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  r.fill_(-1);  // the copy is independent
  EXPECT_EQ(t.sum().item<float>(), 15.f);
  // Views that a non-contiguous tensor does allow.
  EXPECT_TRUE(layout(t.view({3, 2}), {3, 2}, {1, 3}, 0, false));
  EXPECT_TRUE(layout(x.slice(1, 1, 2).view({2, 4}), {2, 4}, {12, 1}, 4, false));
  EXPECT_TRUE(layout(m.slice(1, 0, 3).view({2, 2, 3}), {2, 2, 3}, {12, 6, 1}, 0, false));
  EXPECT_TRUE(layout(loom::zeros({3, 1}).expand({3, 4}).view({3, 4, 1}), {3, 4, 1}, {1, 0, 0}, 0, false));
  EXPECT_TRUE(layout(x.transpose(0, 2).reshape({4, 6}), {4, 6}, {6, 1}, 0, true));
}

TEST_P(ViewTest, Contiguous) {
  EXPECT_TRUE(m.contiguous().is_same(m));
  Tensor c = m.t().contiguous();
  EXPECT_TRUE(layout(c, {6, 4}, {4, 1}, 0, true));
  EXPECT_FALSE(c.is_alias_of(m));
  EXPECT_EQ(c.to_vector<float>(), m.t().to_vector<float>());
  EXPECT_TRUE(loom::zeros({3, 0}).t().is_contiguous());  // no element is out of place
}

// Large enough that the llvm backend runs them in blocks (jit/llvm/codegen.h:
// transpose_block), with edges that are no multiple of a block: every
// element checked against its index.
TEST_P(ViewTest, TransposedCopiesOfLargeOddShapes) {
  auto check = [](const Tensor& got, int64_t rows, int64_t cols, const std::function<double(int64_t, int64_t)>& want) {
    ASSERT_EQ(got.sizes().vec(), (Shape{rows, cols}));
    const std::vector<double> v = got.to(loom::kDouble).to_vector<double>();
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        if (v[i * cols + j] != want(i, j) && bad++ == 0) first = i * cols + j;
    EXPECT_EQ(bad, 0) << "first wrong element at flat index " << first;
  };
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble, loom::kInt, loom::kBFloat16}) {
    SCOPED_TRACE(std::string(loom::to_string(dt)));
    const int64_t R = 517, C = 300;  // a[i][j] = i * C + j (exact in bfloat16 only below 256)
    Tensor a = loom::arange(R * C, loom::kDouble).reshape({R, C});
    if (dt == loom::kBFloat16) a = a.remainder(256);
    a = a.to(dt);
    auto at = [&](int64_t i, int64_t j) { return dt == loom::kBFloat16 ? double((i * C + j) % 256) : double(i * C + j); };
    check(a.t().contiguous(), C, R, [&](int64_t i, int64_t j) { return at(j, i); });
    Tensor b = loom::ones({C, R}, loom::TensorOptions(dt));
    check(b + a.t(), C, R, [&](int64_t i, int64_t j) { return at(j, i) + 1; });
  }
  // The last two dims of a batch swapped.
  Tensor x3 = loom::arange(3 * 70 * 90, loom::kFloat).reshape({3, 70, 90});
  Tensor p = x3.permute({0, 2, 1}).contiguous().reshape({3 * 90, 70});
  check(p, 3 * 90, 70, [](int64_t r, int64_t j) { return double((r / 90) * 6300 + j * 90 + r % 90); });
}

LOOM_INSTANTIATE_BACKENDS(ViewTest);

}  // namespace
