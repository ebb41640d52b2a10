// Every differentiable op's gradient against central finite differences in
// float64 (gradcheck.h), on every CPU backend: random inputs, several
// shapes, broadcasting, inputs read through views. Inputs stay away from
// the points where an op is not differentiable (0 for abs and relu,
// integers for floor, ties for max).
#include "gradcheck.h"

namespace {

using loom::Tensor;
using loom_test::gradcheck;
using loom_test::gradgradcheck;
using loom_test::input;
using T = std::vector<Tensor>;

class GradTest : public loom_test::BackendTest {};

// Positive values away from 0 (log, sqrt, pow bases, divisors).
Tensor positive(std::vector<int64_t> shape, uint64_t seed) { return input(shape, seed, 0.5, 2.0); }
// Values whose magnitude is at least 0.25 (abs, relu, sign kinks avoided).
Tensor away_from_zero(std::vector<int64_t> shape, uint64_t seed) {
  Tensor v = input(shape, seed, 0.25, 2.0);
  Tensor s = input(shape, seed + 7, -1, 1).sign();
  return (v * loom::where(s.eq(0), loom::ones_like(s), s)).clone();
}

TEST_P(GradTest, Unary) {
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    bool positive_only;
  };
  const std::vector<Case> cases = {
      {"neg", [](const Tensor& x) { return -x; }, false},
      {"abs", [](const Tensor& x) { return x.abs(); }, false},
      {"exp", [](const Tensor& x) { return x.exp(); }, false},
      {"log", [](const Tensor& x) { return x.log(); }, true},
      {"log1p", [](const Tensor& x) { return x.log1p(); }, true},
      {"expm1", [](const Tensor& x) { return x.expm1(); }, false},
      {"sqrt", [](const Tensor& x) { return x.sqrt(); }, true},
      {"rsqrt", [](const Tensor& x) { return x.rsqrt(); }, true},
      {"sin", [](const Tensor& x) { return x.sin(); }, false},
      {"cos", [](const Tensor& x) { return x.cos(); }, false},
      {"tanh", [](const Tensor& x) { return x.tanh(); }, false},
      {"sigmoid", [](const Tensor& x) { return x.sigmoid(); }, false},
      {"relu", [](const Tensor& x) { return x.relu(); }, false},
      {"gelu", [](const Tensor& x) { return loom::gelu(x); }, false},
      {"gelu_tanh", [](const Tensor& x) { return loom::gelu(x, "tanh"); }, false},
      {"silu", [](const Tensor& x) { return loom::silu(x); }, false},
      {"erf", [](const Tensor& x) { return x.erf(); }, false},
      {"atan", [](const Tensor& x) { return x.atan(); }, false},
      {"asin", [](const Tensor& x) { return (x * 0.45).asin(); }, false},  // |0.45 x| <= 0.9
      {"acos", [](const Tensor& x) { return (x * 0.45).acos(); }, false},
      {"reciprocal", [](const Tensor& x) { return x.reciprocal(); }, false},
      {"square", [](const Tensor& x) { return x.square(); }, false},
      {"floor", [](const Tensor& x) { return x.floor() * x; }, false},  // floor's own gradient is 0
      {"ceil", [](const Tensor& x) { return x.ceil() * x; }, false},
      {"trunc", [](const Tensor& x) { return x.trunc() * x; }, false},
      {"round", [](const Tensor& x) { return x.round() + x; }, false},
      {"sign", [](const Tensor& x) { return x.sign() * x; }, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    for (auto shape : {std::vector<int64_t>{5}, std::vector<int64_t>{2, 3}}) {
      Tensor x = c.positive_only ? positive(shape, 11) : away_from_zero(shape, 11);
      EXPECT_TRUE(gradcheck([&](const T& v) { return c.f(v[0]); }, {x}));
    }
    // Through a strided view of the leaf.
    Tensor m = c.positive_only ? positive({3, 4}, 5) : away_from_zero({3, 4}, 5);
    EXPECT_TRUE(gradcheck([&](const T& v) { return c.f(v[0].t().slice(0, 1, 4, 2)); }, {m}));
  }
}

TEST_P(GradTest, Binary) {
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&)> f;
    bool positive_only;
  };
  const std::vector<Case> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, false},
      {"add_alpha", [](const Tensor& a, const Tensor& b) { return a.add(b, 2.5); }, false},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, false},
      {"sub_alpha", [](const Tensor& a, const Tensor& b) { return a.sub(b, -0.5); }, false},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, false},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, true},
      {"pow", [](const Tensor& a, const Tensor& b) { return a.pow(b); }, true},
      {"maximum", [](const Tensor& a, const Tensor& b) { return loom::maximum(a, b); }, false},
      {"minimum", [](const Tensor& a, const Tensor& b) { return loom::minimum(a, b); }, false},
      {"fmod", [](const Tensor& a, const Tensor& b) { return loom::fmod(a * 3, b); }, true},
      {"remainder", [](const Tensor& a, const Tensor& b) { return loom::remainder(a * 3, b); }, true},
      {"atan2", [](const Tensor& a, const Tensor& b) { return loom::atan2(a, b); }, false},
      {"where", [](const Tensor& a, const Tensor& b) { return loom::where(a.gt(b), a * 2, b); }, false},
  };
  // Same shapes, and broadcasting both ways (gradients are summed back).
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{4, 1}, {1, 3}}, {{}, {2, 2}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    for (const auto& [sa, sb] : shapes) {
      Tensor a = c.positive_only ? positive(sa, 21) : away_from_zero(sa, 21);
      Tensor b = c.positive_only ? positive(sb, 22) : away_from_zero(sb, 22);
      EXPECT_TRUE(gradcheck([&](const T& v) { return c.f(v[0], v[1]); }, {a, b}));
    }
    // Both operands are views of one leaf.
    Tensor m = c.positive_only ? positive({4, 4}, 23) : away_from_zero({4, 4}, 23);
    EXPECT_TRUE(gradcheck([&](const T& v) { return c.f(v[0].narrow(0, 0, 2), v[0].t().narrow(0, 2, 2)); }, {m}));
  }
}

