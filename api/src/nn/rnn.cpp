// loom/nn/rnn.h: one step of each recurrence (shared by the layers and the
// cells), and the walk over layers, directions and time.
#include <loom/autograd.h>
#include <loom/functions.h>
#include <loom/nn/functional.h>
#include <loom/nn/init.h>
#include <loom/nn/rnn.h>

#include <cmath>

#include "api/src/record.h"

namespace loom::nn {

namespace {

using Mode = RNNImplBase::Mode;
using detail::describe;

int64_t gates_of(Mode m) { return m == Mode::LSTM ? 4 : m == Mode::GRU ? 3 : 1; }

Tensor gate(const Tensor& g, int64_t k, int64_t h, const SourceLoc& loc) { return g.slice(-1, k * h, (k + 1) * h, 1, loc); }

// One step. xw: the input's product with weight_ih plus bias_ih; h, c: the
// state ([N, H]). Returns the new h (and c for an LSTM).
std::pair<Tensor, Tensor> step(Mode mode, const Tensor& xw, const Tensor& h, const Tensor& c, const Tensor& w_hh,
                               const Tensor& b_hh, int64_t hidden, const SourceLoc& loc) {
  Tensor hw = loom::matmul(h, w_hh.t(loc), loc);
  if (b_hh.defined()) hw = hw.add(b_hh, 1, loc);
  switch (mode) {
    case Mode::RNN_TANH: return {loom::tanh(xw.add(hw, 1, loc), loc), Tensor()};
    case Mode::RNN_RELU: return {loom::relu(xw.add(hw, 1, loc), loc), Tensor()};
    case Mode::LSTM: {
      const Tensor g = xw.add(hw, 1, loc);
      const Tensor i = loom::sigmoid(gate(g, 0, hidden, loc), loc), f = loom::sigmoid(gate(g, 1, hidden, loc), loc);
      const Tensor cell = loom::tanh(gate(g, 2, hidden, loc), loc), o = loom::sigmoid(gate(g, 3, hidden, loc), loc);
      const Tensor c2 = f.mul(c, loc).add(i.mul(cell, loc), 1, loc);
      return {o.mul(loom::tanh(c2, loc), loc), c2};
    }
    case Mode::GRU: {
      const Tensor r = loom::sigmoid(gate(xw, 0, hidden, loc).add(gate(hw, 0, hidden, loc), 1, loc), loc);
      const Tensor z = loom::sigmoid(gate(xw, 1, hidden, loc).add(gate(hw, 1, hidden, loc), 1, loc), loc);
      const Tensor n = loom::tanh(gate(xw, 2, hidden, loc).add(r.mul(gate(hw, 2, hidden, loc), loc), 1, loc), loc);
      // (1 - z) n + z h
      return {n.add(z.mul(h.sub(n, 1, loc), loc), 1, loc), Tensor()};
    }
  }
  throw Error("rnn: no step for this mode");
}

Tensor input_product(const Tensor& x, const Tensor& w_ih, const Tensor& b_ih, const SourceLoc& loc) {
  Tensor xw = loom::matmul(x, w_ih.t(loc), loc);
  return b_ih.defined() ? xw.add(b_ih, 1, loc) : xw;
}

Mode rnn_mode(Nonlinearity n) {
  if (n == kTanh) return Mode::RNN_TANH;
  if (n == kReLU) return Mode::RNN_RELU;
  throw Error("RNN: nonlinearity must be kTanh or kReLU");
}

}  // namespace

// ---------------------------------------------------------------- layers
RNNImplBase::RNNImplBase(Mode mode, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias,
                         bool batch_first, double dropout, bool bidirectional)
    : mode_(mode), input_size_(input_size), hidden_size_(hidden_size), num_layers_(num_layers), bias_(bias),
      batch_first_(batch_first), bidirectional_(bidirectional), dropout_(dropout) {
  const SourceLoc loc = SourceLoc::current();
  LOOM_CHECK(input_size > 0 && hidden_size > 0 && num_layers > 0, "RNN", loc,
             "input_size, hidden_size and num_layers must be positive, got ", input_size, ", ", hidden_size, ", ",
             num_layers);
  LOOM_CHECK(dropout >= 0 && dropout <= 1, "RNN", loc, "dropout must be in [0, 1], got ", dropout);
  const int64_t g = gates_of(mode) * hidden_size, dirs = bidirectional ? 2 : 1;
  for (int64_t l = 0; l < num_layers; ++l)
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string suffix = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      const int64_t in = l == 0 ? input_size : hidden_size * dirs;
      std::vector<Tensor> w;
      w.push_back(register_parameter("weight_ih" + suffix, loom::empty({g, in})));
      w.push_back(register_parameter("weight_hh" + suffix, loom::empty({g, hidden_size})));
      if (bias) {
        w.push_back(register_parameter("bias_ih" + suffix, loom::empty({g})));
        w.push_back(register_parameter("bias_hh" + suffix, loom::empty({g})));
      } else {
        w.push_back(Tensor());
        w.push_back(Tensor());
      }
      flat_.push_back(w);
    }
  reset_parameters();
}

