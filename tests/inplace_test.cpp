// In-place ops: values, dtype casts, writes through views, and PyTorch's
// aliasing semantics under lazy recording (an expression recorded before an
// in-place write sees the old value; views see the new one).
#include <cmath>

#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::BackendTest;
using V = std::vector<double>;

class InplaceTest : public BackendTest {};

TEST_P(InplaceTest, ArithmeticInPlace) {
  Tensor t = loom::tensor({1.f, 2.f, 4.f});
  t.add_(1);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{2, 3, 5}));
  t.sub_(loom::tensor({1.f, 1.f, 1.f}), 2);  // t - 2 * 1
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 1, 3}));
  t.mul_(loom::tensor({5.f, 2.f, 2.f}));
  t.div_(2);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 1, 3}));
  t.pow_(2);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 1, 9}));
  t.pow_(loom::tensor({3.f, 3.f, 0.5f}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 1, 3}));
  t.add_(1).mul_(-1);  // chained: each returns the tensor itself
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{-1, -2, -4}));
  Tensor& same = (t += 1);
  EXPECT_TRUE(same.is_same(t));
  t -= loom::tensor({1.f, 1.f, 1.f});
  t *= 2;
  t /= loom::tensor({2.f, 2.f, 2.f});
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{-1, -2, -4}));
  Tensor i = loom::tensor({7, -7}, loom::kInt);
  i.add_(loom::tensor({1, 1}));
  i *= 3;
  EXPECT_EQ(i.dtype(), loom::kInt);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{24, -18}));
}

TEST_P(InplaceTest, UnaryInPlace) {
  const V x = {-2.5, -0.5, 0.25, 1.5, 2.5};
  auto check = [&](void (*op)(Tensor&), double (*ref)(double)) {
    Tensor t = loom::tensor(x, loom::kDouble);
    op(t);
    V want;
    for (double v : x) want.push_back(ref(v));
    return all_close(t, want, 1e-14);
  };
  EXPECT_TRUE(check([](Tensor& t) { t.neg_(); }, [](double v) { return -v; }));
  EXPECT_TRUE(check([](Tensor& t) { t.abs_(); }, [](double v) { return std::fabs(v); }));
  EXPECT_TRUE(check([](Tensor& t) { t.exp_(); }, [](double v) { return std::exp(v); }));
  EXPECT_TRUE(check([](Tensor& t) { t.abs_().log_(); }, [](double v) { return std::log(std::fabs(v)); }));
  EXPECT_TRUE(check([](Tensor& t) { t.abs_().sqrt_(); }, [](double v) { return std::sqrt(std::fabs(v)); }));
  EXPECT_TRUE(check([](Tensor& t) { t.tanh_(); }, [](double v) { return std::tanh(v); }));
  EXPECT_TRUE(check([](Tensor& t) { t.sigmoid_(); }, [](double v) { return 1 / (1 + std::exp(-v)); }));
  EXPECT_TRUE(check([](Tensor& t) { t.relu_(); }, [](double v) { return v > 0 ? v : 0; }));
  EXPECT_TRUE(check([](Tensor& t) { t.floor_(); }, [](double v) { return std::floor(v); }));
  EXPECT_TRUE(check([](Tensor& t) { t.round_(); }, [](double v) { return std::nearbyint(v); }));
  EXPECT_TRUE(check([](Tensor& t) { t.clamp_(-1, 1); }, [](double v) { return std::fmin(1.0, std::fmax(-1.0, v)); }));
  EXPECT_THROW(loom::tensor({true}).neg_(), loom::Error);
}

TEST_P(InplaceTest, CopyBroadcastsAndCasts) {
  Tensor dst = loom::zeros({2, 3}, loom::kInt);
  dst.copy_(loom::tensor({1.7, -2.7, 3.2}, loom::kDouble));
  EXPECT_EQ(dst.dtype(), loom::kInt);
  EXPECT_EQ(dst.to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 3, 1, -2, 3}));  // truncation toward zero
  Tensor b = loom::zeros({2}, loom::kBool);
  b.copy_(loom::tensor({0.5f, 0.f}));
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, false}));
  Tensor f = loom::zeros({3, 2});
  f.copy_(loom::tensor({1, 2, 3}).reshape({3, 1}));  // a column broadcast along the rows
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1, 1, 2, 2, 3, 3}));
  f.copy_(f);  // copying a tensor into itself changes nothing
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1, 1, 2, 2, 3, 3}));
  EXPECT_THROW(f.copy_(loom::ones({3})), loom::Error);     // [3] does not broadcast to [3, 2]
  EXPECT_THROW(f.copy_(loom::ones({2, 3, 2})), loom::Error);  // nor does a larger shape
}

