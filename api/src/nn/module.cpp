// nn::Module: registration, traversal, train/eval, to(), printing; and
// Sequential's forward.
#include <loom/autograd.h>
#include <loom/nn/module.h>
#include <loom/nn/sequential.h>

#include <cxxabi.h>

#include <cstdlib>
#include <typeinfo>

#include "api/src/lazy.h"
#include "api/src/record.h"

namespace loom {

namespace detail {
void throw_missing_key(const std::string& key) {
  throw_error("OrderedDict", "key '" + key + "' not found", SourceLoc::current());
}
}  // namespace detail

namespace nn {

namespace {
// "loom::nn::LinearImpl" -> "Linear"; user modules keep their class name.
std::string class_name(const std::type_info& t) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
  std::string n = status == 0 && demangled ? demangled : t.name();
  std::free(demangled);
  if (auto colon = n.rfind("::"); colon != std::string::npos) n = n.substr(colon + 2);
  if (n.size() > 4 && n.ends_with("Impl")) n.resize(n.size() - 4);
  return n;
}

void check_name(const std::string& name, const char* what, bool taken, const SourceLoc& loc) {
  LOOM_CHECK(!name.empty(), what, loc, "a name must not be empty");
  LOOM_CHECK(name.find('.') == std::string::npos, what, loc, "name '", name, "' must not contain a dot");
  LOOM_CHECK(!taken, what, loc, "'", name, "' is already registered");
}

// Replaces t's contents by `value` (converted), keeping the tensor itself:
// anything holding t (an optimizer, a user's handle) sees the new data.
void set_data(Tensor& t, const Tensor& value) {
  detail::TensorImpl& im = *t.impl();
  im.storage = value.impl()->storage;
  im.view = value.impl()->view;
}
}  // namespace

Module::Module(std::string name) : name_(std::move(name)) {}
Module::Module() = default;
Module::~Module() = default;

const std::string& Module::name() const {
  if (name_.empty()) name_ = class_name(typeid(*this));
  return name_;
}

Tensor& Module::register_parameter(std::string name, Tensor tensor, bool requires_grad, SourceLoc loc) {
  check_name(name, "register_parameter", parameters_.contains(name) || buffers_.contains(name), loc);
  if (tensor.defined() && tensor.is_floating_point()) tensor.requires_grad_(requires_grad, loc);
  return parameters_.insert(std::move(name), std::move(tensor));
}

Tensor& Module::register_buffer(std::string name, Tensor tensor, SourceLoc loc) {
  check_name(name, "register_buffer", parameters_.contains(name) || buffers_.contains(name), loc);
  return buffers_.insert(std::move(name), std::move(tensor));
}

void Module::add_child(std::string name, std::shared_ptr<Module> child, const SourceLoc& loc) {
  check_name(name, "register_module", children_.contains(name), loc);
  LOOM_CHECK(child != nullptr, "register_module", loc, "module '", name, "' is empty");
  children_.insert(std::move(name), std::move(child));
}

void Module::collect(const std::string& prefix, bool recurse, bool buffers,
                     OrderedDict<std::string, Tensor>& out) const {
  // A tensor shared by two modules (tied weights) is listed once, under its
  // first name, as PyTorch does: an optimizer must not update it twice.
  auto listed = [&out](const Tensor& t) {
    for (const auto& item : out)
      if (item.value().is_same(t)) return true;
    return false;
  };
  for (const auto& item : buffers ? buffers_ : parameters_)
    if (item.value().defined() && !listed(item.value())) out.insert(prefix + item.key(), item.value());
  if (!recurse) return;
  for (const auto& child : children_) child.value()->collect(prefix + child.key() + ".", true, buffers, out);
}

OrderedDict<std::string, Tensor> Module::named_parameters(bool recurse) const {
  OrderedDict<std::string, Tensor> out;
  collect("", recurse, false, out);
  return out;
}
std::vector<Tensor> Module::parameters(bool recurse) const { return named_parameters(recurse).values(); }
OrderedDict<std::string, Tensor> Module::named_buffers(bool recurse) const {
  OrderedDict<std::string, Tensor> out;
  collect("", recurse, true, out);
  return out;
}
std::vector<Tensor> Module::buffers(bool recurse) const { return named_buffers(recurse).values(); }
OrderedDict<std::string, std::shared_ptr<Module>> Module::named_children() const { return children_; }
std::vector<std::shared_ptr<Module>> Module::children() const { return children_.values(); }

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self, SourceLoc loc) {
  return named_modules("", include_self, loc).values();
}

