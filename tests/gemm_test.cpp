// Matrix products as GEMM kernels (ir::Kernel::contraction) with their fused
// epilogues, on every backend, against float64 products computed here.
// Shapes are odd on purpose: 1, 7, 63, 65, 1000 and non-multiples of every
// tile (MR x NR) and block (MC, KC, NC) size, so edge tiles, several K
// blocks (partial sums), the unpacked small-product path and the packed
// path all run. Tolerances grow with K: |error| <= c * K * eps * sum |a||b|.
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace {

using loom::Tensor;
using Shape = std::vector<int64_t>;

class GemmTest : public loom_test::BackendTest {};

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Random normal values (a fixed seed per call site), as a tensor and as
// the doubles it holds (rounded to its dtype).
struct Operand {
  Tensor t;
  std::vector<double> v;
  Shape shape;
};
Operand make(const Shape& shape, loom::ScalarType dt, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd;
  std::vector<double> v(numel(shape));
  for (double& x : v) x = dt == loom::kFloat ? static_cast<double>(static_cast<float>(nd(gen))) : nd(gen);
  return {loom::tensor(v, dt).reshape(shape), v, shape};
}

// A strided operand as a function of its element: (b, i, j) -> value.
using At = std::function<double(int64_t, int64_t, int64_t)>;

// The float64 product and the bound sum_k |a||b| for each element.
struct Expected {
  std::vector<double> value, bound;
};
Expected product(const At& a, const At& b, int64_t B, int64_t M, int64_t N, int64_t K) {
  Expected e{std::vector<double>(B * M * N), std::vector<double>(B * M * N)};
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0, m = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double x = a(bi, i, k) * b(bi, k, j);
          s += x, m += std::abs(x);
        }
        e.value[(bi * M + i) * N + j] = s;
        e.bound[(bi * M + i) * N + j] = m;
      }
  return e;
}
At row_major(const Operand& o) {
  const int64_t r = o.shape[o.shape.size() - 2], c = o.shape.back();
  const bool batched = o.shape.size() == 3 && o.shape[0] > 1;  // [1, r, c]: broadcast over the batch
  return [&o, r, c, batched](int64_t b, int64_t i, int64_t j) { return o.v[((batched ? b : 0) * r + i) * c + j]; };
}

// got vs want with f(product) applied to the expectation, within
// c * K * eps * bound (eps of the product's dtype) plus a relative slack for
// the epilogue's own rounding.
::testing::AssertionResult close(const Tensor& got_t, const Expected& e, int64_t K, loom::ScalarType dt,
                                 const std::function<double(double, int64_t)>& f = nullptr) {
  const std::vector<double> got = got_t.to_vector<double>();
  if (got.size() != e.value.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << e.value.size();
  const double eps = dt == loom::kFloat ? 0x1p-24 : 0x1p-53;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = f ? f(e.value[i], static_cast<int64_t>(i)) : e.value[i];
    // the epilogue's derivative is at most ~1.2 (gelu), so the product's error carries over
    const double tol = 2.0 * (K + 2) * eps * e.bound[i] * 1.2 + 8 * eps * std::abs(want) + 1e-300;
    if (!(std::abs(got[i] - want) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", expected " << want
                                           << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

struct Mnk {
  int64_t m, n, k;
};
// Tiles are 12 x 32 (f32, AVX-512), 12 x 16 (f64), 6 x 16 / 6 x 8 (AVX2);
// KC is 1024 with a 1 MiB L2 (a B strip takes an eighth of it), so K of
// 1100 and 2000 make two K blocks; packing starts where B outgrows half of
// L2 and A is taller than a tile.
const std::vector<Mnk> kShapes = {
    {1, 1, 1},     {1, 64, 64},    {7, 63, 65},    {65, 7, 63},  {63, 65, 1000}, {1000, 33, 17},
    {13, 1000, 7}, {1, 1000, 300}, {257, 513, 300}, {65, 1000, 1000}, {100, 31, 2000}, {200, 300, 1100},
};

TEST_P(GemmTest, OddShapesFloatAndDouble) {
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble})
    for (const Mnk& s : kShapes) {
      Operand a = make({s.m, s.k}, dt, 1), b = make({s.k, s.n}, dt, 2);
      Expected e = product(row_major(a), row_major(b), 1, s.m, s.n, s.k);
      EXPECT_TRUE(close(loom::matmul(a.t, b.t), e, s.k, dt))
          << s.m << "x" << s.k << " @ " << s.k << "x" << s.n << " " << loom::to_string(dt);
    }
}

// A vector times a matrix (M = 1: a control loop's state, a batch-1
// layer) runs its columns two tile widths a call (kGemmWide): a last
// vector cut short in each place of a call's four (float32, 16 lanes; two
// calls for float64's 8), two K blocks (partial sums) and a fused epilogue
// (bias, then ReLU).
TEST_P(GemmTest, SingleRowProductsOfEveryWidth) {
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble})
    for (int64_t n : {1, 17, 33, 64, 65, 97})
      for (int64_t k : {3, 2100}) {
        Operand a = make({1, k}, dt, 31), b = make({k, n}, dt, 32), bias = make({n}, dt, 33);
        Expected e = product(row_major(a), row_major(b), 1, 1, n, k);
        EXPECT_TRUE(close(loom::matmul(a.t, b.t), e, k, dt)) << "1x" << k << " @ " << k << "x" << n << " " << loom::to_string(dt);
        EXPECT_TRUE(close(loom::relu(loom::matmul(a.t, b.t) + bias.t), e, k, dt, [&](double v, int64_t i) {
          const double x = v + bias.v[i];
          return x > 0 ? x : 0;
        })) << "relu(1x" << k << " @ " << k << "x" << n << " + bias) " << loom::to_string(dt);
      }
}

