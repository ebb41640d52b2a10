// Factories: constants, ranges, random numbers, borrowed and copied-in data.
// Expected values are written out by hand or computed here in plain C++.
#include <cmath>
#include <numeric>
#include <set>

#include "test_util.h"

namespace {

using loom_test::all_close;
using loom_test::BackendTest;
using loom_test::sizes_of;
using V = std::vector<double>;

class FactoryTest : public BackendTest {};

// ---------------------------------------------------------------- constants
TEST_P(FactoryTest, ZerosOnesFullHaveShapeDtypeAndValue) {
  auto z = loom::zeros({2, 3});
  EXPECT_EQ(z.dtype(), loom::kFloat);
  EXPECT_EQ(sizes_of(z), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.f));
  auto o = loom::ones({4}, loom::kInt);
  EXPECT_EQ(o.dtype(), loom::kInt);
  EXPECT_EQ(o.to_vector<int32_t>(), std::vector<int32_t>(4, 1));
  auto f = loom::full({2, 2}, 2.5, loom::kDouble);
  EXPECT_EQ(f.to_vector<double>(), V(4, 2.5));
  auto e = loom::empty({3, 0, 2}, loom::kLong);
  EXPECT_EQ(sizes_of(e), (std::vector<int64_t>{3, 0, 2}));
  EXPECT_EQ(e.dtype(), loom::kLong);
  EXPECT_TRUE(e.to_vector<int64_t>().empty());
  auto s = loom::zeros({});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
}

TEST_P(FactoryTest, FullInfersItsDtypeFromTheValue) {
  EXPECT_EQ(loom::full({2}, 3).dtype(), loom::kLong);
  EXPECT_EQ(loom::full({2}, true).dtype(), loom::kBool);
  EXPECT_EQ(loom::full({2}, 2.5).dtype(), loom::kFloat);
  // A float value into an integer dtype truncates toward zero.
  EXPECT_EQ(loom::full({2}, -2.7, loom::kInt).to_vector<int32_t>(), (std::vector<int32_t>{-2, -2}));
}

TEST_P(FactoryTest, NegativeSizeIsRefused) {
  EXPECT_THROW(loom::zeros({2, -1}), loom::Error);
  EXPECT_THROW(loom::rand({-3}), loom::Error);
}

// ---------------------------------------------------------------- arange
TEST_P(FactoryTest, ArangeIntegerForms) {
  auto a = loom::arange(5);
  EXPECT_EQ(a.dtype(), loom::kLong);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(loom::arange(2, 7).to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 4, 5, 6}));
  EXPECT_EQ(loom::arange(0, 10, 3).to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(loom::arange(10, 0, -3).to_vector<int64_t>(), (std::vector<int64_t>{10, 7, 4, 1}));
  EXPECT_EQ(loom::arange(-3, -8, -2).to_vector<int64_t>(), (std::vector<int64_t>{-3, -5, -7}));
  EXPECT_EQ(loom::arange(5, 5).numel(), 0);
  EXPECT_EQ(loom::arange(4, loom::kInt).dtype(), loom::kInt);
}

TEST_P(FactoryTest, ArangeFloatForms) {
  auto a = loom::arange(0, 5, 1.5);
  EXPECT_EQ(a.dtype(), loom::kFloat);  // any floating argument makes it float
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0.f, 1.5f, 3.f, 4.5f}));
  EXPECT_EQ(loom::arange(5.0).dtype(), loom::kFloat);
  EXPECT_EQ(loom::arange(1, 2.5, 0.5).to_vector<float>(), (std::vector<float>{1.f, 1.5f, 2.f}));
  EXPECT_EQ(loom::arange(0, -5, -1.5).to_vector<float>(), (std::vector<float>{0.f, -1.5f, -3.f, -4.5f}));
  // ceil((1 - 0) / 0.1) elements, each start + i * step.
  auto t = loom::arange(0, 1, 0.1, loom::kDouble);
  ASSERT_EQ(t.numel(), 10);
  V want;
  for (int i = 0; i < 10; ++i) want.push_back(i * 0.1);
  EXPECT_TRUE(all_close(t, want, 0, 1e-15));
  // Float bounds with an integer dtype: the bounds and step convert first.
  EXPECT_EQ(loom::arange(0.5, 3, loom::kInt).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2}));
}

TEST_P(FactoryTest, ArangeRejectsBadSteps) {
  EXPECT_THROW(loom::arange(0, 10, 0), loom::Error);
  EXPECT_THROW(loom::arange(0, -10, 1), loom::Error);
  EXPECT_THROW(loom::arange(0, 10, -1), loom::Error);
}

