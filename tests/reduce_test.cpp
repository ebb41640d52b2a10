// Reductions: values, result dtypes and shapes (dims lists, negative dims,
// keepdim, 0-dim results), NaN and empty cases, and reductions of views.
// Expected values are computed here with plain loops.
#include <cmath>
#include <functional>
#include <limits>

#include "test_util.h"

#include <algorithm>

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::BackendTest;
using loom_test::sizes_of;
using V = std::vector<double>;
using Shape = std::vector<int64_t>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// x[i][j][k] = 12i + 4j + k - 5 (some negative), shape [2, 3, 4].
double x3(int i, int j, int k) { return 12 * i + 4 * j + k - 5; }

// Reduces x3 over the dims whose bit is set in `mask` with (init, combine).
V reduce3(unsigned mask, double init, const std::function<double(double, double)>& f) {
  const int n[3] = {2, 3, 4};
  int m[3];
  for (int d = 0; d < 3; ++d) m[d] = (mask >> d & 1) ? 1 : n[d];
  V out(m[0] * m[1] * m[2], init);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        int o = ((mask & 1) ? 0 : i) * m[1] * m[2] + ((mask & 2) ? 0 : j) * m[2] + ((mask & 4) ? 0 : k);
        out[o] = f(out[o], x3(i, j, k));
      }
  return out;
}
double plus(double a, double b) { return a + b; }

class ReduceTest : public BackendTest {
 protected:
  Tensor x = loom::arange(24, loom::kDouble).reshape({2, 3, 4}) - 5;
};

TEST_P(ReduceTest, SumOverDimsListsNegativeDimsAndKeepdim) {
  EXPECT_EQ(x.sum().item<double>(), reduce3(7, 0, plus)[0]);
  EXPECT_EQ(x.sum().dim(), 0);
  Tensor s02 = x.sum({0, 2});
  EXPECT_EQ(sizes_of(s02), Shape{3});
  EXPECT_EQ(s02.to_vector<double>(), reduce3(5, 0, plus));
  EXPECT_EQ(x.sum({-1, -3}).to_vector<double>(), reduce3(5, 0, plus));
  EXPECT_EQ(sizes_of(x.sum({0, 2}, true)), (Shape{1, 3, 1}));
  EXPECT_EQ(x.sum({0, 2}, true).to_vector<double>(), reduce3(5, 0, plus));
  EXPECT_EQ(x.sum(1).to_vector<double>(), reduce3(2, 0, plus));
  EXPECT_EQ(sizes_of(x.sum(-2)), (Shape{2, 4}));
  EXPECT_EQ(sizes_of(loom::sum(x, {0, 1, 2}, true)), (Shape{1, 1, 1}));
  // A 0-dim tensor reduces over dim 0 / -1 to itself.
  Tensor z = loom::scalar_tensor(3.0);
  EXPECT_EQ(z.sum(0).item<float>(), 3.f);
  EXPECT_EQ(z.sum(-1, true).dim(), 0);
  EXPECT_THROW(x.sum({0, -3}), loom::Error);  // the same dim twice
}

// A sum over a dim of size 1 is each element itself, also for many rows
// fused with what follows (a GPU gives such a row one thread: ragged
// counts of rows and a consumer in the same kernel).
TEST_P(ReduceTest, SumOverADimOfSizeOneKeepsEveryElement) {
  for (int64_t n : {255, 256, 4099, 300001}) {
    SCOPED_TRACE(n);
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i % 97) - 48.5;
    const Tensor x = loom::tensor(v).to(loom::kFloat).reshape({1, n, 1});
    V want(v.size());
    for (size_t i = 0; i < v.size(); ++i) want[i] = v[i] * 2 - 1;
    EXPECT_TRUE(all_close(x.sum({0}).mul(2).sub(1).reshape({-1}), want, 0, 0));
    EXPECT_TRUE(all_close(x.sum({0, 2}).mul(2).sub(1), want, 0, 0));
  }
}

