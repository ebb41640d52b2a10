// loom::compile: a function traced once per signature and replayed without
// recording. Each test compares a compiled function with the same code run
// as plain lazy ops, on every backend, and checks what the header promises
// about arguments, captured tensors, in-place updates, random numbers, a
// training step, and the errors for what a trace cannot replay.
#include <loom/compile.h>

#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::BackendTest;
using TL = std::vector<Tensor>;
namespace nn = loom::nn;
namespace F = loom::nn::functional;

class CompileTest : public BackendTest {};

// W5's control step (shared/bench-peers/WORKLOADS.md).
Tensor control_step(const Tensor& s0, const Tensor& W1, const Tensor& W2) {
  Tensor a = loom::tanh(loom::tanh(s0.matmul(W1)).matmul(W2));
  Tensor s = s0;
  for (int i = 0; i < 10; ++i) s = loom::clamp(s * 0.99 + a * 0.01, -1.0, 1.0);
  return s;
}

TEST_P(CompileTest, ReplaysTheTraceWithoutRecordingAndGivesTheSameBits) {
  loom::manual_seed(1);
  Tensor W1 = (loom::randn({64, 64}) * 0.1).clone(), W2 = (loom::randn({64, 64}) * 0.1).clone();
  loom::CompiledFunction step = loom::compile([&](const TL& in) { return TL{control_step(in[0], W1, W2)}; });
  Tensor s = loom::randn({1, 64});
  Tensor eager = s;
  loom::sync();
  for (int k = 0; k < 5; ++k) {
    eager = control_step(eager, W1, W2);
    const std::vector<float> want = eager.to_vector<float>();
    const int64_t recorded = loom::metrics().nodes_recorded;
    s = step({s})[0];
    if (k > 0) EXPECT_EQ(loom::metrics().nodes_recorded, recorded) << "a replay records nothing";
    EXPECT_EQ(s.to_vector<float>(), want) << "call " << k;
  }
  EXPECT_EQ(step.traces(), 1u);
  EXPECT_GE(loom::metrics().compiled_replays, 4);
}

TEST_P(CompileTest, ANewSignatureIsTracedAnew) {
  loom::CompiledFunction f = loom::compile([](const TL& in) { return TL{in[0].sum(0) * 2}; });
  EXPECT_EQ(f({loom::ones({3, 2})})[0].to_vector<double>(), (std::vector<double>{6, 6}));
  EXPECT_EQ(f({loom::ones({4, 2})})[0].to_vector<double>(), (std::vector<double>{8, 8}));
  EXPECT_EQ(f({loom::ones({3, 2}).t()})[0].to_vector<double>(), (std::vector<double>{4, 4, 4}));  // a view
  EXPECT_EQ(f({loom::ones({3, 2}, loom::TensorOptions(loom::kDouble))})[0].dtype(), loom::kDouble);
  EXPECT_EQ(f.traces(), 4u);
  EXPECT_EQ(f({loom::full({4, 2}, 2.0)})[0].to_vector<double>(), (std::vector<double>{16, 16}));
  EXPECT_EQ(f.traces(), 4u);
  // Two arguments that are one tensor trace apart from two tensors.
  loom::CompiledFunction g = loom::compile([](const TL& in) { return TL{in[0] + in[1]}; });
  Tensor a = loom::ones({2}), b = loom::full({2}, 5.0);
  EXPECT_EQ(g({a, b})[0].to_vector<double>(), (std::vector<double>{6, 6}));
  EXPECT_EQ(g({a, a})[0].to_vector<double>(), (std::vector<double>{2, 2}));
  EXPECT_EQ(g({b, b})[0].to_vector<double>(), (std::vector<double>{10, 10}));
  EXPECT_EQ(g({b, a})[0].to_vector<double>(), (std::vector<double>{6, 6}));
  EXPECT_EQ(g.traces(), 2u);
}