TEST_P(GradTest, WithScalars) {
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> cases = {
      {"t+s", [](const Tensor& x) { return x + 1.5; }},     {"s+t", [](const Tensor& x) { return 1.5 + x; }},
      {"t-s", [](const Tensor& x) { return x - 1.5; }},     {"s-t", [](const Tensor& x) { return 1.5 - x; }},
      {"t*s", [](const Tensor& x) { return x * -2.5; }},    {"s*t", [](const Tensor& x) { return -2.5 * x; }},
      {"t/s", [](const Tensor& x) { return x / 4.0; }},     {"s/t", [](const Tensor& x) { return 3.0 / x; }},
      {"t**s", [](const Tensor& x) { return x.pow(2.5); }}, {"t**2", [](const Tensor& x) { return x.pow(2); }},
      {"t**0", [](const Tensor& x) { return x.pow(0) * x; }},
      {"s**t", [](const Tensor& x) { return loom::pow(1.7, x); }},
      {"fmod", [](const Tensor& x) { return loom::fmod(x * 3, 1.3); }},
      {"remainder", [](const Tensor& x) { return x.remainder(0.7); }},
      {"clamp", [](const Tensor& x) { return x.clamp(0.8, 1.6); }},
      {"clamp_min", [](const Tensor& x) { return x.clamp_min(1.1); }},
      {"clamp_max", [](const Tensor& x) { return x.clamp_max(1.1); }},
      {"where_scalar", [](const Tensor& x) { return loom::where(x.gt(1.2), x, 0.5); }},
  };
  for (const auto& [name, f] : cases) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(gradcheck([&](const T& v) { return f(v[0]); }, {input({2, 3}, 31, 0.55, 1.95)}));
  }
}

