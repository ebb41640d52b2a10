// PyTorch's type promotion: tensors with dims outrank 0-dim tensors, which
// outrank C++ numbers; a lower-ranked operand only matters when it is of a
// higher category (bool < integer < floating point).
#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::BackendTest;

class PromotionTest : public BackendTest {
 protected:
  Tensor i32 = loom::tensor({1, 2}, loom::kInt);
  Tensor i64 = loom::tensor({3, 4});
  Tensor f32 = loom::tensor({1.f, 2.f});
  Tensor f64 = loom::tensor({2.0, 3.0}, loom::kDouble);
  Tensor b = loom::tensor({true, false});
};

TEST_P(PromotionTest, TensorsOfTheSameRankPromote) {
  Tensor r = i32 + i64;
  EXPECT_EQ(r.dtype(), loom::kLong);
  EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ((f32 + f64).dtype(), loom::kDouble);
  EXPECT_EQ((i32 + f64).dtype(), loom::kDouble);
  EXPECT_EQ((i64 * f32).dtype(), loom::kFloat);
  EXPECT_EQ((b + i32).dtype(), loom::kInt);
  EXPECT_EQ(loom::result_type(i32, i64), loom::kLong);
  // Two 0-dim tensors promote like two dimmed ones.
  EXPECT_EQ((loom::scalar_tensor(2, loom::kInt) + loom::scalar_tensor(3, loom::kLong)).dtype(), loom::kLong);
  EXPECT_EQ((loom::scalar_tensor(2) + loom::scalar_tensor(2, loom::kDouble)).dtype(), loom::kDouble);
}

TEST_P(PromotionTest, NumbersOnlyMatterWhenOfAHigherCategory) {
  Tensor r = i32 + 2.5;  // int tensor + float number -> the default float type
  EXPECT_EQ(r.dtype(), loom::kFloat);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{3.5f, 4.5f}));
  EXPECT_EQ((i32 + 5).dtype(), loom::kInt);  // an int64 number does not widen int32
  EXPECT_EQ((i64 * 2.0).dtype(), loom::kFloat);
  EXPECT_EQ((f32 + 2.5).dtype(), loom::kFloat);  // a double number does not widen float32
  EXPECT_EQ((f64 + 1).dtype(), loom::kDouble);
  EXPECT_EQ(loom::result_type(i32, 2.5), loom::kFloat);
  // The number is converted to the tensor's type before the op.
  EXPECT_EQ((loom::tensor({1.f}) + 0.1).item<float>(), 1.0f + 0.1f);
  EXPECT_EQ((i64 * (int64_t{1} << 40)).to_vector<int64_t>(), (std::vector<int64_t>{3 * (int64_t{1} << 40), 4 * (int64_t{1} << 40)}));
}

TEST_P(PromotionTest, BoolWithNumbers) {
  Tensor l = b + 1;
  EXPECT_EQ(l.dtype(), loom::kLong);
  EXPECT_EQ(l.to_vector<int64_t>(), (std::vector<int64_t>{2, 1}));
  Tensor f = b + 1.5;
  EXPECT_EQ(f.dtype(), loom::kFloat);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{2.5f, 1.5f}));
  EXPECT_EQ((b + true).dtype(), loom::kBool);
  EXPECT_EQ((i32 * true).dtype(), loom::kInt);
  EXPECT_EQ((b == 1).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ((b == 0.5).to_vector<bool>(), (std::vector<bool>{false, false}));
}

