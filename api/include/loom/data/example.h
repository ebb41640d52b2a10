// loom::data::Example, as torch::data::Example: one sample of a dataset, a
// data tensor and a target (or no target: TensorExample).
#pragma once
#include <utility>

#include <loom/tensor.h>

namespace loom::data {

// The target type of a dataset whose samples have none.
struct NoTarget {};

template <typename Data = Tensor, typename Target = Tensor>
struct Example {
  using DataType = Data;
  using TargetType = Target;
  Example() = default;
  Example(Data data, Target target) : data(std::move(data)), target(std::move(target)) {}
  Data data;
  Target target;
};

template <typename Data>
struct Example<Data, NoTarget> {
  using DataType = Data;
  using TargetType = NoTarget;
  Example() = default;
  /* implicit */ Example(Data data) : data(std::move(data)) {}
  operator Data&() { return data; }
  operator const Data&() const { return data; }
  Data data;
};

using TensorExample = Example<Tensor, NoTarget>;

}  // namespace loom::data