// x.t() @ g (the weight gradient), a @ w.t() (Linear's forward) and both
// transposed: only strides, read by packing.
TEST_P(GemmTest, TransposedOperands) {
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble})
    for (const Mnk& s : {Mnk{65, 63, 7}, Mnk{257, 513, 300}, Mnk{1, 700, 300}, Mnk{130, 20, 900}}) {
      Operand at = make({s.k, s.m}, dt, 3), bt = make({s.n, s.k}, dt, 4);
      Operand a = make({s.m, s.k}, dt, 5), b = make({s.k, s.n}, dt, 6);
      auto A_t = [&](int64_t, int64_t i, int64_t k) { return at.v[k * s.m + i]; };
      auto B_t = [&](int64_t, int64_t k, int64_t j) { return bt.v[j * s.k + k]; };
      EXPECT_TRUE(close(loom::matmul(at.t.t(), b.t), product(A_t, row_major(b), 1, s.m, s.n, s.k), s.k, dt));
      EXPECT_TRUE(close(loom::matmul(a.t, bt.t.t()), product(row_major(a), B_t, 1, s.m, s.n, s.k), s.k, dt));
      EXPECT_TRUE(close(loom::matmul(at.t.t(), bt.t.t()), product(A_t, B_t, 1, s.m, s.n, s.k), s.k, dt));
    }
}

// Packing's register transposes (runtime/cpu/gemm_driver.cpp): rows go 8,
// then 4, then 2, then 1 at a time, and K 8 or 4 at a time with a scalar
// tail; copies along rows go 8 k at a time. M's last panel of 2 or 3 rows
// (MR 6; 8 or 9 with MR 12), N's last strip of 14 or 11 columns (NR 16;
// 14 or 27 with NR 32), and K = 203 (a tail of 3 after 8s and 4s), for
// every layout of A and B, each large enough to be packed.
TEST_P(GemmTest, PackedPanelsOfEveryEdgeWidth) {
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble})
    for (const Mnk& s : {Mnk{68, 814, 203}, Mnk{141, 827, 203}}) {
      Operand a = make({s.m, s.k}, dt, 21), b = make({s.k, s.n}, dt, 22);
      Operand at = make({s.k, s.m}, dt, 23), bt = make({s.n, s.k}, dt, 24);
      auto A_t = [&](int64_t, int64_t i, int64_t k) { return at.v[k * s.m + i]; };
      auto B_t = [&](int64_t, int64_t k, int64_t j) { return bt.v[j * s.k + k]; };
      const std::string name = std::to_string(s.m) + "x" + std::to_string(s.n) + " " + std::string(loom::to_string(dt));
      EXPECT_TRUE(close(loom::matmul(a.t, b.t), product(row_major(a), row_major(b), 1, s.m, s.n, s.k), s.k, dt))
          << name;
      EXPECT_TRUE(close(loom::matmul(at.t.t(), b.t), product(A_t, row_major(b), 1, s.m, s.n, s.k), s.k, dt)) << name;
      EXPECT_TRUE(close(loom::matmul(a.t, bt.t.t()), product(row_major(a), B_t, 1, s.m, s.n, s.k), s.k, dt)) << name;
      EXPECT_TRUE(close(loom::matmul(at.t.t(), bt.t.t()), product(A_t, B_t, 1, s.m, s.n, s.k), s.k, dt)) << name;
    }
}

