// Pointwise ops over every dtype PyTorch supports them for. Expected values
// come from <cmath> applied here to the same inputs (rounded to the dtype).
#include <cmath>
#include <functional>
#include <limits>

#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::BackendTest;
using loom_test::sizes_of;
using V = std::vector<double>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The value `x` takes once stored as dtype `dt`.
double as(double x, loom::ScalarType dt) {
  switch (dt) {
    case loom::kBool: return x != 0;
    case loom::kInt: return static_cast<int32_t>(x);
    case loom::kLong: return static_cast<double>(static_cast<int64_t>(x));
    case loom::kFloat: return static_cast<float>(x);
    case loom::kDouble: return x;
  }
  return x;
}
V map(const V& in, const std::function<double(double)>& f) {
  V out;
  for (double x : in) out.push_back(f(x));
  return out;
}
V zip(const V& a, const V& b, const std::function<double(double, double)>& f) {
  V out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back(f(a[i], b[i]));
  return out;
}
V rounded(const V& in, loom::ScalarType dt) { return map(in, [&](double x) { return as(x, dt); }); }
// Tolerance of a result of dtype dt computed in that dtype.
double rtol(loom::ScalarType dt) { return dt == loom::kDouble ? 1e-12 : 1e-5; }
double atol(loom::ScalarType dt) { return dt == loom::kDouble ? 1e-14 : 1e-6; }

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double sign(double x) { return x > 0 ? 1 : x < 0 ? -1 : 0; }
double py_mod(double a, double b) { return a - b * std::floor(a / b); }  // Python's %: sign of b
int64_t py_mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }

struct UnaryCase {
  const char* name;
  Tensor (*op)(const Tensor&);
  double (*ref)(double);
};
const UnaryCase kFloatUnary[] = {
    {"neg", [](const Tensor& x) { return loom::neg(x); }, [](double x) { return -x; }},
    {"abs", [](const Tensor& x) { return loom::abs(x); }, [](double x) { return std::fabs(x); }},
    {"exp", [](const Tensor& x) { return loom::exp(x); }, [](double x) { return std::exp(x); }},
    {"log", [](const Tensor& x) { return loom::log(x); }, [](double x) { return std::log(x); }},
    {"log1p", [](const Tensor& x) { return loom::log1p(x); }, [](double x) { return std::log1p(x); }},
    {"expm1", [](const Tensor& x) { return loom::expm1(x); }, [](double x) { return std::expm1(x); }},
    {"sqrt", [](const Tensor& x) { return loom::sqrt(x); }, [](double x) { return std::sqrt(x); }},
    {"rsqrt", [](const Tensor& x) { return loom::rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }},
    {"sin", [](const Tensor& x) { return loom::sin(x); }, [](double x) { return std::sin(x); }},
    {"cos", [](const Tensor& x) { return loom::cos(x); }, [](double x) { return std::cos(x); }},
    {"tanh", [](const Tensor& x) { return loom::tanh(x); }, [](double x) { return std::tanh(x); }},
    {"sigmoid", [](const Tensor& x) { return loom::sigmoid(x); }, sigmoid},
    {"relu", [](const Tensor& x) { return loom::relu(x); }, [](double x) { return x > 0 ? x : 0.0; }},
    {"gelu", [](const Tensor& x) { return loom::gelu(x); }, gelu},
    {"gelu_tanh", [](const Tensor& x) { return loom::gelu(x, "tanh"); }, gelu_tanh},
    {"silu", [](const Tensor& x) { return loom::silu(x); }, [](double x) { return x * sigmoid(x); }},
    {"erf", [](const Tensor& x) { return loom::erf(x); }, [](double x) { return std::erf(x); }},
    {"atan", [](const Tensor& x) { return loom::atan(x); }, [](double x) { return std::atan(x); }},
    {"asin", [](const Tensor& x) { return loom::asin(x); }, [](double x) { return std::asin(x); }},
    {"acos", [](const Tensor& x) { return loom::acos(x); }, [](double x) { return std::acos(x); }},
    {"floor", [](const Tensor& x) { return loom::floor(x); }, [](double x) { return std::floor(x); }},
    {"ceil", [](const Tensor& x) { return loom::ceil(x); }, [](double x) { return std::ceil(x); }},
    {"trunc", [](const Tensor& x) { return loom::trunc(x); }, [](double x) { return std::trunc(x); }},
    {"round", [](const Tensor& x) { return loom::round(x); }, [](double x) { return std::nearbyint(x); }},
    {"sign", [](const Tensor& x) { return loom::sign(x); }, sign},
    {"reciprocal", [](const Tensor& x) { return loom::reciprocal(x); }, [](double x) { return 1 / x; }},
    {"square", [](const Tensor& x) { return loom::square(x); }, [](double x) { return x * x; }},
};