TEST_P(ReduceTest, IntegerAndBoolSumsAreInt64) {
  Tensor i = loom::tensor({1, 2, 3, 4}, loom::kInt).reshape({2, 2});
  EXPECT_EQ(i.sum().dtype(), loom::kLong);
  EXPECT_EQ(i.sum(0).to_vector<int64_t>(), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(i.sum({}, false, loom::kInt).dtype(), loom::kInt);
  Tensor b = loom::tensor({true, false, true});
  EXPECT_EQ(b.sum().dtype(), loom::kLong);
  EXPECT_EQ(b.sum().item<int64_t>(), 2);
  EXPECT_EQ(i.prod().dtype(), loom::kLong);
  EXPECT_EQ(i.prod().item<int64_t>(), 24);
  EXPECT_EQ(b.prod().item<int64_t>(), 0);
  // int64 sums are exact beyond float precision.
  const int64_t big = (int64_t{1} << 53) + 1;
  EXPECT_EQ(loom::tensor({big, int64_t{1}}).sum().item<int64_t>(), big + 1);
}

TEST_P(ReduceTest, MeanAndProd) {
  V m = reduce3(2, 0, plus);
  for (double& v : m) v /= 3;
  EXPECT_TRUE(all_close(x.mean(1), m, 1e-15));
  EXPECT_DOUBLE_EQ(x.mean().item<double>(), reduce3(7, 0, plus)[0] / 24);
  EXPECT_EQ(sizes_of(loom::mean(x, {-1}, true)), (Shape{2, 3, 1}));
  EXPECT_THROW(loom::tensor({1, 2}).mean(), loom::Error);
  Tensor p = loom::tensor({1.5f, 2.f, -3.f, 4.f}).reshape({2, 2});
  EXPECT_EQ(p.prod().item<float>(), -36.f);
  EXPECT_EQ(p.prod(1).to_vector<float>(), (std::vector<float>{3.f, -12.f}));
  EXPECT_EQ(sizes_of(p.prod(0, true)), (Shape{1, 2}));
}

TEST_P(ReduceTest, MaxMinWithValuesAndIndices) {
  Tensor t = loom::tensor({3.f, 7.f, 7.f, -1.f, 0.f, -5.f, 2.f, -5.f}).reshape({2, 4});
  auto [mx, ix] = t.max(1);
  EXPECT_EQ(mx.to_vector<float>(), (std::vector<float>{7.f, 2.f}));
  EXPECT_EQ(ix.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));  // the first of tied maxima
  EXPECT_EQ(ix.dtype(), loom::kLong);
  auto [mn, in] = t.min(-1, true);
  EXPECT_EQ(sizes_of(mn), (Shape{2, 1}));
  EXPECT_EQ(mn.to_vector<float>(), (std::vector<float>{-1.f, -5.f}));
  EXPECT_EQ(in.to_vector<int64_t>(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(t.max().item<float>(), 7.f);
  EXPECT_EQ(t.min().item<float>(), -5.f);
  EXPECT_EQ(t.amax(0).to_vector<float>(), (std::vector<float>{3.f, 7.f, 7.f, -1.f}));
  EXPECT_EQ(t.amin({0, 1}).item<float>(), -5.f);
  EXPECT_EQ(sizes_of(t.amax({}, true)), (Shape{1, 1}));
  // The 3-D case against plain loops.
  EXPECT_EQ(x.amax({0, 2}).to_vector<double>(), reduce3(5, -kInf, [](double a, double b) { return std::max(a, b); }));
  EXPECT_EQ(x.amin(1).to_vector<double>(), reduce3(2, kInf, [](double a, double b) { return std::min(a, b); }));
  // Bool: max works, argmax does not (as in PyTorch).
  Tensor b = loom::tensor({false, true, true});
  EXPECT_EQ(b.max().item<bool>(), true);
  EXPECT_EQ(std::get<1>(b.max(0)).item<int64_t>(), 1);
  EXPECT_THROW(b.argmax(), loom::Error);
}

TEST_P(ReduceTest, ArgmaxArgmin) {
  Tensor t = loom::tensor({3, 9, 9, 2, 8, 1}).reshape({2, 3});
  EXPECT_EQ(t.argmax().item<int64_t>(), 1);  // over the flattened tensor, first of ties
  EXPECT_EQ(t.argmin().item<int64_t>(), 5);
  EXPECT_EQ(t.argmax(0).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(t.argmin(-1).to_vector<int64_t>(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(sizes_of(t.argmax(std::nullopt, true)), (Shape{1, 1}));
  EXPECT_EQ(sizes_of(t.argmax(1, true)), (Shape{2, 1}));
  EXPECT_EQ(loom::argmax(loom::scalar_tensor(5.0)).item<int64_t>(), 0);
}

TEST_P(ReduceTest, NaNWinsMaxMinAndItsIndex) {
  Tensor t = loom::tensor({1.0, kNaN, 3.0, 4.0, 5.0, 6.0, 7.0, kNaN, kNaN}, loom::kDouble).reshape({3, 3});
  auto [mx, ix] = t.max(1);
  EXPECT_TRUE(all_close(mx, {kNaN, 6.0, kNaN}));
  EXPECT_EQ(ix.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 1}));  // the first NaN
  auto [mn, in] = t.min(1);
  EXPECT_TRUE(all_close(mn, {kNaN, 4.0, kNaN}));
  EXPECT_EQ(in.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_TRUE(std::isnan(t.max().item<double>()));
  EXPECT_EQ(t.argmax().item<int64_t>(), 1);
}

TEST_P(ReduceTest, VarAndStdUnbiasedAndBiased) {
  V mean = reduce3(4, 0, plus);
  for (double& v : mean) v /= 4;
  V ss(6, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) ss[i * 3 + j] += std::pow(x3(i, j, k) - mean[i * 3 + j], 2);
  V unbiased, biased, sd;
  for (double s : ss) {
    unbiased.push_back(s / 3);
    biased.push_back(s / 4);
    sd.push_back(std::sqrt(s / 3));
  }
  EXPECT_TRUE(all_close(x.var({2}, true), unbiased, 1e-12));
  EXPECT_TRUE(all_close(x.var({-1}, false), biased, 1e-12));
  EXPECT_TRUE(all_close(x.std({2}, true), sd, 1e-12));
  EXPECT_EQ(sizes_of(x.var({2}, true, true)), (Shape{2, 3, 1}));
  // An int or a braced list is a dim, as in Python, never the `unbiased`
  // flag (a plain bool overload would take var(2) and var({2}) as
  // var(false) over every element).
  EXPECT_TRUE(all_close(x.var(2), unbiased, 1e-12));
  EXPECT_TRUE(all_close(x.var({2}), unbiased, 1e-12));
  EXPECT_TRUE(all_close(x.std(2), sd, 1e-12));
  EXPECT_EQ(sizes_of(x.var(0)), (Shape{3, 4}));
  EXPECT_EQ(sizes_of(x.std({0})), (Shape{3, 4}));
  // Over everything: 24 values 12i + 4j + k - 5 are -5 .. 18, a shifted 0 .. 23.
  double all_ss = 0;
  for (int v = 0; v < 24; ++v) all_ss += (v - 11.5) * (v - 11.5);
  EXPECT_NEAR(x.var().item<double>(), all_ss / 23, 1e-12);
  EXPECT_NEAR(x.std(false).item<double>(), std::sqrt(all_ss / 24), 1e-12);
  EXPECT_NEAR(x.std({0, 1, 2}, true).item<double>(), std::sqrt(all_ss / 23), 1e-12);
  // One element: the unbiased estimate divides by zero.
  EXPECT_TRUE(std::isnan(loom::tensor({3.f}).var().item<float>()));
  EXPECT_EQ(loom::tensor({3.f}).var(false).item<float>(), 0.f);
  EXPECT_TRUE(std::isnan(loom::zeros({0}).var().item<float>()));
  EXPECT_THROW(loom::tensor({1, 2}).var(), loom::Error);
}

TEST_P(ReduceTest, LogsumexpIsStableAndHandlesInfiniteRows) {
  Tensor t = loom::tensor({-kInf, -kInf, 1.0, 2.0, kInf, 1.0, 1000.0, 1000.0}, loom::kDouble).reshape({4, 2});
  V want = {-kInf, std::log(std::exp(1.0) + std::exp(2.0)), kInf, 1000 + std::log(2.0)};
  EXPECT_TRUE(all_close(t.logsumexp(1), want, 1e-14));
  EXPECT_EQ(sizes_of(t.logsumexp({1}, true)), (Shape{4, 1}));
  // Over a dims list, against the naive formula (values small enough for it).
  V naive = reduce3(3, 0, [](double a, double b) { return a + std::exp(b / 8); });
  for (double& v : naive) v = std::log(v);
  EXPECT_TRUE(all_close(loom::logsumexp(x / 8, {0, 1}), naive, 1e-12));
  // Integers compute in float32.
  Tensor i = loom::logsumexp(loom::tensor({1, 2, 3}), {0});
  EXPECT_EQ(i.dtype(), loom::kFloat);
  EXPECT_NEAR(i.item<float>(), std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), 1e-5);
}

TEST_P(ReduceTest, AllAny) {
  Tensor t = loom::tensor({0.5f, 0.f, 2.f, 1.f}).reshape({2, 2});
  EXPECT_EQ(t.all().dtype(), loom::kBool);
  EXPECT_FALSE(t.all().item<bool>());
  EXPECT_TRUE(t.any().item<bool>());
  EXPECT_EQ(t.all(1).to_vector<bool>(), (std::vector<bool>{false, true}));
  EXPECT_EQ(t.any(0, true).to_vector<bool>(), (std::vector<bool>{true, true}));
  EXPECT_EQ(sizes_of(t.any(0, true)), (Shape{1, 2}));
  EXPECT_FALSE(loom::tensor({3, 0}, loom::kInt).all().item<bool>());
  EXPECT_TRUE(loom::zeros({0}).all().item<bool>());  // empty: all is true, any is false
  EXPECT_FALSE(loom::zeros({0}).any().item<bool>());
}

TEST_P(ReduceTest, Norms) {
  Tensor v = loom::tensor({1.f, -2.f, 3.f, 0.f});
  EXPECT_FLOAT_EQ(v.norm(1).item<float>(), 6.f);
  EXPECT_FLOAT_EQ(v.norm().item<float>(), std::sqrt(14.f));
  EXPECT_FLOAT_EQ(v.norm(INFINITY).item<float>(), 3.f);
  EXPECT_FLOAT_EQ(v.norm(-INFINITY).item<float>(), 0.f);
  EXPECT_FLOAT_EQ(v.norm(0).item<float>(), 3.f);  // the count of nonzeros
  EXPECT_NEAR(v.norm(3).item<float>(), std::cbrt(1.0 + 8 + 27), 1e-5);
  V rows;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += x3(i, j, k) * x3(i, j, k);
      rows.push_back(std::sqrt(s));
    }
  EXPECT_TRUE(all_close(x.norm(2, {-1}), rows, 1e-12));
  EXPECT_EQ(sizes_of(x.norm(1, {0, 2}, true)), (Shape{1, 3, 1}));
  EXPECT_EQ(x.norm(1, {0, 2}).to_vector<double>(), reduce3(5, 0, [](double a, double b) { return a + std::fabs(b); }));
  EXPECT_THROW(loom::tensor({1, 2}).norm(), loom::Error);
}

TEST_P(ReduceTest, EmptyReductions) {
  EXPECT_EQ(loom::zeros({0}).sum().item<float>(), 0.f);
  EXPECT_EQ(loom::zeros({0}).prod().item<float>(), 1.f);
  EXPECT_TRUE(std::isnan(loom::zeros({0}).mean().item<float>()));
  EXPECT_EQ(loom::zeros({0}).logsumexp({0}).item<float>(), -INFINITY);
  EXPECT_EQ(loom::zeros({0}).norm().item<float>(), 0.f);
  EXPECT_THROW(loom::zeros({0}).max(), loom::Error);
  EXPECT_THROW(loom::zeros({0}).argmax(), loom::Error);
  EXPECT_THROW(loom::zeros({2, 0}).amax(1), loom::Error);
  // Reducing a non-empty dim of an empty tensor is fine: the result is empty.
  EXPECT_EQ(sizes_of(loom::zeros({2, 0}).amax(0)), Shape{0});
  EXPECT_EQ(sizes_of(loom::zeros({2, 0}).sum(1)), Shape{2});
  EXPECT_EQ(loom::zeros({2, 0}).sum(1).to_vector<float>(), (std::vector<float>{0.f, 0.f}));
}

TEST_P(ReduceTest, ReductionsOfNonContiguousViews) {
  Tensor m = loom::arange(12, loom::kDouble).reshape({3, 4});  // m[i][j] = 4i + j
  Tensor t = m.t();
  EXPECT_EQ(t.sum(1).to_vector<double>(), (V{12, 15, 18, 21}));  // column sums of m
  EXPECT_EQ(std::get<1>(t.max(1)).to_vector<int64_t>(), (std::vector<int64_t>{2, 2, 2, 2}));
  Tensor stepped = m.slice(1, 1, std::nullopt, 2);  // columns 1 and 3
  EXPECT_EQ(stepped.sum(0).to_vector<double>(), (V{1 + 5 + 9, 3 + 7 + 11}));
  EXPECT_EQ(m.select(1, 2).prod().item<double>(), 2.0 * 6 * 10);
  EXPECT_EQ(loom::ones({3, 1}).expand({3, 4}).sum().item<float>(), 12.f);
  Tensor p = x.permute({2, 0, 1});  // [4, 2, 3]
  EXPECT_EQ(p.sum({1, 2}).to_vector<double>(), reduce3(3, 0, plus));
  EXPECT_DOUBLE_EQ(p.var({0}, false).mean().item<double>(), 1.25);  // var of 4 consecutive values
}

// Row statistics the caller keeps (a layer norm's mean and variance) are
// graph outputs as well as inputs of the normalization; the llvm backend
// stores them from the normalizing kernel itself, once per row.
TEST_P(ReduceTest, RowStatisticsKeptBesideTheirConsumer) {
  Tensor mu = x.mean({-1}, true);                           // [2, 3, 1]
  Tensor var = (x - mu).pow(2).mean({-1}, true);
  Tensor y = (x - mu) * loom::rsqrt(var + 1e-5);
  Tensor head = x.select(0, 0).sum({-1}, true);             // [3, 1]: one value for two rows of x
  Tensor z = x / head;
  Tensor colmax = x.amax({1}, true);                        // [2, 1, 4]: not over x's last dim
  Tensor w = x - colmax;
  loom::sync();
  V m = reduce3(4, 0, plus), v(6, 0), want_y, want_z, want_w;
  for (double& e : m) e /= 4;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) v[i * 3 + j] += std::pow(x3(i, j, k) - m[i * 3 + j], 2) / 4;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        want_y.push_back((x3(i, j, k) - m[i * 3 + j]) / std::sqrt(v[i * 3 + j] + 1e-5));
        want_z.push_back(x3(i, j, k) / (x3(0, j, 0) + x3(0, j, 1) + x3(0, j, 2) + x3(0, j, 3)));
        want_w.push_back(x3(i, j, k) - x3(i, 2, k));  // rows grow with j: the max is at j = 2
      }
  EXPECT_EQ(sizes_of(mu), (Shape{2, 3, 1}));
  EXPECT_TRUE(all_close(mu, m, 1e-12));
  EXPECT_TRUE(all_close(var, v, 1e-12));
  EXPECT_TRUE(all_close(y, want_y, 1e-9));
  EXPECT_EQ(sizes_of(head), (Shape{3, 1}));
  EXPECT_TRUE(all_close(z, want_z, 1e-12));
  EXPECT_TRUE(all_close(w, want_w, 1e-12));
  EXPECT_TRUE(all_close(colmax, V{3, 4, 5, 6, 15, 16, 17, 18}, 0));
}