TEST_P(GradTest, Reductions) {
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> cases = {
      {"sum", [](const Tensor& x) { return x.sum(); }},
      {"sum_dims", [](const Tensor& x) { return x.sum({0, 2}); }},
      {"sum_keepdim", [](const Tensor& x) { return x.sum({1}, true); }},
      {"mean", [](const Tensor& x) { return x.mean(); }},
      {"mean_dims", [](const Tensor& x) { return x.mean({-1}, true); }},
      {"prod", [](const Tensor& x) { return x.prod(); }},
      {"prod_dim", [](const Tensor& x) { return x.prod(1, true); }},
      {"max", [](const Tensor& x) { return x.max(); }},
      {"min", [](const Tensor& x) { return x.min(); }},
      {"amax", [](const Tensor& x) { return x.amax({0, 1}); }},
      {"amin", [](const Tensor& x) { return x.amin({2}, true); }},
      {"max_dim", [](const Tensor& x) { return std::get<0>(x.max(1)); }},
      {"min_dim", [](const Tensor& x) { return std::get<0>(x.min(-1, true)); }},
      {"var", [](const Tensor& x) { return x.var(); }},
      {"var_dims", [](const Tensor& x) { return x.var({1}, false, true); }},
      {"std", [](const Tensor& x) { return x.std({0, 2}); }},
      {"logsumexp", [](const Tensor& x) { return x.logsumexp({1}); }},
      {"logsumexp_all", [](const Tensor& x) { return x.logsumexp({0, 1, 2}, true); }},
      {"norm2", [](const Tensor& x) { return x.norm(); }},
      {"norm1", [](const Tensor& x) { return x.norm(1, {1}); }},
      {"norm3", [](const Tensor& x) { return x.norm(3, {2}, true); }},
      {"norm_inf", [](const Tensor& x) { return x.norm(INFINITY, {0}); }},
  };
  for (const auto& [name, f] : cases) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(gradcheck([&](const T& v) { return f(v[0]); }, {away_from_zero({2, 3, 4}, 41)}));
    EXPECT_TRUE(gradcheck([&](const T& v) { return f(v[0].permute({2, 0, 1}).transpose(0, 2)); },
                          {away_from_zero({4, 2, 3}, 42)}));
  }
  // prod with one zero in a row, and with two (the rows' other gradients are 0).
  Tensor z = loom::tensor({0.0, 1.5, -2.0, 0.0, 0.0, 3.0, 0.5, 1.25, -0.75}, loom::kDouble).reshape({3, 3});
  EXPECT_TRUE(gradcheck([](const T& v) { return v[0].prod(1); }, {z}));
  EXPECT_TRUE(gradcheck([](const T& v) { return v[0].prod(); }, {z.narrow(0, 0, 1).clone()}));
}

TEST_P(GradTest, Views) {
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> cases = {
      {"view", [](const Tensor& x) { return x.view({4, 6}) * 2; }},
      {"reshape_copy", [](const Tensor& x) { return x.transpose(0, 2).reshape({-1}); }},
      {"permute", [](const Tensor& x) { return x.permute({1, 2, 0}).exp(); }},
      {"transpose", [](const Tensor& x) { return x.transpose(-1, 0).sin(); }},
      {"t", [](const Tensor& x) { return x.select(0, 1).t() * 3; }},
      {"expand", [](const Tensor& x) { return x.narrow(2, 0, 1).expand({2, 3, 5}).exp(); }},
      {"expand_new_dims", [](const Tensor& x) { return x.select(0, 0).select(0, 0).expand({3, 2, 4}) * x.select(0, 1).narrow(0, 0, 2).unsqueeze(0); }},
      {"squeeze", [](const Tensor& x) { return x.narrow(1, 1, 1).squeeze().exp(); }},
      {"squeeze_dim", [](const Tensor& x) { return x.narrow(1, 1, 1).squeeze(1).exp(); }},
      {"unsqueeze", [](const Tensor& x) { return x.unsqueeze(1).exp(); }},
      {"flatten", [](const Tensor& x) { return x.flatten(1).cos(); }},
      {"narrow", [](const Tensor& x) { return x.narrow(2, 1, 2).exp(); }},
      {"slice_step", [](const Tensor& x) { return x.slice(2, 0, 4, 3).exp() + x.slice(1, 1).sum(); }},
      {"select", [](const Tensor& x) { return x.select(2, -1).exp(); }},
      {"chunk", [](const Tensor& x) { return x.chunk(2, 2)[1] * x.chunk(2, 2)[0]; }},
      {"split", [](const Tensor& x) { return x.split({1, 3}, 2)[1].sum({2}) * x.split(1, 0)[0].sum({2}); }},
      {"unbind", [](const Tensor& x) { return x.unbind(1)[2] - x.unbind(1)[0].exp(); }},
      {"contiguous", [](const Tensor& x) { return x.transpose(0, 2).contiguous().exp(); }},
      {"clone", [](const Tensor& x) { return x.clone().tanh(); }},
      {"view_of_view", [](const Tensor& x) { return x.view({6, 4}).t().narrow(0, 1, 2).reshape({2, 2, 3}).exp(); }},
  };
  for (const auto& [name, f] : cases) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(gradcheck([&](const T& v) { return f(v[0]); }, {input({2, 3, 4}, 51)}));
  }
}

