// Recurrent layers, as torch::nn's: RNN (tanh or relu), LSTM and GRU
// (multi-layer, bidirectional, batch_first, dropout between layers) and
// their cells. PyTorch's gate order and parameter names (weight_ih_l0,
// weight_hh_l0_reverse, ...), initialized U(-1/sqrt(hidden), 1/sqrt(hidden)).
// A sequence is recorded step by step into one graph: the input's products
// for every step are one matrix product per layer and direction, the
// recurrence one small product per step; a new sequence of the same length
// replays the compiled step.
#pragma once
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <loom/arg.h>
#include <loom/nn/init.h>
#include <loom/nn/module.h>

#pragma GCC visibility push(default)
namespace loom::nn {



// The chainable setters of each options class return that class.
#define LOOM_RNN_OPTIONS(Name, Extra)                                                                  \
  struct Name {                                                                                        \
    Name(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {} \
    LOOM_ARG(Name, int64_t, input_size, 0)                                                             \
    LOOM_ARG(Name, int64_t, hidden_size, 0)                                                            \
    LOOM_ARG(Name, int64_t, num_layers, 1)                                                             \
    LOOM_ARG(Name, bool, bias, true)                                                                   \
    LOOM_ARG(Name, bool, batch_first, false)                                                           \
    LOOM_ARG(Name, double, dropout, 0.0)                                                               \
    LOOM_ARG(Name, bool, bidirectional, false)                                                         \
    Extra                                                                                              \
  }
LOOM_RNN_OPTIONS(RNNOptions, LOOM_ARG(RNNOptions, Nonlinearity, nonlinearity, kTanh));
LOOM_RNN_OPTIONS(LSTMOptions, );
LOOM_RNN_OPTIONS(GRUOptions, );
#undef LOOM_RNN_OPTIONS

#define LOOM_CELL_OPTIONS(Name, Extra)                                                                 \
  struct Name {                                                                                        \
    Name(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {} \
    LOOM_ARG(Name, int64_t, input_size, 0)                                                             \
    LOOM_ARG(Name, int64_t, hidden_size, 0)                                                            \
    LOOM_ARG(Name, bool, bias, true)                                                                   \
    Extra                                                                                              \
  }
LOOM_CELL_OPTIONS(RNNCellOptions, LOOM_ARG(RNNCellOptions, Nonlinearity, nonlinearity, kTanh));
LOOM_CELL_OPTIONS(LSTMCellOptions, );
LOOM_CELL_OPTIONS(GRUCellOptions, );
#undef LOOM_CELL_OPTIONS

// What the three layers share: their parameters, per layer and direction,
// and the walk over layers, directions and time.
class RNNImplBase : public Module {
 public:
  enum class Mode { RNN_TANH, RNN_RELU, LSTM, GRU };
  RNNImplBase(Mode mode, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first,
              double dropout, bool bidirectional);
  void reset_parameters();
  // weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, then _reverse, per layer.
  std::vector<Tensor> all_weights() const;
  // input [T, N, I] ([N, T, I] batch_first, or unbatched [T, I]); h0 (and
  // c0 for an LSTM) [layers * directions, N, H]: zeros when undefined.
  // Returns the output and the final h (and c).
  std::tuple<Tensor, Tensor, Tensor> run(const Tensor& input, Tensor h0, Tensor c0, const SourceLoc& loc);

