// Autograd's semantics (as libtorch's): recording is lazy, grad_fn names,
// accumulation, retain_graph, NoGradGuard, detach, version counters,
// autograd::grad, backward(inputs), retain_grad, higher order, custom
// functions. Expected gradients are computed by hand in the test.
#include "gradcheck.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::BackendTest;
using V = std::vector<double>;

class AutogradTest : public BackendTest {};

Tensor leaf(const V& v, std::vector<int64_t> shape = {}) {
  Tensor t = loom::tensor(v, loom::kDouble);
  if (!shape.empty()) t = t.reshape(shape).clone();
  return t.requires_grad_();
}

TEST_P(AutogradTest, BackwardRecordsAndRunsNothing) {
  Tensor x = leaf({1, 2, 3});
  Tensor w = leaf({0.5, -1, 2});
  Tensor loss = (x * w).exp().sum();
  const auto before = loom::metrics();
  loss.backward();
  const auto after = loom::metrics();
  EXPECT_EQ(after.graphs_materialized, before.graphs_materialized);  // nothing ran
  EXPECT_GT(after.nodes_recorded, before.nodes_recorded);            // the gradient ops were recorded
  EXPECT_TRUE(x.grad().is_pending());
  // d/dx sum(exp(x*w)) = w * exp(x*w)
  V gx, gw;
  for (int i = 0; i < 3; ++i) {
    const double xv = 1 + i, wv = V{0.5, -1, 2}[i];
    gx.push_back(wv * std::exp(xv * wv));
    gw.push_back(xv * std::exp(xv * wv));
  }
  EXPECT_TRUE(all_close(x.grad(), gx, 1e-12));
  EXPECT_TRUE(all_close(w.grad(), gw, 1e-12));
  EXPECT_EQ(x.grad().dtype(), loom::kDouble);
  EXPECT_TRUE(x.grad().grad_fn() == nullptr);
}

// A leaf's first gradient that nothing else holds becomes its .grad() as it
// is (AccumulateGrad): no copy, though the thread's pending list still
// holds the gradient's storage until its sync.
TEST_P(AutogradTest, AnUnsharedGradientBecomesGradWithoutACopy) {
  Tensor x = leaf({1, 2, 3});
  (x * x).sum().backward();
  const std::string graph = loom::explain(x.grad());
  EXPECT_EQ(graph.find("cast"), std::string::npos) << graph;
  EXPECT_TRUE(all_close(x.grad(), {2, 4, 6}, 1e-12));
}

TEST_P(AutogradTest, GradFnNamesAsLibtorch) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = leaf({1, 2}, {2});
  EXPECT_EQ((x + y).grad_fn()->name(), "AddBackward0");
  EXPECT_EQ((x * y).grad_fn()->name(), "MulBackward0");
  EXPECT_EQ((x * 2).grad_fn()->name(), "MulBackward1");
  EXPECT_EQ((x - 1).grad_fn()->name(), "SubBackward1");
  EXPECT_EQ(x.pow(3).grad_fn()->name(), "PowBackward0");
  EXPECT_EQ(x.sum().grad_fn()->name(), "SumBackward0");
  EXPECT_EQ(x.sum(1).grad_fn()->name(), "SumBackward1");
  EXPECT_EQ(x.mean().grad_fn()->name(), "MeanBackward0");
  EXPECT_EQ(x.amax(1).grad_fn()->name(), "AmaxBackward0");
  EXPECT_EQ(x.max().grad_fn()->name(), "MaxBackward1");
  EXPECT_EQ(x.mm(x).grad_fn()->name(), "MmBackward0");
  EXPECT_EQ(loom::linear(x, x, y).grad_fn()->name(), "AddmmBackward0");
  EXPECT_EQ(x.view({4}).grad_fn()->name(), "ViewBackward0");
  EXPECT_EQ(x.t().grad_fn()->name(), "TransposeBackward0");
  EXPECT_EQ(x.expand({3, 2, 2}).grad_fn()->name(), "ExpandBackward0");
  EXPECT_EQ(x.select(0, 1).grad_fn()->name(), "SelectBackward0");
  EXPECT_EQ(x.softmax(1).grad_fn()->name(), "SoftmaxBackward0");
  EXPECT_EQ(x.log_softmax(1).grad_fn()->name(), "LogSoftmaxBackward0");
  EXPECT_EQ(x.relu().grad_fn()->name(), "ReluBackward0");
  EXPECT_EQ(x.to(loom::kFloat).grad_fn()->name(), "ToCopyBackward0");
  EXPECT_EQ(loom::cat({x, x}).grad_fn()->name(), "CatBackward0");
  // next_functions lead to the leaves' AccumulateGrad.
  auto fn = (x * y).grad_fn();
  ASSERT_EQ(fn->next_functions().size(), 2u);
  EXPECT_EQ(fn->next_functions()[0].function->name(), "AccumulateGrad");
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE((x * y).is_leaf());
  EXPECT_EQ(x.grad_fn(), nullptr);
  // Integer and bool results take no part.
  EXPECT_FALSE(x.gt(1).requires_grad());
  EXPECT_FALSE(x.argmax().requires_grad());
}

