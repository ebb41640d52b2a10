// Saving and loading parameters, as torch::save / torch::load of a module:
// every named parameter and buffer, by name, with its dtype and shape, in
// one binary file (a header "loom-params 1", then per tensor its name,
// dtype, shape and contiguous little-endian data). load() checks every
// name, shape and dtype before writing anything, then copies the values
// into the module's own tensors (which keep their identity).
#pragma once
#include <string>
#include <vector>

#include <loom/nn/module.h>

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

}  // namespace loom
#pragma GCC visibility pop