// Reductions over rows that lie across memory, wide enough that the llvm
// backend reduces many columns at once (jit/llvm/codegen.h: column_lanes),
// with a count of columns no multiple of its lanes: each against a sum,
// max or count computed here in double.
TEST_P(ReduceTest, ColumnReductionsOfWideTensors) {
  const int64_t R = 37, C = 203;
  Tensor a = loom::arange(R * C, loom::kDouble).reshape({R, C}).remainder(97);  // a[i][j] = (i*C + j) % 97
  auto at = [&](int64_t i, int64_t j) { return double((i * C + j) % 97); };
  V sum(C, 0), mx(C, -1);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) sum[j] += at(i, j), mx[j] = std::max(mx[j], at(i, j));
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble, loom::kInt, loom::kBFloat16}) {
    SCOPED_TRACE(std::string(loom::to_string(dt)));
    Tensor t = a.to(dt);
    if (dt != loom::kBFloat16) EXPECT_EQ(t.sum({0}).to(loom::kDouble).to_vector<double>(), sum);  // exact: integers
    EXPECT_EQ(t.amax({0}).to(loom::kDouble).to_vector<double>(), mx);
  }
  // mean over the middle dim of a 3-d tensor, and a NaN that must win its column's max.
  Tensor b = a.to(loom::kFloat).reshape({1, R, C}).expand({2, R, C}).contiguous();
  V mean(2 * C);
  for (int64_t j = 0; j < 2 * C; ++j) mean[j] = sum[j % C] / R;
  const std::vector<float> got = b.mean({1}).to_vector<float>();
  for (int64_t j = 0; j < 2 * C; ++j) EXPECT_NEAR(got[j], mean[j], 1e-4) << "column " << j;
  Tensor n = a.to(loom::kFloat).clone();
  n.select(0, 5).select(0, 100).fill_(std::numeric_limits<double>::quiet_NaN());
  const std::vector<float> m = n.amax({0}).to_vector<float>();
  for (int64_t j = 0; j < C; ++j)
    if (j == 100) EXPECT_TRUE(std::isnan(m[j]));
    else EXPECT_EQ(m[j], mx[j]) << "column " << j;
}

