// The lazy core, observed from outside: recording runs nothing, a sync runs
// one graph and computes each node once, the cache key ignores data and
// scalars but not shapes, dtypes or ops, a forced hash collision is caught,
// big graphs are cut, a sync frees the graph it ran, memory stays flat over
// a long loop, threads record and sync independently, and a failed run
// poisons only what it failed to compute.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::BackendTest;

// Resident memory of this process in KiB (VmRSS), or -1 if unknown.
int64_t resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  return -1;
}

// A materialized random tensor (an Input leaf), so graphs start from data.
Tensor materialized(std::vector<int64_t> sizes, loom::ScalarType dtype = loom::kFloat) {
  Tensor t = loom::randn(sizes, dtype);
  loom::sync();
  return t;
}

class LazyTest : public BackendTest {
 protected:
  void SetUp() override {
    BackendTest::SetUp();
    saved_max_pending_ = loom::max_pending_nodes();
    loom::set_max_pending_nodes(10000);
    loom::sync_all();  // nothing left pending by earlier tests
  }
  void TearDown() override {
    loom::testing::force_graph_hash(0);
    loom::set_max_pending_nodes(saved_max_pending_);
    BackendTest::TearDown();
  }
  int64_t saved_max_pending_ = 10000;
};

// ---------------------------------------------------------------- laziness

TEST_P(LazyTest, RecordingRunsNothingAndOneSyncRunsOneGraph) {
  Tensor x = materialized({16});
  const loom::Metrics before = loom::metrics();
  Tensor y = x;
  for (int i = 0; i < 1000; ++i) y = y + x;
  const loom::Metrics recorded = loom::metrics();
  EXPECT_EQ(recorded.graphs_materialized, before.graphs_materialized);
  EXPECT_EQ(recorded.kernels_launched, before.kernels_launched);
  EXPECT_EQ(recorded.graph_cuts, before.graph_cuts);
  EXPECT_GE(recorded.nodes_recorded - before.nodes_recorded, 1000);
  EXPECT_TRUE(y.is_pending());

  loom::sync();
  const loom::Metrics synced = loom::metrics();
  EXPECT_EQ(synced.graphs_materialized, before.graphs_materialized + 1);
  EXPECT_FALSE(y.is_pending());
  std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(yv[i], 1001.0 * xv[i], 1e-3 * (1 + std::abs(1001.0 * xv[i])));
  // Reading computed values runs nothing more.
  EXPECT_EQ(loom::metrics().graphs_materialized, synced.graphs_materialized);
}

TEST_P(LazyTest, ASharedSubexpressionIsComputedOnce) {
  Tensor x = materialized({8});
  const loom::Metrics before = loom::metrics();
  Tensor a = x * 2;  // mul (x, $2)
  Tensor b = a + 1;  // add (a, $1)
  Tensor c = a - 1;  // sub (a, $1)
  b.to_vector<float>();  // one sync computes every live pending tensor: a, b and c
  const loom::Metrics after = loom::metrics();
  EXPECT_EQ(after.graphs_materialized, before.graphs_materialized + 1);
  // x, mul, add, sub (each scalar is its node's operand): `a` appears once although two results use it.
  EXPECT_EQ(after.graph_nodes - before.graph_nodes, 4);
  EXPECT_FALSE(a.is_pending());
  EXPECT_FALSE(c.is_pending());
  std::vector<double> xv = x.to_vector<double>(), av, bv, cv;
  for (double v : xv) {
    av.push_back(2 * v);
    bv.push_back(2 * v + 1);
    cv.push_back(2 * v - 1);
  }
  EXPECT_TRUE(all_close(a, av));
  EXPECT_TRUE(all_close(b, bv));
  EXPECT_TRUE(all_close(c, cv));
  EXPECT_EQ(loom::metrics().graphs_materialized, after.graphs_materialized);  // nothing ran again
}

// ---------------------------------------------------------------- the cache key

// The program every key test varies: ((x * s) + t).sum(-1).
Tensor program(const Tensor& x, double s, double t) { return (x * s + t).sum({-1}); }

