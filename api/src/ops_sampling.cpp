// Sampling from given probabilities: multinomial (the Gumbel-max trick:
// the argmax of log p + Gumbel noise is a draw from p; the k largest are k
// draws without replacement) and bernoulli of a tensor of probabilities.
// Both are ordinary lazy ops on loom's counter-based random numbers, so a
// sampling loop records and replays like any other graph.
#include <loom/functions.h>
#include <loom/tensor.h>

#include <limits>

#include "api/src/record.h"

namespace loom {

using detail::describe;

Tensor detail::checked_index(const Tensor& index, int64_t size, const SourceLoc& loc) {
  auto n = new_node(ir::Op::IndexCheck, kLong, index.device(), shape_of(index), read(index, loc), loc);
  n->scalar[0] = rt_scalar(size);
  n->num_scalars = 1;
  return wrap(std::move(n));
}

Tensor detail::checked_where(const Tensor& x, const Tensor& ok, int64_t size, const SourceLoc& loc) {
  return checked_index(where(ok, x.to(kLong, loc), size, loc), size, loc);
}

Tensor multinomial(const Tensor& self, int64_t num_samples, bool replacement, SourceLoc loc) {
  detail::impl_of(self, "multinomial", loc);
  LOOM_CHECK(self.dim() == 1 || self.dim() == 2, "multinomial", loc, "prob_dist must be 1 or 2 dim, got ",
             describe(self));
  LOOM_CHECK(is_floating_point(self.dtype()), "multinomial", loc,
             "multinomial only supports floating-point dtypes for input, got ", describe(self));
  LOOM_CHECK(num_samples > 0, "multinomial", loc, "cannot sample n_sample <= 0 samples");
  const int64_t n = self.size(-1);
  LOOM_CHECK(n > 0, "multinomial", loc, "number of categories cannot be zero, got ", describe(self));
  LOOM_CHECK(replacement || num_samples <= n, "multinomial", loc,
             "cannot sample n_sample > prob_dist.size(-1) samples without replacement (", num_samples, " > ", n, ")");
  const Tensor p = (self.dim() == 1 ? self.unsqueeze(0, loc) : self).to(kFloat, loc).detach();  // [rows, n]
  const int64_t rows = p.size(0);
  const TensorOptions f32 = TensorOptions(kFloat).device(self.device());
  // Gumbel(0, 1) noise; u at 0 would give -inf for one category's key.
  auto gumbel = [&](std::vector<int64_t> shape) {
    return rand(shape, f32, loc).clamp(std::numeric_limits<float>::min(), std::nullopt, loc).log(loc).neg(loc).log(loc).neg(loc);
  };
  Tensor samples;
  Tensor ok = p.ge(0, loc).logical_and(p.isfinite(loc), loc).all(-1, true, loc).logical_and(p.sum({-1}, true, std::nullopt, loc).gt(0, loc), loc);
  if (replacement) {
    Tensor keys = p.log(loc).unsqueeze(1, loc).add(gumbel({rows, num_samples, n}), 1, loc);  // [rows, S, n]
    samples = keys.argmax(-1, false, loc);
  } else {
    Tensor keys = p.log(loc).add(gumbel({rows, n}), 1, loc);
    samples = std::get<1>(keys.topk(num_samples, -1, true, true, loc));
    ok = ok.logical_and(p.gt(0, loc).sum({-1}, true, std::nullopt, loc).ge(num_samples, loc), loc);
  }
  samples = detail::checked_where(samples, ok, n, loc);
  return self.dim() == 1 ? samples.squeeze(0, loc) : samples;
}

Tensor Tensor::multinomial(int64_t num_samples, bool replacement, SourceLoc loc) const {
  return loom::multinomial(*this, num_samples, replacement, loc);
}

Tensor bernoulli(const Tensor& p, SourceLoc loc) {
  detail::impl_of(p, "bernoulli", loc);
  LOOM_CHECK(is_floating_point(p.dtype()), "bernoulli", loc, "expected a floating tensor of probabilities, got ",
             describe(p));
  const TensorOptions o = TensorOptions(p.dtype() == kDouble ? kDouble : kFloat).device(p.device());
  Tensor q = p.detach();
  Tensor draw = rand(p.sizes(), o, loc).lt(q, loc).to(kLong, loc);
  return detail::checked_where(draw, q.ge(0, loc).logical_and(q.le(1, loc), loc), 2, loc).to(p.dtype(), loc);
}
Tensor bernoulli(const Tensor& self, double p, SourceLoc loc) {
  detail::impl_of(self, "bernoulli", loc);
  LOOM_CHECK(p >= 0 && p <= 1, "bernoulli", loc, "expects 0 <= p <= 1, but got p=", p);
  return rand(self.sizes(), TensorOptions(kDouble).device(self.device()), loc).lt(p, loc).to(self.dtype(), loc);
}
Tensor Tensor::bernoulli(SourceLoc loc) const { return loom::bernoulli(*this, loc); }
Tensor Tensor::bernoulli(double p, SourceLoc loc) const { return loom::bernoulli(*this, p, loc); }

}  // namespace loom
