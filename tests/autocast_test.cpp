// Autocast (loom/autocast.h): the guard's state, which dtype each op runs
// in inside a region (PyTorch's lists, api/src/autocast.cpp), gradients in
// the weights' float32, the cast cache, and a mixed-precision training run
// that follows the float32 one.
#include <cmath>

#include "test_util.h"

namespace {

namespace F = loom::nn::functional;
using loom::Tensor;
using loom_test::BackendTest;
using loom::autocast::AutocastMode;

class AutocastTest : public BackendTest {
 protected:
  loom::DeviceType device_type() const { return on_gpu() ? loom::kCUDA : loom::kCPU; }
};

TEST(AutocastState, GuardSetsAndRestores) {
  using namespace loom::autocast;
  EXPECT_FALSE(is_autocast_enabled(loom::kCPU));
  EXPECT_FALSE(is_autocast_enabled(loom::kCUDA));
  EXPECT_EQ(get_autocast_dtype(loom::kCUDA), loom::kHalf);  // PyTorch's defaults
  EXPECT_EQ(get_autocast_dtype(loom::kCPU), loom::kBFloat16);
  {
    AutocastMode outer(loom::kCUDA, loom::kBFloat16);
    EXPECT_TRUE(is_autocast_enabled(loom::kCUDA));
    EXPECT_FALSE(is_autocast_enabled(loom::kCPU));
    EXPECT_EQ(get_autocast_dtype(loom::kCUDA), loom::kBFloat16);
    {
      AutocastMode inner(loom::kCUDA, std::nullopt, /*enabled=*/false);
      EXPECT_FALSE(is_autocast_enabled(loom::kCUDA));
      EXPECT_EQ(get_autocast_dtype(loom::kCUDA), loom::kBFloat16);
    }
    EXPECT_TRUE(is_autocast_enabled(loom::kCUDA));
  }
  EXPECT_FALSE(is_autocast_enabled(loom::kCUDA));
  EXPECT_EQ(get_autocast_dtype(loom::kCUDA), loom::kHalf);
}

TEST(AutocastState, OnlyReducedFloatingDtypes) {
  EXPECT_LOOM_ERROR(loom::autocast::set_autocast_dtype(loom::kCPU, loom::kFloat), "autocast", "BFloat16 or Half");
  EXPECT_LOOM_ERROR(AutocastMode(loom::kCUDA, loom::kInt), "autocast", "BFloat16 or Half");
  EXPECT_FALSE(loom::autocast::is_autocast_enabled(loom::kCUDA));  // the failed guard changed nothing
}

TEST_P(AutocastTest, ProductsRunInTheRegionsDtype) {
  for (loom::ScalarType low : {loom::kBFloat16, loom::kHalf}) {
    const Tensor a = loom::randn({4, 8}), b = loom::randn({8, 3}), bias = loom::randn({3});
    const Tensor a3 = loom::randn({2, 4, 8}), b3 = loom::randn({2, 8, 3});
    const Tensor img = loom::randn({1, 2, 5, 5}), kernel = loom::randn({3, 2, 3, 3});
    const Tensor q = loom::randn({1, 2, 4, 8});
    AutocastMode amp(device_type(), low);
    EXPECT_EQ(a.matmul(b).dtype(), low);
    EXPECT_EQ(loom::mm(a, b).dtype(), low);
    EXPECT_EQ(loom::bmm(a3, b3).dtype(), low);
    EXPECT_EQ(loom::baddbmm(loom::zeros({2, 4, 3}), a3, b3).dtype(), low);
    EXPECT_EQ(loom::addmm(bias, a, b).dtype(), low);
    EXPECT_EQ(F::linear(a, b.t(), bias).dtype(), low);
    EXPECT_EQ(loom::einsum("ij,jk->ik", {a, b}).dtype(), low);
    EXPECT_EQ(F::conv2d(img, kernel).dtype(), low);
    EXPECT_EQ(loom::scaled_dot_product_attention(q, q, q, {}, 0.0, true).dtype(), low);
    // The value is the product of the rounded operands, accumulated in float32.
    const Tensor want = a.to(low).to(loom::kFloat).matmul(b.to(low).to(loom::kFloat));
    EXPECT_TRUE(loom_test::all_close(a.matmul(b).to(loom::kFloat), want.to_vector<double>(), 1.0 / 128, 1e-2));
  }
}

TEST_P(AutocastTest, Float32ListRunsInFloat32) {
  const Tensor x = loom::randn({4, 6}).to(loom::kBFloat16), target = loom::randint(0, 6, {4});
  AutocastMode amp(device_type(), loom::kBFloat16);
  EXPECT_EQ(x.softmax(-1).dtype(), loom::kFloat);
  EXPECT_EQ(x.log_softmax(-1).dtype(), loom::kFloat);
  EXPECT_EQ(x.softmax(-1, loom::kBFloat16).dtype(), loom::kBFloat16);  // an explicit dtype wins, as in PyTorch
  EXPECT_EQ(x.logsumexp({1}).dtype(), loom::kFloat);
  EXPECT_EQ(F::layer_norm(x, F::LayerNormFuncOptions({6})).dtype(), loom::kFloat);
  EXPECT_EQ(F::cross_entropy(x, target).dtype(), loom::kFloat);
  EXPECT_EQ(F::mse_loss(x, x).dtype(), loom::kFloat);
  EXPECT_EQ(x.exp().dtype(), loom::kFloat);
  EXPECT_EQ(x.log().dtype(), loom::kFloat);
  EXPECT_EQ(x.rsqrt().dtype(), loom::kFloat);
  EXPECT_EQ(x.pow(3).dtype(), loom::kFloat);
  EXPECT_EQ(x.sum().dtype(), loom::kFloat);
  EXPECT_EQ(x.cumsum(1).dtype(), loom::kFloat);
}

TEST_P(AutocastTest, OtherOpsAndDtypesAreLeftAlone) {
  const Tensor x = loom::randn({4, 4}).to(loom::kBFloat16), d = loom::randn({4, 4}, loom::kDouble);
  const Tensor i = loom::randint(0, 5, {4, 4});
  AutocastMode amp(device_type(), loom::kBFloat16);
  EXPECT_EQ(x.relu().dtype(), loom::kBFloat16);
  EXPECT_EQ(F::gelu(x).dtype(), loom::kBFloat16);
  EXPECT_EQ(x.add(x).dtype(), loom::kBFloat16);
  EXPECT_EQ(d.matmul(d).dtype(), loom::kDouble);  // float64 is never narrowed
  EXPECT_EQ(i.matmul(i).dtype(), loom::kLong);
  EXPECT_EQ(loom::randn({2, 2}).matmul(x.slice(0, 0, 2).slice(1, 0, 2)).dtype(), loom::kBFloat16);
}

TEST_P(AutocastTest, OtherDevicesRegionDoesNotApply) {
  const Tensor a = loom::randn({3, 3});
  AutocastMode amp(on_gpu() ? loom::kCPU : loom::kCUDA, loom::kBFloat16);
  EXPECT_EQ(a.matmul(a).dtype(), loom::kFloat);
}

// A two-layer model, its loss under autocast (or not) and its gradients.
struct Mlp {
  loom::nn::Linear l1{16, 32}, l2{32, 5};
  Tensor loss(const Tensor& x, const Tensor& y) { return F::cross_entropy(l2(loom::tanh(l1(x))), y); }
  std::vector<Tensor> grads() {
    return {l1->weight.grad(), l1->bias.grad(), l2->weight.grad(), l2->bias.grad()};
  }
};

TEST_P(AutocastTest, GradientsArriveInFloat32NearTheFloat32Run) {
  loom::manual_seed(3);
  Mlp m;
  const Tensor x = loom::randn({8, 16}), y = loom::randint(0, 5, {8});
  Tensor ref_loss = m.loss(x, y);
  ref_loss.backward();
  std::vector<Tensor> ref;
  for (const Tensor& g : m.grads()) ref.push_back(g.clone());
  m.l1->zero_grad();
  m.l2->zero_grad();
  Tensor loss;
  {
    AutocastMode amp(device_type(), loom::kBFloat16);
    loss = m.loss(x, y);
  }
  EXPECT_EQ(loss.dtype(), loom::kFloat);
  loss.backward();
  const std::vector<Tensor> got = m.grads();
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].dtype(), loom::kFloat) << k;
    // bfloat16 products (8 significant bits) through two layers: a few
    // percent of the gradient's largest entry.
    const double scale = ref[k].abs().max().item<double>();
    EXPECT_TRUE(loom_test::all_close(got[k], ref[k].to_vector<double>(), 0.0, 0.05 * scale)) << k;
  }
  EXPECT_NEAR(loss.item<double>(), ref_loss.item<double>(), 0.02 * std::abs(ref_loss.item<double>()));
}

