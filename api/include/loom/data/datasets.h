// Datasets, as torch::data::datasets: a BatchDataset answers a batch
// request (by default a list of indices); a Dataset answers one index and
// gets its batches by asking once per index. `.map(transform)` wraps a
// dataset in a MapDataset that applies a transform to every batch, so
//   MNIST(dir).map(transforms::Normalize<>(0.1307, 0.3081)).map(transforms::Stack<>())
// reads like libtorch's example. Nothing here records an op by itself: a
// dataset's get() returns what its author records (a view of a stored
// tensor, usually), and the graph that stacks a batch is compiled once and
// replayed, whatever indices a batch holds (view offsets are run arguments).
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <loom/array_ref.h>
#include <loom/data/example.h>
#include <loom/tensor.h>

#pragma GCC visibility push(default)
namespace loom::data::datasets {

template <typename SourceDataset, typename AppliedTransform>
class MapDataset;
template <typename DatasetType, typename TransformType>
MapDataset<DatasetType, TransformType> map(DatasetType dataset, TransformType transform);

template <typename Self, typename Batch = std::vector<Example<>>, typename BatchRequest = ArrayRef<size_t>>
class BatchDataset {
 public:
  using SelfType = Self;
  using BatchType = Batch;
  using BatchRequestType = BatchRequest;
  constexpr static bool is_stateful = false;

  virtual ~BatchDataset() = default;
  virtual Batch get_batch(BatchRequest request) = 0;
  // The number of samples, when known.
  virtual std::optional<size_t> size() const = 0;

  template <typename TransformType>
  MapDataset<Self, TransformType> map(TransformType transform) & {
    return datasets::map(static_cast<Self&>(*this), std::move(transform));
  }
  template <typename TransformType>
  MapDataset<Self, TransformType> map(TransformType transform) && {
    return datasets::map(std::move(static_cast<Self&>(*this)), std::move(transform));
  }
};

template <typename Self, typename SingleExample = Example<>>
class Dataset : public BatchDataset<Self, std::vector<SingleExample>> {
 public:
  using ExampleType = SingleExample;
  virtual ExampleType get(size_t index) = 0;
  std::vector<ExampleType> get_batch(ArrayRef<size_t> indices) override {
    std::vector<ExampleType> batch;
    batch.reserve(indices.size());
    for (size_t i : indices) batch.push_back(get(i));
    return batch;
  }
};

// A dataset of one tensor: sample i is tensor[i].
class TensorDataset : public Dataset<TensorDataset, TensorExample> {
 public:
  explicit TensorDataset(const std::vector<Tensor>& tensors) : TensorDataset(tensors.at(0)) {}
  explicit TensorDataset(Tensor tensor) : tensor(std::move(tensor)) {}
  TensorExample get(size_t index) override { return tensor[static_cast<int64_t>(index)]; }
  std::optional<size_t> size() const override { return static_cast<size_t>(tensor.size(0)); }
  Tensor tensor;
};

template <typename SourceDataset, typename AppliedTransform>
class MapDataset : public BatchDataset<MapDataset<SourceDataset, AppliedTransform>,
                                       typename AppliedTransform::OutputBatchType,
                                       typename SourceDataset::BatchRequestType> {
 public:
  using DatasetType = SourceDataset;
  using TransformType = AppliedTransform;
  using BatchRequestType = typename SourceDataset::BatchRequestType;
  using OutputBatchType = typename AppliedTransform::OutputBatchType;

  MapDataset(DatasetType dataset, TransformType transform)
      : dataset_(std::move(dataset)), transform_(std::move(transform)) {}

  OutputBatchType get_batch(BatchRequestType indices) override {
    return transform_.apply_batch(dataset_.get_batch(std::move(indices)));
  }
  std::optional<size_t> size() const override { return dataset_.size(); }

  const SourceDataset& dataset() const noexcept { return dataset_; }
  const AppliedTransform& transform() const noexcept { return transform_; }

 private:
  SourceDataset dataset_;
  AppliedTransform transform_;
};

template <typename DatasetType, typename TransformType>
MapDataset<DatasetType, TransformType> map(DatasetType dataset, TransformType transform) {
  static_assert(std::is_same<typename DatasetType::BatchType, typename TransformType::InputBatchType>::value,
                "the transform's input batch type is not the dataset's batch type");
  return {std::move(dataset), std::move(transform)};
}

// The MNIST idx files of a folder: train-images-idx3-ubyte and
// train-labels-idx1-ubyte (kTrain), t10k-... (kTest). Images are float32
// [N, 1, 28, 28] scaled to [0, 1], targets int64 [N]; sample i is
// (images()[i], targets()[i]), views of the stored tensors. A missing or
// malformed file is a loom::Error naming it.
class MNIST : public Dataset<MNIST> {
 public:
  enum class Mode { kTrain, kTest };
  explicit MNIST(const std::string& root, Mode mode = Mode::kTrain);
  Example<> get(size_t index) override;
  std::optional<size_t> size() const override;
  bool is_train() const noexcept;
  const Tensor& images() const;
  const Tensor& targets() const;

 private:
  Tensor images_, targets_;
  bool train_ = true;
};

}  // namespace loom::data::datasets

namespace loom::data {
// As torch::data::Dataset, the name custom datasets derive from.
using datasets::BatchDataset;
using datasets::Dataset;
}  // namespace loom::data
#pragma GCC visibility pop
