// matmul, mm, bmm, addmm, linear: every shape case of torch.matmul, against
// products computed here with plain loops. Operand values are small
// multiples of 1/4, so float32 results are exact and comparisons are tight.
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::sizes_of;
using Shape = std::vector<int64_t>;

class LinalgTest : public loom_test::BackendTest {};

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Deterministic values in [-1.5, 1.5] (integers in [-6, 6] for integer dtypes).
std::vector<double> values(int64_t n, int salt, loom::ScalarType dt) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) {
    double x = static_cast<double>((i * salt + 3) % 13 - 6);
    v[i] = loom::is_floating_point(dt) ? x / 4 : x;
  }
  return v;
}

Tensor make(const std::vector<double>& v, const Shape& shape, loom::ScalarType dt) {
  return loom::tensor(v, dt).reshape(shape);
}

// Plain [B,M,K] x [B,K,N] product, row-major.
std::vector<double> ref_bmm(const std::vector<double>& a, const std::vector<double>& b, int64_t B, int64_t M,
                            int64_t K, int64_t N) {
  std::vector<double> out(B * M * N, 0.0);
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += a[(bi * M + i) * K + k] * b[(bi * K + k) * N + j];
        out[(bi * M + i) * N + j] = s;
      }
  return out;
}

std::vector<double> transpose2(const std::vector<double>& v, int64_t rows, int64_t cols) {
  std::vector<double> t(v.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = v[i * cols + j];
  return t;
}


const loom::ScalarType kDtypes[] = {loom::kFloat, loom::kDouble, loom::kLong};

TEST_P(LinalgTest, Mm2DEveryDtypeAndOddShapes) {
  const Shape cases[] = {{2, 3, 4}, {1, 1, 1}, {7, 63, 65}, {65, 7, 1}, {1, 65, 63}, {63, 1, 7}};
  for (loom::ScalarType dt : kDtypes)
    for (const Shape& c : cases) {
      const int64_t M = c[0], K = c[1], N = c[2];
      auto av = values(M * K, 5, dt), bv = values(K * N, 7, dt);
      Tensor r = loom::mm(make(av, {M, K}, dt), make(bv, {K, N}, dt));
      EXPECT_EQ(r.dtype(), dt);
      EXPECT_EQ(sizes_of(r), (Shape{M, N}));
      EXPECT_TRUE(all_close(r, ref_bmm(av, bv, 1, M, K, N))) << dt << " " << M << "x" << K << "x" << N;
      Tensor r2 = loom::matmul(make(av, {M, K}, dt), make(bv, {K, N}, dt));
      EXPECT_TRUE(all_close(r2, ref_bmm(av, bv, 1, M, K, N)));
    }
}

TEST_P(LinalgTest, DotAndVectorMatrixForms) {
  for (loom::ScalarType dt : kDtypes) {
    auto a = values(7, 3, dt), b = values(7, 5, dt);
    Tensor d = loom::matmul(make(a, {7}, dt), make(b, {7}, dt));
    EXPECT_EQ(d.dim(), 0);
    EXPECT_TRUE(all_close(d, ref_bmm(a, b, 1, 1, 7, 1)));

    auto m = values(7 * 4, 11, dt);
    Tensor vm = loom::matmul(make(a, {7}, dt), make(m, {7, 4}, dt));  // [K] x [K,N] -> [N]
    EXPECT_EQ(sizes_of(vm), (Shape{4}));
    EXPECT_TRUE(all_close(vm, ref_bmm(a, m, 1, 1, 7, 4)));

    Tensor mv = loom::matmul(make(m, {4, 7}, dt), make(b, {7}, dt));  // [M,K] x [K] -> [M]
    EXPECT_EQ(sizes_of(mv), (Shape{4}));
    EXPECT_TRUE(all_close(mv, ref_bmm(m, b, 1, 4, 7, 1)));
  }
}

TEST_P(LinalgTest, BatchedFoldsAndBroadcasts) {
  const auto dt = loom::kFloat;
  // [2,3,4] x [4,5]: a's batch folds into rows.
  auto a = values(2 * 3 * 4, 5, dt), b = values(4 * 5, 7, dt);
  Tensor r = loom::matmul(make(a, {2, 3, 4}, dt), make(b, {4, 5}, dt));
  EXPECT_EQ(sizes_of(r), (Shape{2, 3, 5}));
  EXPECT_TRUE(all_close(r, ref_bmm(a, b, 1, 6, 4, 5)));

  // [2,3,4] x [4] -> [2,3]
  auto v = values(4, 3, dt);
  Tensor rv = loom::matmul(make(a, {2, 3, 4}, dt), make(v, {4}, dt));
  EXPECT_EQ(sizes_of(rv), (Shape{2, 3}));
  EXPECT_TRUE(all_close(rv, ref_bmm(a, v, 1, 6, 4, 1)));

  // [4] x [2,4,3] -> [2,3]: the vector is broadcast over b's batch.
  auto bb = values(2 * 4 * 3, 11, dt);
  Tensor vb = loom::matmul(make(v, {4}, dt), make(bb, {2, 4, 3}, dt));
  EXPECT_EQ(sizes_of(vb), (Shape{2, 3}));
  std::vector<double> want;
  for (int64_t i = 0; i < 2; ++i) {
    std::vector<double> bi(bb.begin() + i * 12, bb.begin() + (i + 1) * 12);
    for (double x : ref_bmm(v, bi, 1, 1, 4, 3)) want.push_back(x);
  }
  EXPECT_TRUE(all_close(vb, want));

  // [3,4] x [2,4,5] -> [2,3,5]: a 2-D operand is broadcast over the batch.
  auto m = values(3 * 4, 5, dt), c = values(2 * 4 * 5, 7, dt);
  Tensor mb = loom::matmul(make(m, {3, 4}, dt), make(c, {2, 4, 5}, dt));
  EXPECT_EQ(sizes_of(mb), (Shape{2, 3, 5}));
  std::vector<double> m2(m);
  m2.insert(m2.end(), m.begin(), m.end());
  EXPECT_TRUE(all_close(mb, ref_bmm(m2, c, 2, 3, 4, 5)));

  // [2,1,3,4] x [5,4,2] -> [2,5,3,2]: batch dims [2,1] and [5] broadcast to [2,5].
  auto x = values(2 * 3 * 4, 5, dt), y = values(5 * 4 * 2, 3, dt);
  Tensor xy = loom::matmul(make(x, {2, 1, 3, 4}, dt), make(y, {5, 4, 2}, dt));
  EXPECT_EQ(sizes_of(xy), (Shape{2, 5, 3, 2}));
  std::vector<double> xe, ye;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      xe.insert(xe.end(), x.begin() + i * 12, x.begin() + (i + 1) * 12);
      ye.insert(ye.end(), y.begin() + j * 8, y.begin() + (j + 1) * 8);
    }
  EXPECT_TRUE(all_close(xy, ref_bmm(xe, ye, 10, 3, 4, 2)));
}

