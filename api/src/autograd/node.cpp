// Node, SavedVariable, OpGrad, AccumulateGrad, grad mode, and the helpers
// that give a tensor its history (meta.h, node.h).
#include "api/src/autograd/node.h"

#include <atomic>

#include "api/src/block_pool.h"
#include "api/src/lazy.h"
#include "api/src/record.h"

namespace loom {

namespace detail {
__attribute__((tls_model("initial-exec"))) thread_local bool t_grad_disabled = false;
}

bool GradMode::is_enabled() { return !detail::t_grad_disabled; }
void GradMode::set_enabled(bool enabled) { detail::t_grad_disabled = !enabled; }

namespace autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node(std::vector<Edge> next)
    : next_(std::move(next)), sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}
Node::~Node() = default;

uint32_t Node::add_input_metadata(const Tensor& t) {
  GradInfo info;
  const auto& v = t.impl()->view;
  info.dim = v.sizes.n;
  for (size_t d = 0; d < v.sizes.n; ++d) info.sizes[d] = v.sizes[d];
  info.dtype = t.impl()->storage->dtype;
  info.device = t.impl()->storage->device;
  inputs_.push_back(info);
  return static_cast<uint32_t>(inputs_.size() - 1);
}

}  // namespace autograd

namespace detail {

// ---------------------------------------------------------------- history

AutogradMeta& meta_of(const Tensor& t) {
  TensorImpl& im = *t.impl();
  // Pooled (block_pool.h), as every object an op records: one per output of
  // a differentiable op.
  if (!im.autograd) im.autograd = make_pooled<AutogradMeta>();
  return *im.autograd;
}

Tensor strided_alias(const Tensor& t, const ViewSpec& view) {
  return Tensor(make_pooled<TensorImpl>(t.impl()->storage, view.sizes, view.strides, view.offset));
}

Tensor plain_alias(const Tensor& t) { return strided_alias(t, t.impl()->view); }

void set_history(const Tensor& out, const std::shared_ptr<autograd::Node>& fn) {
  TensorImpl& im = *out.impl();
  AutogradMeta& m = meta_of(out);
  m.grad_fn = fn;
  m.output_nr = fn->add_input_metadata(out);
  im.requires_grad = true;
  im.view_version = im.storage->version.load(std::memory_order_relaxed);
}

autograd::Edge gradient_edge(const Tensor& t) {
  TensorImpl& im = *t.impl();
  if (im.view_base && im.view_base->requires_grad &&
      im.view_version != im.storage->version.load(std::memory_order_relaxed))
    regenerate_view_history(t);
  if (!im.requires_grad || !im.autograd) return {};
  AutogradMeta& m = *im.autograd;
  if (m.grad_fn) return {m.grad_fn, m.output_nr};
  std::shared_ptr<autograd::Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = make_pooled<AccumulateGrad>(t.impl());
    m.grad_accumulator = acc;
  }
  return {std::move(acc), 0};
}

// ---------------------------------------------------------------- SavedVariable

SavedVariable::SavedVariable(const Tensor& t, bool is_output) {
  if (!t.defined()) return;
  was_defined_ = true;
  is_output_ = is_output;
  version_ = t.impl()->storage->version.load(std::memory_order_relaxed);
  if (is_output) {
    data_ = plain_alias(t);
    output_nr_ = t.impl()->autograd ? t.impl()->autograd->output_nr : 0;
  } else {
    data_ = t;
  }
}

void SavedVariable::reset() { data_ = Tensor(); }

void SavedVariable::replace(const Tensor& t) {
  data_ = t;
  version_ = t.impl()->storage->version.load(std::memory_order_relaxed);
}

Tensor SavedVariable::unpack(const autograd::Node& owner) const {
  if (!data_.defined()) {
    if (!was_defined_) return Tensor();
    throw_error("backward",
                "trying to backward through the graph a second time (or to use tensors saved for " + owner.name() +
                    " after they were freed): saved tensors are freed by backward() and autograd::grad(); pass "
                    "retain_graph=true to the first call if you need to backward through the graph again",
                owner.where());
  }
  const uint32_t now = data_.impl()->storage->version.load(std::memory_order_relaxed);
  if (now != version_) {
    std::ostringstream os;
    os << "one of the tensors needed for the gradient (" << owner.name() << ") was modified by an in-place "
       << "operation: " << describe(data_) << ", saved by the op recorded here, is at version " << now
       << "; expected version " << version_ << " instead. Write out-of-place (y = y + 1, not y.add_(1)) or "
       << "clone() it before the in-place write";
    throw_error("backward", os.str(), owner.where());
  }
  if (!is_output_ || !GradMode::is_enabled()) return data_;
  // create_graph: the output gets its grad_fn back, so the gradient of this
  // rule flows into the node that made it.
  Tensor r = plain_alias(data_);
  AutogradMeta& m = meta_of(r);
  m.grad_fn = std::const_pointer_cast<autograd::Node>(owner.shared_from_this());
  m.output_nr = output_nr_;
  r.impl()->requires_grad = true;
  return r;
}

