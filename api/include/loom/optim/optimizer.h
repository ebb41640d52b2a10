// loom::optim::Optimizer: parameter groups, per-parameter state, zero_grad
// and step, with libtorch's names (torch::optim::Optimizer).
//
// Lazy-specific behaviour, all of it about keeping one training step one
// graph that is compiled once:
//  - the constructor materializes the parameters and creates the state
//    (zeros), so the first step records the same graph as every later one;
//  - step() records the update as in-place writes under NoGradGuard (the
//    parameters' and state's buffers are donated: updated where they lie)
//    and then syncs: it is a materialization point, so the forward pass,
//    backward pass and update run as one graph. set_sync_on_step(false)
//    leaves the update pending instead (it joins the next sync);
//  - hyperparameters (learning rate, betas, eps, ...) and step-dependent
//    factors (bias corrections) enter the graph as runtime scalars: changing
//    them never recompiles;
//  - inside loom::compile, a replay runs no host code, so step() tells the
//    trace what it depends on: a replay advances the step counts and
//    computes the numbers that change between steps (learning rate, bias
//    corrections: replay_recomputes) for its step; a call where another
//    number changed (replay_numbers: momentum, betas, ...) traces the step
//    again, which compiles nothing.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <unordered_map>
#include <vector>

#include <loom/arg.h>
#include <loom/tensor.h>

#pragma GCC visibility push(default)
namespace loom::optim {

class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
};

class OptimizerParamGroup {
 public:
  OptimizerParamGroup(std::vector<Tensor> params) : params_(std::move(params)) {}  // NOLINT: as libtorch
  OptimizerParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options)
      : params_(std::move(params)), options_(std::move(options)) {}
  OptimizerParamGroup(const OptimizerParamGroup& g)
      : params_(g.params_), options_(g.options_ ? g.options_->clone() : nullptr) {}
  OptimizerParamGroup& operator=(const OptimizerParamGroup& g) {
    params_ = g.params_;
    options_ = g.options_ ? g.options_->clone() : nullptr;
    return *this;
  }
  bool has_options() const { return options_ != nullptr; }
  OptimizerOptions& options() { return *options_; }
  const OptimizerOptions& options() const { return *options_; }
  void set_options(std::unique_ptr<OptimizerOptions> o) { options_ = std::move(o); }
  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& params() const { return params_; }

 private:
  std::vector<Tensor> params_;
  std::unique_ptr<OptimizerOptions> options_;
};

// One parameter's state (momentum buffer, moments, step count).
struct OptimizerParamState {
  virtual ~OptimizerParamState() = default;
  int64_t step = 0;
};

class Optimizer {
 public:
  using LossClosure = std::function<Tensor()>;
  // A number of an update as a function of the group's options and the step
  // (replay_recomputes).
  using StepNumber = double (*)(const OptimizerOptions& options, int64_t step);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient. `closure` (optional)
  // re-evaluates the loss with grad mode on; its result is returned.
  // Virtual for an optimizer that is not one update per parameter (LBFGS).
  virtual Tensor step(LossClosure closure = nullptr);
  // Clears every parameter's gradient: undefined (the default, as PyTorch),
  // or zeros written in place.
  void zero_grad(bool set_to_none = true);
  void add_param_group(const OptimizerParamGroup& group);

  std::vector<OptimizerParamGroup>& param_groups() { return groups_; }
  const std::vector<OptimizerParamGroup>& param_groups() const { return groups_; }
  std::vector<Tensor> parameters() const;
  size_t size() const;  // number of parameters
  OptimizerOptions& defaults() { return *defaults_; }

  // A parameter's state (nullptr for a tensor this optimizer does not hold),
  // and the named tensors of a state (momentum_buffer, exp_avg, ...): what
  // torch::save / torch::load of an optimizer write and read.
  OptimizerParamState* state_of(const Tensor& p);
  virtual std::vector<std::pair<std::string, Tensor*>> state_tensors(OptimizerParamState& state);

  // Whether step() ends with loom::sync() (default true; see the top of this file).
  void set_sync_on_step(bool sync) { sync_on_step_ = sync; }
  bool sync_on_step() const { return sync_on_step_; }

 protected:
  // A subclass adds its groups (add_param_group) once it is constructed:
  // adding one makes each parameter's state, which is the subclass's.
  explicit Optimizer(std::unique_ptr<OptimizerOptions> defaults);
  // Records the update of one parameter (under NoGradGuard; p.grad() defined).
  virtual void update(Tensor& p, OptimizerParamState& state, const OptimizerOptions& options) = 0;
  // The state a new parameter starts with (its tensors already made).
  virtual std::unique_ptr<OptimizerParamState> make_state(const Tensor& p, const OptimizerOptions& options) = 0;
  // Writes into `out` the numbers update() records that a compiled replay
  // keeps, with every option that shapes its graph: all of them come from
  // the group's options. A step traced by loom::compile is replayed while
  // they stay what the trace recorded, and traced again when they change.
  // False (this default, for a subclass that does not say): every compiled
  // call traces the step again. (`out` is the caller's: a replay allocates
  // nothing.)
  virtual bool replay_numbers(const OptimizerOptions& options, std::vector<double>& out) const;
  // For update(): `t` was just recorded holding `now`, a number that changes
  // from step to step (the learning rate, Adam's bias corrections). A
  // compiled replay computes it anew as `of(the group's options, the step it
  // stands for)` rather than taking the traced value, so replay_numbers
  // leaves it out. Nothing outside loom::compile's trace.
  void replay_recomputes(const Tensor& t, double now, StepNumber of) {
    if (updating_.state) note_replay_scalar(t, now, of);  // set only while step() is traced
  }

 private:
  struct TracedSteps;  // optimizer.cpp
  // The update being traced: its state, group, and which of this trace's
  // steps of that state it is (1 for the first).
  struct Updating {
    OptimizerParamState* state = nullptr;
    size_t group = 0;
    int64_t nth = 0;
  };
  TracedSteps& traced_steps();
  void note_replay_scalar(const Tensor& t, double now, StepNumber of);
  void adopt(OptimizerParamGroup& group);
  std::vector<OptimizerParamGroup> groups_;
  std::unique_ptr<OptimizerOptions> defaults_;
  std::unordered_map<const void*, std::unique_ptr<OptimizerParamState>> state_;
  bool sync_on_step_ = true;
  // What step() recorded in the trace numbered traced_in_ (its replay guard
  // and replay scalars read it), the update being traced, and a token they
  // check first: a compiled function may outlive its optimizer.
  std::shared_ptr<TracedSteps> traced_;
  uint64_t traced_in_ = 0;
  Updating updating_;
  std::shared_ptr<const bool> alive_ = std::make_shared<const bool>(true);
};

}  // namespace loom::optim
#pragma GCC visibility pop