TEST_P(CompileTest, CapturedTensorsAreReadAtEveryCall) {
  Tensor w = loom::full({3}, 2.0);
  loom::CompiledFunction f = loom::compile([&](const TL& in) { return TL{in[0] * w}; });
  Tensor x = loom::tensor(std::vector<float>{1, 2, 3}).to(w.device());
  EXPECT_EQ(f({x})[0].to_vector<double>(), (std::vector<double>{2, 4, 6}));
  w.mul_(3);  // in place, lazily: the next call computes it first
  EXPECT_EQ(f({x})[0].to_vector<double>(), (std::vector<double>{6, 12, 18}));
  EXPECT_EQ(f({x + 1})[0].to_vector<double>(), (std::vector<double>{12, 18, 24}));  // a pending argument
}

TEST_P(CompileTest, InPlaceUpdatesAreRedoneByEveryCall) {
  Tensor state = loom::zeros({2});
  loom::CompiledFunction f = loom::compile([&](const TL& in) {
    Tensor arg = in[0];
    arg.add_(1);              // an argument
    state.add_(arg.sum());    // a tensor from before the call
    return TL{arg * 10, arg};
  });
  Tensor x = loom::zeros({2});
  for (int k = 1; k <= 3; ++k) {
    TL r = f({x});
    EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{double(k), double(k)}));
    EXPECT_EQ(r[0].to_vector<double>(), (std::vector<double>{10.0 * k, 10.0 * k}));
    EXPECT_EQ(r[1].to_vector<double>(), x.to_vector<double>());
    r[1].add_(0);  // the result aliases the argument: same storage
  }
  EXPECT_EQ(state.to_vector<double>(), (std::vector<double>{2 + 4 + 6, 2 + 4 + 6}));
  EXPECT_EQ(f.traces(), 1u);
}

TEST_P(CompileTest, RandomNumbersAreFreshAndThoseOfThePlainCode) {
  auto noisy = [](const Tensor& x) { return x + loom::randn(x.sizes()) + loom::rand({1}); };
  Tensor x = loom::zeros({100});
  loom::manual_seed(7);
  std::vector<std::vector<float>> plain;
  for (int k = 0; k < 3; ++k) plain.push_back(noisy(x).to_vector<float>());
  EXPECT_NE(plain[0], plain[1]);
  loom::CompiledFunction f = loom::compile([&](const TL& in) { return TL{noisy(in[0])}; });
  loom::manual_seed(7);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(f({x})[0].to_vector<float>(), plain[k]) << "call " << k;
}

struct Mlp : nn::Module {
  Mlp() : fc1(register_module("fc1", nn::Linear(16, 32))), fc2(register_module("fc2", nn::Linear(32, 4))) {}
  Tensor forward(const Tensor& x) { return fc2(loom::relu(fc1(x))); }
  nn::Linear fc1, fc2;
};

float value(const Tensor& t) { return t.item<float>(); }

// A small model, its data and an optimizer: one training step as W4's.
template <class Opt, class Options>
struct OptRun {
  std::shared_ptr<Mlp> model;
  std::unique_ptr<Opt> opt;
  Tensor x, y;
  explicit OptRun(const Options& o) {
    loom::manual_seed(5);
    model = std::make_shared<Mlp>();
    opt = std::make_unique<Opt>(model->parameters(), o);
    x = loom::randn({8, 16});
    y = loom::randint(0, 4, {8});
  }
  Tensor step() {
    opt->zero_grad(/*set_to_none=*/false);
    Tensor loss = F::cross_entropy(model->forward(x), y);
    loss.backward();
    opt->step();
    return loss.detach();
  }
  void set_lr(double lr) {
    for (auto& g : opt->param_groups()) g.options().set_lr(lr);
  }
  std::vector<float> params() const {
    std::vector<float> all;
    for (const Tensor& p : model->parameters())
      for (float v : p.to_vector<float>()) all.push_back(v);
    return all;
  }
};

