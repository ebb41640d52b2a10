// TensorAccessor, as libtorch's: t.accessor<float, 2>() gives a[i][j] over
// t's materialized CPU memory through its strides, for element loops in
// C++ (reads and writes). The accessor holds its own sizes and strides; the
// tensor must outlive it, and a write through it is seen by every later
// graph that reads the tensor, as a write through data_ptr is.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include <loom/array_ref.h>

namespace loom {

template <typename T, size_t N>
class TensorAccessor {
 public:
  TensorAccessor(T* data, const int64_t* sizes, const int64_t* strides) : data_(data) {
    for (size_t i = 0; i < N; ++i) sizes_[i] = sizes[i], strides_[i] = strides[i];
  }
  TensorAccessor<T, N - 1> operator[](int64_t i) const {
    return TensorAccessor<T, N - 1>(data_ + strides_[0] * i, sizes_.data() + 1, strides_.data() + 1);
  }
  IntArrayRef sizes() const { return IntArrayRef(sizes_.data(), N); }
  IntArrayRef strides() const { return IntArrayRef(strides_.data(), N); }
  int64_t size(size_t i) const { return sizes_[i]; }
  int64_t stride(size_t i) const { return strides_[i]; }
  T* data() const { return data_; }

 private:
  T* data_;
  std::array<int64_t, N> sizes_{}, strides_{};
};

template <typename T>
class TensorAccessor<T, 1> {
 public:
  TensorAccessor(T* data, const int64_t* sizes, const int64_t* strides)
      : data_(data), size_(sizes[0]), stride_(strides[0]) {}
  T& operator[](int64_t i) const { return data_[stride_ * i]; }
  IntArrayRef sizes() const { return IntArrayRef(&size_, 1); }
  IntArrayRef strides() const { return IntArrayRef(&stride_, 1); }
  int64_t size(size_t) const { return size_; }
  int64_t stride(size_t) const { return stride_; }
  T* data() const { return data_; }

 private:
  T* data_;
  int64_t size_, stride_;
};

}  // namespace loom
