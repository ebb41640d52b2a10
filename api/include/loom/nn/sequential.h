// nn::Sequential: modules applied in order (torch::nn::Sequential), each
// taking and returning one tensor. Sequential seq(Linear(784, 64), ReLU(),
// Linear(64, 10)); seq->forward(x). Submodules are named "0", "1", ...
#pragma once
#include <functional>
#include <string>
#include <type_traits>

#include <loom/nn/module.h>

#pragma GCC visibility push(default)
namespace loom {

namespace nn {

class SequentialImpl : public Module {
 public:
  SequentialImpl() = default;
  template <class... Modules>
  explicit SequentialImpl(Modules&&... modules) {
    (push_back(std::forward<Modules>(modules)), ...);
  }

  template <class M>
  void push_back(std::shared_ptr<M> module) {
    push_back(std::to_string(items_.size()), std::move(module));
  }
  template <class M>
  void push_back(const ModuleHolder<M>& holder) {
    push_back(holder.ptr());
  }
  template <class M>
  void push_back(std::string name, const ModuleHolder<M>& holder) {
    push_back(std::move(name), holder.ptr());
  }
  template <class M>
  void push_back(std::string name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "Sequential holds modules");
    M* raw = module.get();
    items_.push_back({module, [raw](const Tensor& x, const SourceLoc& loc) -> Tensor {
                        if constexpr (::loom::detail::forward_takes_loc<M>::value) return raw->forward(x, loc);
                        else return raw->forward(x);
                      }});
    register_module(std::move(name), std::move(module));
  }

  // Runs every module in order.
  Tensor forward(const Tensor& input, LOOM_LOC);
  size_t size() const { return items_.size(); }
  bool is_empty() const { return items_.empty(); }
  const std::shared_ptr<Module>& ptr(size_t index) const;
  template <class M>
  std::shared_ptr<M> ptr(size_t index) const {
    return std::dynamic_pointer_cast<M>(ptr(index));
  }
  Module& operator[](size_t index) const { return *ptr(index); }
  void pretty_print(std::ostream& os) const override { os << "Sequential"; }

 private:
  struct Item {
    std::shared_ptr<Module> module;
    std::function<Tensor(const Tensor&, const SourceLoc&)> forward;
  };
  std::vector<Item> items_;
};
LOOM_MODULE(Sequential);

}  // namespace nn
}  // namespace loom
#pragma GCC visibility pop
