// The llvm backend's promises beyond matching the reference: how many
// kernels a workload becomes, that a replay compiles nothing, that an
// in-place update allocates nothing, and what LOOM_DUMP_DIR holds.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <sys/mman.h>

#include "test_util.h"

namespace {

class JitTest : public ::testing::Test {
 protected:
  void SetUp() override { previous_ = loom::set_backend("llvm"); }
  void TearDown() override { loom::set_backend(previous_); }
  std::string previous_;
};

// Kernels launched by one sync of `make()`'s result (inputs already computed).
template <class F>
int64_t kernels_for(F make) {
  loom::sync();
  int64_t before = loom::metrics().kernels_launched;
  loom::Tensor y = make();
  loom::sync();
  return loom::metrics().kernels_launched - before;
}

TEST_F(JitTest, W1PointwiseChainIsOneKernel) {
  auto x = loom::randn({1 << 12});
  EXPECT_EQ(kernels_for([&] { return loom::sigmoid(loom::tanh(x * 1.5 + 0.5) * x) + x * x; }), 1);
}

TEST_F(JitTest, W2SoftmaxIsOneKernel) {
  auto x = loom::randn({64, 256});
  EXPECT_EQ(kernels_for([&] { return loom::softmax(x, -1); }), 1);
}

TEST_F(JitTest, W3LayerNormIsOneKernel) {
  auto x = loom::randn({64, 256});
  auto g = loom::randn({256});
  auto b = loom::randn({256});
  EXPECT_EQ(kernels_for([&] {
              auto mu = x.mean({-1}, true);
              auto var = (x - mu).pow(2).mean({-1}, true);
              return (x - mu) * loom::rsqrt(var + 1e-5) * g + b;
            }),
            1);
}

// Random numbers are computed in the kernel that uses them: dropout's mask
// and an initializer's scaling have no random buffer and no library call.
TEST_F(JitTest, RandomNumbersFuseIntoTheirConsumer) {
  auto x = loom::randn({64, 256});
  EXPECT_EQ(kernels_for([&] { return x * (loom::rand({64, 256}) < 0.9).to(loom::kFloat) / 0.9; }), 1);
  EXPECT_EQ(kernels_for([&] { return loom::rand({1024, 784}) * 0.07 - 0.035; }), 1);
  EXPECT_EQ(kernels_for([&] { return (loom::randn({64, 256}) + x).sum(); }), 1);
}

// Outputs of 16 MiB and more are written with non-temporal stores from the
// first 64-byte aligned element on (jit/llvm/memory_hints.h); row kernels
// prefetch the next row. Odd lengths, offset views and rows that do not
// start on a cache line must still come out exactly right.
TEST_F(JitTest, StreamedOutputsAreExactAtEveryAlignment) {
  const int64_t n = (int64_t{16} << 20) / 4 + 13;
  auto x = loom::arange(n + 3, loom::kFloat);
  auto y = x.slice(0, 3, n + 3) * 2 + 1;  // reads from element 3: loads and stores out of phase
  std::vector<float> got = y.to_vector<float>();
  ASSERT_EQ(static_cast<int64_t>(got.size()), n);
  for (int64_t i = 0; i < n; ++i)
    if (got[i] != static_cast<float>(i + 3) * 2 + 1) FAIL() << "element " << i << ": " << got[i];
  x.mul_(-1);  // in place: written through the input's own buffer
  std::vector<float> back = x.to_vector<float>();
  for (int64_t i = 0; i < n + 3; ++i)
    if (back[i] != -static_cast<float>(i)) FAIL() << "in place, element " << i << ": " << back[i];

  const int64_t rows = 1031, cols = 4099;  // rows start off a cache line
  auto r = loom::arange(rows * cols, loom::kFloat).reshape({rows, cols}).remainder(7.0) - 3;
  std::vector<float> sm = loom::softmax(r, -1).to_vector<float>();
  std::vector<float> rv = r.to_vector<float>();
  for (int64_t i = 0; i < rows; i += 97) {
    double sum = 0, mx = -1e30;
    for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, double(rv[i * cols + j]));
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(double(rv[i * cols + j]) - mx);
    for (int64_t j = 0; j < cols; ++j) {
      double want = std::exp(double(rv[i * cols + j]) - mx) / sum;
      // float32 sums of 4099 terms: with AVX2's 16 accumulators a chain is
      // ~256 terms long, ~1e-6 relative (measured up to 1.005e-6 on Zen 3).
      // A misplaced streamed store would be off by far more than this.
      ASSERT_NEAR(sm[i * cols + j], want, 4e-6 * want) << "row " << i << " col " << j;
    }
  }
}

