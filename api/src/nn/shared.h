// What the nn sources share: the normalization every norm layer computes,
// and how options print.
#pragma once
#include <loom/tensor.h>

namespace loom::nn::shared {

// y = (x - mean) / sqrt(var + eps) * weight + bias, with the mean and
// biased variance of x over `dims` (kept as size-1 dims): layer, batch,
// instance and group norm. weight and bias may be undefined; defined, they
// broadcast against x (a channel's [1, C, 1, 1], or a layer norm's trailing
// shape). One backward node, `grad_name` (libtorch's NativeBatchNormBackward0,
// NativeLayerNormBackward0, ...): it saves x, the mean and 1/sqrt(var + eps),
// and gives dx, dweight and dbias from two sums over `dims` (see
// api/src/nn/normalize.cpp), never the normalized x itself, which the
// forward then does not have to store.
struct Normalized {
  Tensor y, mean, var;  // mean and var without history
};
Normalized normalize(const Tensor& x, IntArrayRef dims, double eps, const Tensor& weight, const Tensor& bias,
                     const char* grad_name, const SourceLoc& loc);

inline const char* yes(bool b) { return b ? "true" : "false"; }

}  // namespace loom::nn::shared
