// Transforms, as torch::data::transforms: a BatchTransform maps a whole
// batch (Stack collates a vector of examples into one example of stacked
// tensors); a Transform maps each example of a batch; a TensorTransform
// maps each example's data tensor (Normalize). Lambda, BatchLambda and
// TensorLambda wrap a function.
#pragma once
#include <functional>
#include <utility>
#include <vector>

#include <loom/array_ref.h>
#include <loom/data/example.h>
#include <loom/functions.h>
#include <loom/tensor.h>

namespace loom::data::transforms {

template <typename InputBatch, typename OutputBatch>
class BatchTransform {
 public:
  using InputBatchType = InputBatch;
  using OutputBatchType = OutputBatch;
  virtual ~BatchTransform() = default;
  virtual OutputBatch apply_batch(InputBatch input_batch) = 0;
};

template <typename Input, typename Output>
class Transform : public BatchTransform<std::vector<Input>, std::vector<Output>> {
 public:
  using InputType = Input;
  using OutputType = Output;
  virtual Output apply(Input input) = 0;
  std::vector<Output> apply_batch(std::vector<Input> input_batch) override {
    std::vector<Output> out;
    out.reserve(input_batch.size());
    for (Input& in : input_batch) out.push_back(apply(std::move(in)));
    return out;
  }
};

template <typename Input, typename Output = Input>
class BatchLambda : public BatchTransform<Input, Output> {
 public:
  using FunctionType = std::function<Output(Input)>;
  explicit BatchLambda(FunctionType function) : function_(std::move(function)) {}
  Output apply_batch(Input input_batch) override { return function_(std::move(input_batch)); }

 private:
  FunctionType function_;
};

template <typename Input, typename Output = Input>
class Lambda : public Transform<Input, Output> {
 public:
  using FunctionType = std::function<Output(Input)>;
  explicit Lambda(FunctionType function) : function_(std::move(function)) {}
  Output apply(Input input) override { return function_(std::move(input)); }

 private:
  FunctionType function_;
};

// Maps the data tensor of each example; the target passes through.
template <typename Target = Tensor>
class TensorTransform : public Transform<Example<Tensor, Target>, Example<Tensor, Target>> {
 public:
  using E = Example<Tensor, Target>;
  virtual Tensor operator()(Tensor input) = 0;
  E apply(E example) override {
    example.data = (*this)(std::move(example.data));
    return example;
  }
};

template <typename Target = Tensor>
class TensorLambda : public TensorTransform<Target> {
 public:
  using FunctionType = std::function<Tensor(Tensor)>;
  explicit TensorLambda(FunctionType function) : function_(std::move(function)) {}
  Tensor operator()(Tensor input) override { return function_(std::move(input)); }

 private:
  FunctionType function_;
};

// (x - mean) / stddev, per channel: mean and stddev have one value, or one
// per channel of a [C, H, W] example (libtorch's shape: [C, 1, 1], float32).
template <typename Target = Tensor>
struct Normalize : public TensorTransform<Target> {
  Normalize(ArrayRef<double> mean, ArrayRef<double> stddev)
      : mean(channels(mean)), stddev(channels(stddev)) {}
  Normalize(double mean, double stddev) : Normalize(ArrayRef<double>(mean), ArrayRef<double>(stddev)) {}
  Tensor operator()(Tensor input) override { return input.sub(mean).div(stddev); }
  Tensor mean, stddev;

 private:
  static Tensor channels(ArrayRef<double> v) {
    return loom::tensor(v.vec(), TensorOptions().dtype(kFloat)).unsqueeze(1).unsqueeze(2);
  }
};

template <typename BatchType, typename RawBatchType = std::vector<BatchType>>
using Collation = BatchTransform<RawBatchType, BatchType>;

// Collates a batch of examples into one example whose data (and target)
// is the examples' tensors stacked along a new first dimension.
template <typename T = Example<>>
struct Stack;

template <>
struct Stack<Example<>> : public Collation<Example<>> {
  Example<> apply_batch(std::vector<Example<>> examples) override {
    std::vector<Tensor> data, targets;
    data.reserve(examples.size());
    targets.reserve(examples.size());
    for (Example<>& e : examples) {
      data.push_back(std::move(e.data));
      targets.push_back(std::move(e.target));
    }
    return {loom::stack(data), loom::stack(targets)};
  }
};

template <>
struct Stack<TensorExample> : public Collation<TensorExample> {
  TensorExample apply_batch(std::vector<TensorExample> examples) override {
    std::vector<Tensor> data;
    data.reserve(examples.size());
    for (TensorExample& e : examples) data.push_back(std::move(e.data));
    return loom::stack(data);
  }
};

}  // namespace loom::data::transforms