// A kernel reaches its constants (the math polynomials' coefficients)
// through 32-bit pc-relative addresses, so code and constants must be
// linked within 2 GiB of each other. On the GPU machine, where CUDA had
// reserved much of the address space, the linker once put them further
// apart and the truncated address crashed the kernel. Holes of 3 GiB
// reserved between compiles scatter the address space the same way.
TEST_F(JitTest, KernelsRunWhereTheAddressSpaceIsScattered) {
  std::vector<std::pair<void*, size_t>> holes;
  const size_t hole = size_t{3} << 30;
  for (int i = 0; i < 32; ++i) {
    void* p = mmap(nullptr, hole, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) holes.emplace_back(p, hole);
    auto x = loom::arange(100 + i, loom::kFloat).div(64.0 + i);  // a new shape: a new compile
    auto y = loom::tanh(x).exp() + loom::sigmoid(x) * loom::erf(x);
    std::vector<float> got = y.to_vector<float>();
    std::vector<float> xs = x.to_vector<float>();
    for (size_t j = 0; j < got.size(); ++j) {
      const double v = xs[j];
      const double want = std::exp(std::tanh(v)) + 1 / (1 + std::exp(-v)) * std::erf(v);
      ASSERT_NEAR(got[j], want, 1e-5 * std::abs(want) + 1e-6) << "graph " << i << ", element " << j;
    }
  }
  for (auto [p, n] : holes) munmap(p, n);
}

TEST_F(JitTest, AGraphReplayedAHundredTimesCompilesOnce) {
  auto x = loom::randn({32, 32});
  loom::sync();
  loom::Metrics m0 = loom::metrics();
  for (int i = 0; i < 100; ++i) {
    auto y = loom::softmax(x * static_cast<double>(i + 1), -1).sum();  // new scalar each time: same key
    y.item<float>();
  }
  loom::Metrics m1 = loom::metrics();
  EXPECT_LE(m1.cache_misses - m0.cache_misses, 1);
  EXPECT_GE(m1.cache_hits - m0.cache_hits, 99);
}

TEST_F(JitTest, AnInPlaceUpdateWritesIntoTheTensorsOwnBuffer) {
  auto w = loom::randn({1 << 16});
  auto g = loom::randn({1 << 16});
  float* before = w.data_ptr<float>();
  std::vector<float> w0 = w.to_vector<float>(), g0 = g.to_vector<float>();
  w.sub_(g * 0.1);  // compile once
  w.data_ptr<float>();
  int64_t bytes = loom::metrics().bytes_allocated;
  w.sub_(g * 0.1);
  EXPECT_EQ(w.data_ptr<float>(), before);
  EXPECT_EQ(loom::metrics().bytes_allocated, bytes);  // no output buffer: written in place
  std::vector<float> w2 = w.to_vector<float>();
  for (size_t i = 0; i < w2.size(); i += 997) EXPECT_NEAR(w2[i], w0[i] - 0.2f * g0[i], 1e-5f);
}

// A tensor that is its whole storage (borrowed, copied in, or moved with
// .to()) is its graph leaf, not a view of a flat one: an in-place update of
// it is one kernel written straight into its buffer (no scatter step, no
// copy back).
TEST_F(JitTest, AnInPlaceUpdateOfABorrowedMatrixIsOneKernel) {
  std::vector<float> data(32 * 64);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  loom::Tensor w = loom::from_blob(data.data(), {32, 64});
  const loom::Metrics m0 = loom::metrics();
  EXPECT_EQ(kernels_for([&] { return w.mul_(2); }), 1);
  EXPECT_EQ(loom::metrics().bytes_copied_back - m0.bytes_copied_back, 0);
  EXPECT_EQ(data[100], 200.f);  // the borrowed memory itself, as libtorch's from_blob
}

