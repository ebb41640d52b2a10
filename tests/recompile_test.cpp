// Each reason a graph compiles, provoked: the first graph of a structure,
// an input's shape, an input's dtype, an op's attributes, the same graph
// after the executable cache was cleared, and (on a GPU) a view offset
// without the alignment the first code assumed. LOOM_LOG=recompiles (here
// loom::set_log) prints what differed and where it was recorded;
// loom::metrics() counts the compiles by reason.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <algorithm>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using loom::Tensor;

// What `f` printed to stderr with the recompiles log on, and the metrics after.
template <class F>
std::string recompiles_of(F f) {
  loom::set_log("recompiles");
  ::testing::internal::CaptureStderr();
  f();
  std::string printed = ::testing::internal::GetCapturedStderr();
  loom::set_log("");
  return printed;
}

float run(const Tensor& x) { return (x * 2 + 1).sum().item<float>(); }

TEST(Recompiles, ANewShapeSaysWhichInputAndDimChanged) {
  const Tensor a = loom::ones({4, 3}), b = loom::ones({5, 3});
  loom::sync();  // both stored: the graphs below read them as inputs
  run(a);
  const loom::Metrics before = loom::metrics();
  const std::string printed = recompiles_of([&] { run(b); });
  EXPECT_NE(printed.find("[loom:recompiles]"), std::string::npos) << printed;
  EXPECT_NE(printed.find(" shape: input 0"), std::string::npos) << printed;
  EXPECT_NE(printed.find("Float[4, 3] -> Float[5, 3] (dim 0: 4 -> 5)"), std::string::npos) << printed;
  EXPECT_NE(printed.find("recompile_test.cpp:"), std::string::npos) << printed;  // where the input was recorded
  EXPECT_EQ(loom::metrics().recompiles_shape, before.recompiles_shape + 1);
  // Back to the first shape: a cache hit, nothing printed.
  EXPECT_EQ(recompiles_of([&] { run(a); }), "");
}

TEST(Recompiles, ANewDtypeSaysSo) {
  const Tensor a = loom::ones({6}), b = loom::ones({6}, loom::kDouble);
  loom::sync();
  run(a);
  const loom::Metrics before = loom::metrics();
  const std::string printed = recompiles_of([&] { run(b); });
  EXPECT_NE(printed.find(" dtype: input 0"), std::string::npos) << printed;
  EXPECT_NE(printed.find("Float[6] -> Double[6]"), std::string::npos) << printed;
  EXPECT_EQ(loom::metrics().recompiles_dtype, before.recompiles_dtype + 1);
}

TEST(Recompiles, AnOpsAttributesSayWhichOpAndWhere) {
  const Tensor x = loom::ones({7, 7});
  loom::sync();
  auto reduce = [&](int64_t dim) { return x.sum(dim, true).mul(3).sum().item<float>(); };
  reduce(0);
  const loom::Metrics before = loom::metrics();
  const std::string printed = recompiles_of([&] { reduce(1); });
  EXPECT_NE(printed.find(" attribute: sum (recorded at "), std::string::npos) << printed;
  EXPECT_NE(printed.find("attributes {1} -> {2}"), std::string::npos) << printed;
  EXPECT_EQ(loom::metrics().recompiles_attribute, before.recompiles_attribute + 1);
}

TEST(Recompiles, AGraphOfANewStructurePrintsNothingAndCountsAsNew) {
  const Tensor x = loom::ones({3});
  loom::sync();
  const loom::Metrics before = loom::metrics();
  const std::string printed = recompiles_of([&] { loom::exp(x).sin().sum().item<float>(); });
  EXPECT_EQ(printed, "");
  EXPECT_EQ(loom::metrics().compiles_new_graph, before.compiles_new_graph + 1);
}

