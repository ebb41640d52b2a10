// Bad input fails where it was written: every record-time error names the op
// and this file's line of the call. A failed materialization raises too, and
// leaves the executable cache and every other tensor usable.
#include <functional>
#include <string>

#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::BackendTest;

// Runs `stmt` (one line) and checks that it throws a loom::Error whose
// message names `op` and "errors_test.cpp:<this line>".
#define EXPECT_ERROR_AT_THIS_LINE(stmt, op) expect_error([&] { (void)(stmt); }, op, __LINE__)

void expect_error(const std::function<void()>& f, const std::string& op, int line) {
  const std::string where = "errors_test.cpp:" + std::to_string(line);
  try {
    f();
    ADD_FAILURE_AT(__FILE__, line) << "no loom::Error was thrown";
  } catch (const loom::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(op), std::string::npos) << "op '" << op << "' missing from: " << msg;
    EXPECT_NE(msg.find(where), std::string::npos) << where << " missing from: " << msg;
  }
}

class ErrorsTest : public BackendTest {
 protected:
  Tensor a = loom::ones({2, 3});
  Tensor b = loom::ones({4});
  Tensor i = loom::tensor({1, 2, 3});
};

TEST_P(ErrorsTest, ShapesThatDoNotBroadcast) {
  EXPECT_ERROR_AT_THIS_LINE(a + b, "add");
  EXPECT_ERROR_AT_THIS_LINE(a - b, "sub");
  EXPECT_ERROR_AT_THIS_LINE(loom::mul(a, b), "mul");
  EXPECT_ERROR_AT_THIS_LINE(a / b, "div");
  EXPECT_ERROR_AT_THIS_LINE(a < b, "lt");
  EXPECT_ERROR_AT_THIS_LINE(loom::maximum(a, b), "maximum");
  EXPECT_ERROR_AT_THIS_LINE(loom::where(a > 0, a, b), "where");
  EXPECT_ERROR_AT_THIS_LINE(a.add_(b), "add");
  EXPECT_ERROR_AT_THIS_LINE(a.copy_(b), "copy_");
  EXPECT_ERROR_AT_THIS_LINE(a.view({4}), "view");
  EXPECT_ERROR_AT_THIS_LINE(a.reshape({-1, 4}), "reshape");
  EXPECT_ERROR_AT_THIS_LINE(a.expand({3, 3}), "expand");
  // The message names both shapes.
  try {
    (void)(a * b);
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4]"), std::string::npos) << e.what();
  }
}

TEST_P(ErrorsTest, DimsOutOfRange) {
  EXPECT_ERROR_AT_THIS_LINE(a.sum(2), "sum");
  EXPECT_ERROR_AT_THIS_LINE(a.mean({-3}), "mean");
  EXPECT_ERROR_AT_THIS_LINE(a.max(5), "max");
  EXPECT_ERROR_AT_THIS_LINE(a.argmin(2), "argmin");
  EXPECT_ERROR_AT_THIS_LINE(a.logsumexp({3}), "logsumexp");
  EXPECT_ERROR_AT_THIS_LINE(a.transpose(0, 2), "transpose");
  EXPECT_ERROR_AT_THIS_LINE(a.permute({0, 0}), "permute");
  EXPECT_ERROR_AT_THIS_LINE(a.select(2, 0), "select");
  EXPECT_ERROR_AT_THIS_LINE(a.select(1, 3), "select");
  EXPECT_ERROR_AT_THIS_LINE(a.unsqueeze(3), "unsqueeze");
  EXPECT_ERROR_AT_THIS_LINE(a.squeeze(-3), "squeeze");
  EXPECT_ERROR_AT_THIS_LINE(a.flatten(1, 0), "flatten");
  EXPECT_ERROR_AT_THIS_LINE(a.narrow(1, 2, 2), "narrow");
  EXPECT_ERROR_AT_THIS_LINE(a.chunk(0), "chunk");
  EXPECT_ERROR_AT_THIS_LINE(a.sum({1, -1}), "sum");
}

TEST_P(ErrorsTest, WrongDtypes) {
  EXPECT_ERROR_AT_THIS_LINE(loom::randn({2}, loom::kLong), "randn");
  EXPECT_ERROR_AT_THIS_LINE(i.mean(), "mean");
  EXPECT_ERROR_AT_THIS_LINE(i.var(), "var");
  EXPECT_ERROR_AT_THIS_LINE(i.norm(), "norm");
  EXPECT_ERROR_AT_THIS_LINE(loom::gelu(i), "gelu");
  EXPECT_ERROR_AT_THIS_LINE(loom::where(i, a, a), "where");
  EXPECT_ERROR_AT_THIS_LINE(loom::neg(i > 1), "neg");
  EXPECT_ERROR_AT_THIS_LINE((i > 1) - (i > 2), "sub");
  EXPECT_ERROR_AT_THIS_LINE(loom::pow(i, -2), "pow");
  EXPECT_ERROR_AT_THIS_LINE(i.add_(0.5), "add_");
  EXPECT_ERROR_AT_THIS_LINE(i.data_ptr<float>(), "data_ptr");
  EXPECT_ERROR_AT_THIS_LINE((i > 1).argmax(), "argmax");
}

TEST_P(ErrorsTest, MixingDevicesFailsAtRecordTime) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU here: " << loom::cuda::unavailable_reason();
  Tensor c = loom::ones({2, 3}, loom::kCUDA);
  Tensor h = loom::ones({2, 3}, loom::kCPU);
  EXPECT_TRUE(c.is_cuda());
  EXPECT_EQ((c * 2).device(), loom::Device(loom::kCUDA, 0));
  EXPECT_ERROR_AT_THIS_LINE(c + h, "add");
  EXPECT_ERROR_AT_THIS_LINE(h * c, "mul");
  EXPECT_ERROR_AT_THIS_LINE(loom::maximum(h, c), "maximum");
  EXPECT_ERROR_AT_THIS_LINE(loom::where(h > 0, c, h), "where");
  EXPECT_ERROR_AT_THIS_LINE(c.eq(h), "eq");
}

