// The macros and small helpers libtorch programs use, so that a port
// compiles unchanged: TORCH_MODULE (LOOM_MODULE), TORCH_CHECK and AT_ASSERT
// (a loom::Error with the message parts, as c10::Error), torch::str,
// torch::optional, torch::ExpandingArray.
// Each is defined only where libtorch's own is not.
#pragma once
#include <algorithm>
#include <array>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <loom/error.h>

namespace loom {
// torch::optional and torch::nullopt are std's, as in libtorch.
using std::nullopt;
using std::optional;

// The parts streamed into one string, as c10::str.
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

// D values of T given as one value (repeated) or as D of them, as
// torch::ExpandingArray: kernel sizes, strides and paddings in user code.
template <size_t D, class T = int64_t>
class ExpandingArray {
 public:
  ExpandingArray(T single) { values_.fill(single); }  // NOLINT: as libtorch
  ExpandingArray(std::initializer_list<T> list) : ExpandingArray(std::vector<T>(list)) {}
  ExpandingArray(const std::vector<T>& v) {  // NOLINT: as libtorch
    if (v.size() != D)
      throw Error(str("ExpandingArray: expected ", D, " values, got ", v.size()));
    std::copy(v.begin(), v.end(), values_.begin());
  }
  ExpandingArray(const std::array<T, D>& a) : values_(a) {}  // NOLINT: as libtorch
  std::array<T, D>& operator*() { return values_; }
  const std::array<T, D>& operator*() const { return values_; }
  std::array<T, D>* operator->() { return &values_; }
  const std::array<T, D>* operator->() const { return &values_; }
  operator std::vector<T>() const { return std::vector<T>(values_.begin(), values_.end()); }  // NOLINT
  T& operator[](size_t i) { return values_[i]; }
  const T& operator[](size_t i) const { return values_[i]; }
  static constexpr size_t size() { return D; }

 private:
  std::array<T, D> values_;
};
}  // namespace loom

#ifndef TORCH_MODULE
#define TORCH_MODULE(Name) LOOM_MODULE(Name)
#endif

#ifndef TORCH_CHECK
#define TORCH_CHECK(cond, ...)                                                                          \
  do {                                                                                                  \
    if (!(cond))                                                                                        \
      throw ::loom::Error(::loom::str("Expected " #cond " to be true, but got false. ", ##__VA_ARGS__, \
                                      " (", __FILE__, ":", __LINE__, ")"));                             \
  } while (0)
#endif

#ifndef AT_ASSERT
#define AT_ASSERT(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#endif

#ifndef TORCH_INTERNAL_ASSERT
#define TORCH_INTERNAL_ASSERT(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#endif
