// Sizes that change between calls (loom::set_dynamic_shapes,
// loom::mark_dynamic): once a graph's sizes are arguments of its kernels,
// a new size lowers the graph again and runs the kernels compiled before,
// with the same numbers the reference backend computes; a size of 1, which
// decides code, compiles its own.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using loom::Tensor;

// The mode for one test, then the one before.
class DynamicMode {
 public:
  explicit DynamicMode(loom::DynamicShapes m) : was_(loom::set_dynamic_shapes(m)) {}
  ~DynamicMode() { loom::set_dynamic_shapes(was_); }

 private:
  loom::DynamicShapes was_;
};

// Every kind of kernel whose numbers move with n: a GEMM with its
// epilogue, rows of fixed length, a reduction over the n rows, a
// transpose, rows of length n (too long for nothing: no stack stash),
// a fused gather, a variance and a whole-tensor mean (split in parts),
// an argmax, random numbers (their counters are strides) and an arange.
std::vector<Tensor> program(const Tensor& x, const Tensor& w, const Tensor& idx) {
  const int64_t n = x.size(0);
  return {loom::softmax(loom::relu(loom::matmul(x, w) + 1), 1),
          x.sum(0),
          (x.t() * 2).contiguous(),
          loom::softmax(x.t(), 1),
          loom::gather(x, 1, idx) * 3,
          x.var({0}),
          x.mean(),
          x.argmax(1),
          loom::rand({n, 3}, loom::TensorOptions().device(x.device())) + x.slice(1, 0, 3),
          loom::arange(n, loom::TensorOptions(loom::kLong).device(x.device())).to(loom::kFloat) * x.select(1, 0)};
}

struct Inputs {
  Tensor x, w, idx;
};
Inputs inputs(int64_t n) {
  loom::manual_seed(static_cast<uint64_t>(n));
  Inputs in{loom::randn({n, 16}), loom::randn({16, 8}), loom::randint(0, 16, {n, 4})};
  loom::sync();
  return in;
}

// The program's values at n on `backend`, random numbers seeded alike.
std::vector<std::vector<double>> values_on(const std::string& backend, const Inputs& in, uint64_t seed) {
  const std::string was = loom::set_backend(backend);
  loom::manual_seed(seed);
  std::vector<Tensor> as_double;  // all recorded before the first read: one graph
  for (const Tensor& t : program(in.x, in.w, in.idx)) as_double.push_back(t.to(loom::kDouble));
  std::vector<std::vector<double>> out;
  for (const Tensor& t : as_double) out.push_back(t.to_vector<double>());
  loom::set_backend(was);
  return out;
}

TEST(SizesAsArgs, ANewSizeRunsTheKernelsCompiledBeforeAndMatchesTheReference) {
  DynamicMode automatic(loom::DynamicShapes::Automatic);
  int64_t code_after_second = -1;
  const std::vector<int64_t> sizes = {24, 17, 18, 25, 31, 40, 57, 64, 100};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    const Inputs in = inputs(n);
    const loom::Metrics before = loom::metrics();
    const auto got = values_on("llvm", in, 7), want = values_on("reference", in, 7);
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < got.size(); ++o) EXPECT_TRUE(loom_test::all_close(got[o], want[o], 1e-4, 1e-5)) << "n " << n << " output " << o;
    const loom::Metrics after = loom::metrics();
    if (i == 0) EXPECT_EQ(after.compiles_sizes_as_args, before.compiles_sizes_as_args) << "the first size is static";
    if (i == 1) {
      EXPECT_EQ(after.compiles_sizes_as_args, before.compiles_sizes_as_args + 1) << "the second size takes arguments";
      code_after_second = after.jit_compiles;
    }
    if (i >= 2) {
      // Only the program's own graph runs on the llvm backend here.
      EXPECT_EQ(after.compiles_sizes_as_args, before.compiles_sizes_as_args + 1) << "n " << n;
      EXPECT_EQ(after.executables_resized, before.executables_resized + 1) << "n " << n;
      EXPECT_EQ(after.jit_compiles, code_after_second) << "n " << n << ": no code compiled";
    }
  }
}