class PointwiseTest : public BackendTest {};

// ---------------------------------------------------------------- unary
TEST_P(PointwiseTest, UnaryOpsOnFloatingTypes) {
  const V in = {-2.5, -1.0, -0.3, 0.0, 0.4, 1.0, 2.5, 7.0};
  for (auto dt : {loom::kFloat, loom::kDouble}) {
    const V x = rounded(in, dt);
    for (const auto& c : kFloatUnary) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(loom::to_string(dt)));
      Tensor r = c.op(loom::tensor(x, dt));
      EXPECT_EQ(r.dtype(), dt);
      EXPECT_TRUE(all_close(r, map(x, c.ref), rtol(dt), atol(dt)));
    }
  }
}

TEST_P(PointwiseTest, UnaryOpsThatKeepIntegerTypes) {
  const V x = {-7, -1, 0, 2, 5};
  for (auto dt : {loom::kInt, loom::kLong}) {
    SCOPED_TRACE(std::string(loom::to_string(dt)));
    Tensor t = loom::tensor(x, dt);
    for (const char* name : {"neg", "abs", "relu", "sign", "floor", "ceil", "round", "trunc", "square"}) {
      const UnaryCase* c = nullptr;
      for (const auto& u : kFloatUnary)
        if (std::string(u.name) == name) c = &u;
      SCOPED_TRACE(name);
      Tensor r = c->op(t);
      EXPECT_EQ(r.dtype(), dt);
      EXPECT_EQ(r.to_vector<double>(), map(x, c->ref));
    }
  }
}

TEST_P(PointwiseTest, FloatingUnaryOpsPromoteIntegersAndBoolToFloat) {
  const V x = {-2, 0, 1, 3};
  for (auto dt : {loom::kInt, loom::kLong}) {
    for (const auto& c : kFloatUnary) {
      std::string n = c.name;
      if (n == "gelu" || n == "gelu_tanh" || n == "silu" || n == "neg" || n == "abs" || n == "relu" ||
          n == "floor" || n == "ceil" || n == "round" || n == "trunc" || n == "sign" || n == "square")
        continue;
      SCOPED_TRACE(n);
      Tensor r = c.op(loom::tensor(x, dt));
      EXPECT_EQ(r.dtype(), loom::kFloat);
      EXPECT_TRUE(all_close(r, map(x, c.ref)));
    }
  }
  Tensor b = loom::tensor({true, false});
  EXPECT_EQ(loom::exp(b).dtype(), loom::kFloat);
  EXPECT_TRUE(all_close(loom::exp(b), {std::exp(1.0), 1.0}));
  EXPECT_TRUE(all_close(loom::reciprocal(b), {1.0, kInf}));
}