TEST_P(PromotionTest, ZeroDimTensorsOnlyMatterWhenOfAHigherCategory) {
  Tensor d0 = loom::scalar_tensor(2.0, loom::kDouble);
  Tensor r = f32 + d0;  // same category: the dimmed tensor's type wins
  EXPECT_EQ(r.dtype(), loom::kFloat);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{3.f, 4.f}));
  Tensor w = i32 + d0;  // higher category: promote with the 0-dim tensor's own type
  EXPECT_EQ(w.dtype(), loom::kDouble);
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{3.0, 4.0}));
  EXPECT_EQ((i32 + loom::scalar_tensor(2.0)).dtype(), loom::kFloat);
  EXPECT_EQ((i32 + loom::scalar_tensor(2, loom::kLong)).dtype(), loom::kInt);
  EXPECT_EQ((b + loom::scalar_tensor(3, loom::kInt)).dtype(), loom::kInt);
  EXPECT_EQ((d0 + i32).dtype(), loom::kDouble);  // the order of operands does not matter
  EXPECT_EQ(loom::result_type(i32, d0), loom::kDouble);
  // A 0-dim tensor still outranks a number.
  EXPECT_EQ((loom::scalar_tensor(2, loom::kInt) + 2.5).dtype(), loom::kFloat);
  EXPECT_EQ((d0 + 2.5).dtype(), loom::kDouble);
  EXPECT_EQ(loom::maximum(i32, loom::scalar_tensor(2.5, loom::kDouble)).to_vector<double>(),
            (std::vector<double>{2.5, 2.5}));
  Tensor wh = loom::where(b, i32, d0);
  EXPECT_EQ(wh.dtype(), loom::kDouble);
  EXPECT_EQ(wh.to_vector<double>(), (std::vector<double>{1.0, 2.0}));
}

TEST_P(PromotionTest, DivisionOfIntegersIsFloat) {
  Tensor q = i32 / i32;
  EXPECT_EQ(q.dtype(), loom::kFloat);
  EXPECT_EQ(q.to_vector<float>(), (std::vector<float>{1.f, 1.f}));
  EXPECT_EQ((i64 / 2).dtype(), loom::kFloat);
  EXPECT_EQ((i64 / 2).to_vector<float>(), (std::vector<float>{1.5f, 2.f}));
  EXPECT_EQ((i32 / loom::scalar_tensor(2.0, loom::kDouble)).dtype(), loom::kDouble);
  EXPECT_EQ((b / b).dtype(), loom::kFloat);
}

TEST_P(PromotionTest, ComparisonsAreBoolAndCompareInThePromotedType) {
  EXPECT_EQ((i32 < 1.5).dtype(), loom::kBool);
  EXPECT_EQ((i32 < 1.5).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ((i32 == i64).dtype(), loom::kBool);
  EXPECT_EQ(loom::ge(f64, i32).to_vector<bool>(), (std::vector<bool>{true, true}));
  // 16777217 compared with a float number is compared as float32, as in PyTorch.
  EXPECT_EQ((loom::tensor({int64_t{16777217}}) == 16777216.0).item<bool>(), true);
  EXPECT_EQ((loom::tensor({int64_t{16777217}}) == int64_t{16777216}).item<bool>(), false);
}

TEST_P(PromotionTest, InPlaceResultMustFitTheDestination) {
  Tensor a = i32.clone();
  a.add_(i64);  // int64 into int32: same category, allowed
  EXPECT_EQ(a.dtype(), loom::kInt);
  EXPECT_EQ(a.to_vector<int32_t>(), (std::vector<int32_t>{4, 6}));
  a.mul_(b);
  EXPECT_EQ(a.to_vector<int32_t>(), (std::vector<int32_t>{4, 0}));
  Tensor f = f32.clone();
  f.add_(f64);
  EXPECT_EQ(f.dtype(), loom::kFloat);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{3.f, 5.f}));
  f.add_(i64);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{6.f, 9.f}));
  Tensor bb = b.clone();
  bb.add_(true);
  EXPECT_EQ(bb.to_vector<bool>(), (std::vector<bool>{true, true}));

  Tensor c = i32.clone();
  EXPECT_THROW(c.add_(1.5), loom::Error);
  EXPECT_THROW(c.add_(f32), loom::Error);
  EXPECT_THROW(c.div_(2), loom::Error);
  EXPECT_THROW(c += 0.5, loom::Error);
  EXPECT_THROW(c.sqrt_(), loom::Error);
  EXPECT_THROW(b.clone().add_(1), loom::Error);
  EXPECT_EQ(c.to_vector<int32_t>(), (std::vector<int32_t>{1, 2}));  // a refused op changes nothing
}

LOOM_INSTANTIATE_BACKENDS(PromotionTest);

}  // namespace
