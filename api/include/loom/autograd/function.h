// Custom differentiable functions, as libtorch's torch::autograd::Function:
//
//   struct MulConstant : loom::autograd::Function<MulConstant> {
//     static loom::Tensor forward(loom::autograd::AutogradContext* ctx, loom::Tensor x, double c) {
//       ctx->saved_data["c"] = c;
//       return x * c;
//     }
//     static loom::autograd::variable_list backward(loom::autograd::AutogradContext* ctx,
//                                                   loom::autograd::variable_list grads) {
//       return {grads[0] * ctx->saved_data["c"].toDouble(), loom::Tensor()};  // one per forward argument
//     }
//   };
//   loom::Tensor y = MulConstant::apply(x, 2.0);
//
// forward runs under NoGradGuard and returns a Tensor or a variable_list;
// backward gets one gradient per output (zeros where none arrived, unless
// set_materialize_grads(false)) and returns one per forward argument
// (undefined for arguments that are not tensors or need no gradient). Like
// every rule, backward only records ops.
#pragma once
#include <loom/autograd.h>

#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <variant>
#include <vector>

#pragma GCC visibility push(default)
namespace loom {

// A value a custom function keeps for its backward (libtorch's IValue, for
// the kinds a context needs).
class IValue {
 public:
  IValue() = default;
  IValue(double v) : v_(v) {}                        // NOLINT: implicit, as c10::IValue
  IValue(float v) : v_(static_cast<double>(v)) {}    // NOLINT
  IValue(int64_t v) : v_(v) {}                       // NOLINT
  IValue(int v) : v_(static_cast<int64_t>(v)) {}     // NOLINT
  IValue(bool v) : v_(v) {}                          // NOLINT
  IValue(std::string v) : v_(std::move(v)) {}        // NOLINT
  IValue(const char* v) : v_(std::string(v)) {}      // NOLINT
  IValue(Tensor v) : v_(std::move(v)) {}             // NOLINT
  IValue(std::vector<int64_t> v) : v_(std::move(v)) {}  // NOLINT

  bool isNone() const { return v_.index() == 0; }
  bool isDouble() const { return std::holds_alternative<double>(v_); }
  bool isInt() const { return std::holds_alternative<int64_t>(v_); }
  bool isBool() const { return std::holds_alternative<bool>(v_); }
  bool isString() const { return std::holds_alternative<std::string>(v_); }
  bool isTensor() const { return std::holds_alternative<Tensor>(v_); }
  bool isIntList() const { return std::holds_alternative<std::vector<int64_t>>(v_); }
  // Throw loom::Error naming the kind held when it is another one.
  double toDouble() const;
  int64_t toInt() const;
  bool toBool() const;
  const std::string& toStringRef() const;
  Tensor toTensor() const;
  std::vector<int64_t> toIntVector() const;

 private:
  std::variant<std::monostate, double, int64_t, bool, std::string, Tensor, std::vector<int64_t>> v_;
};

namespace autograd {

namespace detail {
class FunctionNode;
}

class AutogradContext {
 public:
  // Values for backward, by name.
  std::unordered_map<std::string, IValue> saved_data;
  // Tensors for backward: checked against in-place writes when read back.
  void save_for_backward(variable_list to_save);
  variable_list get_saved_variables() const;
  // These outputs get no gradient (indices, masks).
  void mark_non_differentiable(const variable_list& outputs);
  // false: backward sees undefined tensors for outputs that got no gradient.
  void set_materialize_grads(bool value) { materialize_grads_ = value; }
  // Whether the i-th tensor argument of forward needs its gradient.
  bool needs_input_grad(size_t tensor_input) const;

 private:
  friend class detail::FunctionNode;
  variable_list saved_;
  std::vector<int64_t> saved_versions_;
  std::vector<int> saved_output_nr_;  // -1: an input (or another tensor); else the output it is
  std::vector<bool> needs_input_grad_;
  variable_list non_differentiable_;
  bool materialize_grads_ = true;
  bool released_ = false;
  std::weak_ptr<Node> node_;
};

namespace detail {

// What every custom function's node shares; FunctionNodeOf<T> adds T's backward.
class FunctionNode : public Node {
 public:
  AutogradContext ctx;
  std::vector<bool> arg_is_tensor;  // per forward argument
  std::string name() const override;
  variable_list apply(variable_list&& grads) override;
  void release_variables() override;
  // After forward: edges to the tensor inputs, history for the outputs.
  void finish(const variable_list& inputs, variable_list& outputs);

 protected:
  virtual variable_list call_backward(variable_list&& grads) = 0;
  virtual const std::type_info& function_type() const = 0;
};

template <class T>
class FunctionNodeOf final : public FunctionNode {
 protected:
  variable_list call_backward(variable_list&& grads) override { return T::backward(&ctx, std::move(grads)); }
  const std::type_info& function_type() const override { return typeid(T); }
};

template <class A>
void collect_arg(FunctionNode& node, variable_list& inputs, const A& arg) {
  if constexpr (std::is_same_v<std::decay_t<A>, Tensor>) {
    node.arg_is_tensor.push_back(true);
    inputs.push_back(arg);
  } else {
    node.arg_is_tensor.push_back(false);
  }
}

inline variable_list to_list(const Tensor& t) { return {t}; }
inline variable_list to_list(const variable_list& v) { return v; }
template <class R>
R from_list(variable_list&& v) {
  if constexpr (std::is_same_v<R, Tensor>) return std::move(v[0]);
  else return std::move(v);
}

}  // namespace detail

template <class T>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
    auto node = std::make_shared<detail::FunctionNodeOf<T>>();
    variable_list inputs;
    (detail::collect_arg(*node, inputs, args), ...);
    using R = std::decay_t<decltype(T::forward(&node->ctx, std::forward<Args>(args)...))>;
    static_assert(std::is_same_v<R, Tensor> || std::is_same_v<R, variable_list>,
                  "forward must return a loom::Tensor or a loom::autograd::variable_list");
    variable_list outputs;
    {
      AutoGradMode no_grad(false);
      outputs = detail::to_list(T::forward(&node->ctx, std::forward<Args>(args)...));
    }
    node->finish(inputs, outputs);
    return detail::from_list<R>(std::move(outputs));
  }
};

}  // namespace autograd
}  // namespace loom
#pragma GCC visibility pop
