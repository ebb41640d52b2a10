// loom::data, as torch::data: datasets, transforms, samplers and the data
// loader, written the way libtorch's examples use them.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

namespace {

namespace torch = loom;
using loom::Tensor;

// The rows of a [n, 3] tensor whose row i is {i, i + 0.5, -i}.
Tensor rows(int64_t n) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) {
    v.push_back(static_cast<float>(i));
    v.push_back(static_cast<float>(i) + 0.5f);
    v.push_back(-static_cast<float>(i));
  }
  return loom::tensor(v).reshape({n, 3});
}

// libtorch's custom-dataset pattern: get(i) returns a view of a stored tensor.
class RowsDataset : public torch::data::Dataset<RowsDataset> {
 public:
  explicit RowsDataset(int64_t n) : x_(rows(n)), y_(loom::arange(n, loom::kLong)) { loom::sync(); }
  torch::data::Example<> get(size_t index) override {
    return {x_[static_cast<int64_t>(index)], y_[static_cast<int64_t>(index)]};
  }
  std::optional<size_t> size() const override { return static_cast<size_t>(x_.size(0)); }

 private:
  Tensor x_, y_;
};

std::vector<int64_t> targets_of(const torch::data::Example<>& batch) { return batch.target.to_vector<int64_t>(); }

TEST(Data, SequentialBatchesAreStackedInOrderWithAShortLastBatch) {
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      RowsDataset(10).map(torch::data::transforms::Stack<>()), 4);
  std::vector<std::vector<int64_t>> seen;
  for (auto& batch : *loader) {
    EXPECT_EQ(batch.data.size(1), 3);
    EXPECT_EQ(batch.data.size(0), batch.target.size(0));
    const std::vector<int64_t> t = targets_of(batch);
    // Row i of the data is sample t[i]'s row.
    const std::vector<float> d = batch.data.to_vector<float>();
    for (size_t i = 0; i < t.size(); ++i) {
      EXPECT_EQ(d[3 * i], static_cast<float>(t[i]));
      EXPECT_EQ(d[3 * i + 2], -static_cast<float>(t[i]));
    }
    seen.push_back(t);
  }
  EXPECT_EQ(seen, (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
}

TEST(Data, DropLastDropsTheShortBatch) {
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      RowsDataset(10).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(4).drop_last(true));
  size_t batches = 0;
  for (auto& batch : *loader) {
    EXPECT_EQ(batch.data.size(0), 4);
    ++batches;
  }
  EXPECT_EQ(batches, 2u);
}

// Without Stack, a batch is the examples themselves.
TEST(Data, WithoutACollationABatchIsAVectorOfExamples) {
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(RowsDataset(5), 2);
  std::vector<size_t> sizes;
  for (std::vector<torch::data::Example<>>& batch : *loader) sizes.push_back(batch.size());
  EXPECT_EQ(sizes, (std::vector<size_t>{2, 2, 1}));
}

TEST(Data, RandomSamplerIsAPermutationDecidedByTheSeedAndNewEachEpoch) {
  auto order = [](torch::data::samplers::RandomSampler& s) {
    std::vector<size_t> all;
    while (auto b = s.next(7)) all.insert(all.end(), b->begin(), b->end());
    return all;
  };
  loom::manual_seed(3);
  torch::data::samplers::RandomSampler a(100);
  const std::vector<size_t> first = order(a);
  std::vector<size_t> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  std::vector<size_t> iota(100);
  std::iota(iota.begin(), iota.end(), size_t{0});
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(first, iota);
  a.reset();
  EXPECT_NE(order(a), first);  // a new epoch, a new order
  loom::manual_seed(3);
  torch::data::samplers::RandomSampler b(100);
  EXPECT_EQ(order(b), first);  // the same seed, the same order
}