// The same on a GPU: the cuda backend's kernels read their sizes from
// their argument tables, the products keep the tile configuration the
// first size chose, and each size matches the reference on the host.
TEST(SizesAsArgs, OnAGpuANewSizeRunsTheKernelsCompiledBefore) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU here: " << loom::cuda::unavailable_reason();
  DynamicMode automatic(loom::DynamicShapes::Automatic);
  // Multiples of 4: a GPU kernel whose innermost loop is one takes four
  // lanes a thread, other lengths one (a size class of their own).
  const std::vector<int64_t> sizes = {24, 16, 20, 28, 40, 100, 36, 64};
  int64_t resized = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    const Inputs in = inputs(n);
    const loom::Device gpu(loom::kCUDA, 0);
    const Inputs on_gpu{in.x.to(gpu), in.w.to(gpu), in.idx.to(gpu)};
    loom::sync(gpu);
    const loom::Metrics before = loom::metrics();
    loom::manual_seed(11);
    std::vector<Tensor> as_double;
    for (const Tensor& t : program(on_gpu.x, on_gpu.w, on_gpu.idx)) as_double.push_back(t.to(loom::kDouble));
    std::vector<std::vector<double>> got;
    for (const Tensor& t : as_double) got.push_back(t.to_vector<double>());
    const loom::Metrics after = loom::metrics();
    const auto want = values_on("reference", in, 11);
    for (size_t o = 0; o < got.size(); ++o) EXPECT_TRUE(loom_test::all_close(got[o], want[o], 1e-4, 1e-5)) << "n " << n << " output " << o;
    // A size may plan a kernel otherwise (its lanes, a product's tiles, a
    // sum split in another number of parts, a number that had not changed
    // before): a class of its own, compiled once. On an H200 fewer than
    // five of the six later sizes were resized with no code here (W9, one
    // model at 32 lengths, resizes 28 of 32): the count is printed.
    if (i >= 2) resized += after.executables_resized - before.executables_resized;
  }
  std::printf("[ sizes as arguments ] %lld of %zu later sizes resized on the GPU\n", static_cast<long long>(resized),
              sizes.size() - 2);
  EXPECT_GE(resized, 1);
}

// Sizes of 1 decide code (a broadcast, a loop that is not one): such a
// size compiles kernels of its own, and both still match the reference.
TEST(SizesAsArgs, ASizeOfOneIsAGuardNotAnArgument) {
  DynamicMode always(loom::DynamicShapes::Always);
  for (int64_t n : {9, 1, 10}) {
    const Inputs in = inputs(n);
    const auto got = values_on("llvm", in, 3), want = values_on("reference", in, 3);
    for (size_t o = 0; o < got.size(); ++o) EXPECT_TRUE(loom_test::all_close(got[o], want[o], 1e-4, 1e-5)) << "n " << n << " output " << o;
  }
}

// The recompile log says a shape change now takes sizes as arguments.
TEST(SizesAsArgs, TheRecompileLogSaysSizesAreArguments) {
  DynamicMode automatic(loom::DynamicShapes::Automatic);
  auto run = [](int64_t n) {
    const Tensor x = loom::ones({n, 5});
    loom::sync();
    return (loom::exp(x) * 2).sum(1).sum().item<float>();
  };
  run(12);
  loom::set_log("recompiles");
  ::testing::internal::CaptureStderr();
  const float v = run(13);
  const std::string printed = ::testing::internal::GetCapturedStderr();
  loom::set_log("");
  EXPECT_NEAR(v, 13 * 5 * 2 * std::exp(1.0f), 1e-3);
  EXPECT_NE(printed.find("(dim 0: 12 -> 13) [sizes as arguments]"), std::string::npos) << printed;
}

