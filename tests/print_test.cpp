// operator<< prints as libtorch does. Every expected string below is the
// output of the same tensor printed by libtorch 2.x (`std::cout << t`).
#include <limits>
#include <sstream>

#include "test_util.h"

namespace {

using loom_test::BackendTest;

// The printed text; a GPU tensor's type line must say CUDA (as libtorch's
// does) and is then compared as the CPU text the expectations hold.
std::string str(const loom::Tensor& t) {
  std::ostringstream os;
  os << t;
  std::string s = os.str();
  if (t.defined() && t.device().is_cuda()) {
    const size_t at = s.rfind("[ CUDA");
    EXPECT_NE(at, std::string::npos) << s;
    if (at != std::string::npos) s.replace(at, 6, "[ CPU");
  }
  return s;
}

class PrintTest : public BackendTest {};

TEST_P(PrintTest, FloatMatrixUsesFixedFourDecimals) {
  auto t = loom::tensor({1.5f, 2.25f, -3.f, 4.f, 5.f, 6.f}).reshape({2, 3});
  EXPECT_EQ(str(t), " 1.5000  2.2500 -3.0000\n 4.0000  5.0000  6.0000\n[ CPUFloatType{2,3} ]");
}

TEST_P(PrintTest, IntegersPrintWithoutDecimals) {
  EXPECT_EQ(str(loom::arange(6).reshape({2, 3})), " 0  1  2\n 3  4  5\n[ CPULongType{2,3} ]");
  EXPECT_EQ(str(loom::tensor({-1, 20, 3}, loom::kInt).reshape({1, 3})), " -1  20   3\n[ CPUIntType{1,3} ]");
  // Integral values of a float tensor print as integers too.
  auto t = loom::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}).reshape({2, 3}).t();
  EXPECT_EQ(str(t), " 1  4\n 2  5\n 3  6\n[ CPUFloatType{3,2} ]");
}

TEST_P(PrintTest, ZeroDimPrintsTheShortestExactValue) {
  EXPECT_EQ(str(loom::scalar_tensor(2.5)), "2.5\n[ CPUFloatType{} ]");
  EXPECT_EQ(str(loom::scalar_tensor(3.0)), "3\n[ CPUFloatType{} ]");
  EXPECT_EQ(str(loom::scalar_tensor(7, loom::kLong)), "7\n[ CPULongType{} ]");
  EXPECT_EQ(str(loom::scalar_tensor(true, loom::kBool)), "1\n[ CPUBoolType{} ]");
  EXPECT_EQ(str(loom::scalar_tensor(1.0 / 3, loom::kDouble)), "0.3333333333333333\n[ CPUDoubleType{} ]");
  EXPECT_EQ(str(loom::scalar_tensor(0.1 + 0.2, loom::kDouble)), "0.30000000000000004\n[ CPUDoubleType{} ]");
  EXPECT_EQ(str(loom::scalar_tensor(1e15, loom::kDouble)), "1000000000000000\n[ CPUDoubleType{} ]");
  EXPECT_EQ(str(loom::scalar_tensor(1e16, loom::kDouble)), "1e+16\n[ CPUDoubleType{} ]");
  EXPECT_EQ(str(loom::scalar_tensor(1e-5, loom::kDouble)), "1e-05\n[ CPUDoubleType{} ]");
  EXPECT_EQ(str(loom::scalar_tensor(3.14159)), "3.141590118408203\n[ CPUFloatType{} ]");  // float32's value
  // A reduction's 0-dim result prints the same way.
  EXPECT_EQ(str(loom::tensor({1, 2, 3}).sum()), "6\n[ CPULongType{} ]");
}

TEST_P(PrintTest, OneDimPrintsAColumn) {
  EXPECT_EQ(str(loom::tensor({0.1, 0.2, 0.3}, loom::kDouble)), " 0.1000\n 0.2000\n 0.3000\n[ CPUDoubleType{3} ]");
  EXPECT_EQ(str(loom::tensor({true, false, true})), " 1\n 0\n 1\n[ CPUBoolType{3} ]");
  EXPECT_EQ(str(loom::tensor({-0.5f, 0.25f})), "-0.5000\n 0.2500\n[ CPUFloatType{2} ]");
}

TEST_P(PrintTest, ScientificWhenTheRangeDemands) {
  EXPECT_EQ(str(loom::tensor({1e10f, 1.f}).reshape({1, 2})), " 1.0000e+10  1.0000e+00\n[ CPUFloatType{1,2} ]");
  EXPECT_EQ(str(loom::tensor({1e-120, 1e120}, loom::kDouble)), " 1.0000e-120\n 1.0000e+120\n[ CPUDoubleType{2} ]");
  EXPECT_EQ(str(loom::tensor({int64_t{123456789}, int64_t{1}})), "1.23457e+08\n         1\n[ CPULongType{2} ]");
}

