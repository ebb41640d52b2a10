// What the nn sources share: the normalization every norm layer computes,
// and how options print.
#pragma once
#include <loom/tensor.h>

namespace loom::nn::shared {

// (x - mean) / sqrt(var + eps) with the mean and biased variance of x over
// `dims` (kept as size-1 dims): layer, batch, instance and group norm.
struct Normalized {
  Tensor y, mean, var;
};
inline Normalized normalize(const Tensor& x, IntArrayRef dims, double eps, const SourceLoc& loc) {
  Tensor mean = x.mean(dims, true, loc);
  const Tensor centered = x.sub(mean, 1, loc);
  Tensor var = centered.mul(centered, loc).mean(dims, true, loc);
  return {centered.mul(var.add(eps, 1, loc).rsqrt(loc), loc), mean, var};
}

inline const char* yes(bool b) { return b ? "true" : "false"; }

}  // namespace loom::nn::shared