// A loom::compile'd function called at a new batch size records its
// function again (its C++ may compute with sizes), and the compile of that
// trace takes the kernels of the size before: from the third size on,
// nothing is compiled.
TEST(SizesAsArgs, ACompiledFunctionAtANewBatchSizeCompilesNoCode) {
  DynamicMode automatic(loom::DynamicShapes::Automatic);
  using TL = std::vector<Tensor>;
  loom::CompiledFunction f = loom::compile([](const TL& in) { return TL{(loom::tanh(in[0]) * 3 + 1).sum(0)}; });
  for (int64_t n : {6, 9, 12, 31}) {
    const Tensor x = loom::full({n, 3}, 0.5);
    loom::sync();
    const loom::Metrics before = loom::metrics();
    const std::vector<double> got = f({x})[0].to_vector<double>();
    const loom::Metrics after = loom::metrics();
    EXPECT_TRUE(loom_test::all_close(got, std::vector<double>(3, n * (std::tanh(0.5) * 3 + 1)), 1e-5, 1e-5)) << n;
    if (n >= 12) {
      EXPECT_EQ(after.executables_resized, before.executables_resized + 1) << n;
      EXPECT_EQ(after.jit_compiles, before.jit_compiles) << n;
    }
  }
  EXPECT_EQ(f.traces(), 4u);
}

TEST(SizesAsArgs, MarkingAnUndefinedTensorNamesTheCall) {
  EXPECT_LOOM_ERROR(loom::mark_dynamic(Tensor()), "mark_dynamic", "undefined");
}

// A training loop over 11 samples in batches of 4 whose data is marked
// dynamic: the short last batch's step runs the full batches' kernels
// (no code compiled for it), every later epoch compiles nothing, and the
// losses are the static run's.
TEST(SizesAsArgs, AShortLastBatchCompilesNoCodeWhenTheDataIsMarked) {
  auto train = [](bool mark, std::vector<float>& losses, int64_t& code_for_short) {
    loom::manual_seed(5);
    loom::nn::Sequential model(loom::nn::Linear(5, 16), loom::nn::ReLU(), loom::nn::Linear(16, 3));
    loom::optim::SGD opt(model->parameters(), loom::optim::SGDOptions(0.1).momentum(0.9));
    const Tensor x = loom::randn({11, 5}), y = loom::randint(0, 3, {11});
    loom::sync();
    if (mark) loom::mark_dynamic(x), loom::mark_dynamic(y);
    for (int epoch = 0; epoch < 3; ++epoch)
      for (int64_t i = 0; i < 11; i += 4) {
        const int64_t n = std::min<int64_t>(4, 11 - i);
        const int64_t code_before = loom::metrics().jit_compiles;
        opt.zero_grad();
        Tensor loss = loom::cross_entropy_loss(model->forward(x.slice(0, i, i + n)), y.slice(0, i, i + n));
        loss.backward();
        opt.step();
        losses.push_back(loss.item<float>());
        if (epoch == 0 && n == 3) code_for_short = loom::metrics().jit_compiles - code_before;
      }
  };
  std::vector<float> fixed, marked;
  int64_t code_static = -1, code_marked = -1;
  {
    DynamicMode never(loom::DynamicShapes::Never);
    train(false, fixed, code_static);
  }
  DynamicMode automatic(loom::DynamicShapes::Automatic);
  loom::clear_executable_cache();  // the static run's executables have the same keys
  const loom::Metrics before = loom::metrics();
  train(true, marked, code_marked);
  const loom::Metrics after = loom::metrics();
  (void)code_static;  // the static short batch's code may come from the disk cache: not checked
  EXPECT_EQ(code_marked, 0) << "the short batch's step compiled code";
  EXPECT_GE(after.executables_resized, before.executables_resized + 1);
  ASSERT_EQ(fixed.size(), marked.size());
  for (size_t i = 0; i < fixed.size(); ++i) EXPECT_NEAR(marked[i], fixed[i], 1e-5 + 1e-5 * std::abs(fixed[i])) << "step " << i;
}

}  // namespace