TEST_P(InplaceTest, FillAndZero) {
  Tensor t = loom::ones({2, 3}, loom::kInt);
  t.fill_(2.7);  // truncated to the int dtype
  EXPECT_EQ(t.to_vector<int32_t>(), std::vector<int32_t>(6, 2));
  t.select(1, 1).zero_();
  EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{2, 0, 2, 2, 0, 2}));
  t.t().select(0, 2).fill_(-1);  // column 2 through a transposed view
  EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{2, 0, -1, 2, 0, -1}));
}

TEST_P(InplaceTest, WritesThroughSlicesSelectsAndTransposes) {
  Tensor m = loom::arange(12, loom::kFloat).reshape({3, 4});
  m.t().select(0, 1).add_(100);  // column 1
  m.slice(0, 0, 3, 2).mul_(-1);  // rows 0 and 2
  m.select(1, -1).copy_(loom::tensor({7.f, 8.f, 9.f}));
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{-0.f, -101, -2, 7, 4, 105, 6, 8, -8, -109, -10, 9}));
  Tensor block = m.slice(0, 1, 3).slice(1, 1, 3);
  block.sub_(block);  // reads and writes the same view
  EXPECT_EQ(m.sum().item<float>(), -101.f - 2 + 7 + 4 + 8 - 8 + 9);
}

// A view that covers its whole storage in order, in another shape (a bias
// gradient made [1, n] by a keepdim sum and seen as [n]): writing it
// replaces the storage's value without a scatter, and every view of the
// storage, the old shape's too, sees the new value; a later partial write
// through the old shape still lands where it should.
TEST_P(InplaceTest, WritingAWholeStorageThroughAReshapedViewNeedsNoScatter) {
  Tensor base = loom::zeros({1, 4}) + 1;  // a storage whose node is [1, 4]
  Tensor flat = base.view({4});
  loom::sync();
  const loom::Metrics m0 = loom::metrics();
  flat.add_(loom::tensor({1.f, 2.f, 3.f, 4.f}));
  loom::sync();
  // On the compiling backends: one add kernel (before: the add, then a
  // library scatter of the view into the storage).
  if (GetParam() != "reference") EXPECT_EQ(loom::metrics().kernels_launched - m0.kernels_launched, 1);
  EXPECT_EQ(base.to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(flat.to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  base.slice(1, 1, 3).mul_(10);
  EXPECT_EQ(flat.to_vector<float>(), (std::vector<float>{2, 30, 40, 5}));
  flat.zero_();
  EXPECT_EQ(base.sum().item<float>(), 0.f);
}

TEST_P(InplaceTest, ExpressionsRecordedBeforeAWriteSeeTheOldValue) {
  Tensor a = loom::tensor({1.f, 2.f});      // materialized
  Tensor b = a * 2;                         // recorded, not computed
  Tensor c = a.clone();
  Tensor alias = a;                         // the same tensor
  Tensor view = a.view({2, 1});             // a view: sees the write
  a.add_(1);
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{2, 4}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(alias.to_vector<float>(), (std::vector<float>{2, 3}));
  EXPECT_EQ(view.to_vector<float>(), (std::vector<float>{2, 3}));
  // The same when the written tensor is itself still pending.
  Tensor p = loom::ones({2}) * 5;
  Tensor q = p + 1;
  p.mul_(10);
  Tensor r = p + 1;
  EXPECT_EQ(q.to_vector<float>(), (std::vector<float>{6, 6}));
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{51, 51}));
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{50, 50}));
}

