// What only the GPU has: transfers, the caching allocator, out-of-memory
// recovery, CUDA-graph replay and the error path of a kernel. The op suite
// and the differential test run on the GPU through their "cuda" instances;
// every test here skips, saying why, on a machine without one.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "test_util.h"

namespace {

using loom::Tensor;

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU here: " << loom::cuda::unavailable_reason();
  }
};

TEST(CudaAvailability, ReportsAReasonOrADevice) {
  if (loom::cuda::is_available()) {
    EXPECT_GT(loom::cuda::device_count(), 0);
    EXPECT_TRUE(loom::cuda::unavailable_reason().empty());
    EXPECT_FALSE(loom::cuda::device_name().empty());
  } else {
    EXPECT_EQ(loom::cuda::device_count(), 0);
    EXPECT_FALSE(loom::cuda::unavailable_reason().empty());
    // Asking for a missing GPU fails where it is asked, as in libtorch.
    EXPECT_LOOM_ERROR(loom::ones({2}, loom::kCUDA), "ones", "CUDA is not available");
    EXPECT_LOOM_ERROR(loom::tensor({1.f, 2.f}).to(loom::kCUDA), "to", "CUDA is not available");
  }
}

// Events that were never recorded, or recorded without a GPU, are errors
// naming the call and the caller's line, on any machine.
TEST(CudaEvent, MisuseIsAClearError) {
  loom::cuda::Event start, end;
  EXPECT_FALSE(start.recorded());
  EXPECT_LOOM_ERROR(start.elapsed_time(end), "cuda::Event::elapsed_time", "start event was never recorded");
  EXPECT_LOOM_ERROR(start.synchronize(), "cuda::Event::synchronize", "never recorded");
  if (!loom::cuda::is_available()) {
    EXPECT_LOOM_ERROR(start.record(), "cuda::Event::record", loom::cuda::unavailable_reason());
    EXPECT_FALSE(start.recorded());
    return;
  }
  start.record();
  EXPECT_LOOM_ERROR(start.elapsed_time(end), "cuda::Event::elapsed_time", "end event was never recorded");
  EXPECT_LOOM_ERROR(start.record(loom::cuda::device_count()), "cuda::Event::record", "does not exist");
}

// Two events around queued work time the GPU's part of it: more than
// nothing, no more than the host waited, and longer for eight times the work.
TEST_F(CudaTest, EventsTimeTheWorkQueuedBetweenThem) {
  Tensor x = loom::randn({1 << 24}, loom::kCUDA);
  Tensor y;
  loom::cuda::synchronize();
  auto timed = [&](int calls) {
    loom::cuda::Event start, end;
    const auto t0 = std::chrono::steady_clock::now();
    start.record();
    for (int i = 0; i < calls; ++i) {
      y = loom::sigmoid(loom::tanh(x * 1.5 + 0.5) * x) + x * x;
      loom::sync();  // queued, not waited for
    }
    end.record();
    const float ms = start.elapsed_time(end);
    const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GT(ms, 0.f);
    EXPECT_LE(ms, wall_ms * 1.01 + 0.01);
    return ms;
  };
  // The first runs compile, and build a CUDA graph per set of buffers y
  // alternates between: the GPU waits for the host there.
  for (int i = 0; i < 3; ++i) timed(2);
  const float one = std::min({timed(1), timed(1), timed(1)}), eight = timed(8);
  EXPECT_GT(eight, 2 * one) << one << " ms for one call, " << eight << " for eight";
  loom::cuda::Event again;
  again.record();
  again.synchronize();
  EXPECT_EQ(again.elapsed_time(again), 0.f);
  loom::cuda::Event moved = std::move(again);
  EXPECT_TRUE(moved.recorded());
  EXPECT_FALSE(again.recorded());  // NOLINT(bugprone-use-after-move): a moved-from event is empty
  EXPECT_EQ(moved.device(), 0);
}