// Slices with steps in both dims and an offset.
TEST_P(GemmTest, SteppedSlices) {
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble}) {
    const int64_t M = 70, K = 610, N = 300;
    Operand big_a = make({2 * M + 1, 2 * K + 3}, dt, 7), big_b = make({3 * K + 2, N + 5}, dt, 8);
    Tensor a = big_a.t.slice(0, 1, std::nullopt, 2).slice(1, 3, 3 + 2 * K, 2);  // [M, K]
    Tensor b = big_b.t.slice(0, 2, std::nullopt, 3).slice(1, 5);                // [K, N]
    ASSERT_EQ(loom_test::sizes_of(a), (Shape{M, K}));
    ASSERT_EQ(loom_test::sizes_of(b), (Shape{K, N}));
    auto A = [&](int64_t, int64_t i, int64_t k) { return big_a.v[(1 + 2 * i) * (2 * K + 3) + 3 + 2 * k]; };
    auto B = [&](int64_t, int64_t k, int64_t j) { return big_b.v[(2 + 3 * k) * (N + 5) + 5 + j]; };
    EXPECT_TRUE(close(loom::matmul(a, b), product(A, B, 1, M, N, K), K, dt));
  }
}

// [B,M,K] x [B,K,N]: many small products, a few large ones, and a batch
// broadcast (a [K,N] matrix against every batch: batch stride 0).
TEST_P(GemmTest, Batched) {
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble}) {
    for (auto [B, s] : {std::pair<int64_t, Mnk>{64, {15, 17, 19}}, {3, {130, 300, 600}}, {5, {7, 40, 1}}}) {
      Operand a = make({B, s.m, s.k}, dt, 9), b = make({B, s.k, s.n}, dt, 10);
      EXPECT_TRUE(close(loom::matmul(a.t, b.t), product(row_major(a), row_major(b), B, s.m, s.n, s.k), s.k, dt));
    }
    const int64_t B = 4, M = 33, K = 700, N = 260;
    Operand a = make({B, M, K}, dt, 11), w = make({K, N}, dt, 12);
    EXPECT_TRUE(close(loom::matmul(a.t, w.t), product(row_major(a), row_major(w), B, M, N, K), K, dt));
    Operand x = make({1, M, K}, dt, 13);
    Tensor xe = x.t.expand({B, M, K});
    Operand wb = make({B, K, N}, dt, 14);
    EXPECT_TRUE(close(loom::matmul(xe, wb.t), product(row_major(x), row_major(wb), B, M, N, K), K, dt));
  }
}