// Kernels of several phases whose rows lie across memory: var(0) (two
// reductions, then a store per column), softmax and log_softmax over dim 0
// (two reductions, then a store per element), var over the middle dim.
// 300 columns: the GPU's column groups need 256 outputs, the CPU's run 64
// at a time and the last 44 one by one.
TEST_P(ReduceTest, SeveralPhasesOverColumns) {
  const int64_t R = 37, C = 300;
  Tensor a = (loom::arange(R * C, loom::kDouble) * 0.37).sin().mul(3).reshape({R, C});
  const std::vector<double> h = a.to_vector<double>();
  V var(C, 0), sm(R * C), lsm(R * C), var3(2 * C);
  for (int64_t j = 0; j < C; ++j) {
    double mean = 0, mx = -1e300, se = 0;
    for (int64_t i = 0; i < R; ++i) mean += h[i * C + j] / R, mx = std::max(mx, h[i * C + j]);
    for (int64_t i = 0; i < R; ++i) var[j] += std::pow(h[i * C + j] - mean, 2) / (R - 1), se += std::exp(h[i * C + j] - mx);
    for (int64_t i = 0; i < R; ++i) {
      sm[i * C + j] = std::exp(h[i * C + j] - mx) / se;
      lsm[i * C + j] = h[i * C + j] - mx - std::log(se);
    }
    var3[j] = var3[C + j] = var[j];
  }
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble}) {
    SCOPED_TRACE(std::string(loom::to_string(dt)));
    const double tol = dt == loom::kFloat ? 1e-5 : 1e-12;
    Tensor t = a.to(dt);
    EXPECT_TRUE(all_close(t.var(0), var, tol, tol));
    EXPECT_TRUE(all_close(loom::softmax(t, 0), sm, tol, tol));
    EXPECT_TRUE(all_close(loom::log_softmax(t, 0), lsm, tol, tol));
    EXPECT_TRUE(all_close(t.reshape({1, R, C}).expand({2, R, C}).contiguous().var(1), var3, tol, tol));
  }
}