TEST_P(PointwiseTest, UnaryOpsOnBool) {
  Tensor b = loom::tensor({true, false, true});
  EXPECT_EQ(loom::logical_not(b).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(loom::sign(b).dtype(), loom::kBool);
  EXPECT_EQ(loom::sign(b).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  Tensor sq = loom::square(b);
  EXPECT_EQ(sq.dtype(), loom::kLong);
  EXPECT_EQ(sq.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_THROW(loom::neg(b), loom::Error);
  EXPECT_THROW(loom::abs(b), loom::Error);
  EXPECT_THROW(loom::relu(b), loom::Error);
  EXPECT_THROW(loom::floor(b), loom::Error);
  EXPECT_THROW(loom::round(b), loom::Error);
  EXPECT_THROW(loom::gelu(loom::tensor({1, 2})), loom::Error);
  EXPECT_THROW(loom::silu(loom::tensor({1, 2})), loom::Error);
  // logical_not of numbers: x == 0.
  EXPECT_EQ(loom::logical_not(loom::tensor({0.0f, -2.f})).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ((~loom::tensor({3, 0})).to_vector<bool>(), (std::vector<bool>{false, true}));
}

TEST_P(PointwiseTest, RoundIsHalfToEven) {
  auto r = loom::round(loom::tensor({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 2.4999f, 3.5f})).to_vector<float>();
  EXPECT_EQ(r, (std::vector<float>{0.f, 2.f, 2.f, -0.f, -2.f, -2.f, 2.f, 4.f}));
  EXPECT_TRUE(std::signbit(r[3]));  // -0.5 rounds to -0
}

// trunc rounds toward zero (torch.trunc; fix is its alias): -2.7 to -2, where
// floor gives -3; -0.5 to -0; infinities and NaN pass through; in place too.
TEST_P(PointwiseTest, TruncRoundsTowardZero) {
  const float inf = std::numeric_limits<float>::infinity();
  auto x = loom::tensor({-2.7f, -0.5f, 0.5f, 2.7f, 1e8f + 8, -inf, inf});
  auto r = loom::trunc(x).to_vector<float>();
  EXPECT_EQ(r, (std::vector<float>{-2.f, -0.f, 0.f, 2.f, 1e8f + 8, -inf, inf}));
  EXPECT_TRUE(std::signbit(r[1]));
  EXPECT_TRUE(std::isnan(loom::fix(loom::tensor({std::nanf("")})).item<float>()));
  auto y = loom::tensor({-3.5, 3.5}, loom::kDouble);
  y.trunc_();
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{-3, 3}));
  EXPECT_EQ(loom::trunc(loom::tensor({-7, 7}, loom::kLong)).to_vector<int64_t>(), (std::vector<int64_t>{-7, 7}));
  EXPECT_LOOM_ERROR(loom::trunc(loom::tensor({true})), "trunc", "bool");
}

// W1's chain over millions of elements: on a GPU, costly pointwise kernels
// this large take four steps a thread (jit/cuda KernelPlan::steps), so the
// last block's later steps are only partly in range: [2^22 + 148] walks 4
// lanes a step, [4099, 1025] one. Every element is checked.
TEST_P(PointwiseTest, LargeCostlyChainsMatchEveryElement) {
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{(int64_t{1} << 22) + 148}, std::vector<int64_t>{4099, 1025}}) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    V in(numel);
    for (int64_t i = 0; i < numel; ++i) in[i] = static_cast<float>(4 * std::sin(0.001 * double(i)));
    Tensor x = loom::tensor(in, loom::kFloat).reshape(shape);
    Tensor y = loom::sigmoid(loom::tanh(x * 1.5 + 0.5) * x) + x * x;
    const std::vector<float> got = y.reshape({numel}).to_vector<float>();
    ASSERT_EQ(static_cast<int64_t>(got.size()), numel);
    int64_t bad = 0;
    for (int64_t i = 0; i < numel; ++i) {
      const double want = sigmoid(std::tanh(in[i] * 1.5 + 0.5) * in[i]) + in[i] * in[i];
      if (!(std::fabs(got[i] - want) <= 1e-5 + 1e-5 * std::fabs(want)) && bad++ < 5)
        ADD_FAILURE() << "element " << i << " of " << numel << ": " << got[i] << ", want " << want;
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST_P(PointwiseTest, GeluExactAndTanhDiffer) {
  const V x = {-3, -1, -0.5, 0, 0.5, 1, 3};
  for (auto dt : {loom::kFloat, loom::kDouble}) {
    Tensor t = loom::tensor(x, dt);
    EXPECT_TRUE(all_close(loom::gelu(t), map(x, gelu), rtol(dt), atol(dt)));
    EXPECT_TRUE(all_close(loom::gelu(t, "tanh"), map(x, gelu_tanh), rtol(dt), atol(dt)));
  }
  // The two forms differ visibly at x = -3 (about 1.6e-4 apart).
  EXPECT_GT(std::abs(gelu(-3) - gelu_tanh(-3)), 1e-4);
  EXPECT_NEAR(loom::gelu(loom::tensor({-3.0}, loom::kDouble)).item<double>(), gelu(-3), 1e-12);
  EXPECT_THROW(loom::gelu(loom::tensor({1.f}), "fast"), loom::Error);
}

// ---------------------------------------------------------------- binary
struct BinaryCase {
  const char* name;
  Tensor (*op)(const Tensor&, const Tensor&);
  double (*ref)(double, double);
};
const BinaryCase kArith[] = {
    {"add", [](const Tensor& a, const Tensor& b) { return loom::add(a, b); }, [](double a, double b) { return a + b; }},
    {"sub", [](const Tensor& a, const Tensor& b) { return loom::sub(a, b); }, [](double a, double b) { return a - b; }},
    {"mul", [](const Tensor& a, const Tensor& b) { return loom::mul(a, b); }, [](double a, double b) { return a * b; }},
    {"maximum", [](const Tensor& a, const Tensor& b) { return loom::maximum(a, b); },
     [](double a, double b) { return a > b ? a : b; }},
    {"minimum", [](const Tensor& a, const Tensor& b) { return loom::minimum(a, b); },
     [](double a, double b) { return a < b ? a : b; }},
};
const BinaryCase kCompare[] = {
    {"eq", [](const Tensor& a, const Tensor& b) { return loom::eq(a, b); }, [](double a, double b) { return double(a == b); }},
    {"ne", [](const Tensor& a, const Tensor& b) { return loom::ne(a, b); }, [](double a, double b) { return double(a != b); }},
    {"lt", [](const Tensor& a, const Tensor& b) { return loom::lt(a, b); }, [](double a, double b) { return double(a < b); }},
    {"le", [](const Tensor& a, const Tensor& b) { return loom::le(a, b); }, [](double a, double b) { return double(a <= b); }},
    {"gt", [](const Tensor& a, const Tensor& b) { return loom::gt(a, b); }, [](double a, double b) { return double(a > b); }},
    {"ge", [](const Tensor& a, const Tensor& b) { return loom::ge(a, b); }, [](double a, double b) { return double(a >= b); }},
    {"logical_and", [](const Tensor& a, const Tensor& b) { return loom::logical_and(a, b); },
     [](double a, double b) { return double(a != 0 && b != 0); }},
    {"logical_or", [](const Tensor& a, const Tensor& b) { return loom::logical_or(a, b); },
     [](double a, double b) { return double(a != 0 || b != 0); }},
};

TEST_P(PointwiseTest, BinaryOpsOnFloatingTypes) {
  const V a0 = {-3.5, -1, 0, 0.5, 2, 7.25, 2}, b0 = {2, -0.5, 3, 0.25, -2, 1.5, 2};
  for (auto dt : {loom::kFloat, loom::kDouble}) {
    const V a = rounded(a0, dt), b = rounded(b0, dt);
    Tensor ta = loom::tensor(a, dt), tb = loom::tensor(b, dt);
    for (const auto& c : kArith) {
      SCOPED_TRACE(c.name);
      EXPECT_EQ(c.op(ta, tb).dtype(), dt);
      EXPECT_TRUE(all_close(c.op(ta, tb), zip(a, b, c.ref), rtol(dt), atol(dt)));
    }
    for (const auto& c : kCompare) {
      SCOPED_TRACE(c.name);
      EXPECT_EQ(c.op(ta, tb).dtype(), loom::kBool);
      EXPECT_EQ(c.op(ta, tb).to_vector<double>(), zip(a, b, c.ref));
    }
    EXPECT_TRUE(all_close(loom::div(ta, tb), zip(a, b, [](double x, double y) { return x / y; }), rtol(dt), atol(dt)));
    EXPECT_TRUE(all_close(loom::pow(ta, tb), zip(a, b, [](double x, double y) { return std::pow(x, y); }), rtol(dt), atol(dt)));
    EXPECT_TRUE(all_close(loom::fmod(ta, tb), zip(a, b, [](double x, double y) { return std::fmod(x, y); }), rtol(dt), atol(dt)));
    EXPECT_TRUE(all_close(loom::remainder(ta, tb), zip(a, b, [](double x, double y) { return py_mod(x, y); }), rtol(dt), atol(dt)));
  }
}

TEST_P(PointwiseTest, BinaryOpsOnIntegerTypes) {
  const V a = {-7, -3, 0, 4, 9, 5}, b = {2, -2, 5, 3, -4, 5};
  for (auto dt : {loom::kInt, loom::kLong}) {
    SCOPED_TRACE(std::string(loom::to_string(dt)));
    Tensor ta = loom::tensor(a, dt), tb = loom::tensor(b, dt);
    for (const auto& c : kArith) {
      SCOPED_TRACE(c.name);
      EXPECT_EQ(c.op(ta, tb).dtype(), dt);
      EXPECT_EQ(c.op(ta, tb).to_vector<double>(), zip(a, b, c.ref));
    }
    for (const auto& c : kCompare) {
      SCOPED_TRACE(c.name);
      EXPECT_EQ(c.op(ta, tb).to_vector<double>(), zip(a, b, c.ref));
    }
    Tensor q = loom::div(ta, tb);  // true division
    EXPECT_EQ(q.dtype(), loom::kFloat);
    EXPECT_TRUE(all_close(q, zip(a, b, [](double x, double y) { return x / y; })));
    EXPECT_EQ(loom::fmod(ta, tb).to_vector<int64_t>(), (std::vector<int64_t>{-1, -1, 0, 1, 1, 0}));       // C %
    EXPECT_EQ(loom::remainder(ta, tb).to_vector<int64_t>(), (std::vector<int64_t>{1, -1, 0, 1, -3, 0}));  // Python %
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(py_mod(int64_t(a[i]), int64_t(b[i])), loom::remainder(ta, tb)[i].item<int64_t>());
    Tensor e = loom::tensor(V{2, 0, 3, 1, 2, 1}, dt);
    EXPECT_EQ(loom::pow(ta, e).to_vector<int64_t>(), (std::vector<int64_t>{49, 1, 0, 4, 81, 5}));
    EXPECT_EQ(loom::pow(ta, e).dtype(), dt);
  }
}

TEST_P(PointwiseTest, IntegerPowers) {
  // A negative scalar exponent of an integer tensor is refused, as in PyTorch;
  // a tensor of exponents truncates: 1 and -1 keep their magnitude, others give 0.
  EXPECT_THROW(loom::pow(loom::tensor({2, 3}), -1), loom::Error);
  Tensor base = loom::tensor({1, -1, -1, 2, 0});
  EXPECT_EQ(loom::pow(base, loom::tensor({-3, -3, -2, -1, -1})).to_vector<int64_t>(),
            (std::vector<int64_t>{1, -1, 1, 0, 0}));
  EXPECT_EQ(loom::pow(2, loom::tensor({0, 1, 10})).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 1024}));
  Tensor f = loom::pow(2.5, loom::tensor({1, 2}));
  EXPECT_EQ(f.dtype(), loom::kFloat);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{2.5f, 6.25f}));
  Tensor h = loom::pow(loom::tensor({4, 9}), 0.5);
  EXPECT_EQ(h.dtype(), loom::kFloat);
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{2.f, 3.f}));
}

