// A view's storage offset is a run argument, not part of the graph's key
// (ir/node.h): the idioms that index a stored tensor in a loop (`data[i]`,
// `slice`, `narrow`, `select`, examples stacked into a batch, a cache row
// written at step t) replay one executable, and compute what a fresh
// compile computes. On a GPU the key keeps whether the offset is 16-byte
// aligned, so a loop whose offsets alternate compiles at most twice there.
#include "test_util.h"

#include <numeric>
#include <random>

namespace {

using loom::Tensor;
using loom_test::BackendTest;

class ViewOffsetTest : public BackendTest {
 protected:
  // Compiles since the last reset.
  static int64_t compiles() { return loom::metrics().cache_misses; }
  void start() {
    loom::sync();
    loom::reset_metrics();
  }
  // A loop whose offsets are all multiples of 16 bytes compiles once
  // everywhere; one whose offsets are not compiles once on a CPU and at most
  // twice on a GPU (aligned, unaligned).
  int64_t most_compiles(bool aligned) const { return aligned || !on_gpu() ? 1 : 2; }
};

// [N, 28, 28] images whose pixels are their flat index (exact in float).
Tensor images(int64_t n) { return loom::arange(n * 28 * 28, loom::kFloat).view({n, 28, 28}).clone(); }
double image_sum(int64_t i) {  // sum of 784 consecutive integers from 784 i
  const double first = 784.0 * static_cast<double>(i);
  return 784.0 * first + 783.0 * 784.0 / 2.0;
}

TEST_P(ViewOffsetTest, IndexingAStoredTensorInALoopCompilesOnce) {
  Tensor base = images(100);
  start();
  for (int64_t i = 0; i < 100; ++i) {
    const double got = (base[i] * 2).sum().item<double>();
    ASSERT_DOUBLE_EQ(got, 2 * image_sum(i)) << "i = " << i;
  }
  EXPECT_EQ(compiles(), 1);
  EXPECT_EQ(loom::metrics().cache_hits, 99);
}

TEST_P(ViewOffsetTest, SliceNarrowAndSelectInALoopCompileOnce) {
  Tensor base = images(104);
  start();
  for (int64_t i = 0; i < 100; ++i) {
    double want = 0;
    for (int64_t j = i; j < i + 4; ++j) want += image_sum(j);
    ASSERT_DOUBLE_EQ(base.slice(0, i, i + 4).sum().item<double>(), want) << "i = " << i;
  }
  EXPECT_EQ(compiles(), 1);

  start();
  for (int64_t i = 0; i < 100; ++i) {
    const int64_t n = 1 + i % 20;
    // base.narrow(0, n, 2)[:, 5, :] : rows 5 of images n and n + 1 (a read
    // of a view alone needs no graph: the op after it does).
    const std::vector<float> got = (base.narrow(0, n, 2).select(1, 5) + 1).to_vector<float>();
    ASSERT_EQ(got.size(), 56u);
    ASSERT_EQ(got[0], static_cast<float>(784 * n + 5 * 28 + 1));
    ASSERT_EQ(got[55], static_cast<float>(784 * (n + 1) + 5 * 28 + 28));
  }
  EXPECT_EQ(compiles(), 1);
}

// nanoGPT's get_batch: windows of a 1-D token array at any position,
// stacked: offsets of every alignment.
TEST_P(ViewOffsetTest, WindowsOfATokenArrayStackedCompileOnceOnACpu) {
  std::vector<int64_t> tokens(5000);
  std::iota(tokens.begin(), tokens.end(), 0);
  Tensor data = loom::tensor(tokens);
  std::mt19937_64 rng(7);
  start();
  for (int step = 0; step < 100; ++step) {
    std::vector<Tensor> xs, ys;
    std::vector<int64_t> at;
    for (int b = 0; b < 4; ++b) {
      const int64_t i = static_cast<int64_t>(rng() % 4900);
      at.push_back(i);
      xs.push_back(data.slice(0, i, i + 16));
      ys.push_back(data.slice(0, i + 1, i + 17));
    }
    Tensor x = loom::stack(xs), y = loom::stack(ys);
    const std::vector<int64_t> xv = x.to_vector<int64_t>(), yv = (y - x).to_vector<int64_t>();
    for (int b = 0; b < 4; ++b) {
      ASSERT_EQ(xv[b * 16], at[b]);
      ASSERT_EQ(xv[b * 16 + 15], at[b] + 15);
    }
    for (int64_t d : yv) ASSERT_EQ(d, 1);
  }
  // Two graphs a step (the read of x, then y - x, which reads x's buffer).
  EXPECT_LE(compiles(), 2 * most_compiles(false));
}

// libtorch's MNIST dataset returns images_[i]; a random sampler stacks B of
// them into a batch, a training step follows.
class ImageDataset {
 public:
  explicit ImageDataset(int64_t n) : images_(images(n) / 100000.0), labels_(loom::arange(n, loom::kLong) % 10) {
    loom::sync();
  }
  std::pair<Tensor, Tensor> get(int64_t i) const { return {images_[i], labels_[i]}; }
  int64_t size() const { return images_.size(0); }

