// L-BFGS: torch/optim/lbfgs.py in C++, the same iterations, conditions and
// line search (_cubic_interpolate, _strong_wolfe), so a run matches
// PyTorch's evaluation for evaluation. Vectors are flat tensors on the
// parameters' device; the scalars that steer the search are read to the
// host (item), as PyTorch's are.
#include <loom/autograd.h>
#include <loom/functions.h>
#include <loom/optim/lbfgs.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "api/src/record.h"

namespace loom::optim {

namespace {

double dot(const Tensor& a, const Tensor& b) { return a.mul(b).sum().item<double>(); }
double abs_max(const Tensor& a) { return a.numel() == 0 ? 0.0 : a.abs().amax().item<double>(); }

// The minimizer of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped
// to the bounds (PyTorch's _cubic_interpolate).
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = std::nullopt) {
  const auto [lo, hi] = bounds ? *bounds : (x1 <= x2 ? std::pair{x1, x2} : std::pair{x2, x1});
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (d2_square >= 0) {
    const double d2 = std::sqrt(d2_square);
    const double min_pos = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                                    : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
    return std::min(std::max(min_pos, lo), hi);
  }
  return (lo + hi) / 2;
}

}  // namespace

LBFGS::LBFGS(std::vector<Tensor> params, const LBFGSOptions& options)
    : LBFGS(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, options) {}

LBFGS::LBFGS(std::vector<OptimizerParamGroup> groups, const LBFGSOptions& options)
    : Optimizer(std::make_unique<LBFGSOptions>(options)) {
  if (groups.size() != 1)
    throw Error("LBFGS: doesn't support per-parameter options (parameter groups); got " +
                std::to_string(groups.size()) + " groups");
  const auto& fn = options.line_search_fn();
  if (fn && *fn != "strong_wolfe")
    throw Error("LBFGS: only 'strong_wolfe' is supported as line_search_fn, got '" + *fn + "'");
  for (const OptimizerParamGroup& g : groups) add_param_group(g);
}

std::unique_ptr<OptimizerParamState> LBFGS::make_state(const Tensor&, const OptimizerOptions&) {
  return std::make_unique<OptimizerParamState>();  // the state is one for all parameters: history_
}

void LBFGS::update(Tensor&, OptimizerParamState&, const OptimizerOptions&) {
  throw Error("LBFGS: step(closure) updates all parameters together; update() is not used");
}

std::vector<Tensor>& LBFGS::params() { return param_groups()[0].params(); }

Tensor LBFGS::flat_grad() const {
  std::vector<Tensor> parts;
  for (const Tensor& p : param_groups()[0].params())
    parts.push_back(p.grad().defined() ? p.grad().reshape({-1}) : zeros({p.numel()}, TensorOptions(p.dtype()).device(p.device())));
  return cat(parts, 0);
}

void LBFGS::add_to_params(double step, const Tensor& direction) {
  NoGradGuard no_grad;
  int64_t offset = 0;
  for (Tensor& p : params()) {
    p.add_(direction.narrow(0, offset, p.numel()).view(p.sizes()), step);
    offset += p.numel();
  }
}

std::vector<Tensor> LBFGS::clone_params() const {
  std::vector<Tensor> out;
  for (const Tensor& p : param_groups()[0].params()) out.push_back(p.detach().clone());
  return out;
}

void LBFGS::set_params(const std::vector<Tensor>& values) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < values.size(); ++i) params()[i].copy_(values[i]);
}

std::pair<double, Tensor> LBFGS::evaluate_at(const LossClosure& closure, const std::vector<Tensor>& x, double t,
                                             const Tensor& d) {
  add_to_params(t, d);
  double loss;
  {
    AutoGradMode enabled(true);
    loss = closure().item<double>();
  }
  Tensor g = flat_grad();
  set_params(x);
  return {loss, g};
}

