// The backward nodes of built-in ops: SavedVariable (a tensor kept for the
// gradient, checked against in-place writes), OpGrad (one op's rule: its
// libtorch name, what it saved, and a plain function recording the
// gradient), AccumulateGrad (a leaf's sink), and attach(), which every
// rule file uses to give a result its history.
#pragma once
#include <loom/autograd.h>

#include <initializer_list>
#include <memory>
#include <vector>

#include "api/src/autograd/meta.h"
#include "ir/node.h"

namespace loom::detail {

// A tensor saved for backward. An input is kept as is; an output is kept
// without its autograd state (it would own its own grad_fn: a cycle) and
// gets it back on unpack. The storage version at save time must still be
// current on unpack, else the value the rule needs was overwritten.
class SavedVariable {
 public:
  SavedVariable() = default;
  SavedVariable(const Tensor& t, bool is_output);
  // `owner` is the node unpacking it (its name and source line go into errors).
  Tensor unpack(const autograd::Node& owner) const;
  void reset();
  bool defined() const { return data_.defined(); }
  bool aliases(const Storage& s) const { return data_.defined() && data_.impl()->storage.get() == &s; }
  bool is_output() const { return is_output_; }
  // Replaces the kept tensor by `t` (an in-place op snapshots its self).
  void replace(const Tensor& t);

 private:
  Tensor data_;
  uint32_t version_ = 0;
  uint32_t output_nr_ = 0;
  bool is_output_ = false;
  bool was_defined_ = false;
};

class OpGrad;
// A gradient rule: the gradient of the op's output -> one gradient per
// forward input (in next-edge order), in the output's shape where
// broadcasting applies (the engine sums it down and casts it to the input).
using Vjp = autograd::variable_list (*)(const OpGrad& node, const Tensor& grad);

class OpGrad final : public autograd::Node {
 public:
  // `edges`: how many next edges the op will add (one allocation, not a
  // growing vector's two or three).
  OpGrad(const char* name, Vjp vjp, size_t edges = 0) : name_(name), vjp_(vjp) { next_.reserve(edges); }
  std::string name() const override { return name_; }
  autograd::variable_list apply(autograd::variable_list&& grads) override;
  void release_variables() override;

  void save(const Tensor& t, bool is_output = false) {
    if (saved_.empty()) saved_.reserve(kSavedReserve);  // most rules save one to three tensors
    saved_.emplace_back(t, is_output);
  }
  Tensor saved(size_t i) const { return saved_[i].unpack(*this); }
  std::vector<SavedVariable>& saved_variables() { return saved_; }
  bool needs(size_t input) const { return should_compute_output(input); }

  // What a rule needs besides tensors: dims, masks, a shape, a scalar operand.
  ir::Attrs ints;
  ir::Dims shape;
  Scalar scalar;
  std::vector<int64_t> sizes;  // per input (cat)

 private:
  static constexpr size_t kSavedReserve = 3;
  const char* name_;
  Vjp vjp_;
  std::vector<SavedVariable> saved_;
};

// If `out` is floating point and grad mode is on: a new OpGrad with an edge
// per input (invalid for inputs that need no gradient), set as out's
// grad_fn. Null otherwise (the caller then saves nothing).
std::shared_ptr<OpGrad> attach(const char* name, Vjp vjp, std::initializer_list<const Tensor*> inputs,
                               const Tensor& out, const SourceLoc& loc);
std::shared_ptr<OpGrad> attach(const char* name, Vjp vjp, const std::vector<const Tensor*>& inputs,
                               const Tensor& out, const SourceLoc& loc);

// A leaf's gradient sink.
class AccumulateGrad final : public autograd::Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::string name() const override { return "AccumulateGrad"; }
  autograd::variable_list apply(autograd::variable_list&& grads) override;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// `grad` shaped, typed and placed as `want` (summing broadcast dims).
Tensor fit_gradient(const Tensor& grad, const autograd::GradInfo& want, const autograd::Node& from);

}  // namespace loom::detail
