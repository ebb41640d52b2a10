// loom::nn::Module, as torch::nn::Module: named parameters, buffers and
// submodules, train/eval, to(device/dtype); ModuleHolder and LOOM_MODULE
// (libtorch's TORCH_MODULE), so `Linear fc(784, 10)` is a shared handle
// to a `LinearImpl`.
#pragma once
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <loom/tensor.h>

#pragma GCC visibility push(default)
namespace loom {

// An insertion-ordered map (torch::OrderedDict): `for (auto& p : m.named_parameters()) p.key(), p.value()`.
template <class Key, class Value>
class OrderedDict {
 public:
  class Item {
   public:
    Item(Key k, Value v) : kv_(std::move(k), std::move(v)) {}
    const Key& key() const { return kv_.first; }
    Value& value() { return kv_.second; }
    const Value& value() const { return kv_.second; }
    Value* operator->() { return &kv_.second; }

   private:
    std::pair<Key, Value> kv_;
  };
  Value& insert(Key k, Value v) {
    items_.emplace_back(std::move(k), std::move(v));
    return items_.back().value();
  }
  const Value* find(const Key& k) const {
    for (const Item& i : items_)
      if (i.key() == k) return &i.value();
    return nullptr;
  }
  Value* find(const Key& k) {
    for (Item& i : items_)
      if (i.key() == k) return &i.value();
    return nullptr;
  }
  bool contains(const Key& k) const { return find(k) != nullptr; }
  // Throws loom::Error for a missing key.
  const Value& operator[](const Key& k) const;
  Value& operator[](const Key& k) { return const_cast<Value&>(static_cast<const OrderedDict&>(*this)[k]); }
  size_t size() const { return items_.size(); }
  bool is_empty() const { return items_.empty(); }
  std::vector<Key> keys() const {
    std::vector<Key> r;
    for (const Item& i : items_) r.push_back(i.key());
    return r;
  }
  std::vector<Value> values() const {
    std::vector<Value> r;
    for (const Item& i : items_) r.push_back(i.value());
    return r;
  }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
};

namespace detail {
[[noreturn]] void throw_missing_key(const std::string& key);

// The module class a type names: a holder's Impl, or the type itself.
template <class T, class = void>
struct ContainedOf {
  using type = T;
};
template <class T>
struct ContainedOf<T, std::void_t<typename T::ContainedType>> {
  using type = typename T::ContainedType;
};

// Whether M::forward takes the caller's location after the tensor (the
// built-in modules do; a user's module need not).
template <class M, class = void>
struct forward_takes_loc : std::false_type {};
template <class M>
struct forward_takes_loc<M, std::void_t<decltype(std::declval<M&>().forward(std::declval<const Tensor&>(),
                                                                               std::declval<const SourceLoc&>()))>>
    : std::true_type {};
// A holder's call `m(x)` that passes the caller's line on: one argument, a
// tensor, to a forward that takes a location.
// Whether M::forward(a, b, loc) can be called: a two-argument call (an
// input and a state, as the recurrent layers take) then passes the
// caller's line on.
template <class M, class A, class B, class = void>
struct forward_takes_loc2 : std::false_type {};
template <class M, class A, class B>
struct forward_takes_loc2<M, A, B,
                          std::void_t<decltype(std::declval<M&>().forward(std::declval<A>(), std::declval<B>(),
                                                                          std::declval<const SourceLoc&>()))>>
    : std::true_type {};
template <class M, class... Args>
constexpr bool passes_loc() {
  if constexpr (sizeof...(Args) == 1)
    return forward_takes_loc<M>::value && (std::is_convertible_v<Args, const Tensor&> && ...);
  else if constexpr (sizeof...(Args) == 2)
    return forward_takes_loc2<M, Args...>::value;
  else
    return false;
}
}
template <class Key, class Value>
const Value& OrderedDict<Key, Value>::operator[](const Key& k) const {
  if (const Value* v = find(k)) return *v;
  if constexpr (std::is_convertible_v<Key, std::string>) detail::throw_missing_key(k);
  else detail::throw_missing_key("?");
}

namespace nn {

template <class Contained>
class ModuleHolder;

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string name);
  Module();
  virtual ~Module();

  // The class name ("Linear" for LinearImpl), or the one given.
  const std::string& name() const;