TEST_P(AutocastTest, BackwardInsideTheRegionCastsNothing) {
  loom::manual_seed(4);
  Mlp m;
  const Tensor x = loom::randn({8, 16}), y = loom::randint(0, 5, {8});
  Tensor outside;
  {
    AutocastMode amp(device_type(), loom::kBFloat16);
    outside = m.loss(x, y);
  }
  outside.backward();
  const Tensor g_outside = m.l1->weight.grad().clone();
  m.l1->zero_grad();
  m.l2->zero_grad();
  {
    AutocastMode amp(device_type(), loom::kBFloat16);
    m.loss(x, y).backward();
  }
  EXPECT_TRUE(loom_test::all_close(m.l1->weight.grad(), g_outside.to_vector<double>(), 0.0, 0.0));
}

TEST_P(AutocastTest, CachedCastSeesInPlaceWrites) {
  Tensor w = loom::randn({4, 4}).requires_grad_();
  const Tensor x = loom::randn({2, 4});
  AutocastMode amp(device_type(), loom::kBFloat16);
  const Tensor first = x.matmul(w).to(loom::kFloat);
  {
    loom::NoGradGuard no_grad;
    w.mul_(2);  // an optimizer step inside the region
  }
  const Tensor second = x.matmul(w).to(loom::kFloat);
  EXPECT_TRUE(loom_test::all_close(second, first.mul(2).to_vector<double>(), 1.0 / 64, 1e-2));
}

