// Shared vocabulary of the reference backend's evaluators: one Step per
// graph node, evaluated into a fresh contiguous buffer from contiguous inputs.
// Plain C++ on purpose: this is the oracle the JIT backends are tested
// against, so it shares no lowering or codegen with them.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <loom/dtype.h>

#include "ir/dtype_dispatch.h"
#include "ir/node.h"
#include "runtime/backend.h"
#include "runtime/reference/scalar_ops.h"

namespace loom::runtime::reference {

struct Step {
  ir::Op op;
  ScalarType dtype;
  ir::Dims shape;
  ir::Attrs attr;
  std::vector<uint32_t> inputs;  // step indices
  uint32_t scalar_begin = 0;     // into RunArgs::scalars
  int32_t input_slot = -1;       // Input steps: index into RunArgs::inputs
};

// A computed (or bound) value: contiguous data of a step's dtype and shape.
struct Value {
  const void* data = nullptr;
  ScalarType dtype = kFloat;
  const ir::Dims* shape = nullptr;
  int64_t numel() const { return shape->numel(); }
  template <class T> const T* as() const { return static_cast<const T*>(data); }
};

// What an evaluator gets: the step, its input values, the run's scalars, and
// the output memory (numel(step.shape) elements of step.dtype).
struct EvalContext {
  const Step& step;
  std::span<const Value* const> in;
  std::span<const ir::RtScalar> scalars;  // this step's scalars only
  void* out;
  uint32_t node;  // canonical index, for RunError
  [[noreturn]] void fail(const std::string& message) const { throw RunError{node, message}; }
};

void eval_leaf(const EvalContext& c);
void eval_unary(const EvalContext& c);
void eval_binary(const EvalContext& c);
void eval_where(const EvalContext& c);
void eval_reduce(const EvalContext& c);
void eval_move(const EvalContext& c);
// eval_sort_scan.cpp, reached through eval_move.
void eval_argsort(const EvalContext& c);
void eval_scan(const EvalContext& c);
// eval_attention.cpp: Attention and its two gradients.
void eval_attention(const EvalContext& c);
// eval_conv.cpp: Conv2d and its two gradients.
void eval_conv(const EvalContext& c);

using ir::dispatch_dtype;  // the evaluators run their typed loops through it

// Floating point in the reference's sense: float, double, bfloat16 and
// float16 (whose arithmetic goes through float, rounding each result back).
template <class T>
inline constexpr bool is_real_v = std::is_floating_point_v<T> || ir::is_reduced_float_v<T>;


using ir::contiguous_strides;

// Element offsets of an input broadcast (NumPy rules, right-aligned) to
// `out_shape`, in row-major order of the output.
class BroadcastIndex {
 public:
  BroadcastIndex(const ir::Dims& in_shape, const ir::Dims& out_shape);
  // Offsets for output elements [0, n) written to `offsets`.
  void fill(std::vector<int64_t>& offsets) const;
  bool identity() const { return identity_; }

 private:
  ir::Dims out_shape_, strides_;
  bool identity_;
};

}  // namespace loom::runtime::reference