TEST_P(LazyTest, SameProgramOnOtherDataHasTheSameKeyAndHitsTheCache) {
  loom::clear_executable_cache();
  Tensor x1 = materialized({4, 8});
  Tensor x2 = materialized({4, 8});
  EXPECT_EQ(loom::testing::graph_key(program(x1, 2, 1)), loom::testing::graph_key(program(x2, 2, 1)));

  // One at a time: a sync computes every live pending tensor, so two live
  // results would make one two-output graph.
  const loom::Metrics before = loom::metrics();
  program(x1, 2, 1).to_vector<float>();
  program(x2, 2, 1).to_vector<float>();
  const loom::Metrics after = loom::metrics();
  EXPECT_EQ(after.cache_misses - before.cache_misses, 1);
  EXPECT_EQ(after.cache_hits - before.cache_hits, 1);
}

TEST_P(LazyTest, ADifferentScalarOperandIsARuntimeArgumentNotANewKey) {
  Tensor x = materialized({4, 8});
  size_t n1 = 0, n2 = 0;
  EXPECT_EQ(loom::testing::graph_key(program(x, 2, 1), &n1), loom::testing::graph_key(program(x, -3.5, 100), &n2));
  EXPECT_EQ(n1, n2);
  program(x, 2, 1).to_vector<float>();  // compiles (or hits from an earlier test)
  const loom::Metrics before = loom::metrics();
  std::vector<double> got = program(x, -3.5, 100).to_vector<double>();
  const loom::Metrics after = loom::metrics();
  EXPECT_EQ(after.cache_misses, before.cache_misses);
  EXPECT_EQ(after.cache_hits - before.cache_hits, 1);
  // ... and the new scalars were used.
  std::vector<double> xv = x.to_vector<double>(), want(4, 0.0);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) want[i] += xv[i * 8 + j] * -3.5 + 100;
  EXPECT_TRUE(all_close(got, want, 1e-4, 1e-3));
}

// A scalar operand is part of its op's node (ir::has_scalar_operand), and
// clamp's two bounds are one Clamp node's runtime scalars: one node per op,
// and none of their values is in the key.
TEST_P(LazyTest, ScalarOperandsAndClampBoundsAreFoldedRuntimeArguments) {
  Tensor x = materialized({2, 8});
  auto step = [&](double a, double b, double lo, double hi) { return loom::clamp(x * a - b, lo, hi); };
  const int64_t recorded = loom::metrics().nodes_recorded;
  Tensor r = step(2, 1, -1, 1);
  EXPECT_EQ(loom::metrics().nodes_recorded - recorded, 3);  // mul, sub, clamp: no Full leaf
  size_t n1 = 0, n2 = 0;
  const uint64_t k1 = loom::testing::graph_key(r, &n1);
  EXPECT_EQ(n1, 4u);  // and the input
  EXPECT_EQ(loom::testing::graph_key(step(-0.5, 3, 0, 0.25), &n2), k1);
  EXPECT_EQ(n2, n1);
  EXPECT_NE(loom::testing::graph_key(loom::clamp(x * 2, -1, std::nullopt)), k1);  // another form, another key
  r.to_vector<float>();  // compiles (or hits from an earlier run)
  r = Tensor();

  const loom::Metrics before = loom::metrics();
  const std::vector<float> got = step(-0.5, 3, -3.25, -2.75).to_vector<float>();
  const loom::Metrics after = loom::metrics();
  EXPECT_EQ(after.cache_misses, before.cache_misses);
  EXPECT_EQ(after.cache_hits - before.cache_hits, 1);
  // ... and the new values were used, each in float32 as the node computes it.
  const std::vector<float> xv = x.to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    const float v = xv[i] * -0.5f - 3.0f;
    EXPECT_EQ(got[i], std::min(std::max(v, -3.25f), -2.75f)) << i;
  }
}