TEST_F(CudaTest, RoundTripKeepsValuesAndDtypes) {
  Tensor h = loom::arange(12, loom::kDouble).reshape({3, 4}).t();  // a strided view
  Tensor d = h.to(loom::kCUDA);
  EXPECT_TRUE(d.is_cuda());
  EXPECT_EQ(d.to_vector<double>(), h.to_vector<double>());
  Tensor back = (d * 2).to(loom::kCPU);
  EXPECT_TRUE(back.device().is_cpu());
  EXPECT_TRUE(loom_test::all_close(back, {0, 8, 16, 2, 10, 18, 4, 12, 20, 6, 14, 22}));
  Tensor flags = loom::tensor({true, false, true}).to(loom::kCUDA);
  EXPECT_EQ(loom::logical_not(flags).to_vector<bool>(), (std::vector<bool>{false, true, false}));
}

TEST_F(CudaTest, ItemReadsOneElementAfterQueuedWork) {
  Tensor x = loom::arange(1 << 20, loom::TensorOptions(loom::kFloat).device(loom::kCUDA));
  Tensor y = x * 3 + 1;
  loom::sync();  // queued on the stream
  EXPECT_EQ(y.select(0, 1000).item<float>(), 3001.f);
  const double want = 3.0 * (double(1 << 20) * ((1 << 20) - 1) / 2) + (1 << 20);
  EXPECT_NEAR(y.sum().item<double>(), want, want * 1e-5);  // a float32 sum of 2^20 terms
}

TEST_F(CudaTest, ReplaysAsOneCudaGraphAndAllocatesFromTheCache) {
  Tensor x = loom::randn({256, 256}, loom::kCUDA);
  loom::sync();
  loom::reset_metrics();
  loom::cuda::MemoryStats after_first;
  for (int i = 0; i < 10; ++i) {
    Tensor y = loom::softmax(x.matmul(x) * (i + 1), -1).sum();  // a library kernel and generated ones
    EXPECT_NEAR(y.item<float>(), 256.f, 1e-2);
    if (i == 0) after_first = loom::cuda::memory_stats();
  }
  const loom::Metrics m = loom::metrics();
  EXPECT_EQ(m.cache_misses, 1);
  EXPECT_EQ(m.cache_hits, 9);
  EXPECT_EQ(m.cuda_graph_launches, 9);  // runs 2..10: the first launches directly (several kernels here)
  const loom::cuda::MemoryStats after = loom::cuda::memory_stats();
  EXPECT_GT(after.allocations, after_first.allocations);
  EXPECT_EQ(after.driver_allocations, after_first.driver_allocations) << "replays must allocate from the cache";
}

// A replayed graph orders a launch only after the launches whose memory it
// shares (runtime/cuda/launch_graph.h): here two products of the same
// operand run side by side, while the in-place update of `w` still waits
// for the kernel that reads the old `w`. Every replay must match the CPU.
TEST_F(CudaTest, ReplayedGraphOverlapsOnlyIndependentKernels) {
  loom::manual_seed(3);
  const Tensor a = loom::randn({256, 784}), b = loom::randn({784, 512}) * 0.05, c = loom::randn({256, 784});
  Tensor w = loom::randn({512});
  const Tensor ga = a.to(loom::kCUDA), gb = b.to(loom::kCUDA), gc = c.to(loom::kCUDA);
  Tensor gw = w.to(loom::kCUDA);
  auto step = [](const Tensor& a, const Tensor& b, const Tensor& c, Tensor& w) {
    Tensor p = loom::relu(a.matmul(b));  // two products that do not depend on each other
    Tensor q = loom::tanh(c.matmul(b));
    Tensor r = (p + q * w).sum(0);  // reads w
    w.add_(p.mean(0));              // then updates it in place
    return r;
  };
  loom::sync();
  loom::reset_metrics();
  for (int i = 0; i < 6; ++i) {
    Tensor want = step(a, b, c, w), got = step(ga, gb, gc, gw);
    loom::sync();
    ASSERT_TRUE(loom_test::all_close(got, want.to_vector<double>(), 1e-4, 1e-3)) << "replay " << i;
    ASSERT_TRUE(loom_test::all_close(gw, w.to_vector<double>(), 1e-4, 1e-4)) << "replay " << i;
  }
  const loom::Metrics m = loom::metrics();
  EXPECT_GE(m.cuda_graph_launches, 5);
  ASSERT_GE(m.cuda_graphs_built, 1);
  EXPECT_LT(m.cuda_graph_depth, m.cuda_graph_kernels) << "the two products overlap: not a chain";
}

