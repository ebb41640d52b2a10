// RNN, LSTM, GRU and their cells against PyTorch's recurrences written out
// in float64; the layer options (layers, directions, batch_first) against
// the cells; float64 gradient checks; a sequence model's training step
// compiles once.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "test_util.h"

namespace {

namespace nn = loom::nn;
using loom::Tensor;
using loom_test::all_close;
using loom_test::gradcheck;
using loom_test::input;
using T = std::vector<Tensor>;
using V = std::vector<double>;

class RnnTest : public loom_test::BackendTest {};

double sig(double v) { return 1 / (1 + std::exp(-v)); }

// y = W x + b for W [rows, cols] row-major.
V affine(const V& w, const V& b, const V& x, size_t rows) {
  const size_t cols = x.size();
  V y(rows, 0);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) y[r] += w[r * cols + c] * x[c];
    if (!b.empty()) y[r] += b[r];
  }
  return y;
}

// One sample's sequence through a written-out cell: kind 0 RNN tanh, 1 LSTM, 2 GRU.
V reference(int kind, const std::vector<V>& xs, const V& wih, const V& whh, const V& bih, const V& bhh, size_t hid) {
  V h(hid, 0), c(hid, 0), out;
  const size_t g = kind == 1 ? 4 : kind == 2 ? 3 : 1;
  for (const V& x : xs) {
    const V a = affine(wih, bih, x, g * hid), b = affine(whh, bhh, h, g * hid);
    V h2(hid);
    for (size_t j = 0; j < hid; ++j) {
      if (kind == 0) {
        h2[j] = std::tanh(a[j] + b[j]);
      } else if (kind == 1) {
        const double i = sig(a[j] + b[j]), f = sig(a[hid + j] + b[hid + j]);
        const double gg = std::tanh(a[2 * hid + j] + b[2 * hid + j]), o = sig(a[3 * hid + j] + b[3 * hid + j]);
        c[j] = f * c[j] + i * gg;
        h2[j] = o * std::tanh(c[j]);
      } else {
        const double r = sig(a[j] + b[j]), z = sig(a[hid + j] + b[hid + j]);
        const double n = std::tanh(a[2 * hid + j] + r * b[2 * hid + j]);
        h2[j] = (1 - z) * n + z * h[j];
      }
    }
    h = h2;
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

template <class Layer>
V run_reference(int kind, Layer& layer, const Tensor& x, size_t hid) {
  const V xv = x.to_vector<double>();
  const int64_t steps = x.size(0), in = x.size(1);
  std::vector<V> xs;
  for (int64_t t = 0; t < steps; ++t) xs.emplace_back(xv.begin() + t * in, xv.begin() + (t + 1) * in);
  auto p = layer->named_parameters();
  return reference(kind, xs, p["weight_ih_l0"].template to_vector<double>(), p["weight_hh_l0"].template to_vector<double>(),
                   p["bias_ih_l0"].template to_vector<double>(), p["bias_hh_l0"].template to_vector<double>(), hid);
}

TEST_P(RnnTest, LayersFollowPyTorchsRecurrences) {
  loom::manual_seed(1);
  Tensor x = input({5, 3}, 41);  // unbatched: [T, I]
  nn::RNN rnn(nn::RNNOptions(3, 4));
  nn::LSTM lstm(nn::LSTMOptions(3, 4));
  nn::GRU gru(nn::GRUOptions(3, 4));
  rnn->to(loom::kDouble), lstm->to(loom::kDouble), gru->to(loom::kDouble);
  auto [ro, rh] = rnn(x);
  EXPECT_TRUE(all_close(ro, run_reference(0, rnn, x, 4), 1e-9, 1e-12));
  auto [lo, lstate] = lstm(x);
  const V lref = run_reference(1, lstm, x, 4);
  EXPECT_TRUE(all_close(lo, lref, 1e-9, 1e-12));
  EXPECT_TRUE(all_close(std::get<0>(lstate), V(lref.end() - 4, lref.end()), 1e-9, 1e-12));
  EXPECT_EQ(std::get<1>(lstate).sizes().vec(), (std::vector<int64_t>{1, 4}));
  auto [go, gh] = gru(x);
  EXPECT_TRUE(all_close(go, run_reference(2, gru, x, 4), 1e-9, 1e-12));
  EXPECT_EQ(lstm->named_parameters().keys(),
            (std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}));
}

// Two layers, both directions, batch_first: the same numbers as cells run
// by hand over each layer and direction with the layer's weights.
TEST_P(RnnTest, LayersDirectionsAndBatchFirstAgreeWithTheCells) {
  loom::manual_seed(2);
  nn::LSTM lstm(nn::LSTMOptions(3, 2).num_layers(2).bidirectional(true).batch_first(true));
  lstm->to(loom::kDouble);
  Tensor x = input({2, 4, 3}, 42);  // [N, T, I]
  auto [out, state] = lstm(x);
  ASSERT_EQ(out.sizes().vec(), (std::vector<int64_t>{2, 4, 4}));
  ASSERT_EQ(std::get<0>(state).sizes().vec(), (std::vector<int64_t>{4, 2, 2}));
  auto p = lstm->named_parameters();
  auto run_cell = [&](const Tensor& seq, const std::string& suffix, bool reverse) {  // seq [T, N, I]
    nn::LSTMCell cell(seq.size(2), 2);
    cell->to(loom::kDouble);
    {
      loom::NoGradGuard no_grad;
      cell->weight_ih.copy_(p["weight_ih" + suffix]);
      cell->weight_hh.copy_(p["weight_hh" + suffix]);
      cell->bias_ih.copy_(p["bias_ih" + suffix]);
      cell->bias_hh.copy_(p["bias_hh" + suffix]);
    }
    std::vector<Tensor> hs(4);
    std::tuple<Tensor, Tensor> hc{loom::zeros({2, 2}, loom::kDouble), loom::zeros({2, 2}, loom::kDouble)};
    for (int i = 0; i < 4; ++i) {
      const int t = reverse ? 3 - i : i;
      hc = cell(seq[t], hc);
      hs[t] = std::get<0>(hc);
    }
    return loom::stack(hs, 0);
  };
  Tensor seq = x.transpose(0, 1);
  Tensor l0 = loom::cat({run_cell(seq, "_l0", false), run_cell(seq, "_l0_reverse", true)}, 2);
  Tensor l1 = loom::cat({run_cell(l0, "_l1", false), run_cell(l0, "_l1_reverse", true)}, 2);
  EXPECT_TRUE(all_close(out, l1.transpose(0, 1).to_vector<double>(), 1e-9, 1e-12));
  EXPECT_LOOM_ERROR(lstm(input({2, 4, 5}, 1)), "LSTM", "input_size 3");
}

TEST_P(RnnTest, CellGradients) {
  loom::manual_seed(3);
  nn::GRUCell gru(3, 2);
  nn::LSTMCell lstm(3, 2);
  nn::RNNCell rnn(nn::RNNCellOptions(3, 2).nonlinearity(loom::kReLU));
  gru->to(loom::kDouble), lstm->to(loom::kDouble), rnn->to(loom::kDouble);
  EXPECT_TRUE(gradcheck([&](const T& v) { return gru(v[0], v[1]); }, {input({2, 3}, 51), input({2, 2}, 52)}));
  EXPECT_TRUE(gradcheck(
      [&](const T& v) {
        auto [h, c] = lstm(v[0], std::make_tuple(v[1], v[2]));
        return h + c;
      },
      {input({2, 3}, 53), input({2, 2}, 54), input({2, 2}, 55)}));
  EXPECT_TRUE(gradcheck([&](const T& v) { return rnn(v[0], v[1]); }, {input({2, 3}, 56), input({2, 2}, 57)}));
  // Through a whole GRU layer, to its input.
  nn::GRU layer(nn::GRUOptions(2, 2));
  layer->to(loom::kDouble);
  EXPECT_TRUE(gradcheck([&](const T& v) { return std::get<0>(layer(v[0])); }, {input({3, 1, 2}, 58)}));
}

LOOM_INSTANTIATE_BACKENDS(RnnTest);

// A sequence classifier's training step: one compile, then replays.
TEST(Rnn, ASequenceModelsTrainingStepCompilesOnce) {
  loom::manual_seed(5);
  nn::LSTM lstm(nn::LSTMOptions(4, 8).batch_first(true));
  nn::Linear head(8, 3);
  std::vector<Tensor> params = lstm->parameters();
  for (const Tensor& p : head->parameters()) params.push_back(p);
  loom::optim::Adam opt(params, loom::optim::AdamOptions(1e-2));
  Tensor x = loom::randn({16, 6, 4}), y = loom::randint(3, {16});
  const loom_test::TrainingRun run = loom_test::train_for(30, [&] {
    opt.zero_grad();
    auto [out, state] = lstm(x);
    auto loss = loom::cross_entropy_loss(head(std::get<0>(state)[0]), y);
    loss.backward();
    opt.step();
    return loss.item<float>();
  });
  EXPECT_EQ(run.compiles_after_two, 0);
  EXPECT_LT(run.losses.back(), run.losses.front() * 0.8);
}

}  // namespace