// W4's structure, small: the forward, backward and momentum-SGD update of
// one step replayed as one executable match the plain loop step for step.
TEST_P(CompileTest, ATrainingStepCompilesAfterItsStateExists) {
  using Run = OptRun<loom::optim::SGD, loom::optim::SGDOptions>;
  Run plain(loom::optim::SGDOptions(0.05).momentum(0.9)), compiled(loom::optim::SGDOptions(0.05).momentum(0.9));
  plain.step();
  compiled.step();  // the first step creates the gradients and the momentum buffers
  loom::CompiledFunction step = loom::compile([&](const TL&) { return TL{compiled.step()}; });
  for (int k = 0; k < 20; ++k) {
    const float want = plain.step().item<float>();
    EXPECT_EQ(step({})[0].item<float>(), want) << "step " << k;
  }
  EXPECT_EQ(compiled.params(), plain.params());
  EXPECT_EQ(step.traces(), 1u);
}

// An optimizer whose numbers change between calls: Adam's bias corrections
// change every step, and a learning rate may be changed between calls. A
// replay must use the numbers the plain step would record, and leave the
// optimizer's step counts where the plain loop leaves them; neither may
// compile anything new (the graph is the same).
template <class Opt, class Options>
void expect_compiled_steps_match_plain(const Options& options, int retraces) {
  OptRun<Opt, Options> plain(options), compiled(options);
  plain.step();
  compiled.step();  // creates the gradients
  loom::CompiledFunction step = loom::compile([&](const TL&) { return TL{compiled.step()}; });
  int64_t misses = -1;
  int traced = 0;
  for (int k = 0; k < 8; ++k) {
    if (k == 5) {  // a learning-rate change between calls
      plain.set_lr(0.003);
      compiled.set_lr(0.003);
    }
    const float want = value(plain.step());
    const int64_t recorded = loom::metrics().nodes_recorded;
    EXPECT_EQ(value(step({})[0]), want) << "call " << k;
    if (k > 0) traced += loom::metrics().nodes_recorded != recorded;
    if (k == 1) misses = loom::metrics().cache_misses;
  }
  EXPECT_EQ(compiled.params(), plain.params());
  EXPECT_EQ(loom::metrics().cache_misses, misses) << "a changed number compiles nothing";
  EXPECT_EQ(traced, retraces) << "calls after the first that traced again";
  // The step counts moved on with the replays: the next plain steps agree.
  EXPECT_EQ(value(compiled.step()), value(plain.step()));
  EXPECT_EQ(compiled.params(), plain.params());
}

TEST_P(CompileTest, AnAdamStepReplaysWithTheBiasCorrectionsOfEachCall) {
  // Replayed, with their bias corrections and learning rate computed anew.
  expect_compiled_steps_match_plain<loom::optim::Adam>(loom::optim::AdamOptions(0.01), 0);
  expect_compiled_steps_match_plain<loom::optim::AdamW>(loom::optim::AdamWOptions(0.01).weight_decay(0.1), 0);
  expect_compiled_steps_match_plain<loom::optim::Adam>(loom::optim::AdamOptions(0.01).amsgrad(true).weight_decay(0.01), 0);
}

TEST_P(CompileTest, ALearningRateChangedBetweenCallsTakesEffectWithoutATrace) {
  expect_compiled_steps_match_plain<loom::optim::SGD>(loom::optim::SGDOptions(0.05).momentum(0.9).nesterov(true), 0);
  expect_compiled_steps_match_plain<loom::optim::SGD>(loom::optim::SGDOptions(0.05).momentum(0.9).dampening(0.5), 0);
}

// A number a replay keeps (SGD's momentum) changed: the next call traces
// the step again, and the calls after it replay that trace.
TEST_P(CompileTest, AChangedMomentumTracesAgainThenReplays) {
  using Run = OptRun<loom::optim::SGD, loom::optim::SGDOptions>;
  Run plain(loom::optim::SGDOptions(0.05).momentum(0.9)), compiled(loom::optim::SGDOptions(0.05).momentum(0.9));
  plain.step();
  compiled.step();
  loom::CompiledFunction step = loom::compile([&](const TL&) { return TL{compiled.step()}; });
  for (int k = 0; k < 5; ++k) {
    if (k == 2)
      for (Run* r : {&plain, &compiled})
        static_cast<loom::optim::SGDOptions&>(r->opt->param_groups()[0].options()).momentum(0.5);
    const float want = value(plain.step());
    const int64_t before = loom::metrics().nodes_recorded;
    EXPECT_EQ(value(step({})[0]), want) << "call " << k;
    if (k > 0) EXPECT_EQ(loom::metrics().nodes_recorded > before, k == 2) << "call " << k << " traced";
  }
  EXPECT_EQ(compiled.params(), plain.params());
  EXPECT_EQ(step.traces(), 1u);
}