TEST_P(ErrorsTest, UndefinedTensors) {
  Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_ERROR_AT_THIS_LINE(u + a, "add");
  EXPECT_ERROR_AT_THIS_LINE(a * u, "mul");
  EXPECT_ERROR_AT_THIS_LINE(2 - u, "sub");
  EXPECT_ERROR_AT_THIS_LINE(loom::exp(u), "exp");
  EXPECT_ERROR_AT_THIS_LINE(u.sum(), "sum");
  EXPECT_ERROR_AT_THIS_LINE(u.view({1}), "view");
  EXPECT_ERROR_AT_THIS_LINE(u.item<float>(), "item");
  EXPECT_ERROR_AT_THIS_LINE(a.copy_(u), "copy_");
  EXPECT_ERROR_AT_THIS_LINE(u.fill_(1), "fill_");
  EXPECT_ERROR_AT_THIS_LINE(loom::zeros_like(u), "zeros_like");
}

TEST_P(ErrorsTest, ItemOfManyElements) {
  EXPECT_ERROR_AT_THIS_LINE(a.item<float>(), "item");
  EXPECT_ERROR_AT_THIS_LINE(a.item(), "item");
  EXPECT_ERROR_AT_THIS_LINE(loom::zeros({0}).item<float>(), "item");
  EXPECT_EQ(a.sum().item<float>(), 6.f);
}

TEST_P(ErrorsTest, AFailedMaterializationLeavesEverythingElseUsable) {
  Tensor x = loom::tensor({6, 7});
  Tensor ok = x * 2;
  EXPECT_EQ(ok.to_vector<int64_t>(), (std::vector<int64_t>{12, 14}));
  const int64_t* ok_data = ok.data_ptr<int64_t>();

  const int bad_line = __LINE__ + 1;
  Tensor bad = x % loom::tensor({0, 1});
  try {
    bad.to_vector<int64_t>();
    ADD_FAILURE() << "integer remainder by zero did not raise";
  } catch (const loom::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("remainder"), std::string::npos) << msg;
    EXPECT_NE(msg.find("errors_test.cpp:" + std::to_string(bad_line)), std::string::npos) << msg;
  }
  EXPECT_THROW(bad.to_vector<int64_t>(), loom::Error);  // it keeps failing when read again

  // Tensors computed before are intact, in place.
  EXPECT_EQ(x.to_vector<int64_t>(), (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(ok.data_ptr<int64_t>(), ok_data);
  EXPECT_EQ(ok.to_vector<int64_t>(), (std::vector<int64_t>{12, 14}));
  // The same graph with good data runs from the executable cache.
  const auto hits = loom::metrics().cache_hits;
  Tensor good = x % loom::tensor({4, 5});
  EXPECT_EQ(good.to_vector<int64_t>(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(loom::metrics().cache_hits, hits + 1);
  EXPECT_EQ((x + 1).sum().item<int64_t>(), 15);
}

// Values pending in the same sync as a failing one, but not computed from
// it, are not lost: they compute on their next read.
TEST_P(ErrorsTest, AFailedSyncDoesNotPoisonUnrelatedPendingTensors) {
  Tensor w = loom::tensor({1.f, 2.f});
  Tensor unrelated = loom::ones({3}) * 2;  // pending
  w.add_(1);                               // a pending write to a materialized tensor
  Tensor bad = loom::tensor({1}) % loom::tensor({0});
  EXPECT_THROW(bad.item<int64_t>(), loom::Error);
  std::vector<float> u, v;
  EXPECT_NO_THROW(u = unrelated.to_vector<float>());
  EXPECT_EQ(u, (std::vector<float>{2, 2, 2}));
  EXPECT_NO_THROW(v = w.to_vector<float>());
  EXPECT_EQ(v, (std::vector<float>{2, 3}));
}

// A training step with a label out of range: the step's error and every
// later one it leads to (the weight's update was computed from it) name the
// caller's line, never a line of loom's gradient rules, whose ops record
// the forward op's line (detail::RecordAt).
TEST_P(ErrorsTest, ABadLabelNamesTheCallersLineInTheBackwardGraphToo) {
  namespace F = loom::nn::functional;
  Tensor x = loom::randn({3, 8});
  Tensor y = loom::tensor(std::vector<int64_t>{0, 9, 1});
  loom::nn::Linear model(8, 4);
  model->to(x.device());
  loom::optim::SGD opt(model->parameters(), loom::optim::SGDOptions(0.1).momentum(0.9));
  const std::string here = "errors_test.cpp:" + std::to_string(__LINE__ + 4);
  const std::string first = loom_test::error_of([&] {
    opt.zero_grad();
    {
      Tensor loss = F::cross_entropy(model->forward(x), y);
      loss.backward();
    }
    opt.step();
    wait_for_device();
  });
  EXPECT_NE(first.find("out of bounds"), std::string::npos) << first;
  EXPECT_NE(first.find(here), std::string::npos) << first;
  const std::string second = loom_test::error_of([&] { model->weight.sum().item<float>(); });
  EXPECT_NE(second.find("out of bounds"), std::string::npos) << second;
  EXPECT_NE(second.find(here), std::string::npos) << second;
  EXPECT_EQ(second.find("rules_"), std::string::npos) << second;
}

LOOM_INSTANTIATE_BACKENDS(ErrorsTest);

}  // namespace