TEST_P(LinalgTest, NonContiguousOperands) {
  for (loom::ScalarType dt : kDtypes) {
    // Transposed: a is the transpose of a [K,M] tensor.
    auto at = values(5 * 3, 7, dt), b = values(5 * 4, 3, dt);
    Tensor a = make(at, {5, 3}, dt).t();
    EXPECT_FALSE(a.is_contiguous());
    EXPECT_TRUE(all_close(a.matmul(make(b, {5, 4}, dt)), ref_bmm(transpose2(at, 5, 3), b, 1, 3, 5, 4)));

    // Sliced: every other column of a [5,8] tensor.
    auto wide = values(5 * 8, 11, dt);
    Tensor bs = make(wide, {5, 8}, dt).slice(1, 0, 8, 2);
    std::vector<double> bsv;
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 8; j += 2) bsv.push_back(wide[i * 8 + j]);
    EXPECT_TRUE(all_close(loom::mm(a, bs), ref_bmm(transpose2(at, 5, 3), bsv, 1, 3, 5, 4)));

    // Expanded: one row repeated 3 times (stride 0).
    auto row = values(5, 5, dt);
    Tensor ae = make(row, {1, 5}, dt).expand({3, 5});
    std::vector<double> aev;
    for (int i = 0; i < 3; ++i) aev.insert(aev.end(), row.begin(), row.end());
    EXPECT_TRUE(all_close(ae.mm(make(b, {5, 4}, dt)), ref_bmm(aev, b, 1, 3, 5, 4)));

    // Batched with a transposed batch operand.
    auto bt = values(2 * 4 * 5, 3, dt);
    Tensor b3 = make(bt, {2, 4, 5}, dt).transpose(1, 2);  // [2,5,4]
    std::vector<double> b3v;
    for (int64_t i = 0; i < 2; ++i)
      for (double x : transpose2(std::vector<double>(bt.begin() + i * 20, bt.begin() + (i + 1) * 20), 4, 5))
        b3v.push_back(x);
    auto a3 = values(2 * 3 * 5, 5, dt);
    EXPECT_TRUE(all_close(make(a3, {2, 3, 5}, dt).bmm(b3), ref_bmm(a3, b3v, 2, 3, 5, 4)));
  }
}