TEST_P(AutogradTest, AccumulatesAndBroadcasts) {
  Tensor b = leaf({1, 2, 3});
  Tensor m = leaf({1, 1, 1, 2, 2, 2}, {2, 3});
  (m * b).sum().backward();
  EXPECT_EQ(b.grad().sizes().vec(), (std::vector<int64_t>{3}));
  EXPECT_TRUE(all_close(b.grad(), {3, 3, 3}));  // summed over the broadcast rows
  (b * 2).sum().backward();
  EXPECT_TRUE(all_close(b.grad(), {5, 5, 5}));  // accumulated
  b.mutable_grad() = Tensor();                  // as zero_grad(set_to_none)
  (b * b).sum().backward();
  EXPECT_TRUE(all_close(b.grad(), {2, 4, 6}));
  // A gradient argument for a non-scalar output.
  Tensor y = b * 3;
  EXPECT_LOOM_ERROR(y.backward(), "backward", "only for one-element outputs");
  b.mutable_grad() = Tensor();
  y.backward(loom::tensor({1.0, 0.0, -1.0}, loom::kDouble));
  EXPECT_TRUE(all_close(b.grad(), {3, 0, -3}));
  // A float32 leaf used as float64 gets a float32 gradient.
  Tensor f = loom::tensor({1.5f, -2.f}).requires_grad_();
  (f.to(loom::kDouble) * loom::tensor({2.0, 3.0}, loom::kDouble)).sum().backward();
  EXPECT_EQ(f.grad().dtype(), loom::kFloat);
  EXPECT_TRUE(all_close(f.grad(), {2, 3}));
}

TEST_P(AutogradTest, RetainGraph) {
  Tensor x = leaf({0.5, 1.5});
  Tensor y = (x * x).exp().sum();  // MulBackward0 saves x; ExpBackward0 saves its output
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  const V once = {2 * 0.5 * std::exp(0.25), 2 * 1.5 * std::exp(2.25)};
  EXPECT_TRUE(all_close(x.grad(), {2 * once[0], 2 * once[1]}, 1e-12));
  EXPECT_LOOM_ERROR(y.backward(), "backward", "retain_graph=true");
}

TEST_P(AutogradTest, NoGradGuardAndDetach) {
  Tensor x = leaf({1, 2});
  {
    loom::NoGradGuard no_grad;
    EXPECT_FALSE(loom::GradMode::is_enabled());
    Tensor y = x * 2;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_FALSE(x.t().requires_grad());
    x.add_(1);  // allowed: this is how an optimizer updates parameters
  }
  EXPECT_TRUE(loom::GradMode::is_enabled());
  EXPECT_TRUE(all_close(x, {2, 3}));
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_alias_of(x));
  Tensor y = (x * d).sum();  // d is a constant
  y.backward();
  EXPECT_TRUE(all_close(x.grad(), {2, 3}));
}

TEST_P(AutogradTest, InPlaceChecks) {
  Tensor x = leaf({1, 2});
  EXPECT_LOOM_ERROR(x.add_(1), "add_", "leaf tensor that requires grad");
  EXPECT_LOOM_ERROR(x.select(0, 0).mul_(2), "mul_", "view");
  // A saved tensor changed in place: the error names the rule and points
  // at the line that recorded the op.
  Tensor y = x.exp();
  const int exp_line = __LINE__ - 1;
  y.add_(1);
  std::string msg = loom_test::error_of([&] { y.sum().backward(); });
  EXPECT_NE(msg.find("ExpBackward0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("in-place"), std::string::npos) << msg;
  EXPECT_NE(msg.find("version 1; expected version 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("autograd_test.cpp:" + std::to_string(exp_line)), std::string::npos) << msg;
  // x.mul_(w) on an intermediate keeps its old value for w's gradient (as PyTorch).
  Tensor w = leaf({3, 4});
  Tensor z = x * 1;
  z.mul_(w);
  EXPECT_EQ(z.grad_fn()->name(), "MulBackward0");
  EXPECT_EQ(z._version(), 1);
  z.sum().backward();
  EXPECT_TRUE(all_close(w.grad(), {1, 2}));
  EXPECT_TRUE(all_close(x.grad(), {3, 4}));
}

TEST_P(AutogradTest, InPlaceThroughViews) {
  Tensor x = leaf({1, 2, 3});
  Tensor h = loom::zeros({2, 3}, loom::kDouble);
  EXPECT_FALSE(h.requires_grad());
  h.select(0, 1).copy_(x * x);
  EXPECT_TRUE(h.requires_grad());
  EXPECT_EQ(h.grad_fn()->name(), "CopySlices");
  EXPECT_TRUE(all_close(h, {0, 0, 0, 1, 4, 9}));
  (h * loom::tensor({1.0, 1.0, 1.0, 1.0, 10.0, 100.0}, loom::kDouble).view({2, 3})).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {2, 40, 600}));
  // A view made before the write sees the new history.
  Tensor a = x * 1;
  Tensor first = a.narrow(0, 0, 2);
  a.narrow(0, 1, 2).mul_(10);
  x.mutable_grad() = Tensor();
  first.sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {1, 10, 0}));
}

