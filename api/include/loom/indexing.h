// torch::indexing: the index of Tensor::index and index_put_, as in
// libtorch: an integer, a bool, Slice(start, stop, step), None, Ellipsis
// (or "..."), or a Tensor (int64/int32 indices, or a bool mask).
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>

#include <loom/tensor.h>

#pragma GCC visibility push(default)
namespace loom::indexing {

struct EllipsisIndexType {
  EllipsisIndexType() = default;
};
inline const EllipsisIndexType Ellipsis{};
inline constexpr std::nullopt_t None = std::nullopt;

// Python's start:stop:step; absent ends mean the whole dim.
class Slice {
 public:
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
        std::optional<int64_t> step = std::nullopt)
      : start_(start), stop_(stop), step_(step) {}
  std::optional<int64_t> start() const { return start_; }
  std::optional<int64_t> stop() const { return stop_; }
  std::optional<int64_t> step() const { return step_; }

 private:
  std::optional<int64_t> start_, stop_, step_;
};

enum class TensorIndexType { None, Ellipsis, Integer, Boolean, Slice, Tensor };

class TensorIndex {
 public:
  TensorIndex(std::nullopt_t) : type_(TensorIndexType::None) {}  // NOLINT: implicit, as in libtorch
  TensorIndex(EllipsisIndexType) : type_(TensorIndexType::Ellipsis) {}  // NOLINT
  TensorIndex(const char* s) : type_(TensorIndexType::Ellipsis), bad_string_(std::strcmp(s, "...") != 0) {}  // NOLINT
  TensorIndex(int64_t i) : type_(TensorIndexType::Integer), integer_(i) {}  // NOLINT
  TensorIndex(int i) : type_(TensorIndexType::Integer), integer_(i) {}  // NOLINT
  template <class T, std::enable_if_t<std::is_same_v<T, bool>, int> = 0>
  TensorIndex(T b) : type_(TensorIndexType::Boolean), boolean_(b) {}  // NOLINT
  TensorIndex(Slice s) : type_(TensorIndexType::Slice), slice_(s) {}  // NOLINT
  TensorIndex(Tensor t) : type_(TensorIndexType::Tensor), tensor_(std::move(t)) {}  // NOLINT

  TensorIndexType type() const { return type_; }
  bool is_none() const { return type_ == TensorIndexType::None; }
  bool is_ellipsis() const { return type_ == TensorIndexType::Ellipsis; }
  bool is_integer() const { return type_ == TensorIndexType::Integer; }
  bool is_boolean() const { return type_ == TensorIndexType::Boolean; }
  bool is_slice() const { return type_ == TensorIndexType::Slice; }
  bool is_tensor() const { return type_ == TensorIndexType::Tensor; }
  int64_t integer() const { return integer_; }
  bool boolean() const { return boolean_; }
  const Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }
  // A string other than "..." (rejected when used).
  bool bad_string() const { return bad_string_; }

 private:
  TensorIndexType type_;
  int64_t integer_ = 0;
  bool boolean_ = false;
  bool bad_string_ = false;
  Slice slice_;
  Tensor tensor_;
};

}  // namespace loom::indexing
#pragma GCC visibility pop