// The loop `y = f(x)`: the new y is allocated before the old one is freed,
// so the output alternates between two buffers. Each address set keeps its
// own argument block and graph: after both are seen, no run uploads, and a
// program of one kernel replays as a graph too.
TEST_F(CudaTest, AlternatingOutputsReplayWithoutUploads) {
  Tensor x = loom::randn({1 << 16}, loom::kCUDA);
  loom::sync();
  Tensor y = x * 2 + 1;  // one kernel
  loom::sync();
  loom::reset_metrics();
  for (int i = 0; i < 10; ++i) {
    y = x * 2 + 1;
    loom::sync();
  }
  const loom::Metrics m = loom::metrics();
  EXPECT_EQ(m.cache_hits, 10);
  EXPECT_EQ(m.cuda_graph_launches, 10);
  EXPECT_LE(m.cuda_argument_uploads, 1) << "two alternating outputs fit the two argument sets";
  EXPECT_TRUE(loom_test::all_close(y, (x.to(loom::kCPU) * 2 + 1).to_vector<double>()));
}

TEST_F(CudaTest, OutOfMemoryIsAClearErrorAndLeavesTensorsIntact) {
  Tensor keep = loom::arange(1000, loom::TensorOptions(loom::kFloat).device(loom::kCUDA)) * 2;
  loom::sync();
  const std::string msg = loom_test::error_of([] {
    Tensor huge = loom::empty({int64_t{1} << 40}, loom::TensorOptions(loom::kFloat).device(loom::kCUDA));
    loom::sync();
  });
  EXPECT_NE(msg.find("out of memory"), std::string::npos) << msg;
  EXPECT_GE(loom::cuda::memory_stats().oom_retries, 1);
  EXPECT_EQ(keep.select(0, 999).item<float>(), 1998.f);
  EXPECT_EQ((keep + 1).select(0, 10).item<float>(), 21.f);
}

TEST_F(CudaTest, BadIndexNamesTheOpAndLeavesTheGpuUsable) {
  Tensor x = loom::randn({4, 3}, loom::kCUDA);
  Tensor idx = loom::tensor({0, 7, 1}).to(loom::kCUDA);
  const std::string msg = loom_test::error_of([&] { x.index_select(0, idx).sum().item<float>(); });
  EXPECT_NE(msg.find("index_select"), std::string::npos) << msg;
  EXPECT_NE(msg.find("index 7 is out of bounds for dimension of size 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda_test.cpp"), std::string::npos) << msg;
  EXPECT_EQ((x * 0 + 1).sum().item<float>(), 12.f);
}