// A module's training mode is host state too: a forward traced in training
// mode (Dropout active) must not be replayed after eval(), nor the other
// way round.
TEST_P(CompileTest, AModuleSwitchedBetweenTrainAndEvalIsTracedAgain) {
  nn::Sequential model(nn::Linear(16, 16), nn::Dropout(0.5));
  loom::CompiledFunction f = loom::compile([&](const TL& in) { return TL{model->forward(in[0]).detach()}; });
  Tensor x = loom::ones({4, 16});
  auto zeros_in = [](const Tensor& t) {
    int n = 0;
    for (float v : t.to_vector<float>()) n += v == 0;
    return n;
  };
  model->eval();
  const std::vector<float> eval_out = model->forward(x).to_vector<float>();
  model->train();
  EXPECT_GT(zeros_in(f({x})[0]), 0) << "training: dropout zeroes about half";
  EXPECT_GT(zeros_in(f({x})[0]), 0) << "a replay in training mode";
  model->eval();
  EXPECT_EQ(f({x})[0].to_vector<float>(), eval_out) << "after eval(): no dropout";
  EXPECT_EQ(f({x})[0].to_vector<float>(), eval_out) << "and its replay";
  model->train();
  EXPECT_GT(zeros_in(f({x})[0]), 0) << "after train() again";
  EXPECT_EQ(f.traces(), 1u);
}

// Dropping the executable cache (loom::clear_executable_cache, or on a GPU
// a change of TF32 mode) drops what a trace replays too: the next call
// traces and compiles again.
TEST_P(CompileTest, AClearedExecutableCacheIsNotReplayedFromATrace) {
  loom::CompiledFunction f = loom::compile([](const TL& in) { return TL{in[0] * 3}; });
  Tensor x = loom::ones({4});
  EXPECT_EQ(f({x})[0].to_vector<double>(), (std::vector<double>(4, 3.0)));
  EXPECT_EQ(f({x})[0].to_vector<double>(), (std::vector<double>(4, 3.0)));
  loom::clear_executable_cache();
  const int64_t misses = loom::metrics().cache_misses;
  EXPECT_EQ(f({x})[0].to_vector<double>(), (std::vector<double>(4, 3.0)));
  EXPECT_EQ(loom::metrics().cache_misses, misses + 1) << "traced and compiled again";
  EXPECT_EQ(loom::executable_cache_size(), 1u);
  EXPECT_EQ(f.traces(), 1u);
}

TEST_P(CompileTest, WhatATraceCannotReplayIsAnErrorSayingWhatToChange) {
  const std::string read = loom_test::error_of([] {
    loom::compile([](const TL& in) { return TL{in[0] * in[0].sum().item<double>()}; })({loom::ones({2})});
  });
  EXPECT_NE(read.find("reads a tensor's value while it is traced"), std::string::npos) << read;
  EXPECT_NE(read.find("compile_test.cpp"), std::string::npos) << read;

  Tensor w = loom::ones({2}).requires_grad_();
  const std::string history = loom_test::error_of([&] { loom::compile([&](const TL& in) { return TL{in[0] * w}; })({loom::ones({2})}); });
  EXPECT_NE(history.find("grad_fn"), std::string::npos) << history;

  Tensor escaped;
  const std::string escape = loom_test::error_of([&] {
    loom::compile([&](const TL& in) {
      escaped = in[0] + 1;
      return TL{in[0] * 2};
    })({loom::ones({2})});
  });
  EXPECT_NE(escape.find("alive outside its results"), std::string::npos) << escape;

  // The thread records and syncs normally after each of these.
  Tensor t = loom::ones({3}) * 4;
  EXPECT_EQ(t.sum().item<double>(), 12);
  EXPECT_EQ(escaped.to_vector<double>(), (std::vector<double>{2, 2}));
}

LOOM_INSTANTIATE_BACKENDS(CompileTest);

}  // namespace