// ---------------------------------------------------------------- OpGrad

autograd::variable_list OpGrad::apply(autograd::variable_list&& grads) {
  const Tensor& g = grads.empty() ? Tensor() : grads[0];
  if (!g.defined()) return autograd::variable_list(num_outputs());
  RecordAt at(where());  // the rule's nodes point at the forward op's line
  autograd::variable_list r = vjp_(*this, g);
  for (size_t i = 0; i < r.size(); ++i)
    if (!needs(i)) r[i] = Tensor();
  return r;
}

void OpGrad::release_variables() {
  for (SavedVariable& s : saved_) s.reset();
}

namespace {
std::shared_ptr<OpGrad> attach_inputs(const char* name, Vjp vjp, const Tensor* const* inputs, size_t count,
                                      const Tensor& out, const SourceLoc& loc) {
  if (!grad_mode() || !is_floating_point(out.impl()->storage->dtype)) return nullptr;
  auto node = make_pooled<OpGrad>(name, vjp, count);
  bool any = false;
  for (size_t i = 0; i < count; ++i) {
    const Tensor* t = inputs[i];
    autograd::Edge e = t && t->defined() ? gradient_edge(*t) : autograd::Edge{};
    any = any || e.is_valid();
    node->add_next_edge(std::move(e));
  }
  if (!any) return nullptr;
  node->set_where(loc);
  set_history(out, node);
  return node;
}
}  // namespace

std::shared_ptr<OpGrad> attach(const char* name, Vjp vjp, const std::vector<const Tensor*>& inputs,
                               const Tensor& out, const SourceLoc& loc) {
  return attach_inputs(name, vjp, inputs.data(), inputs.size(), out, loc);
}

std::shared_ptr<OpGrad> attach(const char* name, Vjp vjp, std::initializer_list<const Tensor*> inputs,
                               const Tensor& out, const SourceLoc& loc) {
  return attach_inputs(name, vjp, inputs.begin(), inputs.size(), out, loc);
}

// ---------------------------------------------------------------- AccumulateGrad

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  add_input_metadata(Tensor(leaf_));
}

autograd::variable_list AccumulateGrad::apply(autograd::variable_list&& grads) {
  if (grads.empty() || !grads[0].defined()) return {};
  Tensor g = std::move(grads[0]);
  grads.clear();
  AutogradMeta& m = meta_of(Tensor(leaf_));
  if (GradMode::is_enabled()) {  // create_graph: the gradient keeps its own history
    m.grad = m.grad.defined() ? m.grad + g : g;
    return {};
  }
  if (m.grad.defined()) {
    m.grad.add_(g);  // in place: a materialized .grad() keeps its buffer
    return {};
  }
  // Adopted as is when nothing else holds it and it is a whole contiguous
  // tensor; else a copy, so that in-place updates of one .grad() never
  // reach another tensor.
  const TensorImpl& gi = *g.impl();
  const bool whole = gi.view.offset == 0 && gi.view.sizes.numel() == gi.storage->numel &&
                     gi.view.strides == ir::contiguous_strides(gi.view.sizes);
  // Nothing else can reach the storage: g alone, or g and the base it is a
  // view of (a transposed product transposed back), which only g holds, and
  // the pending list the storage waits on.
  const long holders = 1 + (gi.view_base && gi.view_base.use_count() == 1 && gi.view_base->storage == gi.storage) +
                       pending_list_refs(*gi.storage);
  const bool alone = g.impl().use_count() == 1 && gi.storage.use_count() == holders;
  m.grad = whole && alone ? plain_alias(g) : g.clone();
  return {};
}

// ---------------------------------------------------------------- fitting gradients

Tensor fit_gradient(const Tensor& grad, const autograd::GradInfo& want, const autograd::Node& from) {
  Tensor g = grad;
  if (!(g.sizes() == want.shape())) {
    int64_t want_numel = 1;
    for (int64_t s : want.shape()) want_numel *= s;
    const int64_t lead = g.dim() - want.dim;
    if (lead < 0 && g.numel() == want_numel) {
      g = g.reshape(want.shape());  // only size-1 dims differ: the same elements
    } else {
      std::vector<int64_t> dims;
      bool ok = lead >= 0;
      for (int64_t d = 0; ok && d < lead; ++d) dims.push_back(d);
      for (int64_t d = 0; ok && d < want.dim; ++d) {
        const int64_t have = g.size(lead + d);
        if (want.sizes[d] == 1 && have != 1) dims.push_back(lead + d);
        else if (want.sizes[d] != have) ok = false;
      }
      LOOM_CHECK(ok, "backward", from.where(), "internal error: ", from.name(), " returned a gradient of shape ",
                 g.sizes(), " for an input of shape ", want.shape());
      if (!dims.empty()) g = g.sum(dims, true);
      g = g.reshape(want.shape());
    }
  }
  if (g.dtype() != want.dtype) g = g.to(want.dtype);
  if (g.device() != want.device) g = g.to(want.device);
  return g;
}

}  // namespace detail
}  // namespace loom