TEST(Data, RandpermIsAPermutation) {
  loom::manual_seed(0);
  std::vector<int64_t> p = loom::randperm(1000).to_vector<int64_t>();
  std::sort(p.begin(), p.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(p[static_cast<size_t>(i)], i);
  EXPECT_EQ(loom::randperm(0).numel(), 0);
  EXPECT_EQ(loom::randperm(5, loom::kFloat).dtype(), loom::kFloat);
  EXPECT_THROW(loom::randperm(-1), loom::Error);
}

TEST(Data, DistributedRandomSamplersShareOutEveryIndexOnce) {
  for (bool duplicates : {true, false}) {
    std::multiset<size_t> all;
    std::vector<size_t> first_of_epoch0;
    for (size_t rank = 0; rank < 3; ++rank) {
      torch::data::samplers::DistributedRandomSampler s(10, 3, rank, duplicates);
      while (auto b = s.next(2)) all.insert(b->begin(), b->end());
      if (rank == 0) {
        s.reset();
        first_of_epoch0 = *s.next(4);
        s.set_epoch(1);
        s.reset();
        EXPECT_NE(*s.next(4), first_of_epoch0);  // another epoch, another order
      }
    }
    EXPECT_EQ(all.size(), duplicates ? 12u : 9u);
    for (size_t i = 0; i < 10; ++i) {
      if (duplicates) EXPECT_GE(all.count(i), 1u) << i;
      EXPECT_LE(all.count(i), duplicates ? 2u : 1u) << i;
    }
  }
  torch::data::samplers::DistributedSequentialSampler s(10, 3, 2);
  std::vector<size_t> last;
  while (auto b = s.next(10)) last = *b;
  EXPECT_EQ(last, (std::vector<size_t>{8, 9, 0, 1}));  // a share of 4, padded from the start
}

// Workers build the same batches, in the sampler's order, as the loop does.
TEST(Data, WorkersGiveTheSameBatchesInOrder) {
  auto run = [](size_t workers) {
    auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
        RowsDataset(50).map(torch::data::transforms::Stack<>()),
        torch::data::DataLoaderOptions().batch_size(8).workers(workers));
    std::vector<std::vector<float>> out;
    for (int epoch = 0; epoch < 2; ++epoch)
      for (auto& batch : *loader) out.push_back(batch.data.to_vector<float>());
    return out;
  };
  const auto plain = run(0);
  EXPECT_EQ(plain.size(), 14u);
  EXPECT_EQ(run(2), plain);
  EXPECT_EQ(run(3), plain);
}

// A dataset's error reaches the loop at the batch that failed.
class FailingDataset : public torch::data::Dataset<FailingDataset, torch::data::TensorExample> {
 public:
  torch::data::TensorExample get(size_t index) override {
    if (index == 5) throw loom::Error("sample 5 is unreadable");
    return loom::full({2}, static_cast<double>(index));
  }
  std::optional<size_t> size() const override { return 8; }
};

TEST(Data, AWorkersErrorIsRethrownAtItsBatch) {
  for (size_t workers : {0u, 2u}) {
    auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
        FailingDataset().map(torch::data::transforms::Stack<torch::data::TensorExample>()),
        torch::data::DataLoaderOptions().batch_size(2).workers(workers));
    size_t good = 0;
    try {
      for (auto& batch : *loader) {
        EXPECT_EQ(batch.data.size(0), 2);
        ++good;
      }
      ADD_FAILURE() << "no error";
    } catch (const loom::Error& e) {
      EXPECT_NE(std::string(e.what()).find("sample 5"), std::string::npos);
    }
    EXPECT_EQ(good, 2u) << workers << " workers";
  }
}

TEST(Data, TransformsNormalizeLambdaAndTensorDataset) {
  Tensor x = loom::arange(24, loom::kFloat).reshape({2, 3, 2, 2});  // two [3, 2, 2] images
  torch::data::transforms::Normalize<> norm({1.0, 2.0, 3.0}, {2.0, 4.0, 8.0});
  torch::data::Example<> e{x[1], loom::tensor(std::vector<int64_t>{7})};
  torch::data::Example<> n = norm.apply(e);
  const std::vector<float> in = x[1].to_vector<float>(), out = n.data.to_vector<float>();
  const double mean[] = {1, 2, 3}, sd[] = {2, 4, 8};
  for (size_t i = 0; i < in.size(); ++i) EXPECT_FLOAT_EQ(out[i], (in[i] - mean[i / 4]) / sd[i / 4]);
  EXPECT_EQ(n.target.item<int64_t>(), 7);

  torch::data::transforms::Lambda<torch::data::Example<>> twice(
      [](torch::data::Example<> ex) { return torch::data::Example<>{ex.data * 2, ex.target}; });
  EXPECT_FLOAT_EQ(twice.apply(e).data.sum().item<float>(), 2 * x[1].sum().item<float>());

  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      torch::data::datasets::TensorDataset(rows(6))
          .map(torch::data::transforms::Stack<torch::data::TensorExample>()), 4);
  std::vector<int64_t> sizes;
  for (auto& batch : *loader) sizes.push_back(batch.data.size(0));
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 2}));
}

