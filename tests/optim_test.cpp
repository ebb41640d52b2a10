// Optimizers against a hand-written float64 implementation of PyTorch's
// update rules (the pseudo-code of torch.optim's documentation), over five
// steps; and what step() does in a lazy runtime: one sync, no recompile
// when the learning rate changes, parameters updated in their own buffers.
#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::BackendTest;
using V = std::vector<double>;

class OptimTest : public BackendTest {};

// The gradient of step t's loss, sum(c_t * p) + sum(p^2) / 2: c_t + p.
V coeffs(int t) { return {0.3 * t - 1, 0.7 - 0.2 * t, 1.5 / t, -0.4, 2.0 - t}; }
const V kStart = {0.5, -1.25, 2.0, 0.1, -0.75};

Tensor loss_at(const Tensor& p, int t) {
  Tensor c = loom::tensor(coeffs(t), loom::kDouble);
  return (c * p).sum() + (p * p).sum() / 2;
}

V grad_at(const V& p, int t) {
  V g = coeffs(t);
  for (size_t i = 0; i < g.size(); ++i) g[i] += p[i];
  return g;
}

struct SgdRef {
  double lr, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
};
V sgd_reference(const SgdRef& o) {
  V p = kStart, buf;
  for (int t = 1; t <= 5; ++t) {
    V g = grad_at(p, t);
    for (size_t i = 0; i < p.size(); ++i) {
      double d = o.maximize ? -g[i] : g[i];
      if (o.weight_decay != 0) d += o.weight_decay * p[i];
      if (o.momentum != 0) {
        if (t == 1) buf.push_back(d);
        else buf[i] = o.momentum * buf[i] + (1 - o.dampening) * d;
        d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * d;
    }
  }
  return p;
}

struct AdamRef {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false, amsgrad = false, maximize = false;
};
V adam_reference(const AdamRef& o) {
  const size_t n = kStart.size();
  V p = kStart, m(n, 0), v(n, 0), vmax(n, 0);
  for (int t = 1; t <= 5; ++t) {
    V g = grad_at(p, t);
    for (size_t i = 0; i < n; ++i) {
      if (o.decoupled) p[i] *= 1 - o.lr * o.weight_decay;
      double gi = o.maximize ? -g[i] : g[i];
      if (!o.decoupled && o.weight_decay != 0) gi += o.weight_decay * p[i];
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * gi;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * gi * gi;
      const double m_hat = m[i] / (1 - std::pow(o.beta1, t));
      vmax[i] = std::max(vmax[i], v[i]);
      const double v_hat = (o.amsgrad ? vmax[i] : v[i]) / (1 - std::pow(o.beta2, t));
      p[i] -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  }
  return p;
}

// Five steps of `opt` over the leaf p (starting at kStart).
V run_five(loom::optim::Optimizer& opt, Tensor& p) {
  for (int t = 1; t <= 5; ++t) {
    opt.zero_grad();
    loss_at(p, t).backward();
    opt.step();
  }
  return p.to_vector<double>();
}

Tensor start() { return loom::tensor(kStart, loom::kDouble).requires_grad_(); }

TEST_P(OptimTest, SgdMatchesPyTorchRule) {
  const std::vector<SgdRef> cases = {
      {0.1}, {0.05, 0.9}, {0.05, 0.9, 0.1, 0.01}, {0.05, 0.9, 0, 0.1, true}, {0.02, 0.5, 0.3, 0.2, false, true}};
  for (const SgdRef& c : cases) {
    SCOPED_TRACE(::testing::Message() << "lr " << c.lr << " momentum " << c.momentum << " dampening " << c.dampening
                                      << " wd " << c.weight_decay << " nesterov " << c.nesterov);
    Tensor p = start();
    loom::optim::SGD opt({p}, loom::optim::SGDOptions(c.lr)
                                  .momentum(c.momentum)
                                  .dampening(c.dampening)
                                  .weight_decay(c.weight_decay)
                                  .nesterov(c.nesterov)
                                  .maximize(c.maximize));
    EXPECT_TRUE(loom_test::all_close(run_five(opt, p), sgd_reference(c), 1e-6, 0));
  }
}

TEST_P(OptimTest, AdamMatchesPyTorchRule) {
  AdamRef plain;
  AdamRef tuned{0.05, 0.8, 0.99, 1e-6, 0.1, false, true, false};
  AdamRef maximize{0.01, 0.9, 0.999, 1e-8, 0, false, false, true};
  for (const AdamRef& c : {plain, tuned, maximize}) {
    Tensor p = start();
    loom::optim::Adam opt({p}, loom::optim::AdamOptions(c.lr)
                                   .betas({c.beta1, c.beta2})
                                   .eps(c.eps)
                                   .weight_decay(c.weight_decay)
                                   .amsgrad(c.amsgrad)
                                   .maximize(c.maximize));
    EXPECT_TRUE(loom_test::all_close(run_five(opt, p), adam_reference(c), 1e-6, 0));
  }
}

struct RmspropRef {
  double lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0;
  bool centered = false;
};
V rmsprop_reference(const RmspropRef& o) {
  const size_t n = kStart.size();
  V p = kStart, sq(n, 0), ga(n, 0), buf(n, 0);
  for (int t = 1; t <= 5; ++t) {
    V g = grad_at(p, t);
    for (size_t i = 0; i < n; ++i) {
      double gi = g[i] + o.weight_decay * p[i];
      sq[i] = o.alpha * sq[i] + (1 - o.alpha) * gi * gi;
      double avg;
      if (o.centered) {
        ga[i] = o.alpha * ga[i] + (1 - o.alpha) * gi;
        avg = std::sqrt(sq[i] - ga[i] * ga[i]) + o.eps;
      } else {
        avg = std::sqrt(sq[i]) + o.eps;
      }
      if (o.momentum > 0) {
        buf[i] = o.momentum * buf[i] + gi / avg;
        p[i] -= o.lr * buf[i];
      } else {
        p[i] -= o.lr * gi / avg;
      }
    }
  }
  return p;
}

struct AdagradRef {
  double lr = 1e-2, lr_decay = 0, weight_decay = 0, initial = 0, eps = 1e-10;
};
V adagrad_reference(const AdagradRef& o) {
  const size_t n = kStart.size();
  V p = kStart, sum(n, o.initial);
  for (int t = 1; t <= 5; ++t) {
    V g = grad_at(p, t);
    const double clr = o.lr / (1 + (t - 1) * o.lr_decay);
    for (size_t i = 0; i < n; ++i) {
      const double gi = g[i] + o.weight_decay * p[i];
      sum[i] += gi * gi;
      p[i] -= clr * gi / (std::sqrt(sum[i]) + o.eps);
    }
  }
  return p;
}

TEST_P(OptimTest, RmspropAndAdagradMatchPyTorchRules) {
  for (const RmspropRef& c : {RmspropRef{}, RmspropRef{0.05, 0.9, 1e-6, 0.1, 0.5, true}, RmspropRef{0.02, 0.95, 1e-8, 0, 0.9, false}}) {
    Tensor p = start();
    loom::optim::RMSprop opt({p}, loom::optim::RMSpropOptions(c.lr)
                                      .alpha(c.alpha)
                                      .eps(c.eps)
                                      .weight_decay(c.weight_decay)
                                      .momentum(c.momentum)
                                      .centered(c.centered));
    EXPECT_TRUE(loom_test::all_close(run_five(opt, p), rmsprop_reference(c), 1e-6, 0)) << c.momentum << c.centered;
  }
  for (const AdagradRef& c : {AdagradRef{}, AdagradRef{0.1, 0.05, 0.01, 0.2, 1e-8}}) {
    Tensor p = start();
    loom::optim::Adagrad opt({p}, loom::optim::AdagradOptions(c.lr)
                                      .lr_decay(c.lr_decay)
                                      .weight_decay(c.weight_decay)
                                      .initial_accumulator_value(c.initial)
                                      .eps(c.eps));
    EXPECT_TRUE(loom_test::all_close(run_five(opt, p), adagrad_reference(c), 1e-6, 0)) << c.lr_decay;
  }
}

// A compiled step replays Adagrad's step-dependent rate, computed anew.
TEST_P(OptimTest, CompiledAdagradReplaysItsDecayingRate) {
  const AdagradRef c{0.1, 0.3, 0, 0, 1e-10};
  Tensor p = start();
  loom::optim::Adagrad opt({p}, loom::optim::AdagradOptions(c.lr).lr_decay(c.lr_decay).eps(c.eps));
  auto body = [&](const Tensor& c_t) {
    opt.zero_grad(/*set_to_none=*/false);  // gradients updated in place: a replay keeps them
    Tensor loss = (c_t * p).sum() + (p * p).sum() / 2;
    loss.backward();
    opt.step();
    return loss.detach();
  };
  body(loom::tensor(coeffs(1), loom::kDouble));  // the first step makes the gradient and the state
  loom::CompiledFunction step([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{body(in[0])}; });
  for (int t = 2; t <= 5; ++t) step({loom::tensor(coeffs(t), loom::kDouble)});
  EXPECT_TRUE(loom_test::all_close(p.to_vector<double>(), adagrad_reference(c), 1e-6, 0));
}

// Saved after two steps and loaded into a fresh optimizer, training goes
// on exactly as without the interruption; a bare tensor round-trips too.
TEST_P(OptimTest, SavedStateResumesTraining) {
  const std::string path = ::testing::TempDir() + "loom_optim_state_" + GetParam() + ".pt";
  auto run = [&](auto make, bool interrupt) {
    Tensor p = start();
    auto opt = make(p);
    for (int t = 1; t <= 5; ++t) {
      if (interrupt && t == 3) {
        loom::save(*opt, path);
        opt = make(p);  // a fresh optimizer: zero state, step 0, the constructor's rate
        opt->param_groups()[0].options().set_lr(123.0);
        loom::load(*opt, path);
      }
      opt->zero_grad();
      loss_at(p, t).backward();
      opt->step();
    }
    return p.to_vector<double>();
  };
  auto adam = [](Tensor& p) {
    return std::make_unique<loom::optim::Adam>(std::vector<Tensor>{p}, loom::optim::AdamOptions(0.05).amsgrad(true));
  };
  auto sgd = [](Tensor& p) {
    return std::make_unique<loom::optim::SGD>(std::vector<Tensor>{p}, loom::optim::SGDOptions(0.05).momentum(0.9));
  };
  auto rms = [](Tensor& p) {
    return std::make_unique<loom::optim::RMSprop>(std::vector<Tensor>{p}, loom::optim::RMSpropOptions(0.01).centered(true));
  };
  EXPECT_EQ(run(adam, true), run(adam, false));
  EXPECT_EQ(run(sgd, true), run(sgd, false));
  EXPECT_EQ(run(rms, true), run(rms, false));
  Tensor x = loom::tensor(kStart, loom::kDouble), y;
  loom::save(x, path);
  loom::load(y, path);
  EXPECT_EQ(y.to_vector<double>(), kStart);
  std::remove(path.c_str());
}

TEST_P(OptimTest, AdamWMatchesPyTorchRule) {
  AdamRef plain{1e-3, 0.9, 0.999, 1e-8, 1e-2, true};
  AdamRef tuned{0.05, 0.7, 0.95, 1e-6, 0.2, true, true};
  for (const AdamRef& c : {plain, tuned}) {
    Tensor p = start();
    loom::optim::AdamW opt({p}, loom::optim::AdamWOptions(c.lr)
                                    .betas({c.beta1, c.beta2})
                                    .eps(c.eps)
                                    .weight_decay(c.weight_decay)
                                    .amsgrad(c.amsgrad));
    EXPECT_TRUE(loom_test::all_close(run_five(opt, p), adam_reference(c), 1e-6, 0));
  }
}

TEST_P(OptimTest, StepIsOneSyncAndLrChangesDoNotRecompile) {
  Tensor w = loom::tensor(V{0.5, -1.0, 0.25, 2.0}, loom::kDouble).reshape({2, 2}).clone().requires_grad_();
  Tensor x = loom::tensor(V{1.0, 2.0, -1.0, 0.5}, loom::kDouble).reshape({2, 2});
  loom::optim::SGD opt({w}, loom::optim::SGDOptions(0.05).momentum(0.5));
  auto train_step = [&] {
    opt.zero_grad();
    Tensor loss = (loom::matmul(x, w) - 1).pow(2).sum();
    loss.backward();
    opt.step();
    EXPECT_FALSE(w.is_pending());     // step() materialized the update
    EXPECT_FALSE(loss.is_pending());  // and the loss, in the same graph
    return loss.item<double>();
  };
  train_step();  // the first step compiles
  loom::reset_metrics();
  const double* buffer = w.data_ptr<double>();
  const double first = train_step();
  double last = first;
  for (int i = 0; i < 6; ++i) {
    if (i == 3)
      for (auto& g : opt.param_groups()) static_cast<loom::optim::SGDOptions&>(g.options()).lr(0.02);
    last = train_step();
  }
  EXPECT_LT(last, first * 0.5);
  const auto m = loom::metrics();
  EXPECT_EQ(m.cache_misses, 0);                 // the new learning rate is a runtime scalar
  EXPECT_EQ(m.graphs_materialized, 7);          // one graph per step
  EXPECT_EQ(w.data_ptr<double>(), buffer);      // updated in its own buffer
}

TEST_P(OptimTest, ZeroGradAndDeferredSync) {
  Tensor a = start();
  Tensor b = start();
  loom::optim::SGD opt({a, b}, 0.5);
  EXPECT_EQ(opt.size(), 2u);
  (a * a).sum().backward();
  opt.set_sync_on_step(false);
  opt.step();  // b has no gradient: left alone
  EXPECT_TRUE(a.is_pending());
  EXPECT_TRUE(loom_test::all_close(b, kStart));
  V want = kStart;
  for (double& v : want) v -= 0.5 * 2 * v;
  EXPECT_TRUE(loom_test::all_close(a, want));
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(loom_test::all_close(a.grad(), V(5, 0.0)));
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  Tensor derived = a * 2;
  std::string twice = loom_test::error_of([&] { loom::optim::SGD bad({a, b, a}, 0.1); });
  EXPECT_NE(twice.find("appears in more than one parameter group"), std::string::npos) << twice;
  std::string msg = loom_test::error_of([&] { loom::optim::SGD bad({derived}, 0.1); });
  EXPECT_NE(msg.find("can't optimize a non-leaf tensor"), std::string::npos) << msg;
}

// L-BFGS: a run of PyTorch's torch.optim.LBFGS in float64 (torch 2.15.0,
// tests' numbers below), matched evaluation for evaluation: the first
// loss, the final point, and how many evaluations and iterations it took.
struct LbfgsRun {
  double first_loss;
  V x;
  int64_t func_evals, n_iter;
};
template <class Loss>
LbfgsRun run_lbfgs(Loss loss, V x0, const loom::optim::LBFGSOptions& o) {
  Tensor x = loom::tensor(x0, loom::kDouble).requires_grad_();
  loom::optim::LBFGS opt({x}, o);
  const double first = opt.step([&] {
                            opt.zero_grad();
                            Tensor l = loss(x);
                            l.backward();
                            return l;
                          }).template item<double>();
  return {first, x.detach().to_vector<double>(), opt.history().func_evals, opt.history().n_iter};
}
Tensor rosenbrock(const Tensor& x) {
  Tensor a = x[0], b = x[1];
  return (1 - a).pow(2) + 100 * (b - a * a).pow(2);
}
Tensor quadratic(const Tensor& x) {
  Tensor A = loom::tensor({3.0, 0.5, 0.0, 0.5, 2.0, 0.25, 0.0, 0.25, 1.0}, loom::kDouble).view({3, 3});
  Tensor b = loom::tensor({1.0, -2.0, 0.5}, loom::kDouble);
  return 0.5 * (x * A.matmul(x)).sum() - (b * x).sum();
}
void expect_run(const LbfgsRun& got, const LbfgsRun& want) {
  EXPECT_NEAR(got.first_loss, want.first_loss, 1e-12);
  ASSERT_EQ(got.x.size(), want.x.size());
  for (size_t i = 0; i < want.x.size(); ++i) EXPECT_NEAR(got.x[i], want.x[i], 1e-9) << i;
  EXPECT_EQ(got.func_evals, want.func_evals);
  EXPECT_EQ(got.n_iter, want.n_iter);
}

TEST_P(OptimTest, LbfgsFollowsPyTorchEvaluationForEvaluation) {
  using loom::optim::LBFGSOptions;
  expect_run(run_lbfgs(rosenbrock, {-1.5, 2.0}, LBFGSOptions(1).max_iter(100).line_search_fn("strong_wolfe")),
             {12.5, {0.9999979943196398, 0.9999973438921637}, 51, 41});
  expect_run(run_lbfgs(rosenbrock, {-1.5, 2.0}, LBFGSOptions(1).max_iter(40).history_size(3).line_search_fn("strong_wolfe")),
             {12.5, {1.0000006898305547, 1.0000015458306801}, 48, 39});
  expect_run(run_lbfgs(quadratic, {0, 0, 0}, LBFGSOptions(0.5).max_iter(7)),
             {0.0, {0.5362083820415408, -1.2257098181363508, 0.7949604046250994}, 7, 7});
  expect_run(run_lbfgs(rosenbrock, {-0.5, 0.5}, LBFGSOptions(0.02).max_iter(30)),
             {8.5, {-0.6243289934182809, 0.49772963374876716}, 30, 30});
  // The minimum of the quadratic solves A x = b.
  LbfgsRun q = run_lbfgs(quadratic, {0, 0, 0}, LBFGSOptions(1).line_search_fn("strong_wolfe"));
  Tensor A = loom::tensor({3.0, 0.5, 0.0, 0.5, 2.0, 0.25, 0.0, 0.25, 1.0}, loom::kDouble).view({3, 3});
  EXPECT_TRUE(loom_test::all_close(A.matmul(loom::tensor(q.x, loom::kDouble)), V{1.0, -2.0, 0.5}, 1e-4, 1e-4));
  Tensor x = loom::zeros({2}, loom::kDouble).requires_grad_();
  loom::optim::LBFGS opt({x});
  EXPECT_THROW(opt.step(nullptr), loom::Error);
  EXPECT_THROW(loom::optim::LBFGS({x}, LBFGSOptions().line_search_fn("backtracking")), loom::Error);
}

LOOM_INSTANTIATE_BACKENDS(OptimTest);

}  // namespace