TEST_F(JitTest, AnInPlaceUpdateThatReadsOtherElementsIsNotDonated) {
  auto x = loom::arange(8, loom::kFloat);
  x.data_ptr<float>();
  auto shifted = x.slice(0, 0, 7).clone();  // reads x before the write
  x.slice(0, 1, 8).copy_(x.slice(0, 0, 7));  // x[1:] = x[:-1], reading what it writes
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(shifted.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5, 6}));
}

// A training step reads a parameter early (the forward matrix product) and
// updates it last: the update still goes into the parameter's own buffer.
TEST_F(JitTest, AParameterReadByAnEarlierStepIsUpdatedInItsOwnBuffer) {
  auto w = loom::randn({64, 64});
  auto x = loom::randn({8, 64});
  loom::sync();
  const float* buffer = w.data_ptr<float>();
  auto step = [&] {
    {
      auto y = loom::matmul(x, w);               // a library step reads w
      auto g = loom::matmul(x.t(), y).index_select(0, loom::arange(64));  // a step that could fail
      w.sub_(g * 0.01);                          // the last kernel writes w
    }
    w.data_ptr<float>();
  };
  step();  // compile
  const int64_t bytes = loom::metrics().bytes_allocated;
  step();
  EXPECT_EQ(w.data_ptr<float>(), buffer);
  EXPECT_EQ(loom::metrics().bytes_allocated, bytes);  // w's new value needed no buffer of its own
}

// A run that fails after nothing was written leaves the donated buffer as
// it was: the update runs again, from the old value, on the next read.
TEST_F(JitTest, AFailedRunLeavesADonatedBufferUntouched) {
  auto w = loom::arange(16, loom::kFloat).reshape({4, 4}).clone();
  w.data_ptr<float>();
  auto picked = w.index_select(0, loom::tensor({0, 9}, loom::kLong));  // 9 is out of range: fails when run
  w.mul_(0.5);
  EXPECT_THROW(picked.sum().item<float>(), loom::Error);
  std::vector<float> want;
  for (int i = 0; i < 16; ++i) want.push_back(0.5f * i);
  EXPECT_EQ(w.to_vector<float>(), want);
}

}  // namespace