// Whole-tensor and few-row reductions of large tensors (split into partials
// and their fold by llvm and cuda, ir/lower/split.cpp): integer values, so every
// float sum is exact whatever the order; a NaN must survive the fold; a
// prime length is not split and must agree too.
// Argmax and argmin of few long rows (split into parts on llvm and cuda,
// ir/lower/split.cpp): the first occurrence wins across parts, a NaN wins over
// every number (PyTorch's rule), and a per-row epilogue still applies.
// A bfloat16 sum of a whole tensor, split into parts on llvm and cuda:
// the parts are float32 and only the total is rounded, once, as unsplit
// (integer values: every float32 partial sum is exact).
TEST_P(ReduceTest, LargeBFloat16SumsRoundOnce) {
  const int64_t N = 3 << 16;
  Tensor a = loom::arange(N, loom::kDouble).remainder(97).to(loom::kBFloat16);
  double sum = 0, half = 0;
  for (int64_t i = 0; i < N; ++i) sum += double(i % 97), half += i < N / 2 ? double(i % 97) : 0;
  const auto bf16 = [](double v) { return double(float(loom::BFloat16(float(v)))); };
  EXPECT_EQ(a.sum().to(loom::kDouble).item<double>(), bf16(sum));
  EXPECT_EQ(a.reshape({2, N / 2}).sum({1}).to(loom::kDouble).to_vector<double>()[0], bf16(half));
  // The mean divides the once-rounded sum, in bfloat16.
  EXPECT_EQ(a.mean().to(loom::kDouble).item<double>(), bf16(bf16(sum) / double(N)));
  EXPECT_EQ(a.amax().to(loom::kDouble).item<double>(), 96);
}