Tensor LBFGS::step(LossClosure closure) {
  if (!closure) throw Error("LBFGS: step() requires a closure that computes the loss and its gradients");
  const auto& o = static_cast<const LBFGSOptions&>(param_groups()[0].options());
  const double lr = o.lr(), tolerance_grad = o.tolerance_grad(), tolerance_change = o.tolerance_change();
  const int64_t max_iter = o.max_iter(), max_eval = o.max_eval().value_or(max_iter * 5 / 4);
  const size_t history_size = static_cast<size_t>(o.history_size());
  History& h = history_;

  Tensor orig_loss;
  {
    AutoGradMode enabled(true);
    orig_loss = closure();
  }
  double loss = orig_loss.item<double>();
  int64_t current_evals = 1;
  h.func_evals += 1;
  Tensor g = flat_grad();
  if (abs_max(g) <= tolerance_grad) return orig_loss;

  int64_t n_iter = 0;
  while (n_iter < max_iter) {
    ++n_iter;
    ++h.n_iter;
    // The direction: -H g from the last history_size curvature pairs.
    if (h.n_iter == 1) {
      h.d = g.neg();
      h.old_dirs.clear(), h.old_stps.clear(), h.ro.clear();
      h.h_diag = 1;
    } else {
      Tensor y = g.sub(h.prev_flat_grad), s = h.d.mul(h.t);
      const double ys = dot(y, s);
      if (ys > 1e-10) {
        if (h.old_dirs.size() == history_size) h.old_dirs.pop_front(), h.old_stps.pop_front(), h.ro.pop_front();
        h.old_dirs.push_back(y), h.old_stps.push_back(s), h.ro.push_back(1.0 / ys);
        h.h_diag = ys / dot(y, y);
      }
      const size_t num_old = h.old_dirs.size();
      std::vector<double> al(num_old);
      Tensor q = g.neg();
      for (size_t i = num_old; i-- > 0;) {
        al[i] = dot(h.old_stps[i], q) * h.ro[i];
        q = q.sub(h.old_dirs[i].mul(al[i]));
      }
      Tensor r = q.mul(h.h_diag);
      for (size_t i = 0; i < num_old; ++i) {
        const double be_i = dot(h.old_dirs[i], r) * h.ro[i];
        r = r.add(h.old_stps[i].mul(al[i] - be_i));
      }
      h.d = r;
    }
    h.prev_flat_grad = g.clone();
    h.prev_loss = loss;
    h.t = h.n_iter == 1 ? std::min(1.0, 1.0 / g.abs().sum().item<double>()) * lr : lr;
    const double gtd = dot(g, h.d);
    if (gtd > -tolerance_change) break;  // not a descent direction

    int64_t ls_func_evals = 0;
    bool opt_cond = false;
    if (o.line_search_fn()) {
      const std::vector<Tensor> x_init = clone_params();
      const Tensor d = h.d;
      // PyTorch's _strong_wolfe (c1 = 1e-4, c2 = 0.9, max_ls = 25).
      constexpr double c1 = 1e-4, c2 = 0.9;
      constexpr int max_ls = 25;
      const double d_norm = abs_max(d);
      double t = h.t;
      auto [f_new, g_new] = evaluate_at(closure, x_init, t, d);
      ls_func_evals = 1;
      double gtd_new = dot(g_new, d);
      double t_prev = 0, f_prev = loss, gtd_prev = gtd;
      Tensor g_prev = g;
      bool done = false;
      int ls_iter = 0;
      std::vector<double> bracket, bracket_f, bracket_gtd;
      std::vector<Tensor> bracket_g;
      while (ls_iter < max_ls) {
        if (f_new > loss + c1 * t * gtd || (ls_iter > 1 && f_new >= f_prev)) {
          bracket = {t_prev, t}, bracket_f = {f_prev, f_new}, bracket_g = {g_prev, g_new}, bracket_gtd = {gtd_prev, gtd_new};
          break;
        }
        if (std::abs(gtd_new) <= -c2 * gtd) {
          bracket = {t}, bracket_f = {f_new}, bracket_g = {g_new};
          done = true;
          break;
        }
        if (gtd_new >= 0) {
          bracket = {t_prev, t}, bracket_f = {f_prev, f_new}, bracket_g = {g_prev, g_new}, bracket_gtd = {gtd_prev, gtd_new};
          break;
        }
        const double min_step = t + 0.01 * (t - t_prev), max_step = t * 10, tmp = t;
        t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, std::pair{min_step, max_step});
        t_prev = tmp, f_prev = f_new, g_prev = g_new, gtd_prev = gtd_new;
        std::tie(f_new, g_new) = evaluate_at(closure, x_init, t, d);
        ++ls_func_evals;
        gtd_new = dot(g_new, d);
        ++ls_iter;
      }
      if (ls_iter == max_ls) bracket = {0, t}, bracket_f = {loss, f_new}, bracket_g = {g, g_new};
      // Zoom into the bracket.
      bool insuf_progress = false;
      size_t low = bracket_f.front() <= bracket_f.back() ? 0 : 1, high = 1 - low;
      while (!done && ls_iter < max_ls) {
        if (std::abs(bracket[1] - bracket[0]) * d_norm < tolerance_change) break;
        t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]);
        const double bmax = std::max(bracket[0], bracket[1]), bmin = std::min(bracket[0], bracket[1]);
        const double eps = 0.1 * (bmax - bmin);
        if (std::min(bmax - t, t - bmin) < eps) {
          if (insuf_progress || t >= bmax || t <= bmin) {
            t = std::abs(t - bmax) < std::abs(t - bmin) ? bmax - eps : bmin + eps;
            insuf_progress = false;
          } else {
            insuf_progress = true;
          }
        } else {
          insuf_progress = false;
        }
        std::tie(f_new, g_new) = evaluate_at(closure, x_init, t, d);
        ++ls_func_evals;
        gtd_new = dot(g_new, d);
        ++ls_iter;
        if (f_new > loss + c1 * t * gtd || f_new >= bracket_f[low]) {
          bracket[high] = t, bracket_f[high] = f_new, bracket_g[high] = g_new, bracket_gtd[high] = gtd_new;
          low = bracket_f[0] <= bracket_f[1] ? 0 : 1, high = 1 - low;
        } else {
          if (std::abs(gtd_new) <= -c2 * gtd) {
            done = true;
          } else if (gtd_new * (bracket[high] - bracket[low]) >= 0) {
            bracket[high] = bracket[low], bracket_f[high] = bracket_f[low], bracket_g[high] = bracket_g[low];
            bracket_gtd[high] = bracket_gtd[low];
          }
          bracket[low] = t, bracket_f[low] = f_new, bracket_g[low] = g_new, bracket_gtd[low] = gtd_new;
        }
      }
      if (bracket.size() == 1) low = 0;
      h.t = bracket[low];
      loss = bracket_f[low];
      g = bracket_g[low];
      add_to_params(h.t, d);
      opt_cond = abs_max(g) <= tolerance_grad;
    } else {
      add_to_params(h.t, h.d);
      if (n_iter != max_iter) {
        {
          AutoGradMode enabled(true);
          loss = closure().item<double>();
        }
        g = flat_grad();
        opt_cond = abs_max(g) <= tolerance_grad;
        ls_func_evals = 1;
      }
    }
    current_evals += ls_func_evals;
    h.func_evals += ls_func_evals;
    if (n_iter == max_iter || current_evals >= max_eval || opt_cond) break;
    if (abs_max(h.d.mul(h.t)) <= tolerance_change) break;
    if (std::abs(loss - h.prev_loss) < tolerance_change) break;
  }
  return orig_loss;
}

}  // namespace loom::optim
