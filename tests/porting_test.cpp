// What broke when libtorch's example programs and a small GPT were ported
// to loom by changing the include and adding `namespace torch = loom;`:
// each case here is written as those programs write it and behaves as in
// libtorch.
#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::BackendTest;
namespace autograd = loom::autograd;

// A linear function whose bias is optional, as libtorch's custom-function
// tutorial writes it: backward returns a gradient per forward parameter,
// the bias's undefined when apply() was not given one.
struct LinearFunction : autograd::Function<LinearFunction> {
  static Tensor forward(autograd::AutogradContext* ctx, Tensor input, Tensor weight, Tensor bias = Tensor()) {
    ctx->save_for_backward({input, weight, bias});
    Tensor out = input.mm(weight.t());
    if (bias.defined()) out += bias.unsqueeze(0).expand_as(out);
    return out;
  }
  static autograd::variable_list backward(autograd::AutogradContext* ctx, autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    Tensor input = saved[0], weight = saved[1], bias = saved[2], g = grads[0];
    Tensor gi = g.mm(weight), gw = g.t().mm(input), gb;
    if (bias.defined()) gb = g.sum(0);
    return {gi, gw, gb};
  }
};

// Returns one gradient too few: an error that names the user's line.
struct MissingGradient : autograd::Function<MissingGradient> {
  static Tensor forward(autograd::AutogradContext*, Tensor a, Tensor b) { return a * b; }
  static autograd::variable_list backward(autograd::AutogradContext*, autograd::variable_list grads) {
    return {grads[0]};
  }
};

class PortingTest : public BackendTest {};

TEST_P(PortingTest, ACustomFunctionMayReturnATrailingUndefinedGradient) {
  Tensor x = loom::tensor({1.0, 2.0, 3.0, 4.0}).view({2, 2}).requires_grad_();
  Tensor w = loom::tensor({0.5, -1.0, 2.0, 1.0}).view({2, 2}).requires_grad_();
  LinearFunction::apply(x, w).sum().backward();  // no bias: backward returns {gi, gw, undefined}
  EXPECT_TRUE(all_close(x.grad(), {2.5, 0, 2.5, 0}));
  EXPECT_TRUE(all_close(w.grad(), {4, 6, 4, 6}));
  Tensor b = loom::tensor({1.0, -1.0}).requires_grad_();
  LinearFunction::apply(x, w, b).sum().backward();
  EXPECT_TRUE(all_close(b.grad(), {2, 2}));
}

TEST_P(PortingTest, AutogradErrorsNameTheUsersLine) {
  Tensor a = loom::ones({3}).requires_grad_(), b = loom::ones({3}).requires_grad_();
  const std::string msg = loom_test::error_of([&] { MissingGradient::apply(a, b).sum().backward(); });
  EXPECT_NE(msg.find("incorrect number of gradients"), std::string::npos) << msg;
  EXPECT_NE(msg.find("porting_test.cpp:"), std::string::npos) << msg;
  EXPECT_EQ(msg.find(":0)"), std::string::npos) << msg;
}

// libtorch: assigning to a temporary tensor writes into the data it views.
TEST_P(PortingTest, AssignmentToATemporaryWritesIntoItsData) {
  Tensor w = loom::ones({3}).requires_grad_();
  (w * 2).sum().backward();
  EXPECT_TRUE(all_close(w.grad(), {2, 2, 2}));
  w.grad().data() = loom::tensor({7.0f, 8.0f, 9.0f});  // copy_ into the gradient
  EXPECT_TRUE(all_close(w.grad(), {7, 8, 9}));
  w.grad().data().mul_(2);  // the clip idiom: an in-place op on .data()
  EXPECT_TRUE(all_close(w.grad(), {14, 16, 18}));

  Tensor m = loom::zeros({3, 2});
  m[1] = loom::tensor({1.0f, 2.0f});  // x[i] = row
  m[2] = 5;                           // x[i] = scalar: fill_
  m.slice(1, 0, 1) = -1.5;            // a column
  EXPECT_TRUE(all_close(m, {-1.5, 0, -1.5, 2, -1.5, 5}));

  // A named tensor rebinds, as in libtorch; the old data is untouched.
  Tensor a = loom::zeros({2}), c = a;
  a = loom::ones({2});
  EXPECT_TRUE(all_close(c, {0, 0}));
  EXPECT_TRUE(all_close(a, {1, 1}));

  // data() shares the data, without history.
  Tensor p = loom::ones({2}).requires_grad_();
  Tensor d = p.data();
  EXPECT_FALSE(d.requires_grad());
  d.add_(1);
  EXPECT_TRUE(all_close(p, {2, 2}));
}

// modules() lists the module itself through its shared_ptr: inside its own
// constructor no shared_ptr owns it yet, which is explained, as libtorch does.
struct Net : loom::nn::Module {
  Net() {
    fc1 = register_module("fc1", loom::nn::Linear(4, 8));
    fc2 = register_module("fc2", loom::nn::Linear(8, 2));
    children_listed = modules(/*include_self=*/false).size();
    try {
      (void)modules();
    } catch (const loom::Error& e) {
      error = e.what();
    }
  }
  loom::nn::Linear fc1{nullptr}, fc2{nullptr};
  size_t children_listed = 0;
  std::string error;
};

TEST(PortingModules, ModulesInAConstructorIsExplained) {
  auto net = std::make_shared<Net>();
  EXPECT_EQ(net->children_listed, 2u);
  EXPECT_NE(net->error.find("modules"), std::string::npos) << net->error;
  EXPECT_NE(net->error.find("std::shared_ptr"), std::string::npos) << net->error;
  EXPECT_NE(net->error.find("include_self"), std::string::npos) << net->error;
  EXPECT_NE(net->error.find("porting_test.cpp:"), std::string::npos) << net->error;
  EXPECT_EQ(net->modules().size(), 3u);  // once owned, it lists itself
  auto named = net->named_modules();
  EXPECT_EQ(named.keys(), (std::vector<std::string>{"", "fc1", "fc2"}));
}

// A module called through its holder (`fc(x)`) reports the caller's line,
// not the holder's header.
TEST(PortingModules, AModuleCallNamesTheCallersLine) {
  loom::nn::Linear fc(4, 3);
  const std::string msg = loom_test::error_of([&] { fc(loom::ones({2, 5})); });
  EXPECT_NE(msg.find("porting_test.cpp:"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("module.h"), std::string::npos) << msg;
}

LOOM_INSTANTIATE_BACKENDS(PortingTest);

}  // namespace

namespace {
namespace torch = loom;

// ExpandingArray and optional as user code spells them.
TEST(PortingHelpers, ExpandingArrayRepeatsOneValueOrTakesD) {
  torch::ExpandingArray<2> k(3);
  EXPECT_EQ((*k)[0], 3);
  EXPECT_EQ(k[1], 3);
  torch::ExpandingArray<3> s({1, 2, 3});
  EXPECT_EQ(s->size(), 3u);
  EXPECT_EQ(std::vector<int64_t>(s), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_THROW(torch::ExpandingArray<2>(std::vector<int64_t>{1, 2, 3}), loom::Error);
  torch::optional<int64_t> none = torch::nullopt;
  EXPECT_FALSE(none.has_value());
}
}  // namespace