// x W^T with fewer rows than a tile (a Linear layer at batch 1) or fewer
// columns (a classifier's logits): A and B both contiguous along K, each
// element a dot product (gemm_dot_product). K with a tail shorter than a
// vector, with single vectors after the unrolled groups, and longer than KC
// (several K blocks); N leaving 0-3 columns after the groups of 4, a batch
// with a shared weight, A with a fused producer, a fused bias and ReLU.
TEST_P(GemmTest, ShortProductsWithATransposedWeight) {
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble})
    for (const Mnk& s : {Mnk{1, 3, 5}, Mnk{2, 33, 63}, Mnk{5, 100, 1100}, Mnk{7, 10, 1000}, Mnk{100, 6, 41},
                         Mnk{13, 15, 2100}}) {
      if (dt == loom::kDouble && s.m != 2) continue;  // compile time: float64 on one shape
      Operand a = make({s.m, s.k}, dt, 40), w = make({s.n, s.k}, dt, 41), bias = make({s.n}, dt, 42);
      auto W_t = [&](int64_t, int64_t k, int64_t j) { return w.v[j * s.k + k]; };
      const Expected e = product(row_major(a), W_t, 1, s.m, s.n, s.k);
      const std::string what = std::to_string(s.m) + "x" + std::to_string(s.k) + " @ (" + std::to_string(s.n) + "x" +
                               std::to_string(s.k) + ")^T " + std::string(loom::to_string(dt));
      EXPECT_TRUE(close(loom::matmul(a.t, w.t.t()), e, s.k, dt)) << what;
      EXPECT_TRUE(close(loom::relu(loom::linear(a.t, w.t, bias.t)), e, s.k, dt, [&](double v, int64_t i) {
        const double y = v + bias.v[i % s.n];
        return y > 0 ? y : 0;
      })) << what;
      // A computed in the same graph (a fused producer of the operand): 2a
      auto A2 = [&](int64_t, int64_t i, int64_t k) { return 2 * a.v[i * s.k + k]; };
      EXPECT_TRUE(close(loom::matmul(a.t * 2.0, w.t.t()), product(A2, W_t, 1, s.m, s.n, s.k), s.k, dt)) << what;
    }
  // A batch of states against one weight (broadcast) and against one each.
  for (loom::ScalarType dt : {loom::kFloat}) {
    const int64_t B = 3, M = 1, K = 37, N = 21;
    Operand x = make({B, M, K}, dt, 43), w = make({1, N, K}, dt, 44), wb = make({B, N, K}, dt, 45);
    auto W_t = [&](int64_t, int64_t k, int64_t j) { return w.v[j * K + k]; };
    auto Wb_t = [&](int64_t b, int64_t k, int64_t j) { return wb.v[(b * N + j) * K + k]; };
    EXPECT_TRUE(close(loom::matmul(x.t, w.t.transpose(1, 2)), product(row_major(x), W_t, B, M, N, K), K, dt));
    EXPECT_TRUE(close(loom::matmul(x.t, wb.t.transpose(1, 2)), product(row_major(x), Wb_t, B, M, N, K), K, dt));
  }
}

double gelu(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }

// Epilogues fused into the product's store, with K deep enough for several
// K blocks (partial sums kept between them).
TEST_P(GemmTest, FusedEpilogues) {
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble})
    for (const Mnk& s : {Mnk{7, 65, 63}, Mnk{257, 513, 1000}}) {
      Operand a = make({s.m, s.k}, dt, 15), b = make({s.k, s.n}, dt, 16);
      Operand bias = make({s.n}, dt, 17), res = make({s.m, s.n}, dt, 18);
      Expected e = product(row_major(a), row_major(b), 1, s.m, s.n, s.k);
      auto col = [&](int64_t i) { return bias.v[i % s.n]; };
      Tensor p = loom::matmul(a.t, b.t);
      EXPECT_TRUE(close(loom::gelu(p + bias.t), e, s.k, dt, [&](double v, int64_t i) { return gelu(v + col(i)); }));
      EXPECT_TRUE(close(loom::relu(loom::matmul(a.t, b.t)), e, s.k, dt, [](double v, int64_t) { return v > 0 ? v : 0; }));
      EXPECT_TRUE(close(loom::matmul(a.t, b.t) + res.t, e, s.k, dt, [&](double v, int64_t i) { return v + res.v[i]; }));
      EXPECT_TRUE(close(loom::matmul(a.t, b.t) * 0.125, e, s.k, dt, [](double v, int64_t) { return v * 0.125; }));
      EXPECT_TRUE(close(loom::linear(a.t, b.t.t(), bias.t), e, s.k, dt, [&](double v, int64_t i) { return v + col(i); }));
      // cast to double: the sums stay in the product's dtype
      Tensor d = loom::matmul(a.t, b.t).to(loom::kDouble);
      EXPECT_EQ(d.dtype(), loom::kDouble);
      EXPECT_TRUE(close(d, e, s.k, dt));
      // the product kept as an output and consumed in the same sync
      Tensor h = loom::matmul(a.t, b.t);
      Tensor r = loom::relu(h) + bias.t;
      loom::sync();
      EXPECT_TRUE(close(h, e, s.k, dt));
      EXPECT_TRUE(close(r, e, s.k, dt, [&](double v, int64_t i) { return (v > 0 ? v : 0) + col(i); }));
    }
}