 private:
  Tensor images_, labels_;
};

TEST_P(ViewOffsetTest, ADatasetOfStackedExamplesTrainsWithAtMostTwoCompiles) {
  ImageDataset data(200);
  loom::manual_seed(3);
  loom::nn::Linear fc(784, 10);
  loom::optim::SGD opt(fc->parameters(), loom::optim::SGDOptions(0.01));
  std::mt19937_64 rng(11);
  start();
  float first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    std::vector<Tensor> xs, ys;
    for (int b = 0; b < 8; ++b) {
      auto [x, y] = data.get(static_cast<int64_t>(rng() % static_cast<uint64_t>(data.size())));
      xs.push_back(x);
      ys.push_back(y);
    }
    Tensor loss = loom::nn::functional::cross_entropy(fc(loom::stack(xs).flatten(1)), loom::stack(ys));
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item<float>();
    if (step == 99) last = loss.item<float>();
  }
  EXPECT_LE(compiles(), 2);
  EXPECT_TRUE(std::isfinite(first) && std::isfinite(last));
}

// Two views of one stored tensor at offsets that change independently, in
// one graph: the same input buffer, two runtime offsets.
TEST_P(ViewOffsetTest, TwoViewsOfOneStorageMoveIndependently) {
  Tensor base = images(50);
  start();
  for (int64_t i = 0; i < 30; ++i) {
    const int64_t j = (i * 7) % 50;
    const double got = (base[i] - base[j]).sum().item<double>();
    ASSERT_DOUBLE_EQ(got, image_sum(i) - image_sum(j)) << i << ", " << j;
  }
  EXPECT_EQ(compiles(), 1);
}

// Writing a row of a stored cache at step t (a key/value cache's update)
// replays too, and reads see every row written so far.
TEST_P(ViewOffsetTest, WritingRowsOfAStoredCacheReplays) {
  Tensor cache = loom::zeros({32, 8});
  loom::sync();
  start();
  for (int64_t t = 0; t < 32; ++t) {
    cache[t] = loom::full({8}, static_cast<double>(t + 1));         // x[t] = v (copy_)
    cache.narrow(0, t, 1).mul_(2);                                // an in-place op through a view
    loom::sync();
  }
  EXPECT_EQ(compiles(), 1);
  const std::vector<float> v = cache.to_vector<float>();
  for (int64_t t = 0; t < 32; ++t) ASSERT_EQ(v[t * 8 + 7], 2.0f * (t + 1)) << t;
}

// A product reading a window of a stored matrix, and a library gather
// whose index is a window of a stored index tensor.
TEST_P(ViewOffsetTest, ProductsAndGathersReadWindowsAtRuntimeOffsets) {
  Tensor w = loom::arange(64 * 8, loom::kFloat).view({64, 8}).clone();
  Tensor x = loom::ones({8, 3});
  Tensor table = loom::arange(40, loom::kFloat).view({10, 4}).clone();
  Tensor idx = loom::tensor(std::vector<int64_t>{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9});
  loom::sync();
  start();
  for (int64_t i = 0; i < 20; ++i) {
    const std::vector<float> p = w.slice(0, i, i + 4).matmul(x).to_vector<float>();
    ASSERT_EQ(p.size(), 12u);
    for (int r = 0; r < 4; ++r) {
      const float row = static_cast<float>(8 * (i + r));
      ASSERT_EQ(p[r * 3], 8 * row + 28) << "i = " << i << ", row " << r;
    }
    const int64_t k = i % 11;
    const std::vector<float> g = table.index_select(0, idx.slice(0, k, k + 4)).to_vector<float>();
    const std::vector<int64_t> want = idx.slice(0, k, k + 4).to_vector<int64_t>();
    for (int r = 0; r < 4; ++r) ASSERT_EQ(g[r * 4], static_cast<float>(4 * want[r])) << "k = " << k;
  }
  // Three graphs an iteration (the product, the gather, the index read).
  EXPECT_LE(compiles(), 3 * most_compiles(false));
}

LOOM_INSTANTIATE_BACKENDS(ViewOffsetTest);

}  // namespace