  std::vector<Tensor> parameters(bool recurse = true) const;
  OrderedDict<std::string, Tensor> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  OrderedDict<std::string, Tensor> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  OrderedDict<std::string, std::shared_ptr<Module>> named_children() const;
  // This module and every descendant, depth first. With include_self the
  // module must be owned by a std::shared_ptr (a holder, make_shared): not
  // inside its own constructor, not on the stack; modules(false) works there.
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true, LOOM_LOC);
  // The same, with their dotted names ("", "encoder", "encoder.0", ...).
  OrderedDict<std::string, std::shared_ptr<Module>> named_modules(const std::string& name_prefix = "",
                                                                 bool include_self = true, LOOM_LOC);

  // Training mode (Dropout is active); recursive. Read inside loom::compile's
  // trace, the mode becomes part of it: a later call in the other mode
  // traces again.
  virtual void train(bool on = true);
  void eval() { train(false); }
  virtual bool is_training() const;

  // Moves/converts every parameter and buffer in place: the tensors keep
  // their identity (an optimizer made before still holds them).
  virtual void to(Device device);
  virtual void to(ScalarType dtype);
  virtual void to(Device device, ScalarType dtype);

  void zero_grad(bool set_to_none = true);

  // A parameter: a leaf that requires grad (unless requires_grad is false).
  Tensor& register_parameter(std::string name, Tensor tensor, bool requires_grad = true, LOOM_LOC);
  // State that is saved and moved with the module but not trained.
  Tensor& register_buffer(std::string name, Tensor tensor, LOOM_LOC);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module, LOOM_LOC) {
    add_child(std::move(name), module, loc);
    return module;
  }
  template <class M>
  std::shared_ptr<M> register_module(std::string name, ModuleHolder<M> holder, LOOM_LOC) {
    return register_module(std::move(name), holder.ptr(), loc);
  }

  virtual void pretty_print(std::ostream& os) const;

  // This module as its concrete type (a holder names its Impl: as<Linear>()
  // is a LinearImpl*), or nullptr when it is another kind.
  template <class T>
  typename detail::ContainedOf<T>::type* as() noexcept {
    return dynamic_cast<typename detail::ContainedOf<T>::type*>(this);
  }
  template <class T>
  const typename detail::ContainedOf<T>::type* as() const noexcept {
    return dynamic_cast<const typename detail::ContainedOf<T>::type*>(this);
  }
  // fn on this module, then on every descendant, depth first (libtorch's
  // apply: initialize weights by module type, count parameters, ...).
  void apply(const std::function<void(Module&)>& fn);
  void apply(const std::function<void(const std::string&, Module&)>& fn, const std::string& name_prefix = "");

 private:
  void add_child(std::string name, std::shared_ptr<Module> child, const SourceLoc& loc);
  void collect(const std::string& prefix, bool recurse, bool buffers, OrderedDict<std::string, Tensor>& out) const;
  mutable std::string name_;
  OrderedDict<std::string, Tensor> parameters_;
  OrderedDict<std::string, Tensor> buffers_;
  OrderedDict<std::string, std::shared_ptr<Module>> children_;
  bool training_ = true;
};

// Prints the module tree, as libtorch: "Sequential(\n  (0): Linear(...)\n ...)".
std::ostream& operator<<(std::ostream& os, const Module& m);

// A shared handle to a module implementation (torch::nn::ModuleHolder).
template <class Contained>
class ModuleHolder {
 public:
  using ContainedType = Contained;
  // Default-constructs the module when it can be (ReLU r;), as libtorch.
  ModuleHolder() : impl_(make_default()) {}
  ModuleHolder(std::nullptr_t) {}  // NOLINT: an empty holder, to be assigned later
  ModuleHolder(std::shared_ptr<Contained> module) : impl_(std::move(module)) {}  // NOLINT
  template <class Head, class... Tail,
            class = std::enable_if_t<!(std::is_same_v<std::decay_t<Head>, ModuleHolder> && sizeof...(Tail) == 0) &&
                                     !std::is_same_v<std::decay_t<Head>, std::nullptr_t>>>
  explicit ModuleHolder(Head&& head, Tail&&... tail)
      : impl_(std::make_shared<Contained>(std::forward<Head>(head), std::forward<Tail>(tail)...)) {}

  Contained* operator->() { return impl_.get(); }
  const Contained* operator->() const { return impl_.get(); }
  Contained& operator*() { return *impl_; }
  const Contained& operator*() const { return *impl_; }
  const std::shared_ptr<Contained>& ptr() const { return impl_; }
  Contained* get() { return impl_.get(); }
  const Contained* get() const { return impl_.get(); }
  bool is_empty() const { return impl_ == nullptr; }
  explicit operator bool() const noexcept { return impl_ != nullptr; }
  // m(x): the module's forward, given the caller's line when it takes one
  // (so errors and the graph name the user's line, not this header's).
  template <class T, std::enable_if_t<detail::passes_loc<Contained, T>(), int> = 0>
  auto operator()(T&& x, SourceLoc loc = SourceLoc::current()) {
    return impl_->forward(std::forward<T>(x), loc);
  }
  template <class A, class B, std::enable_if_t<detail::passes_loc<Contained, A, B>(), int> = 0>
  auto operator()(A&& a, B&& b, SourceLoc loc = SourceLoc::current()) {
    return impl_->forward(std::forward<A>(a), std::forward<B>(b), loc);
  }
  template <class... Args, std::enable_if_t<!detail::passes_loc<Contained, Args...>(), int> = 0>
  auto operator()(Args&&... args) {
    return impl_->forward(std::forward<Args>(args)...);
  }

 private:
  static std::shared_ptr<Contained> make_default() {
    if constexpr (std::is_default_constructible_v<Contained>) return std::make_shared<Contained>();
    else return nullptr;
  }
  std::shared_ptr<Contained> impl_;
};

template <class C>
std::ostream& operator<<(std::ostream& os, const ModuleHolder<C>& m) {
  return os << *m;
}

}  // namespace nn
}  // namespace loom

// LOOM_MODULE(Linear): `class Linear` holding a `LinearImpl`, as TORCH_MODULE.
#define LOOM_MODULE(Name)                                            \
  class Name : public ::loom::nn::ModuleHolder<Name##Impl> {         \
   public:                                                           \
    using ::loom::nn::ModuleHolder<Name##Impl>::ModuleHolder;        \
  }

#pragma GCC visibility pop