// Cheap pointwise producers of an operand (ir::Contraction::a_value) are
// applied as the GEMM reads it: on A, on B, on both, through a transposed
// view, a chain that maps 0 to 1 (padding must not leak into the sums),
// and a producer another kernel reads too.
TEST_P(GemmTest, FusedOperandProducers) {
  // The small product (unpacked when not fused), edge tiles, and several
  // K blocks and packed panels; float64 on one shape.
  for (const Mnk& s : {Mnk{1, 64, 64}, Mnk{7, 65, 63}, Mnk{257, 513, 1100}})
    for (loom::ScalarType dt : {loom::kFloat, loom::kDouble}) {
      if (dt == loom::kDouble && s.m != 7) continue;
      Operand a = make({s.m, s.k}, dt, 31), b = make({s.k, s.n}, dt, 32), at = make({s.k, s.m}, dt, 33);
      auto round = [dt](double v) { return dt == loom::kFloat ? static_cast<double>(static_cast<float>(v)) : v; };
      auto with = [](const Operand& o, std::function<double(double)> f, bool transposed = false) -> At {
        const int64_t c = o.shape[1];
        return [&o, f, c, transposed](int64_t, int64_t i, int64_t j) { return f(transposed ? o.v[j * c + i] : o.v[i * c + j]); };
      };
      auto relu = [](double v) { return v > 0 ? v : 0.0; };
      auto half = [](double v) { return v * 0.5; };
      auto clamp = [](double v) { return std::min(std::max(v, -0.5), 0.5); };
      auto neg = [](double v) { return -v; };
      auto affine = [&](double v) { return round(round(v * 2) + 1); };
      // Each product in a statement of its own: the producers' tensors are
      // gone by the sync (a live one would be an output, stored anyway).
      Tensor y1 = loom::matmul(loom::relu(a.t), b.t);
      Tensor y2 = loom::matmul(a.t, b.t * 0.5);
      Tensor y3 = loom::matmul(loom::clamp(a.t, -0.5, 0.5), -b.t) + 1.0;
      Tensor y4 = loom::matmul(a.t * 2 + 1, b.t);
      Tensor y5 = loom::matmul(loom::relu(at.t.t()), b.t);
      EXPECT_TRUE(close(y1, product(with(a, relu), row_major(b), 1, s.m, s.n, s.k), s.k, dt))
          << "relu(A) " << s.m << "x" << s.n << "x" << s.k;
      EXPECT_TRUE(close(y2, product(row_major(a), with(b, half), 1, s.m, s.n, s.k), s.k, dt)) << "B * 0.5";
      EXPECT_TRUE(close(y3, product(with(a, clamp), with(b, neg), 1, s.m, s.n, s.k), s.k, dt,
                        [](double v, int64_t) { return v + 1; }))
          << "both operands";
      EXPECT_TRUE(close(y4, product(with(a, affine), row_major(b), 1, s.m, s.n, s.k), s.k, dt)) << "A * 2 + 1";
      EXPECT_TRUE(close(y5, product(with(at, relu, true), row_major(b), 1, s.m, s.n, s.k), s.k, dt))
          << "relu(A viewed transposed)";
      Tensor h = loom::relu(a.t);
      Tensor y = loom::matmul(h, b.t);
      Tensor z = h * 3.0;
      loom::sync();
      EXPECT_TRUE(close(y, product(with(a, relu), row_major(b), 1, s.m, s.n, s.k), s.k, dt)) << "shared producer";
      const std::vector<double> zv = z.to_vector<double>();
      for (size_t i = 0; i < zv.size(); ++i) ASSERT_EQ(zv[i], round(relu(a.v[i]) * 3)) << i;
    }
  // Batched, the producer on B (each product's panels prepared on their own).
  const int64_t B = 3, M = 130, K = 300, N = 70;
  Operand a = make({B, M, K}, loom::kFloat, 34), b = make({B, K, N}, loom::kFloat, 35);
  Tensor y = loom::matmul(a.t, loom::relu(b.t));
  const At rb = [&](int64_t bi, int64_t i, int64_t j) { return std::max(b.v[(bi * K + i) * N + j], 0.0); };
  EXPECT_TRUE(close(y, product(row_major(a), rb, B, M, N, K), K, loom::kFloat)) << "batched relu(B)";
}