// A long row whose length has no divisor near the target (a prime): its
// parts leave a tail, reduced as one more part (ir/lower/split.cpp). Integer
// values below 7: every float32 partial sum is exact.
TEST_P(ReduceTest, LongPrimeRowsSplitWithATail) {
  const int64_t N = 1000003;  // prime
  Tensor a = loom::arange(N, loom::kDouble).remainder(7).to(loom::kFloat).clone();
  a.select(0, N - 2).fill_(9.0);  // the max, and the min below, in the tail
  a.select(0, N - 3).fill_(-1.0);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < N; ++i) sum += i == N - 2 ? 9.0 : i == N - 3 ? -1.0 : double(i % 7);
  const double mean = sum / double(N);
  for (int64_t i = 0; i < N; ++i) {
    const double v = i == N - 2 ? 9.0 : i == N - 3 ? -1.0 : double(i % 7);
    sq += (v - mean) * (v - mean);
  }
  EXPECT_EQ(a.sum().item<float>(), sum);
  EXPECT_EQ(a.amax().item<float>(), 9.0f);
  EXPECT_EQ(a.argmax().item<int64_t>(), N - 2);
  EXPECT_EQ(a.argmin().item<int64_t>(), N - 3);
  EXPECT_NEAR(a.var().item<float>(), sq / double(N - 1), 1e-4);
  EXPECT_NEAR(loom::softmax(a, 0).sum().item<float>(), 1.0, 1e-4);
  const auto bf16 = [](double v) { return double(float(loom::BFloat16(float(v)))); };
  EXPECT_EQ(a.to(loom::kBFloat16).sum().to(loom::kDouble).item<double>(), bf16(sum));
  // Two rows of the prime length.
  Tensor two = loom::stack({a, a * 2});
  EXPECT_EQ(two.sum({1}).to_vector<float>(), (std::vector<float>{float(sum), float(2 * sum)}));
  EXPECT_EQ(two.argmax(1).to_vector<int64_t>(), (std::vector<int64_t>{N - 2, N - 2}));
  // 64 columns of a prime number of rows (on a GPU: parts of rows and a
  // tail, each still reading adjacent columns side by side).
  const int64_t R = 8191;
  std::vector<float> col(64, 0);
  for (int64_t i = 0; i < R * 64; ++i) col[i % 64] += float(i % 7);
  EXPECT_EQ(a.slice(0, 0, R * 64).reshape({R, 64}).sum({0}).to_vector<float>(), col);
}