// ---------------------------------------------------------------- linspace, eye
TEST_P(FactoryTest, LinspaceValues) {
  EXPECT_EQ(loom::linspace(-1, 1, 5).to_vector<float>(), (std::vector<float>{-1.f, -0.5f, 0.f, 0.5f, 1.f}));
  EXPECT_EQ(loom::linspace(0, 1, 1).to_vector<float>(), (std::vector<float>{0.f}));
  EXPECT_EQ(loom::linspace(0, 1, 0).numel(), 0);
  EXPECT_EQ(loom::linspace(0, 10, 4, loom::kLong).to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 6, 10}));
  EXPECT_EQ(loom::linspace(3, 10, 3, loom::kInt).to_vector<int32_t>(), (std::vector<int32_t>{3, 6, 10}));
  EXPECT_THROW(loom::linspace(0, 1, -1), loom::Error);
}

TEST_P(FactoryTest, LinspaceIsSymmetricAndExactAtBothEnds) {
  // PyTorch: the first half counts up from start, the second half down from end.
  const int n = 7;
  const double start = 0.1, end = 0.7;
  const double step = (end - start) / (n - 1);
  V want;
  for (int i = 0; i < n; ++i) want.push_back(i < n / 2 ? start + step * i : end - step * (n - 1 - i));
  auto t = loom::linspace(start, end, n, loom::kDouble).to_vector<double>();
  EXPECT_EQ(t.front(), 0.1);
  EXPECT_EQ(t.back(), 0.7);
  EXPECT_TRUE(all_close(t, want, 0, 1e-15));
  auto f = loom::linspace(0.1, 0.7, 7).to_vector<float>();  // float32: its own ends, exactly
  EXPECT_EQ(f.front(), 0.1f);
  EXPECT_EQ(f.back(), 0.7f);
}

