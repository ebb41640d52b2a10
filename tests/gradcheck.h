// gradcheck: analytic gradients (autograd::grad) against central finite
// differences, in float64. The checked scalar is sum(f(inputs) * w) with
// fixed pseudo-random weights w, so one check covers the whole
// vector-Jacobian product of f, not just its sum.
#pragma once
#include <functional>
#include <sstream>

#include "test_util.h"

namespace loom_test {

using Fn = std::function<loom::Tensor(const std::vector<loom::Tensor>&)>;

// Deterministic values in [lo, hi] (a small LCG: tests never depend on loom's RNG).
inline std::vector<double> values(size_t n, uint64_t seed, double lo = -2, double hi = 2) {
  std::vector<double> v(n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (double& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * static_cast<double>(s >> 11) / static_cast<double>(1ull << 53);
  }
  return v;
}

// A materialized float64 tensor of this shape with values() in [lo, hi].
inline loom::Tensor input(std::vector<int64_t> shape, uint64_t seed, double lo = -2, double hi = 2) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return loom::tensor(values(static_cast<size_t>(n), seed, lo, hi), loom::kDouble).reshape(shape).clone();
}

inline double weighted_sum(const loom::Tensor& out, const loom::Tensor& w) {
  return (out.to(loom::kDouble) * w).sum().item<double>();
}

// Checks every input's gradient. Inputs are float64 leaves; f may use them
// through views, broadcasting and in-place ops on intermediate values.
inline ::testing::AssertionResult gradcheck(const Fn& f, const std::vector<loom::Tensor>& inputs,
                                            double rtol = 1e-5, double atol = 1e-7, double h = 1e-6) {
  std::vector<loom::Tensor> leaves;
  for (const loom::Tensor& t : inputs) leaves.push_back(t.detach().clone().requires_grad_());
  loom::Tensor out = f(leaves);
  std::vector<int64_t> out_shape = out.sizes().vec();
  loom::Tensor w = input(out_shape, 977, 0.5, 1.5);
  loom::Tensor loss = (out.to(loom::kDouble) * w).sum();
  auto grads = loom::autograd::grad({loss}, leaves, {}, std::nullopt, false, /*allow_unused=*/true);
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<double> base = inputs[i].to_vector<double>();
    std::vector<double> analytic = grads[i].defined() ? grads[i].to_vector<double>() : std::vector<double>(base.size(), 0);
    if (grads[i].defined() && grads[i].sizes().vec() != inputs[i].sizes().vec())
      return ::testing::AssertionFailure() << "input " << i << ": gradient of shape " << grads[i].sizes()
                                           << " for an input of shape " << inputs[i].sizes();
    for (size_t j = 0; j < base.size(); ++j) {
      auto eval = [&](double delta) {
        std::vector<loom::Tensor> moved;
        for (size_t k = 0; k < inputs.size(); ++k) {
          if (k != i) {
            moved.push_back(inputs[k].detach().clone().requires_grad_());
            continue;
          }
          std::vector<double> v = base;
          v[j] += delta;
          moved.push_back(loom::tensor(v, loom::kDouble).reshape(inputs[i].sizes()).clone().requires_grad_());
        }
        return weighted_sum(f(moved), w);
      };
      const double numeric = (eval(h) - eval(-h)) / (2 * h);
      if (!(std::abs(analytic[j] - numeric) <= atol + rtol * std::abs(numeric)))
        return ::testing::AssertionFailure() << "input " << i << " element " << j << ": analytic " << analytic[j]
                                             << ", finite difference " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

// Second order: the gradient of <grad f, v> (v fixed) checked the same way.
inline ::testing::AssertionResult gradgradcheck(const Fn& f, const std::vector<loom::Tensor>& inputs) {
  Fn first = [f](const std::vector<loom::Tensor>& xs) {
    loom::Tensor out = f(xs);
    loom::Tensor w = input(out.sizes().vec(), 313, 0.5, 1.5);
    auto g = loom::autograd::grad({(out * w).sum()}, xs, {}, std::nullopt, /*create_graph=*/true, true);
    loom::Tensor acc = loom::zeros({}, loom::kDouble);
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i].defined()) acc = acc + (g[i] * input(g[i].sizes().vec(), 101 + i, 0.5, 1.5)).sum();
    return acc;
  };
  return gradcheck(first, inputs, 1e-4, 1e-6);
}

}  // namespace loom_test