// ReLU(x) @ W + b is one kernel on the llvm backend: the producer is applied
// as the product packs x, not stored first.
TEST_P(GemmTest, FusedOperandProducerIsOneKernel) {
  if (GetParam() != "llvm") GTEST_SKIP() << "a kernel count of the llvm backend";
  Tensor x = loom::randn({64, 96}), w = loom::randn({96, 80}), b = loom::randn({80});
  loom::sync();
  const int64_t before = loom::metrics().kernels_launched;
  Tensor y = loom::matmul(loom::relu(x) * 0.5, w) + b;
  loom::sync();
  EXPECT_EQ(loom::metrics().kernels_launched - before, 1);
}

// In-place accumulation y += x @ w: y's buffer may be donated to the kernel
// that reads it in its epilogue; the partial sums must not land there.
TEST_P(GemmTest, AccumulateIntoOperandOfEpilogue) {
  const int64_t M = 130, K = 900, N = 300;
  Operand x = make({M, K}, loom::kFloat, 19), w = make({K, N}, loom::kFloat, 20), y0 = make({M, N}, loom::kFloat, 21);
  Tensor y = y0.t.clone();
  loom::sync();
  y.add_(loom::matmul(x.t, w.t));
  Expected e = product(row_major(x), row_major(w), 1, M, N, K);
  EXPECT_TRUE(close(y, e, K, loom::kFloat, [&](double v, int64_t i) { return v + y0.v[i]; }));
}

// Linear + bias + GELU is one kernel on the llvm backend.
TEST_P(GemmTest, LinearBiasGeluIsOneKernel) {
  if (GetParam() != "llvm") GTEST_SKIP() << "a kernel count of the llvm backend";
  Tensor x = loom::randn({64, 96}), w = loom::randn({80, 96}), b = loom::randn({80});
  loom::sync();
  const int64_t before = loom::metrics().kernels_launched;
  Tensor y = loom::gelu(loom::linear(x, w, b));
  loom::sync();
  EXPECT_EQ(loom::metrics().kernels_launched - before, 1);
}

// A row of a product does not depend on the rows around it: the first m
// rows of A times B equal, bit for bit, the first m rows of a taller
// product's, whether the last rows form an edge tile (one row at a time,
// or padded to a full tile when more than half of it) or a full tile.
// Small products (A read in place), and a packed one.
TEST_P(GemmTest, RowsDoNotDependOnTheRowsAround) {
  if (GetParam() != "llvm") GTEST_SKIP() << "the CPU GEMM's tiles";
  for (Mnk s : {Mnk{40, 40, 64}, Mnk{300, 520, 300}}) {
    Operand a = make({s.m, s.k}, loom::kFloat, 11), b = make({s.k, s.n}, loom::kFloat, 12);
    const std::vector<float> tall = loom::matmul(a.t, b.t).to_vector<float>();
    for (int64_t m : {13, 16, 18, 19, 23, 24}) {  // edge tiles of 1, 4, 6, 7, 11, 12 rows (MR 12)
      const std::vector<float> part = loom::matmul(a.t.slice(0, 0, m), b.t).to_vector<float>();
      ASSERT_EQ(part.size(), static_cast<size_t>(m * s.n));
      for (int64_t i = 0; i < m * s.n; ++i)
        ASSERT_EQ(part[i], tall[i]) << "m " << m << " of " << s.m << ", element " << i;
    }
  }
}

