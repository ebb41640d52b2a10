// Tensor's autograd methods: requires_grad, grad, grad_fn, backward, ...
#include <loom/autograd.h>

#include "api/src/autograd/node.h"
#include "api/src/record.h"

namespace loom {

using detail::impl_of;

bool Tensor::requires_grad() const { return detail::takes_grad(impl_of(*this, "requires_grad", SourceLoc::current())); }

Tensor& Tensor::requires_grad_(bool requires_grad, SourceLoc loc) {
  detail::TensorImpl& im = const_cast<detail::TensorImpl&>(impl_of(*this, "requires_grad_", loc));
  const bool leaf = !im.autograd || !im.autograd->grad_fn;
  if (!leaf) {
    LOOM_CHECK(requires_grad, "requires_grad_", loc,
               "you can only change requires_grad flags of leaf tensors; this one has a grad_fn (",
               im.autograd->grad_fn->name(), "). Use detach() to get a tensor without it");
    return *this;
  }
  LOOM_CHECK(!requires_grad || loom::is_floating_point(im.storage->dtype), "requires_grad_", loc,
             "only tensors of floating point dtype can require gradients, got ", detail::describe(*this));
  detail::meta_of(*this).leaf_requires_grad = requires_grad;
  im.requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const {
  impl_of(*this, "is_leaf", SourceLoc::current());
  if (takes_grad(*impl_)) detail::gradient_edge(*this);  // a stale view gets its history first
  return !impl_->autograd || !impl_->autograd->grad_fn;
}

const Tensor& Tensor::grad() const {
  static const Tensor undefined;
  impl_of(*this, "grad", SourceLoc::current());
  return impl_->autograd ? impl_->autograd->grad : undefined;
}

Tensor& Tensor::mutable_grad() {
  impl_of(*this, "mutable_grad", SourceLoc::current());
  return detail::meta_of(*this).grad;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  impl_of(*this, "grad_fn", SourceLoc::current());
  if (detail::takes_grad(*impl_)) detail::gradient_edge(*this);
  return impl_->autograd ? impl_->autograd->grad_fn : nullptr;
}

int64_t Tensor::output_nr() const {
  impl_of(*this, "output_nr", SourceLoc::current());
  return impl_->autograd ? impl_->autograd->output_nr : 0;
}

int64_t Tensor::_version() const {
  return impl_of(*this, "_version", SourceLoc::current()).storage->version.load(std::memory_order_relaxed);
}

void Tensor::retain_grad(SourceLoc loc) const {
  impl_of(*this, "retain_grad", loc);
  LOOM_CHECK(requires_grad(), "retain_grad", loc, "can't retain_grad on a tensor that has requires_grad=false (",
             detail::describe(*this), ")");
  if (is_leaf()) return;  // leaves keep their grad anyway
  detail::AutogradMeta& m = detail::meta_of(*this);
  if (m.retains_grad) return;
  m.retains_grad = true;
  // The node sees this tensor's gradient as its input `output_nr`: keep a
  // copy there (weakly: the tensor may be gone by then).
  std::weak_ptr<detail::TensorImpl> weak = impl_;
  m.grad_fn->add_pre_hook(m.output_nr, [weak](const Tensor& g) {
    if (auto im = weak.lock()) {
      detail::AutogradMeta& mm = detail::meta_of(Tensor(im));
      if (!mm.retains_grad) return Tensor();
      Tensor add = GradMode::is_enabled() ? g : g.detach();
      mm.grad = mm.grad.defined() ? mm.grad + add : add.clone();
    }
    return Tensor();
  });
}

bool Tensor::retains_grad() const {
  impl_of(*this, "retains_grad", SourceLoc::current());
  return impl_->autograd && impl_->autograd->retains_grad;
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph,
                      const std::vector<Tensor>& inputs, SourceLoc loc) const {
  impl_of(*this, "backward", loc);
  autograd::backward({*this}, {gradient}, retain_graph, create_graph, inputs, loc);
}

Tensor& Tensor::detach_() {
  detail::TensorImpl& im = const_cast<detail::TensorImpl&>(impl_of(*this, "detach_", SourceLoc::current()));
  im.autograd.reset();
  im.view_base.reset();
  im.requires_grad = false;
  return *this;
}

}  // namespace loom
