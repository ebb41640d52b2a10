// The losses (loom/nn/functional.h), each as PyTorch computes it, from
// differentiable loom ops.
#include <loom/nn/functional.h>

#include <loom/autograd.h>
#include <loom/functions.h>

#include "api/src/autocast.h"
#include "api/src/autograd/node.h"
#include "api/src/record.h"

namespace loom::nn::functional {

using detail::describe;

namespace {

Tensor reduce(const Tensor& loss, Reduction r, const char* op, const SourceLoc& loc) {
  switch (r) {
    case kNone: return loss;
    case kSum: return loss.sum(loc);
    case kMean: return loss.mean(loc);
    case kBatchMean: break;
  }
  detail::throw_error(op, "reduction kBatchMean is only for kl_div", loc);
}

void check_pair(const Tensor& input, const Tensor& target, const char* op, const SourceLoc& loc) {
  detail::impl_of(input, op, loc);
  detail::impl_of(target, op, loc);
  LOOM_CHECK(input.is_floating_point(), op, loc, "expected a floating-point input, got ", describe(input));
  LOOM_CHECK(input.sizes() == target.sizes(), op, loc, "the target's size ", target.sizes(),
             " must be the same as the input's size ", input.sizes(), " (", describe(input), " and ", describe(target),
             ")");
}

// Integer targets: per row, -log_probs[target] times the class weight (0
// where target == ignore_index), and those weights (the mean divides by their sum).
struct Picked {
  Tensor loss, weight;
};
Picked pick(const Tensor& log_probs, const Tensor& target, const Tensor& class_weight, int64_t ignore_index,
            const SourceLoc& loc) {
  Tensor valid = target.ne(ignore_index, loc);
  Tensor safe = where(valid, target, Scalar(int64_t{0}), loc);
  Tensor picked = log_probs.gather(1, safe.unsqueeze(1, loc), loc).squeeze(1, loc);
  Tensor w = valid.to(log_probs.dtype(), loc);
  if (class_weight.defined()) w = w.mul(class_weight.index_select(0, safe, loc), loc);
  return {picked.neg(loc).mul(w, loc), w};
}

// Class indices without class weights or smoothing, the common case (a
// language model's loss over its vocabulary): each row's loss is
// logsumexp(x_i) - x_i[t_i], and its gradient (softmax(x_i) - onehot(t_i))
// times the row's incoming gradient, one elementwise expression over x
// recomputed from x and the saved logsumexp. Nothing of x's size is kept
// between forward and backward but x itself (often a cast of the logits,
// which the lowering recomputes where it is read): no log-probabilities,
// no softmax.
autograd::variable_list rows_from_logits_b(const detail::OpGrad& node, const Tensor& g) {
  const Tensor x = node.saved(0), lse = node.saved(1), target = node.saved(2);
  // The forward's gather, which would have found a label out of range, may
  // be gone from the graph (nobody reads the loss): index_check keeps that
  // check in the gradient's kernel, as gather's own rule does.
  const Tensor checked = detail::checked_index(target, x.size(1), SourceLoc::current());
  const Tensor classes = arange(x.size(1), TensorOptions(kLong).device(x.device()));
  const Tensor onehot = classes.unsqueeze(0).eq(checked.unsqueeze(1)).to(x.dtype());
  const Tensor softmax = x.sub(lse.unsqueeze(1)).exp();
  return {softmax.sub(onehot).mul(g.to(x.dtype()).unsqueeze(1))};
}

Picked pick_from_logits(const Tensor& x, const Tensor& target, int64_t ignore_index, const SourceLoc& loc) {
  const Tensor valid = target.ne(ignore_index, loc);
  const Tensor safe = where(valid, target, Scalar(int64_t{0}), loc);
  Tensor rows, lse;
  {
    NoGradGuard no_grad;
    lse = x.logsumexp({1}, false, loc);
    rows = lse.sub(x.gather(1, safe.unsqueeze(1, loc), loc).squeeze(1, loc), 1, loc);
  }
  if (GradMode::is_enabled() && x.requires_grad())
    if (auto node = detail::attach("CrossEntropyLossBackward0", rows_from_logits_b, {&x}, rows, loc)) {
      node->save(x);
      node->save(lse);
      node->save(safe);
    }
  const Tensor w = valid.to(x.dtype(), loc);
  return {rows.mul(w, loc), w};
}

Tensor reduce_weighted(const Picked& p, Reduction r, const char* op, const SourceLoc& loc) {
  if (r == kMean) return p.loss.sum(loc).div(p.weight.sum(loc), loc);
  return reduce(p.loss, r, op, loc);
}

// [N, C, d1, ...] -> [N*d1*..., C], with the target flattened alike; the
// result of a kNone loss is reshaped back to the target's shape.
struct Rows {
  Tensor input, target;
  std::vector<int64_t> target_shape;
};
Rows as_rows(const Tensor& input, const Tensor& target, bool class_target, const char* op, const SourceLoc& loc) {
  detail::impl_of(input, op, loc);
  detail::impl_of(target, op, loc);
  LOOM_CHECK(input.is_floating_point(), op, loc, "expected floating-point scores, got ", describe(input));
  LOOM_CHECK(input.dim() >= 1, op, loc, "expected an input of at least 1 dim, got ", describe(input));
  if (class_target) {
    LOOM_CHECK(target.dtype() == kLong, op, loc, "expected class indices of dtype Long as target, got ", describe(target));
    bool ok = input.dim() == 1 ? target.dim() == 0 : target.dim() == input.dim() - 1 && target.size(0) == input.size(0);
    for (int64_t d = 2; ok && d < input.dim(); ++d) ok = target.size(d - 1) == input.size(d);
    LOOM_CHECK(ok, op, loc, "expected a target of shape [N, d1, ...] for an input [N, C, d1, ...] (or [] for [C]), got ",
               describe(target), " for ", describe(input));
  } else {
    LOOM_CHECK(target.sizes() == input.sizes(), op, loc, "class-probability targets must have the input's shape, got ",
               describe(target), " for ", describe(input));
  }
  Rows r;
  r.target_shape = target.sizes().vec();
  if (input.dim() == 1) {
    r.input = input.unsqueeze(0, loc);
    r.target = target.reshape(class_target ? std::vector<int64_t>{1} : std::vector<int64_t>{1, -1}, loc);
    return r;
  }
  if (input.dim() == 2) {
    r.input = input;
    r.target = target;
    return r;
  }
  std::vector<int64_t> perm{0};
  for (int64_t d = 2; d < input.dim(); ++d) perm.push_back(d);
  perm.push_back(1);
  const int64_t classes = input.size(1);
  r.input = input.permute(perm, loc).reshape({-1, classes}, loc);
  r.target = class_target ? target.reshape({-1}, loc) : target.permute(perm, loc).reshape({-1, classes}, loc);
  return r;
}

Tensor unrows(const Tensor& loss, const Rows& r, Reduction red, const SourceLoc& loc) {
  return red == kNone ? loss.reshape(r.target_shape, loc) : loss;
}

}  // namespace

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, const MSELossFuncOptions& o, SourceLoc loc) {
  const Tensor input = detail::autocast::to_float(input_in, loc), target = detail::autocast::to_float(target_in, loc);
  check_pair(input, target, "mse_loss", loc);
  Tensor d = input.sub(target, 1, loc);
  return reduce(d.mul(d, loc), o.reduction(), "mse_loss", loc);
}