// The order the CPU GEMM visits its tiles in (GemmPlan::strip_group: the
// B strips each A panel meets in turn, LOOM_GEMM_SG to force it) changes
// no element: a packed weight gradient with an in-place SGD update fused
// into its epilogue (a tile visited twice or skipped would show) is bit for
// bit the same with one strip at a time, with groups that do not divide
// the 63 strips, and with the planned group, and matches float64.
TEST_P(GemmTest, StripGroupsChangeNoElement) {
  if (GetParam() != "llvm") GTEST_SKIP() << "the CPU GEMM's tile order";
  const int64_t M = 301, K = 300, N = 1000;
  Operand g = make({K, M}, loom::kFloat, 31), h = make({K, N}, loom::kFloat, 32);
  Operand w0 = make({M, N}, loom::kFloat, 33), m0 = make({M, N}, loom::kFloat, 34);
  // The update on fresh copies of w0 and m0: (weight, momentum).
  auto update = [&] {
    Tensor w = w0.t.clone(), mom = m0.t.clone();
    loom::sync();
    const int64_t before = loom::metrics().kernels_launched;
    mom.mul_(0.9).add_(loom::matmul(g.t.t(), h.t));
    w.sub_(mom * 0.01);
    loom::sync();
    EXPECT_EQ(loom::metrics().kernels_launched - before, 1) << "the update is the product's epilogue";
    return std::make_pair(w.to_vector<float>(), mom.to_vector<float>());
  };
  const auto planned = update();
  {
    loom_test::GemmHook hook("LOOM_GEMM_SG");
    for (const char* group : {"1", "3", "7"}) {
      hook.set(group);
      const auto forced = update();
      EXPECT_EQ(forced.first, planned.first) << "strip group " << group;
      EXPECT_EQ(forced.second, planned.second) << "strip group " << group;
    }
  }
  auto A_t = [&](int64_t, int64_t i, int64_t k) { return g.v[k * M + i]; };
  const Expected e = product(A_t, row_major(h), 1, M, N, K);
  const Tensor mom = loom::tensor(std::vector<double>(planned.second.begin(), planned.second.end()), loom::kFloat);
  EXPECT_TRUE(close(mom, e, K, loom::kFloat, [&](double v, int64_t i) { return 0.9 * m0.v[i] + v; }));
}

LOOM_INSTANTIATE_BACKENDS(GemmTest);

}  // namespace

// A long dot product of same-signed terms: summed in one register chain, its
// error grows with K (a random-graph seed with K = 35640 lost ~1800 ulp);
// summed in K blocks whose sums are added (the CPU GEMM, packed or not), it
// grows with KC + K / KC at worst and measured under 10 ulp for these
// shapes (KC 256 or 1024). The bound here is 700 ulp of the sum.
TEST_P(GemmTest, LongSameSignedSumsStayAccurate) {
  if (GetParam() == "cuda") GTEST_SKIP() << "the GPU GEMM sums all of K in one chain per output, as cuBLAS does";
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> ud(1.1, 1.1001);  // nearly equal terms: rounding errors add up
  for (Mnk s : {Mnk{1, 1, 40000}, Mnk{3, 5, 40000}, Mnk{40, 70, 20000}}) {
    std::vector<double> va(s.m * s.k), vb(s.k * s.n);
    for (double& x : va) x = static_cast<float>(ud(gen));
    for (double& x : vb) x = static_cast<float>(ud(gen));
    Tensor c = loom::matmul(loom::tensor(va, loom::kFloat).reshape({s.m, s.k}),
                            loom::tensor(vb, loom::kFloat).reshape({s.k, s.n}));
    const std::vector<double> got = c.to_vector<double>();
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        double want = 0;
        for (int64_t k = 0; k < s.k; ++k) want += va[i * s.k + k] * vb[k * s.n + j];
        EXPECT_LE(std::abs(got[i * s.n + j] - want), 700 * 0x1p-24 * want)
            << s.m << "x" << s.k << " @ " << s.k << "x" << s.n << " element " << i << "," << j;
      }
  }
}
