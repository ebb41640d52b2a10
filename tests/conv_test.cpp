// The fused convolution (Conv2d, Conv2dGradInput, Conv2dGradWeight: an
// implicit GEMM on every backend) against im2col and a product
// (backends::enable_fused_conv(false)) and against finite differences;
// groups in conv2d, conv1d, conv_transpose2d and the modules.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <algorithm>
#include <vector>

#include "gradcheck.h"
#include "test_util.h"

namespace {

namespace nn = loom::nn;
namespace F = loom::nn::functional;
using loom::Tensor;
using loom_test::all_close;
using loom_test::gradcheck;
using loom_test::input;
using T = std::vector<Tensor>;

// The CPU takes the fused op only when asked (backends::fused_conv_on_cpu_enabled).
class ConvTest : public loom_test::BackendTest {
 protected:
  void SetUp() override {
    BackendTest::SetUp();
    loom::backends::enable_fused_conv_on_cpu(true);
  }
  void TearDown() override {
    loom::backends::enable_fused_conv_on_cpu(false);
    BackendTest::TearDown();
  }
};

struct Case {
  int64_t n, c, h, w, o, kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << "x [" << c.n << ", " << c.c << ", " << c.h << ", " << c.w << "], w [" << c.o << ", " << c.c / c.groups
            << ", " << c.kh << ", " << c.kw << "], stride " << c.stride_h << "x" << c.stride_w << ", padding " << c.pad_h
            << "x" << c.pad_w << ", dilation " << c.dil_h << "x" << c.dil_w << ", groups " << c.groups;
}

F::Conv2dFuncOptions options_of(const Case& c) {
  return F::Conv2dFuncOptions()
      .stride({c.stride_h, c.stride_w})
      .padding({c.pad_h, c.pad_w})
      .dilation({c.dil_h, c.dil_w})
      .groups(c.groups);
}

// Sizes that are not multiples of any kernel's tiles, every attribute away
// from 1 somewhere, depthwise, 1x1, a ResNet stride-2 block.
const std::vector<Case> kCases = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1},     {2, 3, 9, 7, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {3, 4, 11, 10, 6, 3, 2, 2, 1, 1, 0, 1, 2, 2},   {2, 6, 8, 9, 6, 3, 3, 1, 2, 2, 1, 2, 1, 6},
    {2, 8, 10, 10, 16, 1, 1, 2, 2, 0, 0, 1, 1, 1},  {1, 5, 13, 6, 7, 5, 3, 3, 2, 2, 1, 1, 1, 1},
    {2, 16, 12, 12, 24, 3, 3, 2, 2, 1, 1, 1, 1, 4}, {1, 70, 9, 9, 130, 3, 3, 1, 1, 1, 1, 1, 1, 1},
};

// Values and all three gradients (input, weight, bias), fused and written out.
// (On the CPU the default is the written-out path: ConvTest's fixture asks
// for the fused one.)
TEST_P(ConvTest, FusedOpMatchesIm2colAndAProduct) {
  const std::vector<loom::ScalarType> dtypes = on_gpu()
                                                   ? std::vector<loom::ScalarType>{loom::kFloat, loom::kBFloat16, loom::kHalf}
                                                   : std::vector<loom::ScalarType>{loom::kDouble, loom::kFloat, loom::kBFloat16};
  for (const Case& c : kCases)
    for (loom::ScalarType dt : dtypes) {
      SCOPED_TRACE(::testing::Message() << c << " " << dt);
      auto leaf = [&](std::vector<int64_t> shape, uint32_t seed) { return input(shape, seed).to(dt).detach().requires_grad_(); };
      const Tensor x = leaf({c.n, c.c, c.h, c.w}, 1), w = leaf({c.o, c.c / c.groups, c.kh, c.kw}, 2), b = leaf({c.o}, 3);
      auto run = [&](bool fused) {
        loom::backends::enable_fused_conv(fused);
        Tensor y = F::conv2d(x, w, options_of(c).bias(b));
        loom::backends::enable_fused_conv(true);
        const Tensor go = input(y.sizes().vec(), 4).to(dt);
        auto g = loom::autograd::grad({y}, {x, w, b}, {go});
        return std::vector<Tensor>{y, g[0], g[1], g[2]};
      };
      const std::vector<Tensor> fused = run(true), written = run(false);
      // Each sum has C/G * kH * kW (or N * OH * OW) terms of magnitude ~4.
      const double tol = dt == loom::kDouble ? 1e-11 : dt == loom::kFloat ? 2e-5 : dt == loom::kHalf ? 4e-3 : 3e-2;
      const char* what[] = {"out", "dx", "dw", "db"};
      for (size_t i = 0; i < 4; ++i) {
        const double scale = std::max(1.0, written[i].abs().max().to(loom::kDouble).item<double>());
        EXPECT_TRUE(all_close(fused[i].to(loom::kDouble), written[i].to_vector<double>(), 0.0, tol * scale)) << what[i];
        EXPECT_EQ(fused[i].dtype(), dt) << what[i];
      }
    }
}

// The recorded graph holds the fused ops and no im2col: its backward's
// node is the convolution's.
TEST_P(ConvTest, RecordsOneConvolutionNode) {
  const Tensor x = input({2, 3, 8, 8}, 5).to(loom::kFloat).requires_grad_(), w = input({4, 3, 3, 3}, 6).to(loom::kFloat);
  const Tensor y = F::conv2d(x, w, F::Conv2dFuncOptions().padding(1));
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name(), "ConvolutionBackward0");
}