TEST_P(PointwiseTest, BinaryOpsOnBool) {
  Tensor a = loom::tensor({true, true, false, false}), b = loom::tensor({true, false, true, false});
  EXPECT_EQ((a + b).dtype(), loom::kBool);  // add of bools is "or"
  EXPECT_EQ((a + b).to_vector<bool>(), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ((a * b).to_vector<bool>(), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(loom::maximum(a, b).to_vector<bool>(), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(loom::minimum(a, b).to_vector<bool>(), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ((a & b).to_vector<bool>(), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ((a | b).to_vector<bool>(), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ((a == b).to_vector<bool>(), (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ((a > b).to_vector<bool>(), (std::vector<bool>{false, true, false, false}));
  Tensor q = a / b;
  EXPECT_EQ(q.dtype(), loom::kFloat);
  EXPECT_TRUE(all_close(q, {1, kInf, 0, kNaN}));
  EXPECT_THROW(a - b, loom::Error);
  EXPECT_THROW(a - 1, loom::Error);
  EXPECT_THROW(1 - a, loom::Error);
  EXPECT_THROW(loom::pow(a, b), loom::Error);
  EXPECT_EQ(loom::pow(a, 2).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 0, 0}));
}

// ---------------------------------------------------------------- broadcasting
TEST_P(PointwiseTest, BroadcastingAlignsTrailingDims) {
  Tensor a = loom::arange(6, loom::kFloat).reshape({2, 1, 3});  // a[i][0][k] = 3i + k
  Tensor b = loom::arange(4, loom::kFloat).reshape({4, 1}) * 10;  // b[j][0] = 10j
  Tensor c = a + b;
  EXPECT_EQ(sizes_of(c), (std::vector<int64_t>{2, 4, 3}));
  V want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) want.push_back(3 * i + k + 10 * j);
  EXPECT_EQ(c.to_vector<double>(), want);
  // Size-1 against size-1, a [1] against [3], a 0-dim against anything.
  EXPECT_EQ(sizes_of(loom::ones({1, 1}) * loom::ones({1})), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ((loom::tensor({5.f}) - loom::tensor({1.f, 2.f, 3.f})).to_vector<float>(), (std::vector<float>{4, 3, 2}));
  Tensor s = loom::scalar_tensor(2.0);
  Tensor m = loom::tensor({1.f, 2.f, 3.f, 4.f}).reshape({2, 2});
  EXPECT_EQ((m * s).to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_EQ((s - m).to_vector<float>(), (std::vector<float>{1, 0, -1, -2}));
  EXPECT_EQ((s * s).dim(), 0);
  // Empty dims broadcast to empty results.
  EXPECT_EQ(sizes_of(loom::ones({0, 3}) + loom::ones({3})), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(sizes_of(loom::ones({1, 3}) + loom::ones({0, 1})), (std::vector<int64_t>{0, 3}));
}

TEST_P(PointwiseTest, BroadcastingComparisonsAndWhere) {
  Tensor col = loom::tensor({1, 2, 3}).reshape({3, 1});
  Tensor row = loom::tensor({2, 2});
  EXPECT_EQ((col < row).to_vector<bool>(), (std::vector<bool>{true, true, false, false, false, false}));
  Tensor cond = loom::tensor({true, false}).reshape({1, 2});
  Tensor w = loom::where(cond, loom::ones({3, 1}), loom::zeros({2}));
  EXPECT_EQ(sizes_of(w), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{1, 0, 1, 0, 1, 0}));
  Tensor ws = loom::where(loom::tensor({true, false}), loom::tensor({1, 2}), 2.5);
  EXPECT_EQ(ws.dtype(), loom::kFloat);
  EXPECT_EQ(ws.to_vector<float>(), (std::vector<float>{1.f, 2.5f}));
  EXPECT_EQ(loom::where(loom::tensor({false, true}), 7, loom::tensor({1, 2})).to_vector<int64_t>(),
            (std::vector<int64_t>{1, 7}));
  EXPECT_THROW(loom::where(loom::tensor({1, 0}), loom::ones({2}), loom::zeros({2})), loom::Error);
}

// ---------------------------------------------------------------- scalars on either side
TEST_P(PointwiseTest, OperatorsWithScalarsOnEitherSide) {
  Tensor t = loom::tensor({1.f, 2.f, 4.f});
  EXPECT_EQ((t + 2).to_vector<float>(), (std::vector<float>{3, 4, 6}));
  EXPECT_EQ((2 + t).to_vector<float>(), (std::vector<float>{3, 4, 6}));
  EXPECT_EQ((t - 2).to_vector<float>(), (std::vector<float>{-1, 0, 2}));
  EXPECT_EQ((2 - t).to_vector<float>(), (std::vector<float>{1, 0, -2}));
  EXPECT_EQ((t * 0.5).to_vector<float>(), (std::vector<float>{0.5f, 1, 2}));
  EXPECT_EQ((0.5 * t).to_vector<float>(), (std::vector<float>{0.5f, 1, 2}));
  EXPECT_EQ((t / 2).to_vector<float>(), (std::vector<float>{0.5f, 1, 2}));
  EXPECT_EQ((2 / t).to_vector<float>(), (std::vector<float>{2, 1, 0.5f}));
  EXPECT_EQ((-t).to_vector<float>(), (std::vector<float>{-1, -2, -4}));
  EXPECT_EQ((t > 1.5).to_vector<bool>(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ((t == 2).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ((t != 2).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ((t <= 2).to_vector<bool>(), (std::vector<bool>{true, true, false}));
  Tensor i = loom::tensor({-7, 7});
  EXPECT_EQ((i % 3).to_vector<int64_t>(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ((i % -3).to_vector<int64_t>(), (std::vector<int64_t>{-1, -2}));
  EXPECT_EQ((10 - i).to_vector<int64_t>(), (std::vector<int64_t>{17, 3}));
  EXPECT_EQ((10 - i).dtype(), loom::kLong);
  EXPECT_EQ((1 / loom::tensor({4, 2}, loom::kInt)).to_vector<float>(), (std::vector<float>{0.25f, 0.5f}));
  EXPECT_EQ((2.5 - loom::tensor({1, 2}, loom::kInt)).to_vector<float>(), (std::vector<float>{1.5f, 0.5f}));
  EXPECT_EQ(loom::add(t, 1, 2).to_vector<float>(), (std::vector<float>{3, 4, 6}));      // t + alpha * 1
  EXPECT_EQ(loom::sub(t, t, 0.5).to_vector<float>(), (std::vector<float>{0.5f, 1, 2}));  // t - alpha * t
  EXPECT_THROW(loom::add(i, i, 2.5), loom::Error);  // a float alpha needs a floating result
}

// ---------------------------------------------------------------- inverse trigonometry
TEST_P(PointwiseTest, InverseTrigAtTheEdgesOfTheirDomains) {
  const double inf = std::numeric_limits<double>::infinity();
  const V x = {-inf, -1.5, -1.0, -0.999999, -0.5, -0.0, 0.0, 1e-30, 0.5, 0.999999, 1.0, 1.5, inf, kNaN};
  for (auto dt : {loom::kFloat, loom::kDouble}) {
    SCOPED_TRACE(std::string(loom::to_string(dt)));
    const V r = rounded(x, dt);
    Tensor t = loom::tensor(r, dt);
    EXPECT_TRUE(all_close(t.atan(), map(r, [](double v) { return std::atan(v); }), rtol(dt), 0));
    EXPECT_TRUE(all_close(t.asin(), map(r, [](double v) { return std::asin(v); }), rtol(dt), 0));
    EXPECT_TRUE(all_close(t.arccos(), map(r, [](double v) { return std::acos(v); }), rtol(dt), 0));
    // Signed zeros survive atan and asin, as std::'s.
    EXPECT_TRUE(std::signbit(t.atan().to_vector<double>()[5]));
    EXPECT_TRUE(std::signbit(t.asin().to_vector<double>()[5]));
  }
}

TEST_P(PointwiseTest, Atan2CoversEveryQuadrantAndC99Limits) {
  const double inf = std::numeric_limits<double>::infinity();
  const V s = {-inf, -3.0, -1e-20, -0.0, 0.0, 2.0, 1e25, inf, kNaN};
  V a, b;
  for (double u : s)
    for (double v : s) a.push_back(u), b.push_back(v);
  for (auto dt : {loom::kFloat, loom::kDouble}) {
    SCOPED_TRACE(std::string(loom::to_string(dt)));
    const V ra = rounded(a, dt), rb = rounded(b, dt);
    Tensor r = loom::atan2(loom::tensor(ra, dt), loom::tensor(rb, dt));
    EXPECT_EQ(r.dtype(), dt);
    // Rounded to dt: atan2(-1e-20, 1e25) is a float32 subnormal.
    const V want = rounded(zip(ra, rb, [](double y, double x) { return std::atan2(y, x); }), dt);
    EXPECT_TRUE(all_close(r, want, rtol(dt), 0));
    const V got = r.to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i)
      if (want[i] == 0) EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << ra[i] << ", " << rb[i];
  }
  // Integers promote to float32; the shapes broadcast.
  Tensor r = loom::tensor({1, -1}).view({2, 1}).atan2(loom::tensor({1, 0, -1}));
  EXPECT_EQ(r.dtype(), loom::kFloat);
  EXPECT_EQ(r.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(all_close(r, {M_PI / 4, M_PI / 2, 3 * M_PI / 4, -M_PI / 4, -M_PI / 2, -3 * M_PI / 4}));
  Tensor y = loom::tensor({1.0, -2.0});
  y.atan2_(loom::tensor({-1.0, -1.0}));
  EXPECT_TRUE(all_close(y, {std::atan2(1.0, -1.0), std::atan2(-2.0, -1.0)}));
  EXPECT_THROW(loom::atan2(loom::tensor({1.0, 2.0}), loom::tensor({1.0, 2.0, 3.0})), loom::Error);
}

// ---------------------------------------------------------------- fmod, remainder
TEST_P(PointwiseTest, FmodTakesTheDividendsSignRemainderTheDivisors) {
  Tensor a = loom::tensor({-3.f, 3.f, -3.f, 3.f, 5.f}), b = loom::tensor({2.f, -2.f, -2.f, 2.f, 1e30f});
  EXPECT_EQ(loom::fmod(a, b).to_vector<float>(), (std::vector<float>{-1, 1, -1, 1, 5}));
  EXPECT_EQ(loom::remainder(a, b).to_vector<float>(), (std::vector<float>{1, -1, -1, 1, 5}));
  EXPECT_EQ(loom::fmod(loom::tensor({-7, 7}), 3).to_vector<int64_t>(), (std::vector<int64_t>{-1, 1}));
  EXPECT_EQ(loom::remainder(loom::tensor({-7, 7}), 3).to_vector<int64_t>(), (std::vector<int64_t>{2, 1}));
  // An int tensor with a float divisor computes in float.
  Tensor m = loom::remainder(loom::tensor({-3, 3}), 2.5);
  EXPECT_EQ(m.dtype(), loom::kFloat);
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{2.f, 0.5f}));
  // Floating division by zero is nan, not an error.
  EXPECT_TRUE(all_close(loom::remainder(loom::tensor({-3.f, 3.f}), 0.0), {kNaN, kNaN}));
  EXPECT_TRUE(all_close(loom::fmod(loom::tensor({3.f}), 0.0), {kNaN}));
}

TEST_P(PointwiseTest, IntegerDivisionByZeroRaisesAtMaterialization) {
  Tensor a = loom::tensor({-3, 3}), b = loom::tensor({0, 1});
  Tensor r = loom::remainder(a, b);  // recording succeeds: the values are not known yet
  EXPECT_THROW(r.to_vector<int64_t>(), loom::Error);
  Tensor f = loom::fmod(a, loom::tensor({1, 0}));
  EXPECT_THROW(f.to_vector<int64_t>(), loom::Error);
  Tensor s = a % 0;
  EXPECT_THROW(s.to_vector<int64_t>(), loom::Error);
  // The inputs are untouched and a later computation works.
  EXPECT_EQ((a + b).to_vector<int64_t>(), (std::vector<int64_t>{-3, 4}));
}

// ---------------------------------------------------------------- NaN, clamp
TEST_P(PointwiseTest, MaximumMinimumPropagateNaN) {
  Tensor a = loom::tensor({kNaN, 1.0, 2.0}, loom::kDouble), b = loom::tensor({0.0, kNaN, 1.0}, loom::kDouble);
  EXPECT_TRUE(all_close(loom::maximum(a, b), {kNaN, kNaN, 2.0}));
  EXPECT_TRUE(all_close(loom::minimum(a, b), {kNaN, kNaN, 1.0}));
  Tensor mixed = loom::maximum(loom::tensor({1, 5}), loom::tensor({2.5f, std::nanf("")}));
  EXPECT_EQ(mixed.dtype(), loom::kFloat);
  EXPECT_TRUE(all_close(mixed, {2.5, kNaN}));
  // NaN through the unary ops: relu and abs keep it, sign makes it 0 (as PyTorch).
  Tensor n = loom::tensor({kNaN}, loom::kDouble);
  EXPECT_TRUE(std::isnan(loom::relu(n).item<double>()));
  EXPECT_TRUE(std::isnan(loom::abs(n).item<double>()));
  EXPECT_EQ(loom::sign(n).item<double>(), 0.0);
}

TEST_P(PointwiseTest, Clamp) {
  Tensor x = loom::tensor({-2.f, 0.5f, 3.f, std::nanf("")});
  EXPECT_TRUE(all_close(loom::clamp(x, 0, 1), {0, 0.5, 1, kNaN}));  // NaN stays NaN
  EXPECT_TRUE(all_close(x.clamp_min(0), {0, 0.5, 3, kNaN}));
  EXPECT_TRUE(all_close(x.clamp_max(0), {-2, 0, 0, kNaN}));
  EXPECT_TRUE(all_close(loom::clamp(loom::tensor({0.5f, 5.f}), kNaN, 1), {kNaN, kNaN}));  // a NaN bound wins
  EXPECT_EQ(loom::clamp(loom::tensor({1, 2, 3}), 2, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1}));  // min > max: max
  Tensor p = loom::clamp(loom::tensor({1, 2, 3}), 1.5);  // a float bound promotes
  EXPECT_EQ(p.dtype(), loom::kFloat);
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{1.5f, 2.f, 3.f}));
  Tensor bl = loom::clamp(loom::tensor({true, false}), 0, 1);  // bool with int bounds: int64
  EXPECT_EQ(bl.dtype(), loom::kLong);
  EXPECT_EQ(bl.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_THROW(loom::clamp(loom::tensor({true}), true, false), loom::Error);
  EXPECT_THROW(loom::clamp(x, std::nullopt, std::nullopt), loom::Error);
}

LOOM_INSTANTIATE_BACKENDS(PointwiseTest);

}  // namespace