// W5 of shared/bench-peers/WORKLOADS.md: a = tanh(tanh(s @ W1) @ W2), then
// ten times s = clamp(s * 0.99 + a * 0.01, -1, 1). One node per op (a matrix
// product is one 2-D MatMul node, a scalar operand is part of its node,
// clamp is one node), and a second step is a cache hit.
TEST_P(LazyTest, AControlStepRecordsOneNodePerOpAndReplays) {
  Tensor W1 = (materialized({64, 64}) * 0.1).clone();
  Tensor W2 = (materialized({64, 64}) * 0.1).clone();
  Tensor s0 = materialized({1, 64});
  loom::sync();
  auto step = [&] {
    Tensor a = loom::tanh(loom::tanh(s0.matmul(W1)).matmul(W2));
    Tensor s = s0;
    for (int i = 0; i < 10; ++i) s = loom::clamp(s * 0.99 + a * 0.01, -1.0, 1.0);
    return std::make_pair(a, s);
  };
  step().second.to_vector<float>();  // compiles (or hits)
  const loom::Metrics before = loom::metrics();
  auto [a, s] = step();
  const loom::Metrics recorded = loom::metrics();
  EXPECT_EQ(recorded.nodes_recorded - before.nodes_recorded, 44);  // 2 matmul, 2 tanh, 10 x (mul, mul, add, clamp)
  loom::sync();
  const loom::Metrics after = loom::metrics();
  EXPECT_EQ(after.graphs_materialized - before.graphs_materialized, 1);
  EXPECT_EQ(after.graph_nodes - before.graph_nodes, 47);  // and the three inputs
  EXPECT_EQ(after.cache_misses, before.cache_misses);
  EXPECT_EQ(after.cache_hits - before.cache_hits, 1);

  // The values, in double from the same inputs.
  const std::vector<double> w1 = W1.to_vector<double>(), w2 = W2.to_vector<double>(), sv = s0.to_vector<double>();
  std::vector<double> h(64, 0.0), av(64, 0.0), want = sv;
  for (int j = 0; j < 64; ++j) {
    for (int k = 0; k < 64; ++k) h[j] += sv[k] * w1[k * 64 + j];
    h[j] = std::tanh(h[j]);
  }
  for (int j = 0; j < 64; ++j) {
    for (int k = 0; k < 64; ++k) av[j] += h[k] * w2[k * 64 + j];
    av[j] = std::tanh(av[j]);
  }
  for (int i = 0; i < 10; ++i)
    for (int j = 0; j < 64; ++j) want[j] = std::min(std::max(want[j] * 0.99 + av[j] * 0.01, -1.0), 1.0);
  EXPECT_TRUE(all_close(a, av, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(s, want, 1e-5, 1e-5));
}

TEST_P(LazyTest, ADifferentShapeDtypeOrOpIsADifferentKey) {
  Tensor x = materialized({4, 8});
  const uint64_t base = loom::testing::graph_key(program(x, 2, 1));
  Tensor other_shape = materialized({4, 9});
  Tensor other_dtype = materialized({4, 8}, loom::kDouble);
  EXPECT_NE(loom::testing::graph_key(program(other_shape, 2, 1)), base);
  EXPECT_NE(loom::testing::graph_key(program(other_dtype, 2, 1)), base);
  EXPECT_NE(loom::testing::graph_key((x * 2 - 1).sum({-1})), base);  // sub instead of add
  EXPECT_NE(loom::testing::graph_key((x * 2 + 1).sum({0})), base);   // another reduced dim

  // Each of them misses the cache once (they were never compiled); one at a
  // time, as a sync computes every live pending tensor together.
  loom::clear_executable_cache();
  program(x, 2, 1).to_vector<float>();
  const std::vector<std::function<Tensor()>> variants = {
      [&] { return program(other_shape, 2, 1); },
      [&] { return program(other_dtype, 2, 1); },
      [&] { return (x * 2 - 1).sum({-1}); },
  };
  for (const auto& make : variants) {
    const int64_t misses = loom::metrics().cache_misses;
    make().to_vector<double>();
    EXPECT_EQ(loom::metrics().cache_misses, misses + 1);
  }
}

TEST_P(LazyTest, AForcedHashCollisionIsDetectedAndBothGraphsRunCorrectly) {
  Tensor x = materialized({6});
  loom::clear_executable_cache();
  loom::testing::force_graph_hash(0x5eed5eed5eed5eedull);
  auto plus1 = [&] { return x + 1; };
  auto sum3 = [&] { return (x * 3).sum(); };
  EXPECT_EQ(loom::testing::graph_key(plus1()), loom::testing::graph_key(sum3()));  // the same hash

  const loom::Metrics before = loom::metrics();
  std::vector<double> av = plus1().to_vector<double>();
  double bv = sum3().item<double>();  // collides with the cached x + 1: detected, compiled separately
  const loom::Metrics after = loom::metrics();
  EXPECT_GT(after.hash_collisions, before.hash_collisions);
  EXPECT_EQ(after.cache_misses - before.cache_misses, 2);
  EXPECT_EQ(loom::executable_cache_size(), 2u);

  std::vector<double> xv = x.to_vector<double>();
  double want_sum = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_NEAR(av[i], xv[i] + 1, 1e-6);
    want_sum += xv[i] * 3;
  }
  EXPECT_NEAR(bv, want_sum, 1e-4);

  // Each graph now finds its own executable among the colliding entries.
  const loom::Metrics again = loom::metrics();
  EXPECT_TRUE(all_close(plus1(), {xv[0] + 1, xv[1] + 1, xv[2] + 1, xv[3] + 1, xv[4] + 1, xv[5] + 1}));
  EXPECT_NEAR(sum3().item<double>(), want_sum, 1e-4);
  EXPECT_EQ(loom::metrics().cache_hits - again.cache_hits, 2);
  EXPECT_EQ(loom::metrics().cache_misses, again.cache_misses);
  loom::testing::force_graph_hash(0);
}