TEST_P(LinalgTest, BmmEveryDtype) {
  for (loom::ScalarType dt : kDtypes) {
    auto a = values(3 * 2 * 7, 5, dt), b = values(3 * 7 * 1, 3, dt);
    Tensor r = loom::bmm(make(a, {3, 2, 7}, dt), make(b, {3, 7, 1}, dt));
    EXPECT_EQ(sizes_of(r), (Shape{3, 2, 1}));
    EXPECT_TRUE(all_close(r, ref_bmm(a, b, 3, 2, 7, 1)));
  }
}

TEST_P(LinalgTest, EmptyInnerDimGivesZeros) {
  Tensor r = loom::mm(loom::ones({2, 0}), loom::ones({0, 3}));
  EXPECT_EQ(sizes_of(r), (Shape{2, 3}));
  EXPECT_TRUE(all_close(r, std::vector<double>(6, 0.0)));
}

TEST_P(LinalgTest, AddmmScalesAndBroadcastsSelf) {
  for (loom::ScalarType dt : kDtypes) {
    auto s = values(2 * 4, 3, dt), a = values(2 * 3, 5, dt), b = values(3 * 4, 7, dt);
    auto p = ref_bmm(a, b, 1, 2, 3, 4);
    Tensor r = loom::addmm(make(s, {2, 4}, dt), make(a, {2, 3}, dt), make(b, {3, 4}, dt), 2, 3);
    std::vector<double> want(8);
    for (int i = 0; i < 8; ++i) want[i] = 2 * s[i] + 3 * p[i];
    EXPECT_EQ(r.dtype(), dt);
    EXPECT_TRUE(all_close(r, want));

    // A 1-D self broadcasts over the rows (a bias).
    auto bias = values(4, 5, dt);
    Tensor rb = loom::addmm(make(bias, {4}, dt), make(a, {2, 3}, dt), make(b, {3, 4}, dt));
    for (int i = 0; i < 8; ++i) want[i] = bias[i % 4] + p[i];
    EXPECT_TRUE(all_close(rb, want));
  }
}

TEST_P(LinalgTest, AddmmBetaZeroIgnoresNaNSelf) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor self = loom::full({2, 2}, nan);
  auto a = values(4, 5, loom::kFloat), b = values(4, 7, loom::kFloat);
  Tensor r = loom::addmm(self, make(a, {2, 2}, loom::kFloat), make(b, {2, 2}, loom::kFloat), 0, 0.5);
  auto p = ref_bmm(a, b, 1, 2, 2, 2);
  for (double& x : p) x *= 0.5;
  EXPECT_TRUE(all_close(r, p));
}

TEST_P(LinalgTest, LinearWithAndWithoutBias) {
  for (loom::ScalarType dt : {loom::kFloat, loom::kDouble}) {
    auto x = values(2 * 3, 5, dt), w = values(4 * 3, 7, dt), bias = values(4, 3, dt);
    auto xw = ref_bmm(x, transpose2(w, 4, 3), 1, 2, 3, 4);
    std::vector<double> want(8);
    for (int i = 0; i < 8; ++i) want[i] = xw[i] + bias[i % 4];
    Tensor r = loom::linear(make(x, {2, 3}, dt), make(w, {4, 3}, dt), make(bias, {4}, dt));
    EXPECT_EQ(sizes_of(r), (Shape{2, 4}));
    EXPECT_TRUE(all_close(r, want));
    EXPECT_TRUE(all_close(loom::linear(make(x, {2, 3}, dt), make(w, {4, 3}, dt)), xw));

    // [*, in] inputs: 3-D and 1-D.
    Tensor r3 = loom::linear(make(x, {1, 2, 3}, dt), make(w, {4, 3}, dt), make(bias, {4}, dt));
    EXPECT_EQ(sizes_of(r3), (Shape{1, 2, 4}));
    EXPECT_TRUE(all_close(r3, want));
    Tensor r1 = loom::linear(make(x, {2, 3}, dt)[1], make(w, {4, 3}, dt), make(bias, {4}, dt));
    EXPECT_EQ(sizes_of(r1), (Shape{4}));
    EXPECT_TRUE(all_close(r1, std::vector<double>(want.begin() + 4, want.end())));
  }
}

