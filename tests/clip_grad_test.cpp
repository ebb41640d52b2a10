// Gradient clipping (loom/nn/utils.h): clip_grad_norm_ and its two halves,
// get_total_norm and clip_grads_with_norm_, against norms computed here.
#include <cmath>
#include <limits>

#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::BackendTest;
namespace utils = loom::nn::utils;

class ClipGradTest : public BackendTest {};

// Two parameters with known gradients: a [2, 2] and a [3].
struct Params {
  Tensor a = loom::zeros({2, 2}).requires_grad_(), b = loom::zeros({3}).requires_grad_();
  std::vector<double> ga = {3, -4, 0, 12}, gb = {-1, 2, 2};
  Params() {
    a.mutable_grad() = loom::tensor(ga).to(loom::kFloat).view({2, 2}).to(a.device());
    b.mutable_grad() = loom::tensor(gb).to(loom::kFloat).to(b.device());
  }
  double norm(double p) const {
    double acc = 0, mx = 0;
    for (const auto* v : {&ga, &gb})
      for (double x : *v) acc += p == 0 ? (x != 0) : std::pow(std::abs(x), p), mx = std::max(mx, std::abs(x));
    return std::isinf(p) ? mx : p == 0 ? acc : std::pow(acc, 1 / p);
  }
};

TEST_P(ClipGradTest, TotalNormOfEveryOrder) {
  Params p;
  for (double order : {2.0, 1.0, 3.0, 0.0, std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE(order);
    const Tensor total = utils::get_total_norm({p.a.grad(), p.b.grad()}, order);
    EXPECT_EQ(total.dim(), 0);
    EXPECT_EQ(total.dtype(), loom::kFloat);
    EXPECT_NEAR(total.item<double>(), p.norm(order), 1e-5 * p.norm(order));
  }
}

TEST_P(ClipGradTest, ClipScalesOnlyDownAndTheHalvesAgree) {
  Params p, q;
  const double n = p.norm(2);  // 13.6...
  EXPECT_NEAR(utils::clip_grad_norm_({p.a, p.b}, 1.0), n, 1e-4);
  const Tensor total = utils::get_total_norm({q.a.grad(), q.b.grad()});
  utils::clip_grads_with_norm_({q.a, q.b}, 1.0, total);
  std::vector<double> want;
  for (double x : p.ga) want.push_back(x / (n + 1e-6));
  EXPECT_TRUE(loom_test::all_close(p.a.grad(), want, 1e-5, 1e-7));
  EXPECT_TRUE(loom_test::all_close(q.a.grad(), want, 1e-5, 1e-7));
  // A norm below max_norm leaves the gradients as they are.
  Params r;
  utils::clip_grad_norm_({r.a, r.b}, 100.0);
  EXPECT_TRUE(loom_test::all_close(r.b.grad(), r.gb, 0, 0));
}

TEST_P(ClipGradTest, NonFiniteNormIsAnErrorWhenAskedFor) {
  Params p;
  p.b.mutable_grad() = loom::tensor(std::vector<double>{1, NAN, 2}).to(loom::kFloat).to(p.b.device());
  EXPECT_LOOM_ERROR(utils::clip_grad_norm_({p.a, p.b}, 1.0, 2.0, true), "clip_grad_norm_", "non-finite");
  EXPECT_TRUE(std::isnan(utils::get_total_norm({p.a.grad(), p.b.grad()}).item<double>()));
}

LOOM_INSTANTIATE_BACKENDS(ClipGradTest);

}  // namespace