void RNNImplBase::reset_parameters() {
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden_size_));
  for (const std::vector<Tensor>& w : flat_)
    for (const Tensor& t : w)
      if (t.defined()) init::uniform_(t, -k, k);
}

std::vector<Tensor> RNNImplBase::all_weights() const {
  std::vector<Tensor> all;
  for (const std::vector<Tensor>& w : flat_)
    for (const Tensor& t : w)
      if (t.defined()) all.push_back(t);
  return all;
}

std::tuple<Tensor, Tensor, Tensor> RNNImplBase::run(const Tensor& input, Tensor h0, Tensor c0, const SourceLoc& loc) {
  const char* op = mode_ == Mode::LSTM ? "LSTM" : mode_ == Mode::GRU ? "GRU" : "RNN";
  detail::impl_of(input, op, loc);
  LOOM_CHECK(input.dim() == 2 || input.dim() == 3, op, loc, "expected a 2-D (unbatched) or 3-D input, got ",
             describe(input));
  const bool batched = input.dim() == 3;
  Tensor x = batched ? (batch_first_ ? input.transpose(0, 1, loc) : input) : input.unsqueeze(1, loc);  // [T, N, I]
  LOOM_CHECK(x.size(2) == input_size_, op, loc, "expected input_size ", input_size_, ", got ", describe(input));
  const int64_t steps = x.size(0), n = x.size(1), dirs = bidirectional_ ? 2 : 1, hid = hidden_size_;
  const auto state_shape = std::vector<int64_t>{num_layers_ * dirs, n, hid};
  auto initial = [&](Tensor s, const char* what) {
    if (!s.defined()) return loom::zeros(state_shape, TensorOptions(x.dtype()).device(x.device()), loc);
    Tensor t = batched ? s : s.unsqueeze(1, loc);
    LOOM_CHECK(t.sizes().vec() == state_shape, op, loc, "expected ", what, " of shape ", IntArrayRef(state_shape),
               ", got ", describe(s));
    return t;
  };
  h0 = initial(h0, "hx");
  if (mode_ == Mode::LSTM) c0 = initial(c0, "cx");
  std::vector<Tensor> h_n, c_n;
  Tensor layer_input = x;
  for (int64_t l = 0; l < num_layers_; ++l) {
    std::vector<Tensor> outputs;
    for (int64_t d = 0; d < dirs; ++d) {
      const std::vector<Tensor>& w = flat_[static_cast<size_t>(l * dirs + d)];
      const Tensor xw = input_product(layer_input, w[0], w[2], loc);  // [T, N, G H]: one product for every step
      Tensor h = h0.select(0, l * dirs + d, loc), c = mode_ == Mode::LSTM ? c0.select(0, l * dirs + d, loc) : Tensor();
      std::vector<Tensor> hs(static_cast<size_t>(steps));
      for (int64_t i = 0; i < steps; ++i) {
        const int64_t t = d == 0 ? i : steps - 1 - i;
        auto [h2, c2] = step(mode_, xw.select(0, t, loc), h, c, w[1], w[3], hid, loc);
        h = h2, c = c2;
        hs[static_cast<size_t>(t)] = h;
      }
      outputs.push_back(loom::stack(hs, 0, loc));
      h_n.push_back(h);
      if (mode_ == Mode::LSTM) c_n.push_back(c);
    }
    layer_input = dirs == 1 ? outputs[0] : loom::cat(outputs, 2, loc);
    if (dropout_ > 0 && is_training() && l + 1 < num_layers_)
      layer_input = functional::dropout(layer_input, functional::DropoutFuncOptions().p(dropout_), loc);
  }
  Tensor out = layer_input, hn = loom::stack(h_n, 0, loc), cn = c_n.empty() ? Tensor() : loom::stack(c_n, 0, loc);
  if (!batched) {
    out = out.squeeze(1, loc);
    hn = hn.squeeze(1, loc);
    if (cn.defined()) cn = cn.squeeze(1, loc);
  } else if (batch_first_) {
    out = out.transpose(0, 1, loc);
  }
  return {out, hn, cn};
}