Tensor l1_loss(const Tensor& input_in, const Tensor& target_in, const L1LossFuncOptions& o, SourceLoc loc) {
  const Tensor input = detail::autocast::to_float(input_in, loc), target = detail::autocast::to_float(target_in, loc);
  check_pair(input, target, "l1_loss", loc);
  return reduce(input.sub(target, 1, loc).abs(loc), o.reduction(), "l1_loss", loc);
}

Tensor smooth_l1_loss(const Tensor& input_in, const Tensor& target_in, const SmoothL1LossFuncOptions& o, SourceLoc loc) {
  const Tensor input = detail::autocast::to_float(input_in, loc), target = detail::autocast::to_float(target_in, loc);
  check_pair(input, target, "smooth_l1_loss", loc);
  LOOM_CHECK(o.beta() >= 0, "smooth_l1_loss", loc, "beta must be non-negative, got ", o.beta());
  Tensor d = input.sub(target, 1, loc).abs(loc);
  if (o.beta() == 0) return reduce(d, o.reduction(), "smooth_l1_loss", loc);
  Tensor loss = where(d.lt(o.beta(), loc), d.mul(d, loc).mul(0.5 / o.beta(), loc), d.sub(0.5 * o.beta(), 1, loc), loc);
  return reduce(loss, o.reduction(), "smooth_l1_loss", loc);
}