// ---------------------------------------------------------------- graph cuts and memory

TEST_P(LazyTest, AGraphLargerThanTheBoundIsCutAndStaysCorrect) {
  Tensor x = loom::full({4}, 0.5);
  loom::sync();
  loom::set_max_pending_nodes(100);
  const loom::Metrics before = loom::metrics();
  Tensor y = x;
  for (int i = 0; i < 1000; ++i) y = y + x;  // no sync here
  const loom::Metrics after = loom::metrics();
  EXPECT_GT(after.graph_cuts, before.graph_cuts);
  EXPECT_GE(after.graph_cuts - before.graph_cuts, 9);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>(4, 500.5f)));
}

// What was recorded and dropped is not counted against the bound: a loop
// whose every result dies (forward passes with nothing kept) is never cut,
// where a cut would run half of an iteration and, falling elsewhere each
// time, compile a new graph each time. A live chain still is.
TEST_P(LazyTest, ValuesDroppedBeforeTheBoundDoNotCutTheGraph) {
  Tensor x = loom::full({4}, 0.5);
  loom::sync();
  loom::set_max_pending_nodes(100);
  const loom::Metrics before = loom::metrics();
  for (int i = 0; i < 1000; ++i) {
    Tensor dropped = loom::exp(x + static_cast<double>(i)) * 2;
  }
  Tensor kept = x * 3;
  const loom::Metrics after = loom::metrics();
  EXPECT_EQ(after.graph_cuts, before.graph_cuts);
  EXPECT_EQ(after.graphs_materialized, before.graphs_materialized);
  EXPECT_GE(after.nodes_recorded - before.nodes_recorded, 2000);
  EXPECT_EQ(kept.to_vector<float>(), (std::vector<float>(4, 1.5f)));
  Tensor y = x;
  for (int i = 0; i < 1000; ++i) y = y + x;
  EXPECT_GE(loom::metrics().graph_cuts - after.graph_cuts, 9);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>(4, 500.5f)));
}