TEST_P(LinalgTest, ShapeErrorsReadLikePyTorch) {
  Tensor a = loom::ones({2, 3}), b = loom::ones({4, 5});
  EXPECT_LOOM_ERROR(loom::mm(a, b), "mm", "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
  EXPECT_LOOM_ERROR(loom::matmul(a, b), "matmul", "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
  EXPECT_LOOM_ERROR(a.matmul(b), "matmul", "(2x3 and 4x5)");
  EXPECT_LOOM_ERROR(loom::matmul(loom::ones({3}), loom::ones({4})), "matmul", "inconsistent tensor size");
  EXPECT_LOOM_ERROR(loom::matmul(a, loom::ones({4})), "matmul", "size mismatch, got input (2), mat (2x3), vec (4)");
  EXPECT_LOOM_ERROR(loom::matmul(loom::ones({3}), b), "matmul", "(1x3 and 4x5)");
  EXPECT_LOOM_ERROR(loom::matmul(loom::ones({2, 3, 4}), loom::ones({3, 5})), "matmul", "(6x4 and 3x5)");
  EXPECT_LOOM_ERROR(loom::matmul(loom::ones({2, 2, 3}), loom::ones({2, 4, 5})), "matmul", "batch2");
  EXPECT_LOOM_ERROR(loom::matmul(loom::ones({2, 2, 3}), loom::ones({3, 3, 5})), "matmul", "cannot be broadcast");
  EXPECT_LOOM_ERROR(loom::matmul(loom::ones({}), b), "matmul", "at least 1D");
  EXPECT_LOOM_ERROR(loom::mm(loom::ones({3}), b), "mm", "self must be a matrix");
  EXPECT_LOOM_ERROR(loom::bmm(a, b), "bmm", "batch1 must be a 3D tensor");
  EXPECT_LOOM_ERROR(loom::bmm(loom::ones({2, 2, 3}), loom::ones({3, 3, 5})), "bmm", "same number of batches");
  EXPECT_LOOM_ERROR(loom::bmm(loom::ones({2, 2, 3}), loom::ones({2, 4, 5})), "bmm",
                    "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [2, 4]");
  EXPECT_LOOM_ERROR(loom::addmm(loom::ones({3}), a, loom::ones({3, 5})), "addmm", "cannot be broadcast");
  EXPECT_LOOM_ERROR(loom::addmm(loom::ones({2, 5}), a, loom::ones({4, 5})), "addmm", "(2x3 and 4x5)");
  EXPECT_LOOM_ERROR(loom::addmm(loom::ones({2, 5}), loom::ones({3}), b), "addmm", "mat1 must be a matrix");
  EXPECT_LOOM_ERROR(loom::linear(a, loom::ones({4, 5})), "linear", "(2x3 and 5x4)");
  EXPECT_LOOM_ERROR(loom::linear(a, loom::ones({4, 3}), loom::ones({5})), "linear", "cannot be broadcast");
  EXPECT_LOOM_ERROR(loom::linear(a, loom::ones({2, 4, 3})), "linear", "weight must be 1-D or 2-D");
  EXPECT_LOOM_ERROR(loom::matmul(a, Tensor()), "matmul", "undefined");
}

TEST_P(LinalgTest, DtypeErrors) {
  Tensor f = loom::ones({2, 2}), d = loom::ones({2, 2}, loom::kDouble), l = loom::ones({2, 2}, loom::kLong);
  EXPECT_LOOM_ERROR(loom::matmul(f, d), "matmul", "expected m1 and m2 to have the same dtype");
  EXPECT_LOOM_ERROR(loom::mm(f, l), "mm", "expected m1 and m2 to have the same dtype");
  EXPECT_LOOM_ERROR(loom::bmm(f.unsqueeze(0), d.unsqueeze(0)), "bmm", "same dtype");
  EXPECT_LOOM_ERROR(loom::addmm(d, f, f), "addmm", "same dtype");
  EXPECT_LOOM_ERROR(loom::addmm(l, l, l, 0.5), "addmm", "beta must not be a floating point number");
  EXPECT_LOOM_ERROR(loom::linear(f, f, d[0]), "linear", "dtype");
  Tensor bo = loom::ones({2, 2}, loom::kBool);
  EXPECT_LOOM_ERROR(loom::matmul(bo, bo), "matmul", "Bool");
}

}  // namespace

LOOM_INSTANTIATE_BACKENDS(LinalgTest);