TEST_P(PrintTest, CommonScaleFactorLine) {
  EXPECT_EQ(str(loom::tensor({123456.5f, 100000.25f})), "100000 *\n 1.2346\n 1.0000\n[ CPUFloatType{2} ]");
  EXPECT_EQ(str(loom::tensor({0.00012f, 0.00034f, 0.0005f, 0.0001f}).reshape({2, 2})),
            "0.0001 *\n 1.2000  3.4000\n  5.0000  1.0000\n[ CPUFloatType{2,2} ]");
}

TEST_P(PrintTest, NonFiniteValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(str(loom::tensor({nan, 1.5f, inf, -inf}).reshape({2, 2})),
            "    nan  1.5000\n    inf    -inf\n[ CPUFloatType{2,2} ]");
}

TEST_P(PrintTest, ThreeDimsPrintOneBlockPerMatrix) {
  auto t = loom::arange(12, loom::kFloat).reshape({2, 2, 3}) / 2;
  EXPECT_EQ(str(t),
            "(1,.,.) = \n 0.0000  0.5000  1.0000\n  1.5000  2.0000  2.5000\n\n"
            "(2,.,.) = \n 3.0000  3.5000  4.0000\n  4.5000  5.0000  5.5000\n[ CPUFloatType{2,2,3} ]");
}

TEST_P(PrintTest, BlocksIndentEveryRowButTheFirst) {
  auto scaled = loom::tensor({123456.5f, 100000.25f, 3e5f, 4e5f}).reshape({1, 2, 2});
  EXPECT_EQ(str(scaled), "(1,.,.) = \n100000 *\n  1.2346  1.0000\n   3.0000  4.0000\n[ CPUFloatType{1,2,2} ]");
  auto wide = loom::arange(30, loom::kFloat).reshape({1, 2, 15}) + 0.5;
  EXPECT_EQ(str(wide),
            "(1,.,.) = \n"
            "Columns 1 to 8   0.5000   1.5000   2.5000   3.5000   4.5000   5.5000   6.5000   7.5000\n"
            "  15.5000  16.5000  17.5000  18.5000  19.5000  20.5000  21.5000  22.5000\n\n"
            "Columns 9 to 15   8.5000   9.5000  10.5000  11.5000  12.5000  13.5000  14.5000\n"
            "  23.5000  24.5000  25.5000  26.5000  27.5000  28.5000  29.5000\n[ CPUFloatType{1,2,15} ]");
}

TEST_P(PrintTest, FourDimsCountTheFirstLeadingIndexFastest) {
  auto t = loom::arange(6).reshape({2, 3, 1, 1});
  EXPECT_EQ(str(t),
            "(1,1,.,.) = \n 0\n\n(2,1,.,.) = \n 3\n\n(1,2,.,.) = \n 1\n\n"
            "(2,2,.,.) = \n 4\n\n(1,3,.,.) = \n 2\n\n(2,3,.,.) = \n 5\n[ CPULongType{2,3,1,1} ]");
}

TEST_P(PrintTest, WideMatricesSplitIntoColumnBlocks) {
  auto t = loom::arange(30, loom::kFloat).reshape({2, 15}) + 0.5;
  EXPECT_EQ(str(t),
            "Columns 1 to 8  0.5000   1.5000   2.5000   3.5000   4.5000   5.5000   6.5000   7.5000\n"
            " 15.5000  16.5000  17.5000  18.5000  19.5000  20.5000  21.5000  22.5000\n\n"
            "Columns 9 to 15  8.5000   9.5000  10.5000  11.5000  12.5000  13.5000  14.5000\n"
            " 23.5000  24.5000  25.5000  26.5000  27.5000  28.5000  29.5000\n[ CPUFloatType{2,15} ]");
}

TEST_P(PrintTest, EmptyAndUndefined) {
  EXPECT_EQ(str(loom::zeros({2, 0, 3})), "[ CPUFloatType{2,0,3} ]");
  EXPECT_EQ(str(loom::zeros({0}, loom::kInt)), "[ CPUIntType{0} ]");
  EXPECT_EQ(str(loom::Tensor()), "[ Tensor (undefined) ]");
}

TEST_P(PrintTest, StreamStateNeitherChangesNorLeaks) {
  auto t = loom::tensor({1.5f, 2.25f});
  std::ostringstream os;
  os << std::scientific << std::setprecision(2) << std::left << std::showpos;
  os << t;
  EXPECT_EQ(os.str(), std::string(" 1.5000\n 2.2500\n[ ") + (t.is_cuda() ? "CUDA" : "CPU") + "FloatType{2} ]");
  std::ostringstream after;
  after.copyfmt(os);
  after << 0.5;
  EXPECT_EQ(after.str(), "+5.00e-01");  // the caller's flags are back
}

TEST_P(PrintTest, PrintingMaterializesAPendingTensor) {
  auto t = loom::ones({2}) * 3;
  ASSERT_TRUE(t.is_pending());
  EXPECT_EQ(str(t), " 3\n 3\n[ CPUFloatType{2} ]");
  EXPECT_FALSE(t.is_pending());
}

LOOM_INSTANTIATE_BACKENDS(PrintTest);

}  // namespace
