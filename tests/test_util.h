// Helpers shared by the test files: closeness checks and the backend
// parameterization. Every op test runs once per CPU backend in
// kTestBackends: the two CPU backends and the GPU.
#pragma once
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace loom_test {

// The backends every op test runs on: the two CPU backends and the GPU,
// and one more named by LOOM_TEST_EXTRA_BACKEND (CTest's run of the op
// suites on the example backend, runtime/interp).
inline std::vector<std::string> test_backends() {
  std::vector<std::string> all = {"reference", "llvm", "cuda"};
  if (const char* extra = std::getenv("LOOM_TEST_EXTRA_BACKEND"); extra && *extra) all.push_back(extra);
  return all;
}
inline const std::vector<std::string> kTestBackends = test_backends();

// Selects a backend for the duration of a test. "cuda" makes the GPU the
// default device (tensors made without a device live there, results come
// back through to_vector/item) and skips, saying why, where there is none.
class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  // The default device is set here, not in SetUp, so that tensors a fixture
  // makes in its member initializers are on the test's device too.
  BackendTest() {
    if (GetParam() == "cuda" && loom::cuda::is_available()) loom::set_default_device(loom::kCUDA);
  }
  ~BackendTest() override { loom::set_default_device(loom::kCPU); }
  void SetUp() override {
    if (GetParam() == "cuda") {
      if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU here: " << loom::cuda::unavailable_reason();
      return;
    }
    previous_ = loom::set_backend(GetParam());
  }
  void TearDown() override {
    if (!previous_.empty()) loom::set_backend(previous_);
  }
  bool on_gpu() const { return GetParam() == "cuda"; }
  // Where a backend has reported a graph that failed on bad data: the CPU
  // at its sync; a GPU at the next wait for it (api/src/late_checks.h).
  void wait_for_device() const {
    if (on_gpu()) loom::cuda::synchronize();
  }
  std::string previous_;
};

// Element-wise |a - b| <= atol + rtol * |b|; NaNs must match NaNs.
inline ::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want,
                                            double rtol = 1e-5, double atol = 1e-6) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != expected " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    if (!(std::abs(g - w) <= atol + rtol * std::abs(w)))
      return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", expected " << w;
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult all_close(const loom::Tensor& t, const std::vector<double>& want,
                                            double rtol = 1e-5, double atol = 1e-6) {
  return all_close(t.to_vector<double>(), want, rtol, atol);
}

inline std::vector<int64_t> sizes_of(const loom::Tensor& t) { return t.sizes().vec(); }

// The loom::Error text of f(), or a test failure if it does not throw one.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const loom::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a loom::Error";
  return "";
}

inline std::string file_name(const char* path) {
  std::string p = path;
  return p.substr(p.find_last_of('/') + 1);
}

// A GEMM tuning variable set for the products planned after set() (the
// CUDA tuner's LOOM_GEMM_CANDIDATE / LOOM_GEMM_SPLIT, the CPU driver's
// LOOM_GEMM_SG): each set() drops the executables, so the next run plans
// afresh; unset and dropped again when the scope ends.
class GemmHook {
 public:
  explicit GemmHook(const char* name) : name_(name) {}
  ~GemmHook() {
    unsetenv(name_);
    loom::clear_executable_cache();
  }
  GemmHook(const GemmHook&) = delete;
  GemmHook& operator=(const GemmHook&) = delete;
  void set(const std::string& value) {
    setenv(name_, value.c_str(), 1);
    loom::clear_executable_cache();
  }

 private:
  const char* name_;
};

// A training loop's record: each step's loss, and the graphs compiled after
// its first two steps (a step compiles at most twice, the second time once
// the optimizer has state; after that every step must replay).
struct TrainingRun {
  std::vector<float> losses;
  int64_t compiles_after_two = 0;
};
template <class Step>
TrainingRun train_for(int steps, Step step) {
  TrainingRun run;
  for (int i = 0; i < steps; ++i) {
    const int64_t before = loom::metrics().cache_misses;
    run.losses.push_back(step());
    if (i >= 2) run.compiles_after_two += loom::metrics().cache_misses - before;
  }
  return run;
}

}  // namespace loom_test

// A record-time error: names the op, says what was wrong, points at the
// test file that made the call.
#define EXPECT_LOOM_ERROR(stmt, op, fragment)                                          \
  do {                                                                                 \
    std::string msg_ = loom_test::error_of([&] { (void)(stmt); });                     \
    EXPECT_NE(msg_.find(op), std::string::npos) << msg_;                               \
    EXPECT_NE(msg_.find(fragment), std::string::npos) << msg_;                         \
    EXPECT_NE(msg_.find(loom_test::file_name(__FILE__)), std::string::npos) << msg_;   \
  } while (0)

// Instantiates a BackendTest suite over every backend.
#define LOOM_INSTANTIATE_BACKENDS(Suite) \
  INSTANTIATE_TEST_SUITE_P(Backends, Suite, ::testing::ValuesIn(loom_test::kTestBackends), \
                           [](const auto& info) { return info.param; })
