// Leaves: constants, ranges and random numbers. Input leaves are bound, not evaluated.
#include <cmath>

#include "ir/philox.h"
#include "runtime/reference/eval.h"

namespace loom::runtime::reference {

void eval_leaf(const EvalContext& c) {
  const Step& s = c.step;
  const int64_t n = s.shape.numel();
  dispatch_dtype(s.dtype, [&]<class T>() {
    T* out = static_cast<T*>(c.out);
    switch (s.op) {
      case ir::Op::Full: {
        T v = from_scalar<T>(c.scalars[0]);
        for (int64_t i = 0; i < n; ++i) out[i] = v;
        break;
      }
      case ir::Op::Arange: {
        // Computed in the widest type of the dtype's kind, as PyTorch does.
        if constexpr (is_real_v<T>) {
          for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(c.scalars[0].f + static_cast<double>(i) * c.scalars[1].f);
        } else {
          for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(c.scalars[0].i + i * c.scalars[1].i);
        }
        break;
      }
      case ir::Op::Linspace: {
        // PyTorch's symmetric form, exact at both ends: the ends are first
        // converted to T, the step is T for floating types, double for integers.
        using Step = std::conditional_t<std::is_integral_v<T>, double, std::conditional_t<ir::is_reduced_float_v<T>, float, T>>;
        const T start = from_scalar<T>(c.scalars[0]), end = from_scalar<T>(c.scalars[1]);
        const Step step = n > 1 ? (static_cast<Step>(end) - static_cast<Step>(start)) / static_cast<Step>(n - 1) : Step(0);
        const int64_t half = n / 2;
        if (n == 1) out[0] = start;  // PyTorch fills a single step with start
        for (int64_t i = n == 1; i < n; ++i)
          out[i] = static_cast<T>(i < half ? start + step * static_cast<Step>(i) : end - step * static_cast<Step>(n - 1 - i));
        break;
      }
      case ir::Op::RandUniform:
      case ir::Op::RandNormal: {
        auto seed = static_cast<uint64_t>(c.scalars[0].i), offset = static_cast<uint64_t>(c.scalars[1].i);
        bool normal = s.op == ir::Op::RandNormal;
        for (int64_t i = 0; i < n; ++i) {
          double v = normal ? ir::philox::normal(seed, offset, i) : ir::philox::uniform(seed, offset, i);
          // bfloat16, float16: the float32 value, rounded (a uniform one may round up to 1).
          if constexpr (std::is_same_v<T, float> || ir::is_reduced_float_v<T>)
            out[i] = T(normal ? static_cast<float>(v) : ir::philox::uniform_f32(v));
          else out[i] = static_cast<T>(v);
        }
        break;
      }
      default: c.fail("not a leaf the reference backend evaluates");
    }
  });
}

}  // namespace loom::runtime::reference
