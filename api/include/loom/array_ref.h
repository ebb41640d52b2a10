// IntArrayRef: a non-owning view of int64 sizes, like c10::IntArrayRef, so
// that {2, 3}, a std::vector<int64_t> and t.sizes() all pass as sizes.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <vector>

#pragma GCC visibility push(default)
namespace loom {

template <class T>
class ArrayRef {
 public:
  ArrayRef() = default;
  ArrayRef(const T* data, size_t size) : data_(data), size_(size) {}
  ArrayRef(const std::vector<T>& v) : data_(v.data()), size_(v.size()) {}  // NOLINT
  // Safe for the call it appears in ({2, 3} as an argument), which is the
  // only use: the same contract, and the same silenced warning, as c10::ArrayRef.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  ArrayRef(std::initializer_list<T> l) : data_(l.begin()), size_(l.size()) {}  // NOLINT
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  ArrayRef(const T& one) : data_(&one), size_(1) {}  // NOLINT: t.sum(1) as in libtorch
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T& front() const { return data_[0]; }
  const T& back() const { return data_[size_ - 1]; }
  std::vector<T> vec() const { return std::vector<T>(begin(), end()); }
  bool equals(ArrayRef o) const {
    if (size_ != o.size_) return false;
    for (size_t i = 0; i < size_; ++i)
      if (data_[i] != o.data_[i]) return false;
    return true;
  }
  friend bool operator==(ArrayRef a, ArrayRef b) { return a.equals(b); }
  friend bool operator==(ArrayRef a, const std::vector<T>& b) { return a.equals(ArrayRef(b)); }
  friend bool operator!=(ArrayRef a, ArrayRef b) { return !a.equals(b); }

 private:
  const T* data_ = nullptr;
  size_t size_ = 0;
};

using IntArrayRef = ArrayRef<int64_t>;

// "[2, 3]" — the form every error message uses for shapes.
std::ostream& operator<<(std::ostream& os, IntArrayRef a);

}  // namespace loom
#pragma GCC visibility pop