TEST_P(FactoryTest, Eye) {
  EXPECT_EQ(loom::eye(3).to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
  auto r = loom::eye(2, 3, loom::kLong);
  EXPECT_EQ(sizes_of(r), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(loom::eye(2, loom::kBool).to_vector<bool>(), (std::vector<bool>{true, false, false, true}));
}

// ---------------------------------------------------------------- random
double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }
double var_of(const std::vector<double>& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / (v.size() - 1);
}

TEST_P(FactoryTest, RandIsUniformInUnitInterval) {
  loom::manual_seed(1);
  auto v = loom::rand({100000}).to_vector<double>();
  for (double x : v) ASSERT_TRUE(x >= 0.0 && x < 1.0) << x;
  EXPECT_NEAR(mean_of(v), 0.5, 0.01);
  EXPECT_NEAR(var_of(v), 1.0 / 12, 0.005);
  auto d = loom::rand({2, 3}, loom::kDouble);
  EXPECT_EQ(d.dtype(), loom::kDouble);
  EXPECT_EQ(sizes_of(d), (std::vector<int64_t>{2, 3}));
  EXPECT_THROW(loom::rand({2}, loom::kLong), loom::Error);
}

TEST_P(FactoryTest, RandnIsStandardNormal) {
  loom::manual_seed(2);
  auto v = loom::randn({100000}).to_vector<double>();
  EXPECT_NEAR(mean_of(v), 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(var_of(v)), 1.0, 0.02);
  int within_one = 0;
  for (double x : v) within_one += std::abs(x) < 1.0;
  EXPECT_NEAR(within_one / 100000.0, 0.6827, 0.01);
}

TEST_P(FactoryTest, RandintCoversItsHalfOpenRange) {
  loom::manual_seed(3);
  auto t = loom::randint(-2, 8, {100000});
  EXPECT_EQ(t.dtype(), loom::kLong);
  auto v = t.to_vector<int64_t>();
  std::set<int64_t> seen(v.begin(), v.end());
  EXPECT_EQ(seen, (std::set<int64_t>{-2, -1, 0, 1, 2, 3, 4, 5, 6, 7}));
  V d(v.begin(), v.end());
  EXPECT_NEAR(mean_of(d), 2.5, 0.05);
  EXPECT_EQ(loom::randint(5, {3}, loom::kInt).dtype(), loom::kInt);
  EXPECT_THROW(loom::randint(5, 5, {3}), loom::Error);
}

TEST_P(FactoryTest, ManualSeedMakesRandomNumbersRepeat) {
  loom::manual_seed(42);
  auto a = loom::rand({5}).to_vector<float>();
  auto b = loom::rand({5}).to_vector<float>();
  auto ri = loom::randint(100, {5}).to_vector<int64_t>();
  EXPECT_NE(a, b);  // the stream advances
  loom::manual_seed(42);
  EXPECT_EQ(loom::rand({5}).to_vector<float>(), a);
  EXPECT_EQ(loom::rand({5}).to_vector<float>(), b);
  EXPECT_EQ(loom::randint(100, {5}).to_vector<int64_t>(), ri);
  loom::manual_seed(43);
  EXPECT_NE(loom::rand({5}).to_vector<float>(), a);
}

TEST_P(FactoryTest, RandomValuesDoNotDependOnLaterUse) {
  loom::manual_seed(7);
  auto direct_x = loom::rand({1000}).to_vector<double>();
  auto direct_y = loom::randn({1000}).to_vector<double>();

  // Same seed, but: recorded together, used in expressions, read in the
  // opposite order, and after an unrelated sync.
  loom::manual_seed(7);
  auto x = loom::rand({1000});
  auto y = loom::randn({1000});
  auto z = x * 2 + 1;
  (loom::ones({3}) + 1).to_vector<float>();
  auto zv = z.to_vector<double>();
  EXPECT_TRUE(all_close(y, direct_y, 0, 0));
  EXPECT_TRUE(all_close(x, direct_x, 0, 0));
  for (size_t i = 0; i < zv.size(); ++i) ASSERT_FLOAT_EQ(zv[i], static_cast<float>(direct_x[i] * 2 + 1));
  // One random tensor used twice is one set of values.
  auto r = loom::rand({50});
  EXPECT_EQ((r - r).abs().max().item<float>(), 0.f);
}

// A generated kernel computes random numbers where it uses them (Philox
// at the element's counter): through a transpose, a broadcast, inside a
// reduction and in a matrix product's epilogue, the values are exactly
// those the reference backend stores, element for element.
TEST_P(FactoryTest, RandomNumbersAreTheSameWhereverTheyAreComputed) {
  auto make = [] {
    loom::manual_seed(11);
    const loom::Tensor x = loom::ones({3, 5});
    const loom::Tensor w = loom::full({5, 4}, 0.5);
    std::vector<loom::Tensor> outs = {
        loom::rand({3, 5}) * 2 - 1,                                        // fused into its consumer
        loom::randn({5, 3}).t() + x,                                       // read through a view
        loom::rand({5}, loom::kDouble) + loom::zeros({4, 5}, loom::kDouble),  // broadcast
        loom::randn({2, 3, 4}).sum({1}),                                   // inside a reduction
        loom::nn::functional::dropout(x.matmul(w), loom::nn::functional::DropoutFuncOptions().p(0.5)),  // a GEMM epilogue
        loom::randn({7, 9}, loom::kDouble).slice(1, 2, 9, 3),              // a strided slice
    };
    std::vector<std::vector<double>> v;
    for (const loom::Tensor& t : outs) v.push_back(t.to_vector<double>());
    return v;
  };
  const std::vector<std::vector<double>> got = make();
  std::vector<std::vector<double>> want;
  {
    const bool gpu = on_gpu();
    if (gpu) loom::set_default_device(loom::kCPU);
    const std::string previous = loom::set_backend("reference");
    want = make();
    loom::set_backend(previous);
    if (gpu) loom::set_default_device(loom::kCUDA);
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size()) << "output " << i;
    // Element-wise results are exact; the reduction (3) only rounds its sum differently.
    for (size_t j = 0; j < got[i].size(); ++j)
      if (i == 3) ASSERT_NEAR(got[i][j], want[i][j], 1e-5) << "output " << i << " element " << j;
      else ASSERT_EQ(got[i][j], want[i][j]) << "output " << i << " element " << j;
  }
}

TEST_P(FactoryTest, LikeFactoriesCopyShapeAndDtype) {
  auto src = loom::zeros({2, 3}, loom::kInt);
  auto z = loom::zeros_like(src);
  EXPECT_EQ(z.dtype(), loom::kInt);
  EXPECT_EQ(sizes_of(z), (std::vector<int64_t>{2, 3}));
  auto o = loom::ones_like(src, loom::kDouble);
  EXPECT_EQ(o.dtype(), loom::kDouble);
  EXPECT_EQ(o.to_vector<double>(), V(6, 1.0));
  EXPECT_EQ(loom::full_like(src, 2.7).to_vector<int32_t>(), std::vector<int32_t>(6, 2));
  EXPECT_EQ(sizes_of(loom::empty_like(src)), (std::vector<int64_t>{2, 3}));
  auto r = loom::randn_like(loom::zeros({4, 1}, loom::kDouble));
  EXPECT_EQ(r.dtype(), loom::kDouble);
  EXPECT_EQ(sizes_of(r), (std::vector<int64_t>{4, 1}));
  EXPECT_THROW(loom::rand_like(src), loom::Error);  // int32 has no uniform distribution
  EXPECT_EQ(loom::rand_like(src, loom::kFloat).dtype(), loom::kFloat);
}