TEST(Recompiles, TheSameGraphAfterTheCacheWasClearedSaysEvicted) {
  const Tensor x = loom::ones({11});
  loom::sync();
  run(x);
  loom::clear_executable_cache();
  const loom::Metrics before = loom::metrics();
  const std::string printed = recompiles_of([&] { run(x); });
  EXPECT_NE(printed.find(" evicted: the same graph"), std::string::npos) << printed;
  EXPECT_EQ(loom::metrics().recompiles_evicted, before.recompiles_evicted + 1);
  EXPECT_NE(loom::metrics().to_string().find("recompiles: evicted"), std::string::npos);
}

// A training loop over 11 samples in batches of 4: the short last batch
// compiles its step once, said to be a shape (the batch's slice, dim 0:
// 4 -> 3), and the epochs after the first compile nothing. (With symbolic
// sizes it would compile nothing of its own.)
TEST(Recompiles, AShortLastBatchCompilesOnceAndSaysItsShape) {
  loom::manual_seed(5);
  loom::nn::Linear model(5, 3);
  loom::optim::SGD opt(model->parameters(), loom::optim::SGDOptions(0.1));
  const Tensor x = loom::randn({11, 5}), y = loom::randint(0, 3, {11});
  loom::sync();
  auto epoch = [&] {
    for (int64_t i = 0; i < 11; i += 4) {
      const int64_t n = std::min<int64_t>(4, 11 - i);
      opt.zero_grad();
      Tensor loss = loom::cross_entropy_loss(model(x.slice(0, i, i + n)), y.slice(0, i, i + n));
      loss.backward();
      opt.step();
      loss.item<float>();
    }
  };
  const loom::Metrics before = loom::metrics();
  const std::string first = recompiles_of(epoch);
  EXPECT_NE(first.find(" shape: "), std::string::npos) << first;
  EXPECT_NE(first.find("(dim 0: 4 -> 3)"), std::string::npos) << first;
  EXPECT_GE(loom::metrics().recompiles_shape, before.recompiles_shape + 1);
  const loom::Metrics after_one = loom::metrics();
  const std::string later = recompiles_of(epoch) + recompiles_of(epoch);
  EXPECT_EQ(loom::metrics().cache_misses, after_one.cache_misses) << later;
  EXPECT_EQ(later, "");
}

// A loom::compile'd function called with a new batch size traces anew, and
// its compile says which argument's dim changed.
TEST(Recompiles, ACompiledFunctionsNewBatchSizeSaysItsShape) {
  using TL = std::vector<Tensor>;
  loom::CompiledFunction f = loom::compile([](const TL& in) { return TL{(in[0].exp() * 3).sum(0)}; });
  const Tensor a = loom::ones({6, 2}), b = loom::ones({9, 2});
  loom::sync();
  f({a})[0].sum().item<float>();
  const std::string printed = recompiles_of([&] { f({b})[0].sum().item<float>(); });
  EXPECT_NE(printed.find(" shape: input 0"), std::string::npos) << printed;
  EXPECT_NE(printed.find("(dim 0: 6 -> 9)"), std::string::npos) << printed;
  EXPECT_EQ(f.traces(), 2u);
}

// A GPU kernel may load a stored tensor's view 16 bytes at a time where the
// first run's offset allowed it; an offset that does not compiles the
// variant that assumes nothing, once.
TEST(Recompiles, AViewOffsetWithoutTheAlignmentSaysAlignment) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU here: the alignment variant is a GPU executable's";
  const Tensor data = loom::ones({1 << 16}, loom::TensorOptions().device(loom::kCUDA));
  data.sum().item<float>();  // stored
  auto window = [&](int64_t at) { return (data.slice(0, at, at + 4096) * 2).sum().item<float>(); };
  window(0);
  const loom::Metrics before = loom::metrics();
  const std::string printed = recompiles_of([&] { window(1); });
  EXPECT_NE(printed.find(" alignment: the same graph"), std::string::npos) << printed;
  EXPECT_EQ(loom::metrics().recompiles_alignment, before.recompiles_alignment + 1);
}

}  // namespace