TEST_P(AutogradTest, GradFunction) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = leaf({2, 2, 2});
  Tensor u = leaf({5});
  Tensor mid = x * y;
  Tensor out = (mid * mid).sum();
  auto g = loom::autograd::grad({out}, {x, mid});
  EXPECT_TRUE(all_close(g[0], {8, 16, 24}));  // 2 * (x y) * y
  EXPECT_TRUE(all_close(g[1], {4, 8, 12}));
  EXPECT_FALSE(x.grad().defined());           // grad() accumulates nothing
  EXPECT_LOOM_ERROR(loom::autograd::grad({(x * 2).sum()}, {u}), "autograd::grad", "not have been used");
  auto unused = loom::autograd::grad({(x * 2).sum()}, {x, u}, {}, std::nullopt, false, /*allow_unused=*/true);
  EXPECT_TRUE(all_close(unused[0], {2, 2, 2}));
  EXPECT_FALSE(unused[1].defined());
  // grad_outputs for a non-scalar output.
  auto go = loom::autograd::grad({x * 3}, {x}, {loom::tensor({1.0, 2.0, 3.0}, loom::kDouble)});
  EXPECT_TRUE(all_close(go[0], {3, 6, 9}));
  EXPECT_LOOM_ERROR(loom::autograd::grad({x.detach() * 2}, {x}), "autograd::grad", "does not require grad");
}

TEST_P(AutogradTest, BackwardInputsAndRetainGrad) {
  Tensor x = leaf({1, 2});
  Tensor y = leaf({3, 4});
  Tensor mid = x * y;
  mid.retain_grad();
  Tensor out = (mid * mid).sum();
  out.backward({}, true, false, {x});
  EXPECT_TRUE(all_close(x.grad(), {18, 64}));  // 2 x y^2
  EXPECT_FALSE(y.grad().defined());
  EXPECT_TRUE(mid.retains_grad());
  EXPECT_TRUE(all_close(mid.grad(), {6, 16}));  // 2 * mid: x's path runs through mid
  out.backward();
  EXPECT_TRUE(all_close(y.grad(), {6, 32}));    // 2 x^2 y
  EXPECT_TRUE(all_close(mid.grad(), {12, 32})); // accumulated over both calls, as in PyTorch
}

TEST_P(AutogradTest, HigherOrder) {
  Tensor x = leaf({0.5, -1.5, 2});
  Tensor y = (x * x * x).sum();
  auto g1 = loom::autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true);
  EXPECT_TRUE(g1[0].requires_grad());
  EXPECT_TRUE(all_close(g1[0], {0.75, 6.75, 12}));  // 3x^2
  auto g2 = loom::autograd::grad({g1[0].sum()}, {x}, {}, std::nullopt, true);
  EXPECT_TRUE(all_close(g2[0], {3, -9, 12}));       // 6x
  auto g3 = loom::autograd::grad({g2[0].sum()}, {x});
  EXPECT_TRUE(all_close(g3[0], {6, 6, 6}));
  // backward(create_graph) leaves a differentiable .grad().
  Tensor z = leaf({2});
  (z.sin() * z).sum().backward({}, std::nullopt, /*create_graph=*/true);
  Tensor gz = z.grad();
  EXPECT_TRUE(gz.requires_grad());
  auto gg = loom::autograd::grad({gz.sum()}, {z});
  EXPECT_TRUE(all_close(gg[0], {2 * std::cos(2.0) - 2 * std::sin(2.0)}, 1e-12));
}

