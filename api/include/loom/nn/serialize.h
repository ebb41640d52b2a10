// Saving and loading parameters, as torch::save / torch::load of a module
// (and of a tensor, a list of tensors, an optimizer's state):
// every named parameter and buffer, by name, with its dtype and shape, in
// one binary file (a header "loom-params 1", then per tensor its name,
// dtype, shape and contiguous little-endian data). load() checks every
// name, shape and dtype before writing anything, then copies the values
// into the module's own tensors (which keep their identity).
#pragma once
#include <string>
#include <vector>

#include <loom/nn/module.h>
#include <loom/optim/optimizer.h>

#pragma GCC visibility push(default)
namespace loom {

void save(const nn::Module& module, const std::string& path);
void load(nn::Module& module, const std::string& path);
template <class M>
void save(const std::shared_ptr<M>& module, const std::string& path) {
  save(static_cast<const nn::Module&>(*module), path);
}
template <class M>
void save(const nn::ModuleHolder<M>& module, const std::string& path) {
  save(static_cast<const nn::Module&>(*module), path);
}
template <class M>
void load(const std::shared_ptr<M>& module, const std::string& path) {
  load(static_cast<nn::Module&>(*module), path);
}
template <class M>
void load(nn::ModuleHolder<M>& module, const std::string& path) {
  load(static_cast<nn::Module&>(*module), path);
}

// A list of tensors (named "0", "1", ...); load() fills tensors that are
// undefined and checks and overwrites the others.
void save(const std::vector<Tensor>& tensors, const std::string& path);
void load(std::vector<Tensor>& tensors, const std::string& path);
// One tensor (libtorch's torch::save(tensor, path)); load() fills an
// undefined tensor, or checks and overwrites a defined one in place.
void save(const Tensor& tensor, const std::string& path);
void load(Tensor& tensor, const std::string& path);

// An optimizer's state: each group's learning rate, and each parameter's
// step count and state tensors (momentum buffers, moments, ...), by group
// and position. load() needs an optimizer over parameters of the same
// shapes in the same groups; it checks everything before writing anything.
void save(const optim::Optimizer& optimizer, const std::string& path);
void load(optim::Optimizer& optimizer, const std::string& path);

}  // namespace loom
#pragma GCC visibility pop