// Argmax/argmin along long rows (the llvm backend keeps a best value and
// position per vector lane and folds the lanes after the row; the GPU reads
// 4 lanes a step): the first occurrence wins whichever lanes, steps or tail
// hold the ties, and a NaN wins over every number.
TEST_P(ReduceTest, ArgOfLongRowsTakesTheFirstOccurrenceInAnyLane) {
  for (int64_t L : {int64_t{1031}, int64_t{4096}}) {
    std::vector<double> v(3 * L);
    for (int64_t i = 0; i < 3 * L; ++i) v[i] = double((i * 7) % 13);
    auto at = [&](int64_t r, int64_t i) -> double& { return v[r * L + i]; };
    at(0, L - 1) = 50, at(0, 5) = 50;   // the tail's element ties an early lane
    at(1, 10) = 50, at(1, 9) = 50;      // two lanes of one step
    at(2, 3) = 50, at(2, 700) = kNaN, at(2, L - 2) = kNaN;
    for (loom::ScalarType dt : {loom::kFloat, loom::kDouble, loom::kInt}) {
      SCOPED_TRACE(std::string(loom::to_string(dt)) + " L=" + std::to_string(L));
      const bool fp = dt != loom::kInt;
      std::vector<double> w = v;
      if (!fp) w[2 * L + 700] = w[2 * L + L - 2] = 0;
      Tensor x = loom::tensor(w, loom::kDouble).to(dt).reshape({3, L});
      EXPECT_EQ(x.argmax(1).to_vector<int64_t>(), (std::vector<int64_t>{5, 9, fp ? 700 : 3}));
      EXPECT_EQ((-x).argmin(1).to_vector<int64_t>(), (std::vector<int64_t>{5, 9, fp ? 700 : 3}));
    }
  }
}

TEST_P(ReduceTest, LargeArgReductionsOfFewRows) {
  const int64_t N = 3 << 16;
  Tensor a = loom::arange(N, loom::kDouble).remainder(97);  // a[i] = i % 97: max 96 first at 96
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble, loom::kInt}) {
    SCOPED_TRACE(std::string(loom::to_string(dt)));
    Tensor t = a.to(dt);
    EXPECT_EQ(t.argmax().item<int64_t>(), 96);
    EXPECT_EQ(t.argmin().item<int64_t>(), 0);
    Tensor tie = t.clone();  // the same max in an early and a late part
    tie.select(0, 5000).fill_(200);
    tie.select(0, 150000).fill_(200);
    EXPECT_EQ(tie.argmax().item<int64_t>(), 5000);
    tie.select(0, 7000).fill_(-5);
    tie.select(0, 140000).fill_(-5);
    EXPECT_EQ(tie.argmin().item<int64_t>(), 7000);
    // Two rows: each its own first occurrence; an epilogue (+ 1) after the fold.
    const std::vector<int64_t> rows = (tie.reshape({2, N / 2}).argmax(1, true) + 1).to_vector<int64_t>();
    EXPECT_EQ(rows, (std::vector<int64_t>{5001, 150000 - N / 2 + 1}));
  }
  Tensor n = a.to(loom::kFloat).clone();
  n.select(0, 3).fill_(500.0);
  n.select(0, 170000).fill_(std::numeric_limits<double>::quiet_NaN());
  n.select(0, 9000).fill_(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(n.argmax().item<int64_t>(), 9000);
  EXPECT_EQ(n.argmin().item<int64_t>(), 9000);
}