// ---------------------------------------------------------------- borrowed memory
TEST_P(FactoryTest, FromBlobReadsTheCallersMemory) {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  auto t = loom::from_blob(buf, {2, 3});
  EXPECT_FALSE(t.is_pending());
  EXPECT_EQ(t.data_ptr<float>(), buf);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ((t * 2).sum().item<float>(), 42.f);
  int64_t lb[3] = {7, 8, 9};
  EXPECT_EQ(loom::from_blob(lb, {3}, loom::kLong).to_vector<int64_t>(), (std::vector<int64_t>{7, 8, 9}));
  // Strided: a column-major 2x2 read in row-major order.
  double cm[4] = {1, 2, 3, 4};
  EXPECT_EQ(loom::from_blob(cm, {2, 2}, {1, 2}, loom::kDouble).to_vector<double>(), (V{1, 3, 2, 4}));
}

TEST_P(FactoryTest, InPlaceOnFromBlobWritesBackAfterSync) {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  auto t = loom::from_blob(buf, {2, 3});
  t.add_(10);
  t.select(0, 1).mul_(2);
  loom::sync();
  EXPECT_EQ(std::vector<float>(buf, buf + 6), (std::vector<float>{11, 12, 13, 28, 30, 32}));
  EXPECT_EQ(t.data_ptr<float>(), buf);
  // A strided borrow writes only the elements it views.
  float gaps[5] = {1, -1, 2, -1, 3};
  auto s = loom::from_blob(gaps, {3}, {2});
  s.mul_(10);
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{10, 20, 30}));
  EXPECT_EQ(std::vector<float>(gaps, gaps + 5), (std::vector<float>{10, -1, 20, -1, 30}));
}

TEST_P(FactoryTest, FromBlobDeleterRunsWhenTheLastTensorDies) {
  float buf[4] = {1, 2, 3, 4};
  int calls = 0;
  void* released = nullptr;
  {
    auto t = loom::from_blob(buf, {4}, [&](void* p) { ++calls; released = p; });
    auto v = t.view({2, 2});
    auto derived = (t * 3).to_vector<float>();  // a computed result owns its own memory
    EXPECT_EQ(derived, (std::vector<float>{3, 6, 9, 12}));
    t = loom::Tensor();
    EXPECT_EQ(calls, 0);  // the view still borrows it
    EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(released, buf);
}

// ---------------------------------------------------------------- copied-in data
TEST_P(FactoryTest, TensorCopiesItsValuesIn) {
  std::vector<float> src = {1.5f, -2.f, 3.f};
  auto t = loom::tensor(src);
  src[0] = 100.f;
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.5f, -2.f, 3.f}));
  EXPECT_EQ(t.dtype(), loom::kFloat);
  EXPECT_EQ(loom::tensor({1.0, 2.0}).dtype(), loom::kFloat);  // float64 values default to float32
  EXPECT_EQ(loom::tensor({1, 2}).dtype(), loom::kLong);
  EXPECT_EQ(loom::tensor({int64_t{1}}).dtype(), loom::kLong);
  EXPECT_EQ(loom::tensor({true, false}).dtype(), loom::kBool);
  EXPECT_EQ(loom::tensor({1, 2, 3, 4}).reshape({2, 2}).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST_P(FactoryTest, TensorConvertsStraightToTheRequestedDtype) {
  // 0.1 must arrive as the double 0.1, not as float32's 0.1 widened.
  EXPECT_EQ(loom::tensor({0.1, 0.2}, loom::kDouble).to_vector<double>(), (V{0.1, 0.2}));
  EXPECT_EQ(loom::tensor({1.7, -1.7}, loom::kLong).to_vector<int64_t>(), (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(loom::tensor({0.5, 0.0}, loom::kBool).to_vector<bool>(), (std::vector<bool>{true, false}));
  const int64_t big = (int64_t{1} << 53) + 1;
  EXPECT_EQ(loom::tensor({big}).item<int64_t>(), big);
}

TEST_P(FactoryTest, ScalarTensor) {
  auto s = loom::scalar_tensor(3);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.dtype(), loom::kFloat);  // the default dtype, whatever the number's kind
  EXPECT_EQ(s.item<float>(), 3.f);
  auto l = loom::scalar_tensor(-4, loom::kLong);
  EXPECT_EQ(l.item<int64_t>(), -4);
  EXPECT_EQ(loom::scalar_tensor(2.5, loom::kDouble).item<double>(), 2.5);
}

LOOM_INSTANTIATE_BACKENDS(FactoryTest);

}  // namespace