Tensor huber_loss(const Tensor& input_in, const Tensor& target_in, const HuberLossFuncOptions& o, SourceLoc loc) {
  const Tensor input = detail::autocast::to_float(input_in, loc), target = detail::autocast::to_float(target_in, loc);
  check_pair(input, target, "huber_loss", loc);
  LOOM_CHECK(o.delta() > 0, "huber_loss", loc, "delta must be positive, got ", o.delta());
  Tensor d = input.sub(target, 1, loc).abs(loc);
  Tensor loss = where(d.lt(o.delta(), loc), d.mul(d, loc).mul(0.5, loc),
                      d.sub(0.5 * o.delta(), 1, loc).mul(o.delta(), loc), loc);
  return reduce(loss, o.reduction(), "huber_loss", loc);
}

Tensor nll_loss(const Tensor& input_in, const Tensor& target_in, const NLLLossFuncOptions& o, SourceLoc loc) {
  const Tensor input = detail::autocast::to_float(input_in, loc), target = detail::autocast::to_float(target_in, loc);
  Rows r = as_rows(input, target, true, "nll_loss", loc);
  Picked p = pick(r.input, r.target, o.weight(), o.ignore_index(), loc);
  return unrows(reduce_weighted(p, o.reduction(), "nll_loss", loc), r, o.reduction(), loc);
}

