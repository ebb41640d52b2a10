// Autograd, as libtorch spells it: grad mode guards, the backward graph's
// nodes (Tensor::grad_fn()), loom::autograd::grad / backward, and custom
// differentiable functions (loom::autograd::Function<T>, function.h).
//
// Backward is recorded, not run: every gradient rule is written with loom's
// own ops, so backward() only records nodes, exactly like the forward pass,
// and the gradients materialize with everything else at the next sync (the
// end of optimizer.step()). Rules run under NoGradGuard unless create_graph
// is set, in which case they record their own backward graph (higher-order
// gradients). docs/ARCHITECTURE.md, "Autograd", walks through it.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <loom/tensor.h>

#pragma GCC visibility push(default)
namespace loom {

// ---- grad mode (per thread, as in libtorch)
struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};
// Sets grad mode for a scope, restoring the previous one at its end.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : prev_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~AutoGradMode() { GradMode::set_enabled(prev_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};
// Ops in its scope record no gradient (optimizer updates, evaluation).
class NoGradGuard : public AutoGradMode {
 public:
  NoGradGuard() : AutoGradMode(false) {}
};

using tensor_list = std::vector<Tensor>;

namespace autograd {

using variable_list = std::vector<Tensor>;
class Node;

// An input of a backward node: the node that takes the gradient, and which
// of its inputs it arrives at.
struct Edge {
  std::shared_ptr<Node> function;
  uint32_t input_nr = 0;
  bool is_valid() const { return function != nullptr; }
};

// Shape, dtype and device of a tensor an op produced: what its gradient must be.
struct GradInfo {
  std::array<int64_t, 8> sizes{};
  uint8_t dim = 0;
  ScalarType dtype = kFloat;
  Device device{kCPU, 0};
  IntArrayRef shape() const { return IntArrayRef(sizes.data(), dim); }
};

// A node of the backward graph (libtorch's torch::autograd::Node): made when
// a differentiable op records a result that requires grad. It takes the
// gradients of the op's outputs and returns those of its inputs, in the
// order of next_functions(); an undefined tensor means zero.
class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(std::vector<Edge> next = {});
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // "MulBackward0", "AccumulateGrad", ... as libtorch names them.
  virtual std::string name() const = 0;
  const std::vector<Edge>& next_functions() const { return next_; }
  const Edge& next_edge(size_t i) const { return next_[i]; }
  size_t num_outputs() const { return next_.size(); }
  // How many gradients it takes: one per tensor the op produced.
  size_t num_inputs() const { return inputs_.size(); }
  const GradInfo& input_metadata(size_t i) const { return inputs_[i]; }
  // Order of creation; the engine runs later nodes first.
  uint64_t sequence_nr() const { return sequence_nr_; }
  // Whether input i of the forward op needs its gradient.
  bool should_compute_output(size_t i) const { return i < next_.size() && next_[i].is_valid(); }

  // The engine's entry point. Records (never runs) the gradient ops.
  virtual variable_list apply(variable_list&& grads) = 0;
  // Frees the tensors saved for backward (after a backward without retain_graph).
  virtual void release_variables() {}

  // Registers a tensor this node's op produced; returns its output number.
  uint32_t add_input_metadata(const Tensor& t);
  void add_next_edge(Edge e) { next_.push_back(std::move(e)); }
  // Where the forward op was recorded (for error messages); for a node that
  // does not know (a custom function whose forward recorded nothing), the
  // line that called backward() or autograd::grad() while it runs.
  SourceLoc where() const;
  void set_where(const SourceLoc& loc) { loc_ = loc; }

  // A function applied to the gradient arriving at input `slot` before
  // apply() (Tensor::retain_grad, Tensor::register_hook).
  using PreHook = std::function<Tensor(const Tensor&)>;
  void add_pre_hook(uint32_t slot, PreHook hook) { pre_hooks_.emplace_back(slot, std::move(hook)); }
  const std::vector<std::pair<uint32_t, PreHook>>& pre_hooks() const { return pre_hooks_; }

 protected:
  std::vector<Edge> next_;
  std::vector<GradInfo> inputs_;
  std::vector<std::pair<uint32_t, PreHook>> pre_hooks_;
  SourceLoc loc_;
  uint64_t sequence_nr_;
};

// Gradients of `outputs` with respect to `inputs` (torch::autograd::grad):
// returned, not accumulated into .grad(). grad_outputs default to ones for
// one-element outputs. retain_graph defaults to create_graph. With
// allow_unused, an input the outputs do not depend on gets an undefined
// tensor instead of an error.
variable_list grad(const variable_list& outputs, const variable_list& inputs, const variable_list& grad_outputs = {},
                   std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                   bool allow_unused = false, SourceLoc loc = SourceLoc::current());

// Accumulates the gradients of `tensors` into the .grad() of the leaves
// (only of `inputs` when given), as torch::autograd::backward.
void backward(const variable_list& tensors, const variable_list& grad_tensors = {},
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
              const variable_list& inputs = {}, SourceLoc loc = SourceLoc::current());

}  // namespace autograd
}  // namespace loom
#pragma GCC visibility pop

#include <loom/autograd/function.h>
