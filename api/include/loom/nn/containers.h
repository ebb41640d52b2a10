// Containers and shape modules, as torch::nn's: ModuleList and ModuleDict
// (modules held and registered, called by the user's forward), Identity,
// Unflatten.
#pragma once
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <loom/arg.h>
#include <loom/nn/module.h>

#pragma GCC visibility push(default)
namespace loom::nn {

// Modules registered as "0", "1", ...: list[i] is the i-th, iteration gives
// shared_ptr<Module>; it has no forward (the user's loop calls each).
class ModuleListImpl : public Module {
 public:
  ModuleListImpl() = default;
  template <class... Modules>
  explicit ModuleListImpl(Modules&&... modules) {
    (push_back(std::forward<Modules>(modules)), ...);
  }
  template <class M>
  void push_back(std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "ModuleList holds modules");
    modules_.push_back(module);
    register_module(std::to_string(modules_.size() - 1), std::move(module));
  }
  template <class M>
  void push_back(const ModuleHolder<M>& holder) {
    push_back(holder.ptr());
  }
  template <class Container>
  void extend(const Container& container) {
    for (const auto& m : container) push_back(m);
  }
  const std::shared_ptr<Module>& ptr(size_t index) const;
  template <class M>
  std::shared_ptr<typename detail::ContainedOf<M>::type> ptr(size_t index) const {
    return std::dynamic_pointer_cast<typename detail::ContainedOf<M>::type>(ptr(index));
  }
  template <class M>
  typename detail::ContainedOf<M>::type& at(size_t index) const {
    auto* m = ptr(index)->template as<M>();
    if (!m) throw Error("ModuleList::at: module " + std::to_string(index) + " is not of the requested type");
    return *m;
  }
  std::shared_ptr<Module> operator[](size_t index) const { return ptr(index); }
  size_t size() const noexcept { return modules_.size(); }
  bool is_empty() const noexcept { return modules_.empty(); }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }
  void pretty_print(std::ostream& os) const override { os << "ModuleList"; }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};
LOOM_MODULE(ModuleList);

// Modules by name, in insertion order; registered under their keys.
class ModuleDictImpl : public Module {
 public:
  ModuleDictImpl() = default;
  explicit ModuleDictImpl(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules) {
    update(modules);
  }
  void insert(const std::string& key, std::shared_ptr<Module> module);
  template <class M>
  void insert(const std::string& key, const ModuleHolder<M>& holder) {
    insert(key, std::static_pointer_cast<Module>(holder.ptr()));
  }
  void update(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules) {
    for (const auto& kv : modules) insert(kv.first, kv.second);
  }
  std::shared_ptr<Module> operator[](const std::string& key) const;
  template <class M>
  typename detail::ContainedOf<M>::type& at(const std::string& key) const {
    auto* m = (*this)[key]->template as<M>();
    if (!m) throw Error("ModuleDict::at: module '" + key + "' is not of the requested type");
    return *m;
  }
  bool contains(const std::string& key) const noexcept { return modules_.contains(key); }
  std::vector<std::string> keys() const { return modules_.keys(); }
  std::vector<std::shared_ptr<Module>> values() const { return modules_.values(); }
  const OrderedDict<std::string, std::shared_ptr<Module>>& items() const { return modules_; }
  size_t size() const noexcept { return modules_.size(); }
  bool empty() const noexcept { return modules_.is_empty(); }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }
  void pretty_print(std::ostream& os) const override { os << "ModuleDict"; }

 private:
  OrderedDict<std::string, std::shared_ptr<Module>> modules_;
};
LOOM_MODULE(ModuleDict);

// Returns its input.
class IdentityImpl : public Module {
 public:
  IdentityImpl() = default;
  template <class... Ignored>
  explicit IdentityImpl(Ignored&&...) {}  // libtorch's accepts and ignores arguments
  Tensor forward(const Tensor& input) { return input; }
  void pretty_print(std::ostream& os) const override { os << "Identity()"; }
};
LOOM_MODULE(Identity);

struct UnflattenOptions {
  UnflattenOptions(int64_t dim, std::vector<int64_t> sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  LOOM_ARG(UnflattenOptions, int64_t, dim, 0)
  LOOM_ARG(UnflattenOptions, std::vector<int64_t>, sizes, {})
};

// Splits dim into sizes (one of them may be -1).
class UnflattenImpl : public Module {
 public:
  explicit UnflattenImpl(const UnflattenOptions& options) : options(options) {}
  UnflattenImpl(int64_t dim, std::vector<int64_t> sizes) : options(dim, std::move(sizes)) {}
  Tensor forward(const Tensor& input, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  UnflattenOptions options;
};
LOOM_MODULE(Unflatten);

}  // namespace loom::nn
#pragma GCC visibility pop