TEST_P(GradTest, MatrixProducts) {
  auto check = [](std::vector<int64_t> sa, std::vector<int64_t> sb) {
    SCOPED_TRACE(::testing::Message() << "matmul " << loom::IntArrayRef(sa) << " x " << loom::IntArrayRef(sb));
    EXPECT_TRUE(gradcheck([](const T& v) { return loom::matmul(v[0], v[1]); }, {input(sa, 61), input(sb, 62)}));
  };
  check({3}, {3});
  check({2, 3}, {3});
  check({3}, {3, 2});
  check({2, 3}, {3, 4});
  check({2, 2, 3}, {3, 2});
  check({2, 1, 2, 3}, {3, 3, 2});
  check({3}, {2, 3, 2});
  EXPECT_TRUE(gradcheck([](const T& v) { return v[0].mm(v[1].t()); }, {input({2, 3}, 63), input({4, 3}, 64)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return v[0].bmm(v[1]); }, {input({2, 2, 3}, 65), input({2, 3, 2}, 66)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::addmm(v[0], v[1], v[2], 0.5, -2.0); },
                        {input({3}, 67), input({2, 4}, 68), input({4, 3}, 69)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::addmm(v[0], v[1], v[2], 0, 1); },
                        {input({2, 3}, 67), input({2, 4}, 68), input({4, 3}, 69)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::linear(v[0], v[1], v[2]); },
                        {input({2, 4}, 70), input({3, 4}, 71), input({3}, 72)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::linear(v[0], v[1]); }, {input({2, 2, 4}, 73), input({3, 4}, 74)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::linear(v[0], v[1], v[2]); },
                        {input({2, 2, 4}, 75), input({3, 4}, 76), input({3}, 77)}));
}

TEST_P(GradTest, JoinsAndIndexing) {
  Tensor idx = loom::tensor({2, 0, 2, 1}, loom::kLong);
  Tensor gidx = loom::tensor({0, 2, 1, 1, 0, 0}, loom::kLong).reshape({2, 3});
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::cat({v[0], v[1].exp(), v[0]}, 1); },
                        {input({2, 3}, 81), input({2, 2}, 82)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::cat({v[0], loom::zeros({0}, loom::kDouble), v[1]}); },
                        {input({3}, 83), input({2}, 84)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::stack({v[0], v[1] * 2}, 1); }, {input({2, 3}, 85), input({2, 3}, 86)}));
  EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].index_select(0, idx); }, {input({3, 2}, 87)}));
  EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].index_select(1, idx.to(loom::kInt)); }, {input({2, 3}, 88)}));
  EXPECT_TRUE(gradcheck([&](const T& v) { return loom::embedding(v[0], gidx); }, {input({3, 4}, 89)}));
  EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].gather(1, gidx); }, {input({2, 4}, 90)}));
  // One index per line (a select, not a scatter_add), along the last dim and along dim 0.
  EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].gather(1, gidx.narrow(1, 1, 1)); }, {input({2, 4}, 100)}));
  EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].gather(0, gidx.narrow(0, 0, 1)); }, {input({3, 3}, 101)}));
  EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].scatter_add(1, gidx, v[1]); }, {input({2, 4}, 91), input({2, 3}, 92)}));
  EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].scatter_add(1, gidx.narrow(1, 0, 2), v[1]); },
                        {input({2, 4}, 93), input({2, 3}, 94)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return v[0].softmax(1); }, {input({3, 4}, 95)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return v[0].log_softmax(0); }, {input({3, 4}, 96)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return v[0].t().softmax(-1, loom::kDouble); }, {input({3, 4}, 97)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return v[0].tril(); }, {input({3, 4}, 98)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return v[0].triu(1); }, {input({2, 3, 3}, 99)}));
}