// 20 AdamW steps on a fixed batch: the mixed-precision run's loss stays
// within 2% of the float32 run's at every step.
TEST_P(AutocastTest, TrainingFollowsTheFloat32Run) {
  auto run = [&](bool amp_on) {
    loom::manual_seed(11);
    Mlp m;
    loom::manual_seed(12);
    const Tensor x = loom::randn({32, 16}), y = loom::randint(0, 5, {32});
    std::vector<Tensor> params = {m.l1->weight, m.l1->bias, m.l2->weight, m.l2->bias};
    loom::optim::AdamW opt(params, loom::optim::AdamWOptions(1e-2));
    std::vector<double> losses;
    for (int step = 0; step < 20; ++step) {
      opt.zero_grad();
      Tensor loss;
      {
        AutocastMode amp(device_type(), loom::kBFloat16, amp_on);
        loss = m.loss(x, y);
      }
      loss.backward();
      opt.step();
      losses.push_back(loss.item<double>());
    }
    return losses;
  };
  const std::vector<double> f32 = run(false), mixed = run(true);
  EXPECT_LT(f32.back(), 0.7 * f32.front());  // it learns
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_NEAR(mixed[i], f32[i], 0.02 * f32[i]) << "step " << i;
}

LOOM_INSTANTIATE_BACKENDS(AutocastTest);

}  // namespace