// Writes MNIST idx files of n images into dir: image i has label i % 10, a
// bright band of 78 pixels at band (i % 10), elsewhere (i + r + c) % 64.
void write_mnist(const std::string& dir, uint32_t n, bool truncate = false) {
  auto be = [](std::ofstream& f, uint32_t v) {
    const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                                static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
    f.write(reinterpret_cast<const char*>(b), 4);
  };
  std::ofstream img(dir + "/train-images-idx3-ubyte", std::ios::binary), lab(dir + "/train-labels-idx1-ubyte",
                                                                               std::ios::binary);
  be(img, 2051), be(img, n), be(img, 28), be(img, 28);
  be(lab, 2049), be(lab, n);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t p = 0; p < 784; ++p)
      img.put(static_cast<char>(p / 78 == i % 10 ? 255 : (i + p / 28 + p % 28) % 64));
    lab.put(static_cast<char>(i % 10));
  }
  if (truncate) img.seekp(-100, std::ios::end), img.put(0);
  img.close();
  if (truncate) std::filesystem::resize_file(dir + "/train-images-idx3-ubyte", 16 + 784 * n - 100);
}

std::string temp_dir(const char* name) {
  const std::string dir = (std::filesystem::temp_directory_path() / name).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(Data, MnistReadsIdxFilesAndNamesWhatIsWrong) {
  const std::string dir = temp_dir("loom_data_mnist");
  write_mnist(dir, 20);
  torch::data::datasets::MNIST mnist(dir);
  EXPECT_TRUE(mnist.is_train());
  EXPECT_EQ(*mnist.size(), 20u);
  EXPECT_EQ(mnist.images().sizes(), loom::IntArrayRef({20, 1, 28, 28}));
  EXPECT_EQ(mnist.targets().dtype(), loom::kLong);
  auto e = mnist.get(13);
  EXPECT_EQ(e.target.item<int64_t>(), 3);
  EXPECT_FLOAT_EQ(e.data.index_select(2, loom::tensor(std::vector<int64_t>{2})).flatten()[0].item<float>(),
                  static_cast<float>((13 + 2 + 0) % 64) / 255.0f);
  EXPECT_THROW(torch::data::datasets::MNIST(dir, torch::data::datasets::MNIST::Mode::kTest), loom::Error);
  write_mnist(dir, 20, /*truncate=*/true);
  try {
    torch::data::datasets::MNIST bad(dir);
    ADD_FAILURE() << "a truncated file was read";
  } catch (const loom::Error& err) {
    EXPECT_NE(std::string(err.what()).find("truncated"), std::string::npos) << err.what();
  }
  std::filesystem::remove_all(dir);
}

// libtorch's MNIST example: get(i) returns images_[i], Normalize, Stack, a
// random sampler; the training step compiles at most twice, then replays.
TEST(Data, TheMnistExamplePatternTrainsWithAtMostTwoCompilesOfItsStep) {
  const std::string dir = temp_dir("loom_data_mnist_train");
  write_mnist(dir, 256);
  for (size_t workers : {0u, 2u}) {
    auto dataset = torch::data::datasets::MNIST(dir)
                       .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                       .map(torch::data::transforms::Stack<>());
    auto loader = torch::data::make_data_loader(std::move(dataset),
                                                torch::data::DataLoaderOptions().batch_size(32).workers(workers));
    torch::nn::Linear fc(784, 10);
    torch::optim::SGD opt(fc->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
    int64_t steps = 0, misses_after_two = 0;
    float first = 0, last = 0;
    for (int epoch = 0; epoch < 3; ++epoch)
      for (auto& batch : *loader) {
        const int64_t before = loom::metrics().cache_misses;
        opt.zero_grad();
        auto loss = torch::nll_loss(torch::log_softmax(fc->forward(batch.data.view({32, 784})), 1), batch.target);
        loss.backward();
        opt.step();
        last = loss.item<float>();
        if (steps == 0) first = last;
        if (++steps > 2) misses_after_two += loom::metrics().cache_misses - before;
      }
    EXPECT_EQ(steps, 24);
    EXPECT_EQ(misses_after_two, 0) << workers << " workers: the step compiled again after its second run";
    EXPECT_LT(last, first);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
