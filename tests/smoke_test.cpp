#include <gtest/gtest.h>
#include <loom/loom.h>

TEST(Smoke, ReluOfAddThenItem) {
  auto x = loom::tensor({-2.0f, 0.5f, 3.0f});
  auto y = loom::relu(x + 1);
  EXPECT_TRUE(y.is_pending());
  auto v = y.to_vector<float>();
  EXPECT_EQ(v, (std::vector<float>{0.0f, 1.5f, 4.0f}));
  EXPECT_FLOAT_EQ(y.sum().item<float>(), 5.5f);
}
