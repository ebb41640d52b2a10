// Scalar: a number passed to an op (2.0 in x * 2.0). Scalars are runtime
// arguments of a compiled graph, never part of its cache key.
#pragma once
#include <cstdint>
#include <ostream>
#include <type_traits>

#include <loom/dtype.h>

#pragma GCC visibility push(default)
namespace loom {

class Scalar {
 public:
  Scalar() : Scalar(int64_t{0}) {}
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T v) {  // NOLINT: implicit, as in libtorch
    if constexpr (std::is_same_v<T, bool>) {
      type_ = kBool; i_ = v; d_ = v;
    } else if constexpr (std::is_integral_v<T>) {
      type_ = kLong; i_ = static_cast<int64_t>(v); d_ = static_cast<double>(v);
    } else {
      type_ = kDouble; d_ = static_cast<double>(v); i_ = static_cast<int64_t>(v);
    }
  }
  // The category of the number: kBool, kLong (any integer) or kDouble (any floating point).
  ScalarType type() const { return type_; }
  bool isFloatingPoint() const { return type_ == kDouble; }
  bool isIntegral(bool include_bool = false) const { return type_ == kLong || (include_bool && type_ == kBool); }
  bool isBoolean() const { return type_ == kBool; }
  double toDouble() const { return d_; }
  float toFloat() const { return static_cast<float>(d_); }
  int64_t toLong() const { return i_; }
  int32_t toInt() const { return static_cast<int32_t>(i_); }
  bool toBool() const { return type_ == kDouble ? d_ != 0.0 : i_ != 0; }
  template <class T> T to() const {
    if constexpr (std::is_same_v<T, bool>) return toBool();
    else if constexpr (std::is_integral_v<T>) return static_cast<T>(i_);
    else return static_cast<T>(d_);
  }

 private:
  ScalarType type_;
  double d_;
  int64_t i_;
};

std::ostream& operator<<(std::ostream& os, const Scalar& s);

}  // namespace loom
#pragma GCC visibility pop
