// Custom functions (loom/autograd/function.h): the context's saved tensors,
// and the node every Function<T> gets, which checks what T::backward returns.
#include <loom/autograd.h>
#include <loom/functions.h>

#include <cxxabi.h>

#include <algorithm>

#include <cstdlib>

#include "api/src/autograd/meta.h"
#include "api/src/record.h"

namespace loom {

namespace {
[[noreturn]] void wrong_kind(const char* want) {
  detail::throw_error("IValue", std::string("expected a ") + want + " but it holds another kind of value",
                      SourceLoc::current());
}
}  // namespace

double IValue::toDouble() const {
  if (isDouble()) return std::get<double>(v_);
  if (isInt()) return static_cast<double>(std::get<int64_t>(v_));
  wrong_kind("double");
}
int64_t IValue::toInt() const {
  if (!isInt()) wrong_kind("int");
  return std::get<int64_t>(v_);
}
bool IValue::toBool() const {
  if (!isBool()) wrong_kind("bool");
  return std::get<bool>(v_);
}
const std::string& IValue::toStringRef() const {
  if (!isString()) wrong_kind("string");
  return std::get<std::string>(v_);
}
Tensor IValue::toTensor() const {
  if (!isTensor()) wrong_kind("tensor");
  return std::get<Tensor>(v_);
}
std::vector<int64_t> IValue::toIntVector() const {
  if (!isIntList()) wrong_kind("int list");
  return std::get<std::vector<int64_t>>(v_);
}

namespace autograd {

void AutogradContext::save_for_backward(variable_list to_save) {
  saved_ = std::move(to_save);
  saved_versions_.clear();
  saved_output_nr_.assign(saved_.size(), -1);
  for (const Tensor& t : saved_) saved_versions_.push_back(t.defined() ? t._version() : 0);
}

variable_list AutogradContext::get_saved_variables() const {
  auto node = node_.lock();
  const SourceLoc where = node ? node->where() : SourceLoc::current();
  const std::string name = node ? node->name() : "a custom function";
  LOOM_CHECK(!released_, "backward", where, "trying to backward through ", name,
             " a second time (its saved tensors were freed by the first backward); pass retain_graph=true to it");
  variable_list out;
  for (size_t i = 0; i < saved_.size(); ++i) {
    const Tensor& t = saved_[i];
    if (!t.defined()) {
      out.push_back(t);
      continue;
    }
    LOOM_CHECK(t._version() == saved_versions_[i], "backward", where, "one of the tensors ", name,
               " saved for backward (", loom::detail::describe(t), ") was modified by an in-place operation: it is at "
               "version ", t._version(), "; expected version ", saved_versions_[i], " instead");
    if (saved_output_nr_[i] >= 0 && node && GradMode::is_enabled()) {
      // An output: its history back (create_graph).
      Tensor r = loom::detail::plain_alias(t);
      auto& m = loom::detail::meta_of(r);
      m.grad_fn = node;
      m.output_nr = static_cast<uint32_t>(saved_output_nr_[i]);
      r.impl()->requires_grad = true;
      out.push_back(r);
    } else {
      out.push_back(t);
    }
  }
  return out;
}

void AutogradContext::mark_non_differentiable(const variable_list& outputs) {
  non_differentiable_.insert(non_differentiable_.end(), outputs.begin(), outputs.end());
}

bool AutogradContext::needs_input_grad(size_t tensor_input) const {
  return tensor_input < needs_input_grad_.size() && needs_input_grad_[tensor_input];
}

namespace detail {

std::string FunctionNode::name() const {
  int status = 0;
  const char* mangled = function_type().name();
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string r = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  return r;
}

void FunctionNode::finish(const variable_list& inputs, variable_list& outputs) {
  bool any = false;
  for (const Tensor& t : inputs) {
    Edge e = t.defined() && GradMode::is_enabled() ? loom::detail::gradient_edge(t) : Edge{};
    ctx.needs_input_grad_.push_back(e.is_valid());
    any = any || e.is_valid();
    add_next_edge(std::move(e));
  }
  ctx.node_ = weak_from_this();
  // Errors of this node name the user's forward: the line that recorded
  // its first output (in the user's forward), if it recorded one.
  for (const Tensor& out : outputs)
    if (out.defined() && loc_.line() == 0) {
      const ir::NodePtr n = loom::detail::impl_of(out, "apply", SourceLoc::current()).storage->node();
      if (n->line) loc_ = SourceLoc::current(n->file, n->line);
    }
  // An input returned as is becomes a new tensor: its history must not change.
  for (Tensor& out : outputs)
    for (const Tensor& in : inputs)
      if (out.defined() && out.is_same(in)) out = loom::detail::plain_alias(in);
  if (!any) {
    ctx.saved_.clear();  // nothing will call backward: keep nothing alive
    return;
  }
  for (Tensor& out : outputs) {
    bool differentiable = out.defined() && is_floating_point(out.dtype());
    for (const Tensor& nd : ctx.non_differentiable_) differentiable = differentiable && !nd.is_same(out);
    if (!out.defined()) {
      GradInfo none;
      inputs_.push_back(none);
      continue;
    }
    if (differentiable) {
      loom::detail::set_history(out, shared_from_this());
    } else {
      add_input_metadata(out);
    }
  }
  ctx.non_differentiable_.clear();
  // A saved output would own this node through its grad_fn (a cycle): keep
  // a plain alias, and give it its history back when it is unpacked.
  for (size_t i = 0; i < ctx.saved_.size(); ++i)
    for (size_t o = 0; o < outputs.size(); ++o)
      if (ctx.saved_[i].defined() && outputs[o].defined() && ctx.saved_[i].is_same(outputs[o])) {
        ctx.saved_[i] = loom::detail::plain_alias(outputs[o]);
        ctx.saved_output_nr_[i] = static_cast<int>(o);
      }
}

variable_list FunctionNode::apply(variable_list&& grads) {
  if (ctx.materialize_grads_)
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined()) {
        const GradInfo& m = input_metadata(i);
        grads[i] = zeros(m.shape(), TensorOptions(m.dtype).device(m.device));
      }
  variable_list r = call_backward(std::move(grads));
  // As libtorch: gradients past the forward's arguments are fine while
  // undefined (a backward written for an optional bias the call left out).
  if (r.size() > arg_is_tensor.size() &&
      std::none_of(r.begin() + static_cast<std::ptrdiff_t>(arg_is_tensor.size()), r.end(),
                   [](const Tensor& g) { return g.defined(); }))
    r.resize(arg_is_tensor.size());
  LOOM_CHECK(r.size() == arg_is_tensor.size(), "backward", where(), name(),
             "::backward returned an incorrect number of gradients (expected ", arg_is_tensor.size(),
             ", one per forward argument, got ", r.size(), ")");
  variable_list out;
  for (size_t i = 0; i < r.size(); ++i) {
    if (arg_is_tensor[i]) {
      out.push_back(should_compute_output(out.size()) ? r[i] : Tensor());
      continue;
    }
    LOOM_CHECK(!r[i].defined(), "backward", where(), name(), "::backward returned a gradient for argument ", i,
               ", which is not a tensor; return an undefined loom::Tensor() there");
  }
  return out;
}

void FunctionNode::release_variables() {
  ctx.saved_.clear();
  ctx.released_ = true;
}

}  // namespace detail
}  // namespace autograd
}  // namespace loom
