// GEMM kernels on the GPU (jit/cuda/gemm.h, runtime/cuda/gemm_tune.h): odd
// shapes, strided, transposed and broadcast operands, float32 and float64,
// fused epilogues, the TF32 opt-in, and the tuning cache. Every product is
// checked against the same product in float64 on the CPU, by the relative
// norm of the error (float32 lands far under 1e-5, TF32 near 1e-3). Every
// test skips, saying why, on a machine without a GPU.
#include <array>
#include <cmath>
#include <cstdlib>
#include <functional>

#include "test_util.h"

namespace {

using loom::Tensor;

class CudaGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU here: " << loom::cuda::unavailable_reason();
  }
  void TearDown() override {
    if (loom::cuda::is_available()) loom::cuda::set_allow_tf32(false);
  }
};

// ||got - want|| / ||want|| over all elements; infinity on a NaN.
double rel_err(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.sizes().vec(), want.sizes().vec());
  const std::vector<double> g = got.to(loom::kCPU).to(loom::kDouble).to_vector<double>();
  const std::vector<double> w = want.to(loom::kCPU).to(loom::kDouble).to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size() && i < w.size(); ++i) {
    if (std::isnan(g[i]) != std::isnan(w[i])) return INFINITY;
    num += (g[i] - w[i]) * (g[i] - w[i]);
    den += w[i] * w[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

Tensor f64(const Tensor& t) { return t.to(loom::kDouble); }
Tensor gpu(const Tensor& t) { return t.to(loom::kCUDA); }

constexpr double kF32 = 1e-5;  // exact float32 arithmetic (TF32 would be ~1e-3)

// "MxNxK candidate c", for the messages of the every-candidate tests.
std::string candidate_case(int64_t M, int64_t N, int64_t K, int c) {
  return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " candidate " + std::to_string(c);
}

using loom_test::GemmHook;

TEST_F(CudaGemm, OddShapesMatchFloat64) {
  const int64_t shapes[][3] = {{1, 1, 1},    {7, 5, 3},   {63, 65, 1},  {65, 63, 7},   {1, 1000, 63},
                               {1000, 1, 65}, {257, 129, 1000}, {128, 128, 128}, {33, 200, 17}, {300, 7, 513}};
  for (const auto& s : shapes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    Tensor a = loom::randn({M, K}), b = loom::randn({K, N});
    loom::sync();
    Tensor got = loom::matmul(gpu(a), gpu(b));
    EXPECT_LT(rel_err(got, loom::matmul(f64(a), f64(b))), kF32) << M << "x" << N << "x" << K;
  }
}

// A product with at most 16 columns and a K of 256 or more is a row kernel
// on the GPU, one row of K per output element, not a GEMM whose tiles would
// be mostly empty columns (ir::LowerOptions::narrow_products_as_rows): as in
// Linear (B transposed, bias and activation after), with B row-major (read
// along K at a stride), with a strided A, and in float64.
TEST_F(CudaGemm, NarrowProductsAreRowKernels) {
  const int64_t shapes[][3] = {{256, 10, 1024}, {300, 7, 513}, {1, 1, 4096}, {65, 16, 256}};
  for (const auto& s : shapes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    Tensor a = loom::randn({M, K}), w = loom::randn({N, K}), bias = loom::randn({N}), b = loom::randn({K, N});
    Tensor wide = loom::randn({M, K + 3});
    loom::sync();
    const std::string at = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
    EXPECT_LT(rel_err(loom::relu(loom::matmul(gpu(a), gpu(w).t()) + gpu(bias)),
                      loom::relu(loom::matmul(f64(a), f64(w).t()) + f64(bias))),
              kF32)
        << "linear " << at;
    EXPECT_LT(rel_err(loom::matmul(gpu(a), gpu(b)), loom::matmul(f64(a), f64(b))), kF32) << "B row-major " << at;
    EXPECT_LT(rel_err(loom::matmul(gpu(wide).narrow(1, 3, K), gpu(b)), loom::matmul(f64(wide).narrow(1, 3, K), f64(b))),
              kF32)
        << "strided A " << at;
    EXPECT_LT(rel_err(loom::matmul(gpu(f64(a)), gpu(f64(b))), loom::matmul(f64(a), f64(b))), 1e-12) << "float64 " << at;
  }
}

// A product with K of at most 16 is K multiply-adds inside its consumer's
// kernel on the GPU (ir::LowerOptions::short_products_inline): W4's
// backward product with its ReLU mask, transposed and strided operands,
// float64, and a product read by two kernels (computed once, into a buffer).
TEST_F(CudaGemm, ShortProductsAreInlined) {
  const int64_t shapes[][3] = {{256, 1024, 10}, {33, 65, 1}, {7, 300, 16}, {1, 5, 3}};
  for (const auto& s : shapes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    Tensor a = loom::randn({M, K}), b = loom::randn({K, N}), bt = loom::randn({N, K}), h = loom::randn({M, N});
    loom::sync();
    const std::string at = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
    EXPECT_LT(rel_err(loom::where(gpu(h) > 0, loom::matmul(gpu(a), gpu(b)), loom::zeros({}, loom::kCUDA)),
                      loom::where(f64(h) > 0, loom::matmul(f64(a), f64(b)), loom::zeros({}, loom::kDouble))),
              kF32)
        << "masked " << at;
    EXPECT_LT(rel_err(loom::matmul(gpu(a), gpu(bt).t()), loom::matmul(f64(a), f64(bt).t())), kF32) << "B transposed " << at;
    EXPECT_LT(rel_err(loom::matmul(gpu(f64(a)), gpu(f64(b))), loom::matmul(f64(a), f64(b))), 1e-12) << "float64 " << at;
    Tensor p = loom::matmul(gpu(a), gpu(b));
    Tensor two = loom::tanh(p) + p.sum(0, true);
    Tensor pw = loom::matmul(f64(a), f64(b));
    EXPECT_LT(rel_err(two, loom::tanh(pw) + pw.sum(0, true)), 1e-5) << "read twice " << at;
  }
}

TEST_F(CudaGemm, TransposedAndStridedOperands) {
  for (int64_t n : {1, 7, 64, 65, 130}) {
    Tensor at = loom::randn({97, 65}), bt = loom::randn({n, 97});  // a = at.t() [65, 97], b = bt.t() [97, n]
    Tensor big = loom::randn({70, 101});
    loom::sync();
    Tensor a = at.t(), b = bt.t();
    Tensor sub = big.narrow(0, 3, 65).narrow(1, 2, 97);  // rows 101 apart, offset 305: element copies
    Tensor want = loom::matmul(f64(a), f64(b));
    EXPECT_LT(rel_err(loom::matmul(gpu(at).t(), gpu(b)), want), kF32) << "A transposed, n=" << n;
    EXPECT_LT(rel_err(loom::matmul(gpu(a), gpu(bt).t()), want), kF32) << "B transposed, n=" << n;
    EXPECT_LT(rel_err(loom::matmul(gpu(at).t(), gpu(bt).t()), want), kF32) << "both transposed, n=" << n;
    EXPECT_LT(rel_err(loom::matmul(gpu(big).narrow(0, 3, 65).narrow(1, 2, 97), gpu(b)),
                      loom::matmul(f64(sub), f64(b))),
              kF32)
        << "strided A, n=" << n;
  }
}

TEST_F(CudaGemm, BatchedAndBroadcastBatch) {
  Tensor x = loom::randn({5, 33, 70}), w = loom::randn({70, 41}), wb = loom::randn({5, 70, 41});
  loom::sync();
  EXPECT_LT(rel_err(loom::bmm(gpu(x), gpu(wb)), loom::bmm(f64(x), f64(wb))), kF32);
  EXPECT_LT(rel_err(loom::bmm(gpu(x), gpu(w).expand({5, 70, 41})), loom::bmm(f64(x), f64(w).expand({5, 70, 41}))), kF32);
  EXPECT_LT(rel_err(loom::bmm(gpu(x).transpose(1, 2).transpose(1, 2), gpu(wb).transpose(1, 2).contiguous().transpose(1, 2)),
                    loom::bmm(f64(x), f64(wb))),
            kF32);
}

TEST_F(CudaGemm, Float64) {
  Tensor a = loom::randn({129, 65}, loom::kDouble), b = loom::randn({65, 31}, loom::kDouble);
  loom::sync();
  Tensor want = loom::matmul(a, b);
  EXPECT_LT(rel_err(loom::matmul(gpu(a), gpu(b)), want), 1e-13);
  EXPECT_LT(rel_err(loom::matmul(gpu(a.t().contiguous()).t(), gpu(b)), want), 1e-13);
}

TEST_F(CudaGemm, FusedEpilogues) {
  Tensor x = loom::randn({100, 70}), w = loom::randn({50, 70}), b = loom::randn({50}), r = loom::randn({100, 50});
  loom::sync();
  Tensor X = gpu(x), W = gpu(w), B = gpu(b), R = gpu(r);
  Tensor want = loom::matmul(f64(x), f64(w).t());
  loom::sync();  // `want` runs on the CPU now, not in the counted sync below
  // One kernel each: the product and its pointwise consumers.
  loom::reset_metrics();
  Tensor y = loom::gelu(loom::linear(X, W, B));
  loom::sync();
  EXPECT_EQ(loom::metrics().kernels_launched, 1);
  EXPECT_LT(rel_err(y, loom::gelu(want + f64(b))), kF32);
  EXPECT_LT(rel_err((loom::matmul(X, W.t()) + R) * 0.25, (want + f64(r)) * 0.25), kF32);
  Tensor as_double = loom::matmul(X, W.t()).to(loom::kDouble);
  EXPECT_EQ(as_double.dtype(), loom::kDouble);
  EXPECT_LT(rel_err(as_double, want), kF32);
  // Two outputs stored by one epilogue.
  Tensor pre = loom::linear(X, W, B);
  Tensor act = loom::relu(pre);
  loom::sync();
  EXPECT_LT(rel_err(pre, want + f64(b)), kF32);
  EXPECT_LT(rel_err(act, loom::relu(want + f64(b))), kF32);
}

// A large product applies an input's cheap producers (relu(a) * 0.5) as
// it reads the operand (ir::LowerOptions::operand_producers_min_work): no
// kernel of their own, the same result as the producers stored first, in
// float32 and with TF32.
TEST_F(CudaGemm, LargeProductAppliesOperandProducers) {
  const int64_t M = 4096, N = 2048, K = 2048;  // 2^34 multiply-adds: the cuda threshold
  Tensor a = gpu(loom::randn({M, K})), b = gpu(loom::randn({K, N}));
  Tensor r = loom::relu(a) * 0.5;
  Tensor want = loom::matmul(f64(r), f64(b));
  loom::sync();
  r = Tensor();
  auto kernels = [&](auto product) {
    const int64_t before = loom::metrics().kernels_launched;
    Tensor t = product();
    loom::sync();
    return std::make_pair(t, loom::metrics().kernels_launched - before);
  };
  auto [plain, plain_kernels] = kernels([&] { return loom::matmul(a, b); });
  auto [got, fused_kernels] = kernels([&] { return loom::matmul(loom::relu(a) * 0.5, b); });
  EXPECT_EQ(fused_kernels, plain_kernels);
  EXPECT_LT(rel_err(got, want), kF32);
  loom::cuda::set_allow_tf32(true);
  EXPECT_LT(rel_err(loom::matmul(loom::relu(a) * 0.5, b), want), 5e-3);
}

TEST_F(CudaGemm, Tf32OnlyWhenAllowed) {
  Tensor a = loom::randn({256, 512}), b = loom::randn({512, 192});
  loom::sync();
  Tensor want = loom::matmul(f64(a), f64(b));
  Tensor A = gpu(a), B = gpu(b);
  EXPECT_FALSE(loom::cuda::allow_tf32());
  const double exact = rel_err(loom::matmul(A, B), want);
  EXPECT_LT(exact, kF32);
  loom::cuda::set_allow_tf32(true);
  const double tf32 = rel_err(loom::matmul(A, B), want);
  EXPECT_LT(tf32, 5e-3);
  EXPECT_GT(tf32, 1e-5) << "TF32 should round the inputs to 10-bit mantissas";
  loom::cuda::set_allow_tf32(false);  // the TF32 executable must not be replayed
  EXPECT_LT(rel_err(loom::matmul(A, B), want), kF32);
  // Odd sizes and a transposed operand on the tensor cores too.
  loom::cuda::set_allow_tf32(true);
  Tensor c = loom::randn({77, 45}), d = loom::randn({31, 45});
  loom::sync();
  EXPECT_LT(rel_err(loom::matmul(gpu(c), gpu(d).t()), loom::matmul(f64(c), f64(d).t())), 5e-3);
}

// Split-K forced on every product (LOOM_GEMM_SPLIT, untuned): partial sums
// in the executable's workspace, then the reduce kernel runs the epilogue.
TEST_F(CudaGemm, SplitKForced) {
  GemmHook hook("LOOM_GEMM_SPLIT");
  for (const char* splits : {"2", "5", "16"}) {
    hook.set(splits);
    const int64_t shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {65, 63, 700}, {256, 10, 1024}, {33, 200, 97}};
    for (const auto& s : shapes) {
      const int64_t M = s[0], N = s[1], K = s[2];
      Tensor a = loom::randn({M, K}), b = loom::randn({K, N}), bias = loom::randn({N}), r = loom::randn({M, N});
      loom::sync();
      Tensor want = loom::matmul(f64(a), f64(b));
      EXPECT_LT(rel_err(loom::matmul(gpu(a), gpu(b)), want), kF32) << M << "x" << N << "x" << K << " split " << splits;
      // Fused epilogues, a transposed operand, two outputs.
      Tensor pre = loom::linear(gpu(a), gpu(b).t().contiguous(), gpu(bias));
      Tensor act = loom::gelu(pre) + gpu(r);
      EXPECT_LT(rel_err(pre, want + f64(bias)), kF32) << M << "x" << N << "x" << K << " split " << splits;
      EXPECT_LT(rel_err(act, loom::gelu(want + f64(bias)) + f64(r)), kF32) << M << "x" << N << "x" << K;
    }
    Tensor x = loom::randn({3, 33, 300}), w = loom::randn({3, 300, 41});
    loom::sync();
    EXPECT_LT(rel_err(loom::bmm(gpu(x), gpu(w)) * 2, loom::bmm(f64(x), f64(w)) * 2), kF32) << "batched, split " << splits;
  }
}

// A GEMM kernel takes its operands' addresses as launch parameters, which
// a replayed CUDA graph holds (jit/cuda/gemm.h, GemmArgs): the same
// product over four pairs of operands, round and round, replays one
// executable whose graphs get the pair of each run (cuda_graph_node_updates),
// as a plain and as a split-K product, with an epilogue and a second
// product in the same program.
TEST_F(CudaGemm, ReplaysReadEachRunsOperands) {
  GemmHook hook("LOOM_GEMM_SPLIT");
  for (const char* splits : {"1", "3"}) {
    hook.set(splits);
    std::vector<std::array<Tensor, 3>> cpu, dev;
    for (int p = 0; p < 4; ++p) {
      Tensor a = loom::randn({160, 96}), b = loom::randn({96, 144}), w = loom::randn({144, 72});
      loom::sync();
      cpu.push_back({a, b, w});
      dev.push_back({gpu(a), gpu(b), gpu(w)});
    }
    loom::sync();
    loom::reset_metrics();
    for (int i = 0; i < 12; ++i) {
      const auto& [a, b, w] = dev[i % 4];
      Tensor h = loom::relu(loom::matmul(a, b) + 1);
      Tensor y = loom::matmul(h, w);
      loom::sync();
      const auto& [ca, cb, cw] = cpu[i % 4];
      Tensor want_h = loom::relu(loom::matmul(f64(ca), f64(cb)) + 1);
      EXPECT_LT(rel_err(h, want_h), kF32) << "run " << i << ", split " << splits;
      EXPECT_LT(rel_err(y, loom::matmul(want_h, f64(cw))), kF32) << "run " << i << ", split " << splits;
    }
    const loom::Metrics m = loom::metrics();
    EXPECT_GE(m.cuda_graph_launches, 10) << "one executable, replayed from the second run on; split " << splits;
    EXPECT_GT(m.cuda_graph_node_updates, 0) << "the pairs alternate in two argument sets: nodes are updated";
  }
}

// Every tile configuration the tuner may pick (LOOM_GEMM_CANDIDATE), on
// products large enough for the 128-row tiles and on small ones, with the
// operand layouts the warp-tiled loop stores differently: A and B read
// along K (x W^T, Linear's weight: swizzled row tiles), along M / N
// (k-major tiles), and K not a multiple of any slice.
TEST_F(CudaGemm, EveryCandidateMatchesFloat64) {
  GemmHook hook("LOOM_GEMM_CANDIDATE");
  // The last shape is W4's first layer: few output tiles and a long K,
  // whose candidates split K across blocks and inside them (K groups, one
  // of them empty where K runs out).
  for (const auto& s : {std::array<int64_t, 3>{1501, 1499, 100}, std::array<int64_t, 3>{200, 300, 132},
                        std::array<int64_t, 3>{256, 1024, 784}}) {
    const int64_t M = s[0], N = s[1], K = s[2];
    Tensor x = loom::randn({M, K}), w = loom::randn({N, K}), at = loom::randn({K, M}), bias = loom::randn({N});
    loom::sync();
    const Tensor want_xwt = loom::matmul(f64(x), f64(w).t());
    const Tensor want_atw = loom::matmul(f64(at).t(), f64(w).t());
    const Tensor wc = gpu(w.t().contiguous());
    for (int c = 0; c < 14; ++c) {
      hook.set(std::to_string(c));
      const std::string what = candidate_case(M, N, K, c);
      EXPECT_LT(rel_err(loom::linear(gpu(x), gpu(w), gpu(bias)), want_xwt + f64(bias)), kF32) << "x W^T + b, " << what;
      EXPECT_LT(rel_err(loom::matmul(gpu(x), wc), want_xwt), kF32) << "x W, " << what;
      EXPECT_LT(rel_err(loom::matmul(gpu(at).t(), gpu(w).t()), want_atw), kF32) << "A^T W^T, " << what;
    }
  }
}

// bfloat16 products, every candidate (on an H100 or H200 the warpgroup
// tiles of kernels/cuda/gemm_wgmma.cu first, then mma.sync), in the four
// operand layouts, with a bias epilogue. Leading dims are multiples of 8
// (16-byte copies: the layouts wgmma takes); no size is a multiple of a
// tile. The reference is float64 on the same bfloat16 values, so what
// differs is float32 summation and bfloat16 rounding (~2^-9 an element).
TEST_F(CudaGemm, Bf16EveryCandidateMatchesFloat64) {
  GemmHook hook("LOOM_GEMM_CANDIDATE");
  constexpr double kBf16 = 8e-3;
  const loom::ScalarType bf = loom::kBFloat16;
  for (const auto& s : {std::array<int64_t, 3>{1504, 1496, 264}, std::array<int64_t, 3>{200, 296, 136}}) {
    const int64_t M = s[0], N = s[1], K = s[2];
    Tensor x = loom::randn({M, K}).to(bf), w = loom::randn({N, K}).to(bf), at = loom::randn({K, M}).to(bf);
    Tensor bias = loom::randn({N}).to(bf);
    loom::sync();
    const Tensor want_xwt = loom::matmul(f64(x), f64(w).t()) + f64(bias);
    const Tensor want_atw = loom::matmul(f64(at).t(), f64(w).t());
    const Tensor wc = gpu(w.t().contiguous());
    for (int c = 0; c < 6; ++c) {
      hook.set(std::to_string(c));
      const std::string what = candidate_case(M, N, K, c);
      EXPECT_LT(rel_err(loom::linear(gpu(x), gpu(w), gpu(bias)), want_xwt), kBf16) << "x W^T + b, " << what;
      EXPECT_LT(rel_err(loom::matmul(gpu(x), wc) + gpu(bias), want_xwt), kBf16) << "x W + b, " << what;
      EXPECT_LT(rel_err(loom::matmul(gpu(at).t(), gpu(w).t()), want_atw), kBf16) << "A^T W^T, " << what;
      EXPECT_LT(rel_err(loom::matmul(gpu(at).t(), wc), want_atw), kBf16) << "A^T W, " << what;
    }
  }
}

// TF32 products, every candidate (on an H100 or H200 the warpgroup tiles
// first where both operands are contiguous along K, as in x W^T), against
// float64: within TF32's rounding, and not exact float32.
TEST_F(CudaGemm, Tf32EveryCandidateMatchesFloat64) {
  GemmHook hook("LOOM_GEMM_CANDIDATE");
  loom::cuda::set_allow_tf32(true);
  for (const auto& s : {std::array<int64_t, 3>{1504, 1496, 264}, std::array<int64_t, 3>{200, 296, 136}}) {
    const int64_t M = s[0], N = s[1], K = s[2];
    Tensor x = loom::randn({M, K}), w = loom::randn({N, K}), bias = loom::randn({N});
    loom::sync();
    const Tensor want = loom::matmul(f64(x), f64(w).t()) + f64(bias);
    for (int c = 0; c < 6; ++c) {
      hook.set(std::to_string(c));
      const double e = rel_err(loom::linear(gpu(x), gpu(w), gpu(bias)), want);
      EXPECT_LT(e, 5e-3) << candidate_case(M, N, K, c);
      EXPECT_GT(e, 1e-5) << candidate_case(M, N, K, c) << ": TF32 rounds the inputs";
    }
  }
}

// TF32 products of at least 2^30 multiply-adds read operands that are not
// contiguous along K from a copy made just before (ir/lower/operand_copies.cpp),
// for the warpgroup tiles on an H100 or H200: x W (B copied), x^T W (both),
// a batch, and x W^T (nothing to copy), with a fused bias; within TF32's
// rounding of float64, and on a GPU that runs sm_90a code one launch for
// the product and one per copied operand.
TEST_F(CudaGemm, Tf32LargeProductsReadOperandsContiguousAlongK) {
  Tensor x = loom::randn({1024, 1024}), w = loom::randn({1024, 1024}), bias = loom::randn({1024});
  Tensor bx = loom::randn({4, 512, 1024}), bw = loom::randn({4, 1024, 512});  // 2^30 multiply-adds
  loom::sync();
  Tensor X = gpu(x), W = gpu(w), B = gpu(bias), BX = gpu(bx), BW = gpu(bw);
  struct Case {
    const char* what;
    std::function<Tensor()> got;
    Tensor want;
    int copies;
  };
  const Case cases[] = {
      {"x W + b", [&] { return loom::matmul(X, W) + B; }, loom::matmul(f64(x), f64(w)) + f64(bias), 1},
      {"x^T W", [&] { return loom::matmul(X.t(), W); }, loom::matmul(f64(x).t(), f64(w)), 2},
      {"batched x W", [&] { return loom::matmul(BX, BW); }, loom::matmul(f64(bx), f64(bw)), 1},
      {"x W^T", [&] { return loom::matmul(X, W.t()); }, loom::matmul(f64(x), f64(w).t()), 0},
  };
  const bool wgmma = loom::cuda::device_name().find("H100") != std::string::npos ||
                     loom::cuda::device_name().find("H200") != std::string::npos;
  for (const Case& c : cases) {
    auto launched = [&](bool tf32) {
      loom::cuda::set_allow_tf32(tf32);
      const int64_t before = loom::metrics().kernels_launched;
      Tensor t = c.got();
      loom::sync();
      return std::make_pair(t, loom::metrics().kernels_launched - before);
    };
    const Tensor exact = launched(false).first;
    auto [got, tf32_launches] = launched(true);
    EXPECT_LT(rel_err(exact, c.want), kF32) << c.what;
    const double e = rel_err(got, c.want);
    EXPECT_LT(e, 5e-3) << c.what;
    EXPECT_GT(e, 1e-5) << c.what << ": TF32 rounds the inputs";
    if (wgmma) EXPECT_EQ(tf32_launches, 1 + c.copies) << c.what;
  }
}

// The W4 shapes: long K and few output tiles, where the tuner may pick
// split-K; the weight gradient's operands are transposed views.
TEST_F(CudaGemm, MlpShapesWithTunedSplit) {
  Tensor h = loom::randn({256, 1024}), w = loom::randn({10, 1024}), g = loom::randn({256, 10}), x = loom::randn({256, 784});
  Tensor d = loom::randn({256, 1024});
  loom::sync();
  EXPECT_LT(rel_err(loom::matmul(gpu(h), gpu(w).t()), loom::matmul(f64(h), f64(w).t())), kF32);
  EXPECT_LT(rel_err(loom::matmul(gpu(g).t(), gpu(h)), loom::matmul(f64(g).t(), f64(h))), kF32);
  EXPECT_LT(rel_err(loom::matmul(gpu(d).t(), gpu(x)), loom::matmul(f64(d).t(), f64(x))), kF32);
  EXPECT_LT(rel_err(loom::relu(loom::matmul(gpu(h), gpu(d).t())), loom::relu(loom::matmul(f64(h), f64(d).t()))), kF32);
}

TEST_F(CudaGemm, WarmCachesCompileAndTuneNothing) {
  Tensor a = loom::randn({96, 80}), b = loom::randn({80, 112});
  loom::sync();
  Tensor A = gpu(a), B = gpu(b);
  (loom::matmul(A, B) * 3).to(loom::kCPU);  // tuned and compiled (or found on disk)
  loom::clear_executable_cache();
  loom::reset_metrics();
  Tensor again = (loom::matmul(A, B) * 3).to(loom::kCPU);
  const loom::Metrics m = loom::metrics();
  EXPECT_EQ(m.cache_misses, 1);
  EXPECT_EQ(m.nvrtc_compiles, 0) << "the cubins and the tuning came from the caches (memory, or disk)";
  EXPECT_LT(rel_err(again, loom::matmul(f64(a), f64(b)) * 3), kF32);
}

}  // namespace