 protected:
  void print(std::ostream& os, const char* name) const;
  Mode mode_;
  int64_t input_size_, hidden_size_, num_layers_;
  bool bias_, batch_first_, bidirectional_;
  double dropout_;
  std::vector<std::vector<Tensor>> flat_;  // [layer * directions + direction]: w_ih, w_hh, b_ih, b_hh
};

class RNNImpl : public RNNImplBase {
 public:
  explicit RNNImpl(const RNNOptions& options);
  RNNImpl(int64_t input_size, int64_t hidden_size) : RNNImpl(RNNOptions(input_size, hidden_size)) {}
  std::tuple<Tensor, Tensor> forward(const Tensor& input, Tensor hx = {}, LOOM_LOC);
  std::tuple<Tensor, Tensor> forward(const Tensor& input, SourceLoc loc) { return forward(input, Tensor(), loc); }
  void pretty_print(std::ostream& os) const override { print(os, "RNN"); }
  RNNOptions options;
};
LOOM_MODULE(RNN);

class LSTMImpl : public RNNImplBase {
 public:
  explicit LSTMImpl(const LSTMOptions& options);
  LSTMImpl(int64_t input_size, int64_t hidden_size) : LSTMImpl(LSTMOptions(input_size, hidden_size)) {}
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(
      const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx_opt = std::nullopt, LOOM_LOC);
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input, SourceLoc loc) {
    return forward(input, std::nullopt, loc);
  }
  void pretty_print(std::ostream& os) const override { print(os, "LSTM"); }
  LSTMOptions options;
};
LOOM_MODULE(LSTM);

class GRUImpl : public RNNImplBase {
 public:
  explicit GRUImpl(const GRUOptions& options);
  GRUImpl(int64_t input_size, int64_t hidden_size) : GRUImpl(GRUOptions(input_size, hidden_size)) {}
  std::tuple<Tensor, Tensor> forward(const Tensor& input, Tensor hx = {}, LOOM_LOC);
  std::tuple<Tensor, Tensor> forward(const Tensor& input, SourceLoc loc) { return forward(input, Tensor(), loc); }
  void pretty_print(std::ostream& os) const override { print(os, "GRU"); }
  GRUOptions options;
};
LOOM_MODULE(GRU);

// One step: input [N, I] (or [I]), state [N, H]; weight_ih [G H, I],
// weight_hh [G H, H], bias_ih, bias_hh [G H] with G = 1, 4 or 3 gates.
class RNNCellImplBase : public Module {
 public:
  RNNCellImplBase(int64_t input_size, int64_t hidden_size, bool bias, int64_t gates);
  void reset_parameters();
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  void print(std::ostream& os, const char* name) const;
  int64_t input_size_, hidden_size_;
  bool bias_;
};

class RNNCellImpl : public RNNCellImplBase {
 public:
  explicit RNNCellImpl(const RNNCellOptions& options);
  RNNCellImpl(int64_t input_size, int64_t hidden_size) : RNNCellImpl(RNNCellOptions(input_size, hidden_size)) {}
  Tensor forward(const Tensor& input, Tensor hx = {}, LOOM_LOC);
  Tensor forward(const Tensor& input, SourceLoc loc) { return forward(input, Tensor(), loc); }
  void pretty_print(std::ostream& os) const override { print(os, "RNNCell"); }
  RNNCellOptions options;
};
LOOM_MODULE(RNNCell);

class LSTMCellImpl : public RNNCellImplBase {
 public:
  explicit LSTMCellImpl(const LSTMCellOptions& options);
  LSTMCellImpl(int64_t input_size, int64_t hidden_size) : LSTMCellImpl(LSTMCellOptions(input_size, hidden_size)) {}
  std::tuple<Tensor, Tensor> forward(const Tensor& input,
                                     std::optional<std::tuple<Tensor, Tensor>> hx_opt = std::nullopt, LOOM_LOC);
  std::tuple<Tensor, Tensor> forward(const Tensor& input, SourceLoc loc) { return forward(input, std::nullopt, loc); }
  void pretty_print(std::ostream& os) const override { print(os, "LSTMCell"); }
  LSTMCellOptions options;
};
LOOM_MODULE(LSTMCell);

class GRUCellImpl : public RNNCellImplBase {
 public:
  explicit GRUCellImpl(const GRUCellOptions& options);
  GRUCellImpl(int64_t input_size, int64_t hidden_size) : GRUCellImpl(GRUCellOptions(input_size, hidden_size)) {}
  Tensor forward(const Tensor& input, Tensor hx = {}, LOOM_LOC);
  Tensor forward(const Tensor& input, SourceLoc loc) { return forward(input, Tensor(), loc); }
  void pretty_print(std::ostream& os) const override { print(os, "GRUCell"); }
  GRUCellOptions options;
};
LOOM_MODULE(GRUCell);

}  // namespace loom::nn
#pragma GCC visibility pop