TEST_P(LazyTest, ASyncReleasesTheGraphItRan) {
  Tensor x = materialized({16});
  Tensor first = x + x;
  std::weak_ptr<const void> first_node = loom::testing::node_ref(first);
  Tensor y = first;
  first = Tensor();
  for (int i = 0; i < 999; ++i) y = y + x;
  EXPECT_FALSE(first_node.expired()) << "the pending chain keeps its first node";
  std::weak_ptr<const void> last_node = loom::testing::node_ref(y);
  loom::sync();
  EXPECT_TRUE(first_node.expired()) << "the chain's nodes outlive the sync that computed them";
  EXPECT_TRUE(last_node.expired()) << "y's value is now a buffer, not its old node";
  EXPECT_FALSE(y.is_pending());
}

TEST_P(LazyTest, ATensorDroppedBeforeItsSyncIsReleasedThenAndNeverComputed) {
  Tensor x = materialized({16});
  std::weak_ptr<const void> dropped_node;
  {
    Tensor dropped = loom::exp(x) * 2;
    dropped_node = loom::testing::node_ref(dropped);
  }
  const loom::Metrics before = loom::metrics();
  loom::sync();
  EXPECT_TRUE(dropped_node.expired()) << "the pending list still holds a dropped tensor after a sync";
  EXPECT_EQ(loom::metrics().graphs_materialized, before.graphs_materialized) << "a dropped tensor was computed";
  Tensor kept = x * 3;  // a live one beside a dropped one: only it runs
  { Tensor dropped = x * 4; }
  loom::sync();
  EXPECT_EQ(loom::metrics().graphs_materialized, before.graphs_materialized + 1);
  EXPECT_FALSE(kept.is_pending());
}

// The pending list holds what it lists (api/src/lazy.cpp): without a sync,
// a dropped tensor (and the inputs its node holds) must still be let go of
// within a bounded number of recorded ops.
TEST_P(LazyTest, TensorsDroppedWithoutASyncAreLetGoOfWithinAFewDozenOps) {
  Tensor x = materialized({16});
  std::weak_ptr<const void> first;
  {
    Tensor dropped = x * 2;
    first = loom::testing::node_ref(dropped);
  }
  for (int i = 0; i < 200; ++i) Tensor dropped = x + static_cast<double>(i);
  EXPECT_TRUE(first.expired()) << "200 ops after it was dropped, an unsynced tensor's node is still held";
  loom::sync();
}

// A thread that ends with work pending and never synced lets go of it at
// exit: its pending list, which holds the storages, is freed with the
// thread, after the node pools it releases into are still usable (a long
// chain's release grows the node drain stack).
TEST_P(LazyTest, AThreadEndingWithPendingWorkLetsGoOfIt) {
  std::weak_ptr<const void> last;
  std::thread worker([&] {
    Tensor x = materialized({16});
    Tensor y = x;
    for (int i = 0; i < 3000; ++i) y = y + x;
    last = loom::testing::node_ref(y);
  });
  worker.join();
  EXPECT_TRUE(last.expired()) << "a thread's pending chain outlived the thread";
}

TEST_P(LazyTest, ALongStepAndSyncLoopKeepsResidentMemoryFlat) {
  if (resident_kib() < 0) GTEST_SKIP() << "no /proc/self/status";
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator holds freed memory";
#endif
  Tensor x = materialized({64});
  Tensor s = materialized({64});
  int64_t at_10k = 0;
  for (int i = 1; i <= 100000; ++i) {
    s = (s * 0.99 + x * 0.01).clamp(-1.0, 1.0);
    loom::sync();
    if (i == 10000) at_10k = resident_kib();
  }
  const int64_t at_100k = resident_kib();
  EXPECT_LE(at_100k - at_10k, 4 * 1024) << "VmRSS grew from " << at_10k << " KiB to " << at_100k << " KiB";
  EXPECT_FALSE(s.is_pending());
  for (float v : s.to_vector<float>()) EXPECT_LE(std::abs(v), 1.0f);
}

// ---------------------------------------------------------------- threads