void RNNImplBase::print(std::ostream& os, const char* name) const {
  os << name << "(input_size=" << input_size_ << ", hidden_size=" << hidden_size_ << ", num_layers=" << num_layers_
     << ", bias=" << (bias_ ? "true" : "false") << ", batch_first=" << (batch_first_ ? "true" : "false")
     << ", dropout=" << dropout_ << ", bidirectional=" << (bidirectional_ ? "true" : "false") << ")";
}

RNNImpl::RNNImpl(const RNNOptions& o)
    : RNNImplBase(rnn_mode(o.nonlinearity()), o.input_size(), o.hidden_size(), o.num_layers(), o.bias(),
                  o.batch_first(), o.dropout(), o.bidirectional()),
      options(o) {}

std::tuple<Tensor, Tensor> RNNImpl::forward(const Tensor& input, Tensor hx, SourceLoc loc) {
  auto [out, h, c] = run(input, hx, Tensor(), loc);
  return {out, h};
}

LSTMImpl::LSTMImpl(const LSTMOptions& o)
    : RNNImplBase(Mode::LSTM, o.input_size(), o.hidden_size(), o.num_layers(), o.bias(), o.batch_first(), o.dropout(),
                  o.bidirectional()),
      options(o) {}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTMImpl::forward(const Tensor& input,
                                                                 std::optional<std::tuple<Tensor, Tensor>> hx_opt,
                                                                 SourceLoc loc) {
  Tensor h0, c0;
  if (hx_opt) std::tie(h0, c0) = *hx_opt;
  auto [out, h, c] = run(input, h0, c0, loc);
  return {out, {h, c}};
}

GRUImpl::GRUImpl(const GRUOptions& o)
    : RNNImplBase(Mode::GRU, o.input_size(), o.hidden_size(), o.num_layers(), o.bias(), o.batch_first(), o.dropout(),
                  o.bidirectional()),
      options(o) {}

std::tuple<Tensor, Tensor> GRUImpl::forward(const Tensor& input, Tensor hx, SourceLoc loc) {
  auto [out, h, c] = run(input, hx, Tensor(), loc);
  return {out, h};
}

// ---------------------------------------------------------------- cells
RNNCellImplBase::RNNCellImplBase(int64_t input_size, int64_t hidden_size, bool bias, int64_t gates)
    : input_size_(input_size), hidden_size_(hidden_size), bias_(bias) {
  weight_ih = register_parameter("weight_ih", loom::empty({gates * hidden_size, input_size}));
  weight_hh = register_parameter("weight_hh", loom::empty({gates * hidden_size, hidden_size}));
  if (bias) {
    bias_ih = register_parameter("bias_ih", loom::empty({gates * hidden_size}));
    bias_hh = register_parameter("bias_hh", loom::empty({gates * hidden_size}));
  }
  reset_parameters();
}