TEST_P(AutogradTest, FactoriesAndFlags) {
  Tensor a = loom::zeros({2}, loom::TensorOptions(loom::kDouble).requires_grad(true));
  EXPECT_TRUE(a.requires_grad());
  EXPECT_TRUE(a.is_leaf());
  EXPECT_TRUE(loom::randn({3}, loom::requires_grad()).requires_grad());
  EXPECT_TRUE(loom::ones_like(a, loom::requires_grad()).requires_grad());
  EXPECT_FALSE(loom::ones_like(a).requires_grad());
  EXPECT_LOOM_ERROR(loom::arange(3, loom::TensorOptions(loom::kLong).requires_grad(true)), "arange", "floating point");
  EXPECT_LOOM_ERROR(loom::tensor({1, 2}).requires_grad_(), "requires_grad_", "floating point");
  Tensor b = a * 2;
  EXPECT_LOOM_ERROR(b.requires_grad_(false), "requires_grad_", "leaf");
  a.requires_grad_(false);
  EXPECT_FALSE((a * 2).requires_grad());
}

// A custom function whose backward is exact, and one whose backward is off:
// gradcheck must tell them apart (so the op tests can fail).
struct ScaledCube : loom::autograd::Function<ScaledCube> {
  static Tensor forward(loom::autograd::AutogradContext* ctx, Tensor x, double k) {
    ctx->saved_data["k"] = k;
    ctx->save_for_backward({x});
    return x * x * x * k;
  }
  static loom::autograd::variable_list backward(loom::autograd::AutogradContext* ctx,
                                                loom::autograd::variable_list grads) {
    Tensor x = ctx->get_saved_variables()[0];
    return {grads[0] * x * x * (3 * ctx->saved_data["k"].toDouble()), Tensor()};
  }
};
struct WrongCube : loom::autograd::Function<WrongCube> {
  static Tensor forward(loom::autograd::AutogradContext* ctx, Tensor x) {
    ctx->save_for_backward({x});
    return x * x * x;
  }
  static loom::autograd::variable_list backward(loom::autograd::AutogradContext* ctx,
                                                loom::autograd::variable_list grads) {
    Tensor x = ctx->get_saved_variables()[0];
    return {grads[0] * x * x * 2.9};
  }
};
// Saves its output; two outputs, one not differentiable.
struct ExpAndSign : loom::autograd::Function<ExpAndSign> {
  static loom::autograd::variable_list forward(loom::autograd::AutogradContext* ctx, Tensor x) {
    Tensor e = x.exp();
    Tensor s = x.sign();
    ctx->save_for_backward({e});
    ctx->mark_non_differentiable({s});
    return {e, s};
  }
  static loom::autograd::variable_list backward(loom::autograd::AutogradContext* ctx,
                                                loom::autograd::variable_list grads) {
    return {grads[0] * ctx->get_saved_variables()[0]};
  }
};
struct TooMany : loom::autograd::Function<TooMany> {
  static Tensor forward(loom::autograd::AutogradContext*, Tensor x) { return x * 2; }
  static loom::autograd::variable_list backward(loom::autograd::AutogradContext*, loom::autograd::variable_list g) {
    return {g[0], g[0]};
  }
};

TEST_P(AutogradTest, CustomFunction) {
  Tensor x = leaf({0.5, -1, 2});
  Tensor y = ScaledCube::apply(x, 2.0);
  EXPECT_NE(y.grad_fn()->name().find("ScaledCube"), std::string::npos);
  y.sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {1.5, 6, 24}));
  EXPECT_TRUE(loom_test::gradcheck([](const std::vector<Tensor>& v) { return ScaledCube::apply(v[0], -0.5); },
                                   {loom_test::input({4}, 3)}));
  EXPECT_FALSE(loom_test::gradcheck([](const std::vector<Tensor>& v) { return WrongCube::apply(v[0]); },
                                    {loom_test::input({4}, 3)}));
  // Second order through the custom rule (its backward is made of loom ops).
  auto g1 = loom::autograd::grad({ScaledCube::apply(x, 1.0).sum()}, {x}, {}, std::nullopt, true);
  auto g2 = loom::autograd::grad({g1[0].sum()}, {x});
  EXPECT_TRUE(all_close(g2[0], {3, -6, 12}));  // 6x
  auto outs = ExpAndSign::apply(x);
  EXPECT_TRUE(outs[0].requires_grad());
  EXPECT_FALSE(outs[1].requires_grad());
  auto ge = loom::autograd::grad({(outs[0] * 2).sum()}, {x});
  EXPECT_TRUE(all_close(ge[0], {2 * std::exp(0.5), 2 * std::exp(-1.0), 2 * std::exp(2.0)}, 1e-12));
  std::string msg = loom_test::error_of([&] { TooMany::apply(x).sum().backward(); });
  EXPECT_NE(msg.find("TooMany::backward returned an incorrect number of gradients"), std::string::npos) << msg;
  loom::NoGradGuard no_grad;
  EXPECT_FALSE(ScaledCube::apply(x, 2.0).requires_grad());
}

LOOM_INSTANTIATE_BACKENDS(AutogradTest);

}  // namespace