TEST_P(ConvTest, GradientsAgainstFiniteDifferences) {
  if (on_gpu()) GTEST_SKIP() << "float64 finite differences run on the CPU backends";
  for (const Case& c : {Case{2, 4, 5, 6, 4, 3, 2, 2, 1, 1, 1, 1, 2, 2}, Case{1, 3, 4, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1}}) {
    SCOPED_TRACE(::testing::Message() << c);
    auto f = [c](const T& t) { return F::conv2d(t[0], t[1], options_of(c)); };
    EXPECT_TRUE(gradcheck(f, {input({c.n, c.c, c.h, c.w}, 7), input({c.o, c.c / c.groups, c.kh, c.kw}, 8)}));
    // The backward is made of the fused ops too, each differentiable.
    EXPECT_TRUE(loom_test::gradgradcheck(f, {input({c.n, c.c, c.h, c.w}, 9), input({c.o, c.c / c.groups, c.kh, c.kw}, 10)}));
  }
}

// groups: each group of input channels convolved with its own filters,
// as separate convolutions concatenated.
TEST_P(ConvTest, GroupsAreSeparateConvolutions) {
  const Tensor x = input({2, 6, 7, 7}, 11).to(loom::kFloat), w = input({9, 2, 3, 3}, 12).to(loom::kFloat);
  Tensor by_hand = loom::cat({F::conv2d(x.slice(1, 0, 2), w.slice(0, 0, 3), F::Conv2dFuncOptions().padding(1)),
                              F::conv2d(x.slice(1, 2, 4), w.slice(0, 3, 6), F::Conv2dFuncOptions().padding(1)),
                              F::conv2d(x.slice(1, 4, 6), w.slice(0, 6, 9), F::Conv2dFuncOptions().padding(1))},
                             1);
  EXPECT_TRUE(all_close(F::conv2d(x, w, F::Conv2dFuncOptions().padding(1).groups(3)), by_hand.to_vector<double>(), 1e-5, 1e-5));
  // The modules: weights [O, C/G, ...] (transposed: [C, O/G, ...]).
  nn::Conv2d conv(nn::Conv2dOptions(6, 9, 3).groups(3));
  EXPECT_EQ(conv->weight.sizes().vec(), (std::vector<int64_t>{9, 2, 3, 3}));
  EXPECT_EQ(conv->forward(x).sizes().vec(), (std::vector<int64_t>{2, 9, 5, 5}));
  nn::Conv1d conv1(nn::Conv1dOptions(4, 6, 3).groups(2));
  EXPECT_EQ(conv1->weight.sizes().vec(), (std::vector<int64_t>{6, 2, 3}));
  EXPECT_EQ(conv1->forward(input({2, 4, 9}, 13).to(loom::kFloat)).sizes().vec(), (std::vector<int64_t>{2, 6, 7}));
  // conv_transpose2d with groups against each group's own.
  const Tensor xt = input({1, 4, 3, 3}, 14).to(loom::kFloat), wt = input({4, 3, 2, 2}, 15).to(loom::kFloat);
  const auto to = F::ConvTranspose2dFuncOptions().stride(2);
  Tensor t_by_hand = loom::cat({F::conv_transpose2d(xt.slice(1, 0, 2), wt.slice(0, 0, 2), to),
                                F::conv_transpose2d(xt.slice(1, 2, 4), wt.slice(0, 2, 4), to)},
                               1);
  EXPECT_TRUE(all_close(F::conv_transpose2d(xt, wt, F::ConvTranspose2dFuncOptions().stride(2).groups(2)),
                        t_by_hand.to_vector<double>(), 1e-5, 1e-5));
  nn::ConvTranspose2d convt(nn::ConvTranspose2dOptions(4, 6, 2).groups(2));
  EXPECT_EQ(convt->weight.sizes().vec(), (std::vector<int64_t>{4, 3, 2, 2}));
  EXPECT_LOOM_ERROR(F::conv2d(x, w, F::Conv2dFuncOptions().groups(4)), "conv2d", "groups");
  EXPECT_LOOM_ERROR(F::conv2d(x, input({9, 3, 3, 3}, 16).to(loom::kFloat), F::Conv2dFuncOptions().groups(3)), "conv2d",
                    "in_channels / groups");
}

// A training step of a small conv net records the same graph every step:
// the second step compiles nothing.
TEST_P(ConvTest, AConvNetsStepCompilesOnce) {
  loom::manual_seed(3);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(3, 8, 3).padding(1)), nn::ReLU(),
                     nn::Conv2d(nn::Conv2dOptions(8, 8, 3).stride(2).padding(1).groups(2)), nn::Flatten(),
                     nn::Linear(8 * 4 * 4, 5));
  if (on_gpu()) net->to(loom::Device(loom::kCUDA));
  loom::optim::SGD opt(net->parameters(), loom::optim::SGDOptions(0.1).momentum(0.9));
  const Tensor x = input({4, 3, 8, 8}, 17).to(loom::kFloat);
  const Tensor target = loom::tensor(std::vector<int64_t>{0, 1, 2, 3});
  std::vector<double> losses;
  int64_t misses = 0;
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(net->forward(x), target);
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
    if (step == 1) misses = loom::metrics().cache_misses;
  }
  EXPECT_EQ(loom::metrics().cache_misses, misses);
  EXPECT_LT(losses.back(), losses.front());
}

LOOM_INSTANTIATE_BACKENDS(ConvTest);

}  // namespace