// A bias gradient (a column sum) and the momentum and parameter updates
// that read it are one row kernel (pass "vertical" over a reduction's rows),
// the updates written in place. Each row reads its old momentum and
// parameter once, before it writes them: found in a first version, whose
// parameter update read the momentum again after its row had written it.
// Columns: 10 (rows one at a time) and 200 (llvm: 64 rows side by side).
TEST_P(InplaceTest, UpdatesFromAColumnSumInPlaceReadEachOldValueOnce) {
  for (int64_t C : {10, 200}) {
    const int64_t R = 64;
    std::vector<double> xv(R * C), m(C), p(C);
    for (int64_t i = 0; i < R * C; ++i) xv[i] = static_cast<double>((i * 7) % 13) - 6;
    for (int64_t c = 0; c < C; ++c) m[c] = 0.5 * static_cast<double>(c % 5), p[c] = 1 - 0.25 * static_cast<double>(c % 7);
    Tensor x = loom::tensor(xv).reshape({R, C}).to(loom::kFloat);
    Tensor mt = loom::tensor(m).to(loom::kFloat), pt = loom::tensor(p).to(loom::kFloat);
    loom::sync();
    for (int s = 1; s <= 3; ++s) {
      mt.mul_(0.9).add_((x * s).sum({0}));
      pt.add_(mt, -0.1);
      loom::sync();
      for (int64_t c = 0; c < C; ++c) {
        double g = 0;
        for (int64_t r = 0; r < R; ++r) g += s * xv[r * C + c];
        m[c] = 0.9 * m[c] + g;
        p[c] -= 0.1 * m[c];
      }
    }
    EXPECT_TRUE(all_close(mt, m, 1e-5, 1e-4)) << C;
    EXPECT_TRUE(all_close(pt, p, 1e-5, 1e-4)) << C;
  }
}

TEST_P(InplaceTest, DataPtrIsStableAcrossInPlaceOps) {
  Tensor t = loom::tensor({1.f, 2.f, 3.f});
  float* p = t.data_ptr<float>();
  t.mul_(2);
  t.select(0, 0).fill_(9);
  EXPECT_EQ(t.data_ptr<float>(), p);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{9, 4, 6}));
  if (on_gpu()) return;  // the rest reads through the pointer: a device address there
  EXPECT_EQ(std::vector<float>(p, p + 3), (std::vector<float>{9, 4, 6}));
  Tensor computed = loom::ones({4}) + 1;
  float* q = computed.data_ptr<float>();
  computed.add_(1);
  loom::sync();
  EXPECT_EQ(q[3], 3.f);
  EXPECT_EQ(computed.select(0, 2).data_ptr<float>(), q + 2);
}

TEST_P(InplaceTest, WritingIntoAnExpandedViewRaises) {
  Tensor e = loom::zeros({1, 3}).expand({2, 3});
  EXPECT_THROW(e.add_(1), loom::Error);
  EXPECT_THROW(e.fill_(1), loom::Error);
  EXPECT_THROW(e.copy_(loom::ones({2, 3})), loom::Error);
  // An expand that repeats nothing (size 1 stays 1) can be written.
  Tensor base = loom::zeros({1, 3});
  base.expand({1, 3}).add_(2);
  EXPECT_EQ(base.to_vector<float>(), (std::vector<float>{2, 2, 2}));
}

// A graph cut (an automatic sync once max_pending_nodes ops are recorded)
// may land between computing an in-place op's value and writing it back.
TEST_P(InplaceTest, LongInPlaceLoopsAcrossGraphCuts) {
  const int64_t saved = loom::max_pending_nodes();
  for (int64_t bound : {int64_t{1}, int64_t{7}, int64_t{10000}}) {
    loom::set_max_pending_nodes(bound);
    Tensor t = loom::zeros({3}, loom::kDouble);
    Tensor v = t.select(0, 1);
    for (int k = 0; k < 50; ++k) {
      v.mul_(2).add_(1);  // v -> 2v + 1, then +1 for all of t
      t.add_(1);
    }
    double want = 0;
    for (int k = 0; k < 50; ++k) want = 2 * want + 1 + 1;
    EXPECT_EQ(t.to_vector<double>(), (V{50, want, 50})) << "max_pending_nodes " << bound;
    Tensor u = loom::tensor({1.f, 2.f});
    u.mul_(3);
    EXPECT_EQ(u.to_vector<float>(), (std::vector<float>{3, 6})) << "max_pending_nodes " << bound;
  }
  loom::set_max_pending_nodes(saved);
}

LOOM_INSTANTIATE_BACKENDS(InplaceTest);

}  // namespace
