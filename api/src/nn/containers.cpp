// loom/nn/containers.h.
#include <loom/nn/containers.h>

#include "api/src/record.h"

namespace loom::nn {

const std::shared_ptr<Module>& ModuleListImpl::ptr(size_t index) const {
  if (index >= modules_.size())
    throw Error("ModuleList: index " + std::to_string(index) + " is out of range for a list of " +
                std::to_string(modules_.size()) + " modules");
  return modules_[index];
}

void ModuleDictImpl::insert(const std::string& key, std::shared_ptr<Module> module) {
  if (modules_.contains(key)) throw Error("ModuleDict: key '" + key + "' is already present");
  modules_.insert(key, module);
  register_module(key, std::move(module));
}

std::shared_ptr<Module> ModuleDictImpl::operator[](const std::string& key) const {
  if (const std::shared_ptr<Module>* m = modules_.find(key)) return *m;
  throw Error("ModuleDict: no module under the key '" + key + "'");
}

Tensor UnflattenImpl::forward(const Tensor& input, SourceLoc loc) {
  detail::impl_of(input, "Unflatten", loc);
  const int64_t rank = input.dim();
  int64_t dim = options.dim();
  LOOM_CHECK(dim >= -rank && dim < rank, "Unflatten", loc, "dim ", dim, " is out of range for ",
             detail::describe(input));
  if (dim < 0) dim += rank;
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < dim; ++d) shape.push_back(input.size(d));
  for (int64_t s : options.sizes()) shape.push_back(s);
  for (int64_t d = dim + 1; d < rank; ++d) shape.push_back(input.size(d));
  return input.view(shape, loc);
}

void UnflattenImpl::pretty_print(std::ostream& os) const {
  os << "Unflatten(dim=" << options.dim() << ", unflattened_size=" << IntArrayRef(options.sizes()) << ")";
}

}  // namespace loom::nn