void RNNCellImplBase::reset_parameters() {
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden_size_));
  for (Tensor* t : {&weight_ih, &weight_hh, &bias_ih, &bias_hh})
    if (t->defined()) init::uniform_(*t, -k, k);
}

void RNNCellImplBase::print(std::ostream& os, const char* name) const {
  os << name << "(" << input_size_ << ", " << hidden_size_ << (bias_ ? "" : ", bias=false") << ")";
}

namespace {
// A cell's input as [N, I] and its state as [N, H] (zeros when undefined);
// `unbatched` says whether to drop the batch dim again.
Tensor cell_input(const Tensor& input, int64_t input_size, bool& unbatched, const char* op, const SourceLoc& loc) {
  detail::impl_of(input, op, loc);
  LOOM_CHECK((input.dim() == 1 || input.dim() == 2) && input.size(-1) == input_size, op, loc,
             "expected an input [N, ", input_size, "] or [", input_size, "], got ", describe(input));
  unbatched = input.dim() == 1;
  return unbatched ? input.unsqueeze(0, loc) : input;
}
Tensor cell_state(const Tensor& s, const Tensor& x, int64_t hidden, bool unbatched, const SourceLoc& loc) {
  if (!s.defined()) return loom::zeros({x.size(0), hidden}, TensorOptions(x.dtype()).device(x.device()), loc);
  return unbatched ? s.unsqueeze(0, loc) : s;
}
}  // namespace

RNNCellImpl::RNNCellImpl(const RNNCellOptions& o)
    : RNNCellImplBase(o.input_size(), o.hidden_size(), o.bias(), 1), options(o) {}

Tensor RNNCellImpl::forward(const Tensor& input, Tensor hx, SourceLoc loc) {
  bool unbatched = false;
  const Tensor x = cell_input(input, input_size_, unbatched, "RNNCell", loc);
  const Tensor h = cell_state(hx, x, hidden_size_, unbatched, loc);
  Tensor out = step(rnn_mode(options.nonlinearity()), input_product(x, weight_ih, bias_ih, loc), h, Tensor(), weight_hh,
                    bias_hh, hidden_size_, loc)
                   .first;
  return unbatched ? out.squeeze(0, loc) : out;
}

LSTMCellImpl::LSTMCellImpl(const LSTMCellOptions& o)
    : RNNCellImplBase(o.input_size(), o.hidden_size(), o.bias(), 4), options(o) {}

std::tuple<Tensor, Tensor> LSTMCellImpl::forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx_opt,
                                                 SourceLoc loc) {
  bool unbatched = false;
  const Tensor x = cell_input(input, input_size_, unbatched, "LSTMCell", loc);
  Tensor h0, c0;
  if (hx_opt) std::tie(h0, c0) = *hx_opt;
  auto [h, c] = step(Mode::LSTM, input_product(x, weight_ih, bias_ih, loc), cell_state(h0, x, hidden_size_, unbatched, loc),
                     cell_state(c0, x, hidden_size_, unbatched, loc), weight_hh, bias_hh, hidden_size_, loc);
  if (unbatched) return {h.squeeze(0, loc), c.squeeze(0, loc)};
  return {h, c};
}

GRUCellImpl::GRUCellImpl(const GRUCellOptions& o)
    : RNNCellImplBase(o.input_size(), o.hidden_size(), o.bias(), 3), options(o) {}

Tensor GRUCellImpl::forward(const Tensor& input, Tensor hx, SourceLoc loc) {
  bool unbatched = false;
  const Tensor x = cell_input(input, input_size_, unbatched, "GRUCell", loc);
  Tensor out = step(Mode::GRU, input_product(x, weight_ih, bias_ih, loc), cell_state(hx, x, hidden_size_, unbatched, loc),
                    Tensor(), weight_hh, bias_hh, hidden_size_, loc)
                   .first;
  return unbatched ? out.squeeze(0, loc) : out;
}

}  // namespace loom::nn