OrderedDict<std::string, std::shared_ptr<Module>> Module::named_modules(const std::string& name_prefix,
                                                                       bool include_self, SourceLoc loc) {
  OrderedDict<std::string, std::shared_ptr<Module>> out;
  if (include_self) {
    std::shared_ptr<Module> self = weak_from_this().lock();
    LOOM_CHECK(self != nullptr, "modules", loc, "the module ", name(),
               " is not owned by a std::shared_ptr, so it cannot list itself: this happens in its own constructor "
               "(no shared_ptr owns it yet) or for a module made on the stack. Make it with std::make_shared (or its "
               "LOOM_MODULE holder), or pass include_self = false to list only its descendants");
    out.insert(name_prefix, std::move(self));
  }
  for (auto& child : children_) {
    const std::string name = name_prefix.empty() ? child.key() : name_prefix + "." + child.key();
    for (auto& m : child.value()->named_modules(name, true, loc)) out.insert(m.key(), m.value());
  }
  return out;
}

bool Module::is_training() const {
  // A replay runs no host code, so it would keep the mode of its trace.
  if (detail::tracing()) {
    std::weak_ptr<const Module> self = weak_from_this();  // empty for a module no shared_ptr owns: trace every call
    const bool was = training_;
    detail::add_replay_guard({[self, was] {
                                const std::shared_ptr<const Module> m = self.lock();
                                return m && m->training_ == was;
                              },
                              [] {}});
  }
  return training_;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& child : children_) child.value()->train(on);
}

void Module::to(Device device, ScalarType dtype) {
  NoGradGuard no_grad;
  auto convert = [&](Tensor& t) {
    if (!t.defined()) return;
    Tensor moved = t.to(device);
    if (t.is_floating_point()) moved = moved.to(dtype);
    if (moved.is_same(t)) return;
    set_data(t, moved.is_alias_of(t) ? moved.clone() : moved);
    if (t.grad().defined()) {
      Tensor g = t.grad().to(device).to(t.dtype());
      t.mutable_grad() = g;
    }
  };
  for (auto& p : parameters_) convert(p.value());
  for (auto& b : buffers_) convert(b.value());
  for (auto& child : children_) child.value()->to(device, dtype);
}
void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& p : parameters_)
    if (p.value().defined()) set_data(p.value(), p.value().to(device));
  for (auto& b : buffers_)
    if (b.value().defined()) set_data(b.value(), b.value().to(device));
  for (auto& child : children_) child.value()->to(device);
}
void Module::to(ScalarType dtype) {
  for (auto& p : parameters_)
    if (p.value().defined()) return to(p.value().device(), dtype);
  for (auto& child : children_) child.value()->to(dtype);
}

void Module::apply(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (const auto& child : children_.values()) child->apply(fn);
}

void Module::apply(const std::function<void(const std::string&, Module&)>& fn, const std::string& name_prefix) {
  fn(name_prefix, *this);
  for (const auto& item : children_)
    item.value()->apply(fn, name_prefix.empty() ? item.key() : name_prefix + "." + item.key());
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& p : parameters()) {
    Tensor& g = p.mutable_grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      g = Tensor();
    } else {
      NoGradGuard no_grad;
      g.detach_();
      g.zero_();
    }
  }
}

void Module::pretty_print(std::ostream& os) const { os << name(); }

namespace {
void print_tree(std::ostream& os, const Module& m, int indent) {
  m.pretty_print(os);
  auto children = m.named_children();
  if (children.is_empty()) return;
  os << "(\n";
  for (const auto& c : children) {
    os << std::string(indent + 2, ' ') << "(" << c.key() << "): ";
    print_tree(os, *c.value(), indent + 2);
    os << "\n";
  }
  os << std::string(indent, ' ') << ")";
}
}  // namespace

std::ostream& operator<<(std::ostream& os, const Module& m) {
  print_tree(os, m, 0);
  return os;
}

// ---------------------------------------------------------------- Sequential

Tensor SequentialImpl::forward(const Tensor& input, SourceLoc loc) {
  LOOM_CHECK(!items_.empty(), "Sequential", loc, "cannot call forward() on an empty Sequential");
  Tensor x = input;
  for (const Item& item : items_) x = item.forward(x, loc);
  return x;
}

const std::shared_ptr<Module>& SequentialImpl::ptr(size_t index) const {
  LOOM_CHECK(index < items_.size(), "Sequential", SourceLoc::current(), "index ", index,
             " is out of range for a Sequential of ", items_.size(), " modules");
  return items_[index].module;
}

}  // namespace nn
}  // namespace loom
