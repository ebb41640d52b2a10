// libtorch's in-place initializers and comparisons, data<T>() and
// accessor<T, N>(), on every backend.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <cmath>
#include <vector>

#include "test_util.h"

namespace {

using loom::Tensor;
class InitializersTest : public loom_test::BackendTest {};

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

TEST_P(InitializersTest, RandomFillsHaveTheirDistributions) {
  const auto o = loom::TensorOptions(loom::kF64);
  loom::manual_seed(5);
  Tensor u = loom::empty({20000}, o);
  u.uniform_(-2, 3);
  const std::vector<double> uv = u.to_vector<double>();
  for (double x : uv) ASSERT_TRUE(x >= -2 && x < 3) << x;
  EXPECT_NEAR(mean_of(uv), 0.5, 0.05);

  Tensor n = loom::empty({20000}, o);
  n.normal_(1.0, 2.0);
  const std::vector<double> nv = n.to_vector<double>();
  const double m = mean_of(nv);
  double var = 0;
  for (double x : nv) var += (x - m) * (x - m);
  EXPECT_NEAR(m, 1.0, 0.06);
  EXPECT_NEAR(std::sqrt(var / nv.size()), 2.0, 0.06);

  Tensor b = loom::empty({20000}, loom::TensorOptions(loom::kF32));
  b.bernoulli_(0.3);
  const std::vector<double> bv = b.to_vector<double>();
  for (double x : bv) ASSERT_TRUE(x == 0 || x == 1) << x;
  EXPECT_NEAR(mean_of(bv), 0.3, 0.02);

  Tensor r = loom::empty({1000}, loom::TensorOptions(loom::kI64));
  r.random_(3, 7);
  for (int64_t x : r.to_vector<int64_t>()) ASSERT_TRUE(x >= 3 && x < 7) << x;

  // The same seed, the same values.
  loom::manual_seed(5);
  Tensor again = loom::empty({20000}, o);
  again.uniform_(-2, 3);
  EXPECT_EQ(again.to_vector<double>(), uv);
}

TEST_P(InitializersTest, FillsWriteThroughViewsAndRespectAutograd) {
  Tensor x = loom::zeros({4, 5}, loom::TensorOptions(loom::kF32));
  x.slice(1, 1, 3).uniform_(10, 11);
  const std::vector<float> v = x.to_vector<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) {
      const float e = v[i * 5 + j];
      if (j == 1 || j == 2) EXPECT_TRUE(e >= 10 && e < 11) << i << "," << j;
      else EXPECT_EQ(e, 0.0f) << i << "," << j;
    }
  Tensor w = loom::zeros({3}, loom::TensorOptions(loom::kF32).requires_grad(true));
  EXPECT_THROW(w.normal_(), loom::Error);  // a leaf that requires grad, as libtorch
  {
    loom::NoGradGuard no_grad;
    w.normal_();
  }
  EXPECT_TRUE(w.requires_grad());
  EXPECT_LOOM_ERROR(loom::zeros({2}, loom::kLong).uniform_(), "uniform_", "floating-point");
}

TEST_P(InitializersTest, InPlaceComparisonsWriteOnesAndZerosInTheirDtype) {
  Tensor a = loom::tensor(std::vector<float>{1, 2, 3, 4});
  Tensor b = loom::tensor(std::vector<float>{4, 2, 1, 4});
  auto run = [&](auto f) {
    Tensor c = a.clone();
    f(c);
    EXPECT_EQ(c.dtype(), loom::kF32);
    return c.to_vector<float>();
  };
  EXPECT_EQ(run([&](Tensor& c) { c.eq_(b); }), (std::vector<float>{0, 1, 0, 1}));
  EXPECT_EQ(run([&](Tensor& c) { c.ne_(b); }), (std::vector<float>{1, 0, 1, 0}));
  EXPECT_EQ(run([&](Tensor& c) { c.lt_(b); }), (std::vector<float>{1, 0, 0, 0}));
  EXPECT_EQ(run([&](Tensor& c) { c.le_(b); }), (std::vector<float>{1, 1, 0, 1}));
  EXPECT_EQ(run([&](Tensor& c) { c.gt_(2.5); }), (std::vector<float>{0, 0, 1, 1}));
  EXPECT_EQ(run([&](Tensor& c) { c.ge_(2); }), (std::vector<float>{0, 1, 1, 1}));
}

TEST(Accessor, ReadsAndWritesThroughStrides) {
  Tensor x = loom::arange(12, loom::kF32).reshape({3, 4});
  Tensor t = x.t();  // [4, 3], strides {1, 4}
  auto a = t.accessor<float, 2>();
  EXPECT_EQ(a.size(0), 4);
  EXPECT_EQ(a.stride(1), 4);
  EXPECT_EQ(a[1][2], 9.0f);  // x[2][1]
  a[3][0] = 100;              // x[0][3]
  EXPECT_EQ(x[0][3].item<float>(), 100.0f);
  EXPECT_EQ((x * 2).sum().item<float>(), 2 * (66 - 3 + 100));  // a later graph reads the write
  EXPECT_EQ(x.data<float>()[5], 5.0f);
  auto three = [&] { return x.accessor<float, 3>(); };
  EXPECT_LOOM_ERROR((void)three(), "accessor", "expected 3 dims");
}

LOOM_INSTANTIATE_BACKENDS(InitializersTest);

}  // namespace