// scatter, scatter_reduce (each reduction, include_self both ways),
// index_add/copy/fill: inputs distinct (no ties for amax/amin, no zeros for
// prod), duplicates in the index, and src larger than the index.
TEST_P(GradTest, ScatterFamily) {
  Tensor idx = loom::tensor({1, 0, 3, 1, 1, 0, 3, 3}, loom::kLong).reshape({2, 4});  // dim 1 of a [2, 4]
  Tensor idx0 = loom::tensor({2, 0, 2, 0, 1, 1}, loom::kLong).reshape({2, 3});      // dim 0 of a [3, 3]
  // Assign's rule is PyTorch's (src's gradient gathered for every element,
  // a duplicate that lost included): a derivative only for distinct targets.
  Tensor distinct = loom::tensor({1, 0, 3, 2, 3, 2, 0, 1}, loom::kLong).reshape({2, 4});
  EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].scatter(1, distinct.narrow(1, 0, 3), v[1]); },
                        {input({2, 4}, 121), input({2, 5}, 122)}));
  EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].scatter(0, idx0, 1.5); }, {input({3, 3}, 123)}));
  for (const char* r : {"sum", "prod", "mean", "amax", "amin"})
    for (bool inc : {true, false}) {
      SCOPED_TRACE(::testing::Message() << r << " include_self " << inc);
      EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].scatter_reduce(1, idx, v[1], r, inc); },
                            {away_from_zero({2, 4}, 124), away_from_zero({2, 5}, 125)}));
      EXPECT_TRUE(gradcheck([&](const T& v) { return loom::scatter_reduce(v[0], -2, idx0, v[1], r, inc); },
                            {away_from_zero({3, 3}, 126), away_from_zero({2, 3}, 127)}));
    }
  // prod with one zero in a target's src values, and a zero self.
  Tensor with_zero = loom::tensor({0.5, 0.0, -1.5, 2.0, 1.25, 0.75}, loom::kDouble).reshape({2, 3});
  EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].scatter_reduce(0, idx0, v[1], "prod"); },
                        {loom::tensor({1.5, 2.0, -2.0, 1.0, 0.5, 3.0, -1.0, 2.5, 0.0}, loom::kDouble).reshape({3, 3}),
                         with_zero}));
  Tensor rows = loom::tensor({2, 0, 2}, loom::kLong);
  EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].index_add(0, rows, v[1], -0.5); }, {input({3, 2}, 128), input({3, 2}, 129)}));
  EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].index_copy(1, loom::tensor({1, 0}, loom::kLong), v[1]); },
                        {input({2, 3}, 130), input({2, 2}, 131)}));
  EXPECT_TRUE(gradcheck([&](const T& v) { return v[0].index_fill(1, rows, v[1].sum()); }, {input({2, 3}, 132), input({2}, 133)}));
  EXPECT_TRUE(gradcheck([&](const T& v) {
    Tensor y = v[0] * 1;
    y.scatter_reduce_(1, idx, v[1], "amax", false);
    y.index_add_(0, loom::tensor({1}, loom::kLong), v[1].narrow(0, 0, 1).narrow(1, 0, 4));
    return y;
  }, {away_from_zero({2, 4}, 134), away_from_zero({2, 5}, 135)}));
}

TEST_P(GradTest, InPlaceOnIntermediates) {
  // y = x * 2; y += b; y *= x: the in-place ops rebase y's history.
  EXPECT_TRUE(gradcheck([](const T& v) {
    Tensor y = v[0] * 2;
    y.add_(v[1]);
    y.mul_(v[0]);
    y.sigmoid_();
    return y;
  }, {input({2, 3}, 101), input({3}, 102)}));
  // Writes through views of an intermediate and of a tensor that needs no gradient.
  EXPECT_TRUE(gradcheck([](const T& v) {
    Tensor y = v[0].sin();  // sin saves its input, not y: y may be written
    y.select(1, 0).mul_(v[1]);
    y.narrow(0, 1, 1).zero_();
    Tensor h = loom::zeros({3, 4}, loom::kDouble);
    h.slice(1, 0, 4, 2).copy_(y.narrow(1, 0, 2));
    return h * y.sum();
  }, {input({3, 4}, 103), input({3}, 104)}));
  // A view taken before the base was written sees the new value and its gradient.
  EXPECT_TRUE(gradcheck([](const T& v) {
    Tensor y = v[0] * 1;
    Tensor row = y.select(0, 1);
    y.mul_(v[0]);
    return row * 3;
  }, {input({2, 3}, 105)}));
}

TEST_P(GradTest, SecondOrder) {
  EXPECT_TRUE(gradgradcheck([](const T& v) { return (v[0] * v[1]).tanh().sum(); }, {input({3}, 111), input({3}, 112)}));
  EXPECT_TRUE(gradgradcheck([](const T& v) { return v[0].exp().log_softmax(1); }, {input({2, 3}, 113)}));
  EXPECT_TRUE(gradgradcheck([](const T& v) { return loom::matmul(v[0], v[1]).sigmoid(); },
                            {input({2, 3}, 114), input({3, 2}, 115)}));
  EXPECT_TRUE(gradgradcheck([](const T& v) { return (v[0].pow(3) / v[1]).sum({1}); },
                            {input({2, 3}, 116, 0.5, 2), input({3}, 117, 0.5, 2)}));
  EXPECT_TRUE(gradgradcheck([](const T& v) {
    Tensor y = v[0].sin();
    y.narrow(0, 0, 1).mul_(v[0].narrow(0, 1, 1));
    return y;
  }, {input({2, 3}, 118)}));
}

LOOM_INSTANTIATE_BACKENDS(GradTest);

}  // namespace