// A training step with integer labels can fail on bad data (a label out of
// range), found on the GPU. Its sync does not wait for that verdict (the
// host records the next step while the GPU works); the next wait reports
// it, naming the op and the line, and a graph launched after it never
// reads a failed value.
TEST_F(CudaTest, TrainingStepsLeaveTheirLabelCheckToTheNextWait) {
  namespace F = loom::nn::functional;
  loom::manual_seed(3);
  loom::nn::Linear model(8, 4);
  model->to(loom::kCUDA);
  loom::optim::SGD opt(model->parameters(), loom::optim::SGDOptions(0.1).momentum(0.9));
  Tensor x = loom::randn({6, 8}, loom::kCUDA);
  Tensor good = loom::tensor(std::vector<int64_t>{0, 1, 2, 3, 0, 1}).to(loom::kCUDA);
  Tensor bad = loom::tensor(std::vector<int64_t>{0, 9, 2, 3, 0, 1}).to(loom::kCUDA);
  const int loss_line = __LINE__ + 3;
  auto step = [&](const Tensor& y) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  step(good);
  loom::cuda::synchronize();
  loom::reset_metrics();
  Tensor first = step(good);
  for (int i = 0; i < 4; ++i) step(good);
  EXPECT_EQ(loom::metrics().late_checks, 5) << "each step left its check to the next one";
  EXPECT_LT(loom::metrics().cuda_argument_uploads, 5) << "clean error words are not reset by an upload every step";
  EXPECT_LT(first.item<float>(), 10.f);

  EXPECT_NO_THROW(step(bad));  // launched; the GPU finds the label later
  const std::string msg = loom_test::error_of([] { loom::cuda::synchronize(); });
  EXPECT_NE(msg.find("gather"), std::string::npos) << msg;
  EXPECT_NE(msg.find("index 9 is out of bounds for dimension of size 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda_test.cpp:" + std::to_string(loss_line)), std::string::npos) << msg;
  EXPECT_NO_THROW(loom::cuda::synchronize()) << "reported once";
  EXPECT_THROW(model->weight.sum().item<float>(), loom::Error) << "its update was computed from the bad labels";

  // The GPU stays usable, and a fresh model trains.
  loom::nn::Linear fresh(8, 4);
  fresh->to(loom::kCUDA);
  Tensor y = F::cross_entropy(fresh->forward(x), good);
  EXPECT_TRUE(std::isfinite(y.item<float>()));
}

// The check a failed graph left is read before anything else runs on the
// GPU: the next sync reports it and does not run a graph on its values.
TEST_F(CudaTest, AFailedGraphIsReportedByTheNextSyncBeforeItRuns) {
  Tensor x = loom::randn({4, 3}, loom::kCUDA);
  Tensor idx = loom::tensor(std::vector<int64_t>{0, 7, 1}).to(loom::kCUDA);
  Tensor picked = x.index_select(0, idx);
  loom::sync();  // launched; not waited for
  Tensor later = picked * 2 + 1;  // recorded on a value the GPU failed to compute
  const std::string msg = loom_test::error_of([] { loom::sync(); });
  EXPECT_NE(msg.find("index_select"), std::string::npos) << msg;
  EXPECT_THROW(later.item<float>(), loom::Error) << "computed from the failed value";
  EXPECT_THROW(picked.to_vector<float>(), loom::Error);
  EXPECT_EQ((x * 0 + 2).sum().item<float>(), 24.f);
}

// An in-place update in a graph that failed was skipped by the GPU: its
// buffer still holds the value before the update. What was recorded on the
// updated value before the failure was reported fails; the update itself,
// not computed from the bad node, runs again.
TEST_F(CudaTest, ValuesRecordedOnASkippedUpdateFailToo) {
  Tensor w = loom::tensor({1.f, 2.f}).to(loom::kCUDA);
  loom::sync();
  w.add_(1);
  Tensor bad = loom::tensor({1}).to(loom::kCUDA) % loom::tensor({0}).to(loom::kCUDA);
  loom::sync();         // launched; the division by zero is found later
  Tensor twice = w * 2;  // recorded on w's update
  EXPECT_THROW(loom::cuda::synchronize(), loom::Error);
  EXPECT_THROW(twice.to_vector<float>(), loom::Error) << "computed from the value before the update";
  EXPECT_THROW(bad.to_vector<int64_t>(), loom::Error);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{2, 3}));
  EXPECT_EQ((w * 2).to_vector<float>(), (std::vector<float>{4, 6}));
}