TEST_P(ReduceTest, LargeReductionsOfFewRows) {
  const int64_t N = 3 << 16;
  Tensor a = loom::arange(N, loom::kDouble).remainder(97);  // a[i] = i % 97
  double sum = 0;
  V halves(2, 0);
  for (int64_t i = 0; i < N; ++i) sum += double(i % 97), halves[i / (N / 2)] += double(i % 97);
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble, loom::kInt, loom::kLong}) {
    SCOPED_TRACE(std::string(loom::to_string(dt)));
    Tensor t = a.to(dt);
    EXPECT_EQ(t.sum().to(loom::kDouble).item<double>(), sum);
    EXPECT_EQ(t.amax().to(loom::kDouble).item<double>(), 96);
    EXPECT_EQ(t.amin().to(loom::kDouble).item<double>(), 0);
    EXPECT_EQ(t.reshape({2, N / 2}).sum({1}).to(loom::kDouble).to_vector<double>(), halves);
  }
  EXPECT_NEAR(a.to(loom::kFloat).mean().item<float>(), sum / N, 1e-4);
  EXPECT_TRUE((a > 95).any().item<bool>());
  EXPECT_FALSE((a > 96).any().item<bool>());
  EXPECT_TRUE((a >= 0).all().item<bool>());
  // 16 columns of 8192 rows (split into parts of rows on the GPU).
  Tensor c = a.slice(0, 0, 8192 * 16).reshape({8192, 16}).to(loom::kFloat);
  V col(16, 0);
  for (int64_t i = 0; i < 8192 * 16; ++i) col[i % 16] += double(i % 97);
  EXPECT_EQ(c.sum({0}).to(loom::kDouble).to_vector<double>(), col);
  Tensor n = a.to(loom::kFloat).clone();
  n.select(0, N - 5).fill_(std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(std::isnan(n.amax().item<float>()));
  EXPECT_TRUE(std::isnan(n.sum().item<float>()));
  // Two reduce phases: the mean, then the squared deviations from it (var);
  // the max, then the sum of exp(x - max) (logsumexp).
  double ss = 0, se = 0;
  for (int64_t i = 0; i < N; ++i) ss += std::pow(double(i % 97) - sum / N, 2), se += std::exp(double(i % 97) - 96);
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble}) {
    SCOPED_TRACE(std::string(loom::to_string(dt)));
    const double tol = dt == loom::kFloat ? 1e-5 : 1e-12;
    Tensor t = a.to(dt);
    EXPECT_NEAR(t.var().item<double>(), ss / (N - 1), tol * ss / N);
    EXPECT_NEAR(t.std(false).item<double>(), std::sqrt(ss / N), tol * std::sqrt(ss / N));
    EXPECT_NEAR(t.logsumexp({0}).item<double>(), 96 + std::log(se), tol * 100);
    // Reductions, then a store of every element: softmax and a
    // normalization over the whole tensor.
    const std::vector<double> sm = loom::softmax(t, 0).to(loom::kDouble).to_vector<double>();
    const std::vector<double> z = ((t - t.mean()) / t.std(false)).to(loom::kDouble).to_vector<double>();
    for (int64_t i = 0; i < N; i += 997) {
      const double v = double(i % 97);
      const double tiny = dt == loom::kFloat ? 1e-37 : 1e-300;  // float32 results this small are subnormal
      EXPECT_NEAR(sm[i], std::exp(v - 96) / se, tol * std::exp(v - 96) / se + tiny) << i;
      EXPECT_NEAR(z[i], (v - sum / N) / std::sqrt(ss / N), tol * 10) << i;
    }
  }
  Tensor p = loom::arange(65537, loom::kFloat).remainder(7);  // prime length
  double ps = 0;
  for (int64_t i = 0; i < 65537; ++i) ps += double(i % 7);
  EXPECT_EQ(p.sum().item<float>(), ps);
}

LOOM_INSTANTIATE_BACKENDS(ReduceTest);

}  // namespace