Tensor cross_entropy(const Tensor& input_in, const Tensor& target_in, const CrossEntropyFuncOptions& o, SourceLoc loc) {
  const Tensor input = detail::autocast::to_float(input_in, loc), target = detail::autocast::to_float(target_in, loc);
  const double eps = o.label_smoothing();
  LOOM_CHECK(eps >= 0 && eps <= 1, "cross_entropy", loc, "label_smoothing must be between 0.0 and 1.0, got ", eps);
  const bool class_target = !is_floating_point(detail::impl_of(target, "cross_entropy", loc).storage->dtype);
  Rows r = as_rows(input, target, class_target, "cross_entropy", loc);
  const int64_t classes = r.input.size(1);
  if (class_target && eps == 0 && !o.weight().defined()) {
    Picked p = pick_from_logits(r.input, r.target, o.ignore_index(), loc);
    return unrows(reduce_weighted(p, o.reduction(), "cross_entropy", loc), r, o.reduction(), loc);
  }
  Tensor log_probs = r.input.log_softmax(1, std::nullopt, loc);
  Tensor row_weight = o.weight().defined() ? o.weight().view({1, classes}, loc) : Tensor();
  if (!class_target) {
    // Probabilities: -sum_c w_c t_c log p_c, the mean over rows.
    Tensor t = r.target;
    if (eps > 0) t = t.mul(1 - eps, loc).add(eps / static_cast<double>(classes), 1, loc);
    Tensor prod = log_probs.mul(t, loc);
    if (row_weight.defined()) prod = prod.mul(row_weight, loc);
    Tensor loss = prod.sum({1}, false, std::nullopt, loc).neg(loc);
    return unrows(reduce(loss, o.reduction(), "cross_entropy", loc), r, o.reduction(), loc);
  }
  Picked p = pick(log_probs, r.target, o.weight(), o.ignore_index(), loc);
  Tensor nll = reduce_weighted(p, o.reduction(), "cross_entropy", loc);
  if (eps == 0) return unrows(nll, r, o.reduction(), loc);
  // PyTorch's label smoothing: (1 - eps) * nll + eps / C * smooth, where
  // smooth = -sum_c w_c log p_c per row (0 for ignored rows), reduced as nll.
  Tensor per_class = row_weight.defined() ? log_probs.mul(row_weight, loc) : log_probs;
  Tensor smooth = per_class.sum({1}, false, std::nullopt, loc).neg(loc).mul(r.target.ne(o.ignore_index(), loc).to(log_probs.dtype(), loc), loc);
  Tensor smooth_r = reduce_weighted({smooth, p.weight}, o.reduction(), "cross_entropy", loc);
  Tensor loss = nll.mul(1 - eps, loc).add(smooth_r.mul(eps / static_cast<double>(classes), loc), 1, loc);
  return unrows(loss, r, o.reduction(), loc);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BinaryCrossEntropyFuncOptions& o,
                            SourceLoc loc) {
  check_pair(input, target, "binary_cross_entropy", loc);
  // log clamped at -100, as PyTorch, so a probability of exactly 0 or 1 gives a finite loss.
  Tensor log_p = input.log(loc).clamp_min(-100, loc);
  Tensor log_q = input.neg(loc).add(1, 1, loc).log(loc).clamp_min(-100, loc);
  Tensor loss = target.mul(log_p, loc).add(target.neg(loc).add(1, 1, loc).mul(log_q, loc), 1, loc).neg(loc);
  if (o.weight().defined()) loss = loss.mul(o.weight(), loc);
  return reduce(loss, o.reduction(), "binary_cross_entropy", loc);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input_in, const Tensor& target_in,
                                        const BinaryCrossEntropyWithLogitsFuncOptions& o, SourceLoc loc) {
  const Tensor input = detail::autocast::to_float(input_in, loc), target = detail::autocast::to_float(target_in, loc);
  check_pair(input, target, "binary_cross_entropy_with_logits", loc);
  // PyTorch: (1 - t) x - w_pos log sigmoid(x), with log sigmoid(x) =
  // -(max(-x, 0) + log1p(exp(-|x|))) and w_pos = 1 + (pos_weight - 1) t.
  Tensor log_sigmoid = input.neg(loc).clamp_min(0, loc).add(input.abs(loc).neg(loc).exp(loc).log1p(loc), 1, loc).neg(loc);
  if (o.pos_weight().defined())
    log_sigmoid = log_sigmoid.mul(o.pos_weight().sub(1, 1, loc).mul(target, loc).add(1, 1, loc), loc);
  Tensor loss = target.neg(loc).add(1, 1, loc).mul(input, loc).sub(log_sigmoid, 1, loc);
  if (o.weight().defined()) loss = loss.mul(o.weight(), loc);
  return reduce(loss, o.reduction(), "binary_cross_entropy_with_logits", loc);
}

Tensor kl_div(const Tensor& input_in, const Tensor& target_in, const KLDivFuncOptions& o, SourceLoc loc) {
  const Tensor input = detail::autocast::to_float(input_in, loc), target = detail::autocast::to_float(target_in, loc);
  check_pair(input, target, "kl_div", loc);
  Tensor loss;
  if (o.log_target()) {
    loss = target.exp(loc).mul(target.sub(input, 1, loc), loc);
  } else {
    // xlogy(t, t) - t * input, with 0 log 0 = 0 (and no NaN in its gradient).
    Tensor positive = target.gt(0, loc);
    Tensor t_log_t = target.mul(where(positive, target, Scalar(1.0), loc).log(loc), loc);
    loss = t_log_t.sub(target.mul(input, loc), 1, loc);
  }
  if (o.reduction() == kBatchMean) {
    LOOM_CHECK(input.dim() >= 1, "kl_div", loc, "batchmean needs a batch dim, got ", describe(input));
    return loss.sum(loc).div(static_cast<double>(input.size(0)), loc);
  }
  return reduce(loss, o.reduction(), "kl_div", loc);
}

}  // namespace loom::nn::functional
