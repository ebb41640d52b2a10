#include "runtime/reference/eval.h"

namespace loom::runtime::reference {


BroadcastIndex::BroadcastIndex(const ir::Dims& in_shape, const ir::Dims& out_shape) : out_shape_(out_shape) {
  strides_.n = out_shape.n;
  ir::Dims in_strides = contiguous_strides(in_shape);
  int shift = static_cast<int>(out_shape.n) - static_cast<int>(in_shape.n);
  identity_ = shift == 0;
  for (int d = 0; d < out_shape.n; ++d) {
    int id = d - shift;
    if (id < 0 || in_shape[id] == 1) {
      strides_[d] = 0;
      if (out_shape[d] != 1) identity_ = false;
    } else {
      strides_[d] = in_strides[id];
    }
  }
}

void BroadcastIndex::fill(std::vector<int64_t>& offsets) const {
  int64_t n = out_shape_.numel();
  offsets.resize(n);
  if (n == 0) return;
  int nd = out_shape_.n;
  std::array<int64_t, ir::kMaxDims> idx{};
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    offsets[i] = off;
    for (int d = nd - 1; d >= 0; --d) {  // odometer increment
      off += strides_[d];
      if (++idx[d] < out_shape_[d]) break;
      off -= strides_[d] * out_shape_[d];
      idx[d] = 0;
    }
  }
}

}  // namespace loom::runtime::reference