TEST_P(LazyTest, ThreadsRecordAndSyncTheirOwnGraphsConcurrently) {
  const std::string backend = GetParam();
  constexpr int kThreads = 4, kSteps = 200;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &wrong] {
      // Each thread its own program (shapes differ per thread) and data.
      Tensor x = loom::full({8 + t}, static_cast<double>(t + 1));
      Tensor acc = loom::zeros({8 + t});
      for (int k = 0; k < kSteps; ++k) {
        acc = acc + x * 2 - t;  // += 2(t+1) - t = t + 2
        if (k % 10 == 9) loom::sync();
      }
      const float want = static_cast<float>(kSteps * (t + 2));
      for (float v : acc.to_vector<float>())
        if (v != want) ++wrong;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(LazyTest, APendingTensorRecordedOnOneThreadIsReadCorrectlyOnAnother) {
  Tensor x = materialized({32});
  Tensor pending = x * 3 + 1;  // recorded here, on this thread's list
  std::vector<double> xv = x.to_vector<double>(), want;
  for (double v : xv) want.push_back(3 * v + 1);
  std::vector<double> read_there;
  Tensor made_there;
  std::thread reader([&] {
    read_there = pending.to_vector<double>();  // computed by the reading thread
    made_there = x - 1;                        // recorded there, left pending
  });
  reader.join();
  EXPECT_TRUE(all_close(read_there, want, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(pending, want, 1e-5, 1e-5));
  std::vector<double> minus1;
  for (double v : xv) minus1.push_back(v - 1);
  EXPECT_TRUE(all_close(made_there, minus1, 1e-6, 1e-6));  // read here, after its thread ended
}

// ---------------------------------------------------------------- failures

TEST_P(LazyTest, AFailedRunNamesTheOpAndLinePoisonsOnlyItsOutputsAndLaterSyncsWork) {
  Tensor x = materialized({4, 3});
  Tensor index = loom::tensor(std::vector<int64_t>{0, 7});  // 7 is out of range for dim 0 (size 4)
  Tensor fine = x * 2;                                      // pending in the same graph, not computed from the bad node
  const int bad_line = __LINE__ + 1;
  Tensor bad = x.index_select(0, index);
  Tensor bad_too = bad.sum();  // computed from it

  try {
    loom::sync();
    wait_for_device();
    ADD_FAILURE() << "the out-of-range index did not raise";
  } catch (const loom::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("index_select"), std::string::npos) << msg;
    EXPECT_NE(msg.find("lazy_test.cpp:" + std::to_string(bad_line)), std::string::npos) << msg;
  }
  // The failed values keep failing, with the same message.
  EXPECT_THROW(bad.to_vector<float>(), loom::Error);
  EXPECT_THROW(bad_too.item<float>(), loom::Error);
  // The rest of that graph was not poisoned, and later syncs work.
  std::vector<double> xv = x.to_vector<double>(), twice, plus1;
  for (double v : xv) {
    twice.push_back(2 * v);
    plus1.push_back(v + 1);
  }
  EXPECT_TRUE(all_close(fine, twice));
  EXPECT_TRUE(all_close(x + 1, plus1));
  Tensor good = x.index_select(0, loom::tensor(std::vector<int64_t>{3, 0}));
  std::vector<double> gv = good.to_vector<double>();
  ASSERT_EQ(gv.size(), 6u);
  for (int j = 0; j < 3; ++j) {
    EXPECT_DOUBLE_EQ(gv[j], xv[9 + j]);
    EXPECT_DOUBLE_EQ(gv[3 + j], xv[j]);
  }
}

LOOM_INSTANTIATE_BACKENDS(LazyTest);

}  // namespace

// Freeing a very long pending chain must not recurse once per node (a
// million nested destructors would overflow the stack).
TEST(LazyCore, FreeingAMillionNodeChainDoesNotOverflowTheStack) {
  const int64_t bound = loom::max_pending_nodes();
  loom::set_max_pending_nodes(2'000'000);
  {
    auto x = loom::ones({1});
    auto y = x;
    for (int i = 0; i < 1'000'000; ++i) y = y + x;
  }  // y dies unsynced: its whole chain is released here
  loom::set_max_pending_nodes(bound);
  EXPECT_FLOAT_EQ((loom::ones({1}) * 3).item<float>(), 3.0f);
}
