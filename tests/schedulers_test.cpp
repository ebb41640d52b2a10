// Learning-rate schedulers: each schedule against PyTorch's formula, and a
// schedule that changes the rate every step never recompiles the step.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <cmath>
#include <vector>

#include "test_util.h"

namespace {

namespace optim = loom::optim;
using V = std::vector<double>;

struct Model {
  loom::nn::Linear fc{4, 2};
};

// The learning rate after each of n calls of step(), epoch 0 first.
template <class Scheduler>
V rates(optim::Optimizer& opt, Scheduler& s, int n) {
  V out;
  for (int i = 0; i < n; ++i) {
    s.step();
    out.push_back(opt.param_groups()[0].options().get_lr());
  }
  return out;
}

void expect_near(const V& got, const V& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "epoch " << i;
}

TEST(Schedulers, EachFollowsItsFormula) {
  Model m;
  const double pi = std::acos(-1.0);
  {
    optim::SGD opt(m.fc->parameters(), optim::SGDOptions(1.0));
    optim::StepLR s(opt, 3, 0.5);  // libtorch's: the k-th call sets epoch k
    expect_near(rates(opt, s, 8), {1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25});
  }
  {
    optim::SGD opt(m.fc->parameters(), optim::SGDOptions(1.0));
    optim::MultiStepLR s(opt, {2, 5, 5}, 0.1);
    expect_near(rates(opt, s, 7), {1, 1, 0.1, 0.1, 0.1, 0.001, 0.001});
  }
  {
    optim::SGD opt(m.fc->parameters(), optim::SGDOptions(2.0));
    optim::ExponentialLR s(opt, 0.9);
    expect_near(rates(opt, s, 4), {2, 1.8, 1.62, 1.458});
  }
  {
    optim::Adam opt(m.fc->parameters(), optim::AdamOptions(0.1));
    optim::CosineAnnealingLR s(opt, 4, 0.01);
    V want;
    for (int e = 0; e < 6; ++e) want.push_back(0.01 + (0.1 - 0.01) * (1 + std::cos(pi * e / 4)) / 2);
    expect_near(rates(opt, s, 6), want);
  }
  {
    optim::SGD opt(m.fc->parameters(), optim::SGDOptions(0.5));
    optim::LambdaLR s(opt, [](int64_t e) { return 1.0 / (1 + e); });
    expect_near(rates(opt, s, 3), {0.5, 0.25, 0.5 / 3});
  }
  {
    optim::SGD opt(m.fc->parameters(), optim::SGDOptions(1.0));
    optim::LinearLR s(opt, 0.25, 1.0, 3);  // a warm-up over 3 epochs
    expect_near(rates(opt, s, 5), {0.25, 0.5, 0.75, 1, 1});
  }
  EXPECT_THROW(
      {
        optim::SGD opt(m.fc->parameters(), optim::SGDOptions(1.0));
        optim::StepLR s(opt, 0);
      },
      loom::Error);
}

TEST(Schedulers, ReduceLROnPlateauWaitsPatienceThenCoolsDown) {
  Model m;
  optim::SGD opt(m.fc->parameters(), optim::SGDOptions(1.0));
  optim::ReduceLROnPlateauScheduler s(opt, optim::ReduceLROnPlateauScheduler::min, 0.5, /*patience=*/2,
                                      /*threshold=*/0.01, optim::ReduceLROnPlateauScheduler::rel, /*cooldown=*/1,
                                      {0.2f});
  const std::vector<float> metrics = {5, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4};
  V got;
  for (float v : metrics) {
    s.step(v);
    got.push_back(opt.param_groups()[0].options().get_lr());
  }
  // Bad epochs 1, 2, 3 (more than patience 2): halve; a cooldown epoch; then
  // three bad epochs again; the floor 0.2 holds.
  expect_near(got, {1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25});
  for (int i = 0; i < 8; ++i) s.step(4);
  EXPECT_NEAR(opt.param_groups()[0].options().get_lr(), 0.2, 1e-7);
}

TEST(Schedulers, AScheduleNeverRecompilesTheStep) {
  loom::manual_seed(0);
  loom::nn::Linear fc(8, 1);
  optim::SGD opt(fc->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::CosineAnnealingLR sched(opt, 10);
  auto x = loom::randn({16, 8}), y = loom::randn({16, 1});
  loom::sync();
  const loom_test::TrainingRun run = loom_test::train_for(12, [&] {
    opt.zero_grad();
    auto loss = loom::mse_loss(fc->forward(x), y);
    loss.backward();
    opt.step();
    sched.step();
    return loss.item<float>();
  });
  EXPECT_EQ(run.compiles_after_two, 0);
}

}  // namespace