TEST_F(CudaTest, IntegerDivisionByZeroIsReported) {
  Tensor a = loom::tensor({5, 6}).to(loom::kCUDA);
  Tensor b = loom::tensor({2, 0}).to(loom::kCUDA);
  const std::string msg = loom_test::error_of([&] { loom::remainder(a, b).to_vector<int64_t>(); });
  EXPECT_NE(msg.find("ZeroDivisionError"), std::string::npos) << msg;
}

TEST_F(CudaTest, InPlaceUpdatesWriteIntoTheSameDeviceBuffer) {
  Tensor w = loom::ones({1024}, loom::kCUDA);
  loom::sync();
  const float* before = w.data_ptr<float>();
  for (int i = 0; i < 5; ++i) {
    w.mul_(2).add_(1);
    loom::sync();
  }
  EXPECT_EQ(w.data_ptr<float>(), before);
  EXPECT_EQ(w.select(0, 3).item<float>(), 63.f);  // 1 -> 3 -> 7 -> 15 -> 31 -> 63
}

TEST_F(CudaTest, ThreadsShareTheGpu) {
  std::vector<std::thread> threads;
  std::vector<float> got(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &got] {
      Tensor x = loom::full({1000}, float(t), loom::TensorOptions().device(loom::kCUDA));
      for (int i = 0; i < 20; ++i) x = x + 1;
      got[t] = x.sum().item<float>();
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(got[t], 1000.f * (t + 20));
}

}  // namespace

namespace {

// Kernels alike share one function on the GPU too (jit/cuda
// share_kernels), each launched with its own buffer, scalar and node
// tables: four gathers, each from the last one's result scaled by its own
// runtime scalar through its own index, and two products of the same
// shapes with their own bias and scale (one GEMM function), match the CPU;
// a bad index in the third gather names the third's line.
std::vector<float> gather_chain(loom::Device dev, bool bad, int* bad_line) {
  loom::manual_seed(5);
  Tensor x = loom::randn({256, 300}).to(dev);
  std::vector<Tensor> idx;
  for (int i = 0; i < 4; ++i) idx.push_back(loom::randint(0, 300, {256, 300}).to(dev));
  if (bad) idx[2] = (idx[2] + 1000).to(dev);
  Tensor w = (loom::randn({300, 300}) * 0.05).to(dev), b1 = loom::randn({300}).to(dev), b2 = loom::randn({300}).to(dev);
  loom::sync();
  Tensor h = x;
  h = (x + h * 0.5).gather(1, idx[0]);
  h = (x + h * 0.75).gather(1, idx[1]);
  *bad_line = __LINE__ + 1;
  h = (x + h * 1.25).gather(1, idx[2]);
  h = (x + h * 1.5).gather(1, idx[3]);
  Tensor p1 = loom::matmul(h, w) * 0.5 + b1, p2 = loom::matmul(x, w) * 0.25 + b2;
  loom::sync();  // one graph: the gathers and both products
  std::vector<float> out = h.to(loom::kCPU).to_vector<float>();
  for (const Tensor& t : {p1, p2})
    for (float v : t.to(loom::kCPU).to_vector<float>()) out.push_back(v);
  return out;
}

TEST_F(CudaTest, KernelsAlikeShareAFunctionWithTheirOwnTables) {
  int line = 0;
  const std::vector<float> gpu = gather_chain(loom::kCUDA, false, &line);
  const std::vector<float> cpu = gather_chain(loom::kCPU, false, &line);
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < gpu.size(); ++i) ASSERT_NEAR(gpu[i], cpu[i], 1e-4 * (1 + std::abs(cpu[i]))) << i;
  const std::string msg = loom_test::error_of([&] { gather_chain(loom::kCUDA, true, &line); });
  EXPECT_NE(msg.find("out of bounds"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda_test.cpp:" + std::to_string(line)), std::string::npos) << msg;
}

}  // namespace