namespace {

// Kernels alike compile to one function (jit/llvm share_functions), each
// run with its own buffers, scalars and error nodes: eight layers
// tanh(h W_i * s_i + b_i), each over the last one's result with its own
// weight, bias and scale (a runtime scalar), are eight GEMM kernels and one
// function, and compute what the reference computes (each kernel reads its
// own buffers and scalar through the shared code).
std::vector<float> layers(int64_t* functions, int64_t* kernels) {
  loom::manual_seed(3);
  loom::Tensor h = loom::randn({16, 24});
  std::vector<loom::Tensor> w, b;
  for (int i = 0; i < 8; ++i) w.push_back(loom::randn({24, 24}) * 0.3), b.push_back(loom::randn({24}));
  loom::sync();
  const loom::Metrics m0 = loom::metrics();
  for (int i = 0; i < 8; ++i) h = loom::tanh(loom::matmul(h, w[i]) * (0.5 + 0.1 * i) + b[i]);
  std::vector<float> out = h.to_vector<float>();
  const loom::Metrics m1 = loom::metrics();
  *functions = m1.kernels_compiled - m0.kernels_compiled;
  *kernels = m1.kernels_launched - m0.kernels_launched;
  return out;
}

TEST_F(JitTest, KernelsAlikeCompileToOneFunction) {
  int64_t functions = 0, kernels = 0;
  const std::vector<float> llvm = layers(&functions, &kernels);
  EXPECT_EQ(kernels, 8);
  // Compiled here unless the disk cache held the object (then none);
  // tests/internal's LlvmCodegen.KernelsAlikeShareOneFunction checks the
  // sharing itself.
  EXPECT_LE(functions, 1);
  loom::set_backend("reference");
  const std::vector<float> reference = layers(&functions, &kernels);
  loom::set_backend("llvm");
  ASSERT_EQ(llvm.size(), reference.size());
  for (size_t i = 0; i < llvm.size(); ++i) EXPECT_NEAR(llvm[i], reference[i], 1e-5) << i;
}

// A chain far longer than a kernel may hold (ir::kMaxKernelExprs) runs as
// a few kernels, all alike and so one function, and computes what the
// host computes: the same float operations in the same order. As one
// kernel this chain took 16 s to compile, and the lowering's recursion
// nearly ran out of stack.
TEST_F(JitTest, AChainOfTenThousandOpsRunsAsKernelsUnderTheBound) {
  const int64_t saved = loom::max_pending_nodes();
  loom::set_max_pending_nodes(30000);
  const std::vector<float> xs = {0.5f, -1.25f, 3.0f, 0.001f, -7.5f, 2.0f, 0.0f, 1e-3f};
  loom::Tensor x = loom::tensor(xs, loom::kFloat);
  loom::sync();
  const loom::Metrics m0 = loom::metrics();
  loom::Tensor y = x;
  constexpr int kSteps = 5000;  // two nodes a step
  for (int i = 0; i < kSteps; ++i) y = y * 0.999f + x;
  const std::vector<float> got = y.to_vector<float>();
  const loom::Metrics m1 = loom::metrics();
  loom::set_max_pending_nodes(saved);
  EXPECT_GE(m1.kernels_launched - m0.kernels_launched, 10);
  // The first piece, the last and the pieces between (alike: one function);
  // none with a warm disk cache.
  EXPECT_LE(m1.kernels_compiled - m0.kernels_compiled, 4);
  ASSERT_EQ(got.size(), xs.size());
  for (size_t e = 0; e < xs.size(); ++e) {
    float want = xs[e];
    for (int i = 0; i < kSteps; ++i) want = static_cast<float>(want * 0.999f) + xs[e];
    EXPECT_NEAR(got[e], want, 1e-5 * std::fabs(want) + 1e-6) << e;
  }
}

// y = y - y.mean() + x, 100 times: every mean reads the chain so far, so
// one row kernel would evaluate it once per phase (16 s of LLVM for 100
// steps, minutes for 200). Split at the bound, it computes what the host
// computes in double, within float rounding.
TEST_F(JitTest, ChainedMeansRunAsKernelsUnderTheBound) {
  constexpr int kSteps = 100, kN = 16;
  std::vector<std::vector<float>> xs(kSteps, std::vector<float>(kN));
  for (int i = 0; i < kSteps; ++i)
    for (int e = 0; e < kN; ++e) xs[i][e] = static_cast<float>(std::sin(0.37 * i + 1.3 * e));
  std::vector<loom::Tensor> ts;
  for (const auto& v : xs) ts.push_back(loom::tensor(v, loom::kFloat));
  loom::sync();
  const loom::Metrics m0 = loom::metrics();
  loom::Tensor y = ts[0];
  for (int i = 1; i < kSteps; ++i) y = y - y.mean() + ts[i];
  const std::vector<float> got = y.to_vector<float>();
  const loom::Metrics m1 = loom::metrics();
  EXPECT_GE(m1.kernels_launched - m0.kernels_launched, 3);
  std::vector<double> want(xs[0].begin(), xs[0].end());
  for (int i = 1; i < kSteps; ++i) {
    double mean = 0;
    for (double v : want) mean += v;
    mean /= kN;
    for (int e = 0; e < kN; ++e) want[e] = want[e] - mean + xs[i][e];
  }
  ASSERT_EQ(got.size(), want.size());
  for (int e = 0; e < kN; ++e) EXPECT_NEAR(got[e], want[e], 1e-4) << e;
}

// Many outputs in one graph, each an in-place update of its own input:
// every one is written into its input's buffer (no copy back), the check
// of every output against every input staying cheap (it walked every step
// for each pair: 4,000 outputs took 30 s).
TEST_F(JitTest, ManyInPlaceUpdatesInOneGraphAreAllDonated) {
  constexpr int kTensors = 600;
  std::vector<loom::Tensor> ts;
  for (int i = 0; i < kTensors; ++i) ts.push_back(loom::full({8}, static_cast<float>(i), loom::kFloat));
  loom::sync();
  const loom::Metrics m0 = loom::metrics();
  for (auto& t : ts) t.mul_(2).add_(1);
  loom::sync();
  const loom::Metrics m1 = loom::metrics();
  EXPECT_EQ(m1.bytes_copied_back, m0.bytes_copied_back);
  for (int i = 0; i < kTensors; ++i) {
    const std::vector<float> v = ts[i].to_vector<float>();
    for (float f : v) ASSERT_EQ(f, 2.0f * i + 1) << i;
  }
}

// A product's operand is read through the cheap producers over a library
// output (sign(sign(x[idx])): the packing applies both signs). Writing into
// the inner sign through a view gives it a buffer after boundaries() chose
// that chain; the product then read the outer sign, which had none, through
// another node's buffer at stride 0 (random graph seed 51615: every row of
// the product the same). Found by the differential test.
TEST_F(JitTest, ProductOperandWhoseProducerChainGainsABufferLater) {
  const std::vector<float> xs = {0.5f, -1.f, 2.f, -0.25f, 0.f, 3.f,  -2.f, 1.f, 0.75f,
                                 -3.f, 0.5f, 1.5f, 1.f,   2.f, -1.f, 0.f,  -0.5f, 2.5f};
  loom::Tensor x = loom::tensor(xs, loom::kFloat).reshape({3, 6});
  loom::Tensor idx = loom::tensor(std::vector<int64_t>{2, 0, 1}, loom::kLong);
  loom::sync();
  loom::Tensor y, z;
  {
    // Only y and z stay alive, y first: the product comes before the
    // scatter in the graph, as in the seed's program.
    loom::Tensor inner = x.index_select(0, idx).sign();
    y = loom::linear(inner.sign(), x);
    inner.transpose(0, 1).sub_(1.5);
    z = inner * 2;
  }
  const std::vector<float> got = y.to_vector<float>();
  const std::vector<float> got_z = z.to_vector<float>();
  auto sgn = [](float v) { return static_cast<float>((v > 0) - (v < 0)); };
  const int64_t rows[3] = {2, 0, 1};
  ASSERT_EQ(got.size(), 9u);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      float want = 0;
      for (int k = 0; k < 6; ++k) want += sgn(xs[rows[i] * 6 + k]) * xs[j * 6 + k];
      EXPECT_FLOAT_EQ(got[i * 3 + j], want) << i << "," << j;
    }
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 6; ++k) EXPECT_FLOAT_EQ(got_z[i * 6 + k], 2 * (sgn(xs[rows[i] * 6 + k]) - 1.5f));
}

// A failed check in one of several kernels sharing a function names that
// kernel's op and line, not the first sharer's.
TEST_F(JitTest, AFailureInASharedFunctionNamesItsOwnKernel) {
  loom::Tensor x = loom::randn({4, 6});
  loom::Tensor good = loom::tensor({0, 5, 2, 1}).unsqueeze(1);
  loom::Tensor bad = loom::tensor({0, 5, 7, 1}).unsqueeze(1);
  loom::sync();
  loom::Tensor a = x.gather(1, good).exp();
  loom::Tensor b = (x + a).gather(1, good).exp();
  const int bad_line = __LINE__ + 1;
  loom::Tensor c = (x + b).gather(1, bad).exp();
  loom::Tensor d = (x + c).gather(1, good).exp();
  const std::string msg = loom_test::error_of([&] { d.to_vector<float>(); });
  EXPECT_NE(msg.find("index 7 is out of bounds"), std::string::npos) << msg;
  EXPECT_NE(msg.find("jit_test.cpp:" + std::to_string(bad_line)), std::string::npos) << msg;
}

}  // namespace
