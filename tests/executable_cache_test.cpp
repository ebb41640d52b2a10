// The in-memory executable cache is bounded by bytes: past its limit the
// executables used least recently are evicted (counted in metrics), and a
// graph that comes back compiles (or loads from disk) again. What runs an
// evicted executable (a loom::compile trace) keeps it alive.
#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::BackendTest;

class ExecutableCacheTest : public BackendTest {
 protected:
  void SetUp() override {
    BackendTest::SetUp();
    limit_ = loom::executable_cache_limit();
    loom::clear_executable_cache();
    loom::reset_metrics();
  }
  void TearDown() override {
    loom::set_executable_cache_limit(limit_);
    BackendTest::TearDown();
  }
  // Graph `which` of three distinct ones (another shape each).
  static double run(int which) {
    const Tensor x = loom::ones({8, 10 + which});
    const Tensor s = (x * 2 + 1).sum();
    return s.item<double>();
  }
  int64_t limit_ = 0;
};

TEST_P(ExecutableCacheTest, TheLeastRecentlyUsedExecutableIsEvictedFirst) {
  EXPECT_EQ(run(0), 3.0 * 8 * 10);
  const int64_t one = loom::metrics().executable_cache_bytes;
  ASSERT_GT(one, 0);
  loom::set_executable_cache_limit(one * 5 / 2);  // room for two of these
  EXPECT_EQ(run(1), 3.0 * 8 * 11);
  EXPECT_EQ(run(0), 3.0 * 8 * 10);  // A used after B: B is now the oldest
  EXPECT_EQ(run(2), 3.0 * 8 * 12);  // C evicts B
  loom::Metrics m = loom::metrics();
  EXPECT_EQ(m.executables_evicted, 1);
  EXPECT_EQ(m.executables_cached, 2);
  EXPECT_LE(m.executable_cache_bytes, one * 5 / 2);
  const int64_t misses = m.cache_misses;
  EXPECT_EQ(run(0), 3.0 * 8 * 10);  // still cached
  EXPECT_EQ(loom::metrics().cache_misses, misses);
  EXPECT_EQ(run(1), 3.0 * 8 * 11);  // evicted: compiled again
  EXPECT_EQ(loom::metrics().cache_misses, misses + 1);
}

TEST_P(ExecutableCacheTest, LoweringTheLimitEvictsAtOnceButNeverTheExecutableJustCompiled) {
  run(0);
  run(1);
  loom::set_executable_cache_limit(1);  // smaller than any executable
  EXPECT_EQ(loom::metrics().executables_cached, 0);
  EXPECT_EQ(loom::metrics().executables_evicted, 2);
  EXPECT_EQ(run(2), 3.0 * 8 * 12);  // over the limit alone, it is kept while it is the newest
  EXPECT_EQ(loom::metrics().executables_cached, 1);
  EXPECT_EQ(run(0), 3.0 * 8 * 10);
  EXPECT_EQ(loom::metrics().executables_cached, 1);
  loom::set_executable_cache_limit(0);  // no bound
  run(1);
  run(2);
  EXPECT_EQ(loom::metrics().executables_cached, 3);
}

TEST_P(ExecutableCacheTest, ACompiledFunctionReplaysAnEvictedExecutable) {
  Tensor w = loom::full({4}, 2.0);
  auto step = loom::compile([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * w + 1}; });
  EXPECT_TRUE(loom_test::all_close(step({loom::ones({4})})[0], {3, 3, 3, 3}));
  loom::set_executable_cache_limit(1);
  run(0);  // evicts the trace's executable from the cache
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(loom_test::all_close(step({loom::full({4}, 1.0 * i)})[0], {2.0 * i + 1, 2.0 * i + 1, 2.0 * i + 1, 2.0 * i + 1}));
}

LOOM_INSTANTIATE_BACKENDS(ExecutableCacheTest);

}  // namespace
