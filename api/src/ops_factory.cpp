// Factories: constants, ranges, random numbers, borrowed and copied-in data.
#include <loom/export.h>
#include <loom/functions.h>

#include <cmath>
#include <cstring>
#include <mutex>

#include "api/src/lazy.h"
#include "api/src/autograd/hooks.h"
#include "api/src/record.h"
#include "ir/philox.h"

namespace loom {

using detail::new_node;
using detail::wrap;
namespace grad = detail::grad;

namespace {

struct Generator {
  std::mutex mu;
  uint64_t seed = 67280421310721ull;  // PyTorch's default seed
  uint64_t offset = 0;
  // Reserves `n` counters of the stream; returns (seed, first offset).
  std::pair<uint64_t, uint64_t> take(int64_t n) {
    std::lock_guard lock(mu);
    uint64_t first = offset;
    offset += static_cast<uint64_t>(n);
    return {seed, first};
  }
};
Generator& generator() {
  static Generator g;
  return g;
}

ir::Dims checked_sizes(IntArrayRef sizes, const char* op, const SourceLoc& loc) {
  for (int64_t s : sizes)
    LOOM_CHECK(s >= 0, op, loc, "trying to create tensor with negative dimension ", s, ": ", sizes);
  return detail::to_dims(sizes, op, loc);
}

Tensor full_node(const ir::Dims& shape, const Scalar& v, ScalarType dt, Device dev, const SourceLoc& loc) {
  auto n = new_node(ir::Op::Full, dt, dev, shape, loc);
  n->scalar[0] = detail::rt_scalar(v);
  n->num_scalars = 1;
  return wrap(std::move(n));
}

Tensor random(ir::Op op, IntArrayRef sizes, const TensorOptions& o, const char* name, const SourceLoc& loc) {
  ir::Dims shape = checked_sizes(sizes, name, loc);
  ScalarType dt = o.dtype();
  LOOM_CHECK(is_floating_point(dt), name, loc, "expected a floating-point dtype but got ", dt);
  auto [seed, offset] = generator().take(shape.numel());
  auto n = new_node(op, dt, detail::resolve_device(o.device(), name, loc), shape, loc);
  n->scalar[0] = ir::RtScalar{0, static_cast<int64_t>(seed)};
  n->scalar[1] = ir::RtScalar{0, static_cast<int64_t>(offset)};
  n->num_scalars = 2;
  return wrap(std::move(n));
}

TensorOptions like(const Tensor& t, const TensorOptions& o) {
  TensorOptions r = TensorOptions().dtype(o.has_dtype() ? o.dtype() : t.dtype());
  return r.device(o.has_device() ? o.device() : t.device()).requires_grad(o.requires_grad());
}



}  // namespace

namespace detail {
std::pair<uint64_t, uint64_t> take_random(int64_t n) { return generator().take(n); }
}  // namespace detail

void manual_seed(uint64_t seed) {
  Generator& g = generator();
  std::lock_guard lock(g.mu);
  g.seed = seed;
  g.offset = 0;
}

Tensor full(IntArrayRef sizes, const Scalar& value, const TensorOptions& o, SourceLoc loc) {
  // Without a dtype, full() infers it from the value, as torch.full does.
  ScalarType dt = o.has_dtype() ? o.dtype() : value.isBoolean() ? kBool : value.isIntegral() ? kLong : kFloat;
  return grad::with_requires_grad(
      full_node(checked_sizes(sizes, "full", loc), value, dt, detail::resolve_device(o.device(), "full", loc), loc), o,
      "full", loc);
}
Tensor empty(IntArrayRef sizes, const TensorOptions& o, SourceLoc loc) {
  // Lazy "uninitialized" memory is zeros: never garbage, and free if overwritten.
  return grad::with_requires_grad(
      full_node(checked_sizes(sizes, "empty", loc), 0, o.dtype(), detail::resolve_device(o.device(), "empty", loc), loc),
      o, "empty", loc);
}
Tensor zeros(IntArrayRef sizes, const TensorOptions& o, SourceLoc loc) {
  return grad::with_requires_grad(
      full_node(checked_sizes(sizes, "zeros", loc), 0, o.dtype(), detail::resolve_device(o.device(), "zeros", loc), loc),
      o, "zeros", loc);
}
Tensor ones(IntArrayRef sizes, const TensorOptions& o, SourceLoc loc) {
  return grad::with_requires_grad(
      full_node(checked_sizes(sizes, "ones", loc), 1, o.dtype(), detail::resolve_device(o.device(), "ones", loc), loc),
      o, "ones", loc);
}

Tensor arange(const Scalar& end, const TensorOptions& o, SourceLoc loc) { return arange(0, end, 1, o, loc); }
Tensor arange(const Scalar& start, const Scalar& end, const TensorOptions& o, SourceLoc loc) {
  return arange(start, end, 1, o, loc);
}
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, const TensorOptions& o, SourceLoc loc) {
  const double s = start.toDouble(), e = end.toDouble(), st = step.toDouble();
  LOOM_CHECK(st != 0, "arange", loc, "step must be nonzero");
  LOOM_CHECK(std::isfinite(s) && std::isfinite(e), "arange", loc, "unsupported range: ", start, " -> ", end);
  LOOM_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "arange", loc,
             "upper bound and larger bound inconsistent with step sign (start ", start, ", end ", end, ", step ", step, ")");
  bool all_int = start.isIntegral(true) && end.isIntegral(true) && step.isIntegral(true);
  ScalarType dt = o.has_dtype() ? o.dtype() : all_int ? kLong : kFloat;
  int64_t n = all_int ? (end.toLong() - start.toLong() + step.toLong() + (step.toLong() > 0 ? -1 : 1)) / step.toLong()
                      : static_cast<int64_t>(std::ceil((e - s) / st));
  ir::Dims shape(&n, 1);
  auto node = new_node(ir::Op::Arange, dt, detail::resolve_device(o.device(), "arange", loc), shape, loc);
  node->scalar[0] = ir::RtScalar{s, start.toLong()};
  node->scalar[1] = ir::RtScalar{st, step.toLong()};
  node->num_scalars = 2;
  return grad::with_requires_grad(wrap(std::move(node)), o, "arange", loc);
}

Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, const TensorOptions& o, SourceLoc loc) {
  LOOM_CHECK(steps >= 0, "linspace", loc, "number of steps must be non-negative, got ", steps);
  ir::Dims shape(&steps, 1);
  auto node = new_node(ir::Op::Linspace, o.dtype(), detail::resolve_device(o.device(), "linspace", loc), shape, loc);
  node->scalar[0] = detail::rt_scalar(start);
  node->scalar[1] = detail::rt_scalar(end);
  node->num_scalars = 2;
  return grad::with_requires_grad(wrap(std::move(node)), o, "linspace", loc);
}

Tensor eye(int64_t n, const TensorOptions& o, SourceLoc loc) { return eye(n, n, o, loc); }
Tensor eye(int64_t n, int64_t m, const TensorOptions& o, SourceLoc loc) {
  LOOM_CHECK(n >= 0 && m >= 0, "eye", loc, "n and m must be non-negative, got ", n, " and ", m);
  TensorOptions idx = TensorOptions(kLong).device(o.device());
  return grad::with_requires_grad(eq(arange(n, idx, loc).unsqueeze(1, loc), arange(m, idx, loc), loc).to(o.dtype(), loc),
                                  o, "eye", loc);
}

Tensor rand(IntArrayRef sizes, const TensorOptions& o, SourceLoc loc) {
  return grad::with_requires_grad(random(ir::Op::RandUniform, sizes, o, "rand", loc), o, "rand", loc);
}
Tensor randn(IntArrayRef sizes, const TensorOptions& o, SourceLoc loc) {
  return grad::with_requires_grad(random(ir::Op::RandNormal, sizes, o, "randn", loc), o, "randn", loc);
}
Tensor randint(int64_t high, IntArrayRef sizes, const TensorOptions& o, SourceLoc loc) {
  return randint(0, high, sizes, o, loc);
}
Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, const TensorOptions& o, SourceLoc loc) {
  LOOM_CHECK(low < high, "randint", loc, "random_ expects 'from' to be less than 'to', but got from=", low,
             " >= to=", high);
  Tensor u = random(ir::Op::RandUniform, sizes, TensorOptions(kDouble).device(o.device()), "randint", loc);
  ScalarType dt = o.has_dtype() ? o.dtype() : kLong;
  return grad::with_requires_grad(
      (u.mul(static_cast<double>(high - low), loc).floor(loc).add(static_cast<double>(low), 1, loc)).to(dt, loc), o,
      "randint", loc);
}

Tensor randperm(int64_t n, const TensorOptions& o, SourceLoc loc) {
  LOOM_CHECK(n >= 0, "randperm", loc, "n must be non-negative, got ", n);
  ScalarType dt = o.has_dtype() ? o.dtype() : kLong;
  LOOM_CHECK(dt != kBool, "randperm", loc, "randperm is not implemented for Bool");
  // Fisher-Yates, swap i drawn from counter i of the reserved stream.
  auto [seed, first] = generator().take(n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    ir::philox::U32x4 r = ir::philox::philox4x32_10(first + static_cast<uint64_t>(i), seed);
    const uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(bits % static_cast<uint64_t>(i + 1))]);
  }
  return loom::tensor(p, TensorOptions(o).dtype(dt), loc);
}

// The *_like factories check `t` first, so an undefined one is reported as theirs.
Tensor empty_like(const Tensor& t, const TensorOptions& o, SourceLoc loc) {
  detail::impl_of(t, "empty_like", loc);
  return empty(t.sizes(), like(t, o), loc);
}
Tensor zeros_like(const Tensor& t, const TensorOptions& o, SourceLoc loc) {
  detail::impl_of(t, "zeros_like", loc);
  return zeros(t.sizes(), like(t, o), loc);
}
Tensor ones_like(const Tensor& t, const TensorOptions& o, SourceLoc loc) {
  detail::impl_of(t, "ones_like", loc);
  return ones(t.sizes(), like(t, o), loc);
}
Tensor full_like(const Tensor& t, const Scalar& v, const TensorOptions& o, SourceLoc loc) {
  detail::impl_of(t, "full_like", loc);
  return full(t.sizes(), v, like(t, o), loc);
}
Tensor rand_like(const Tensor& t, const TensorOptions& o, SourceLoc loc) {
  detail::impl_of(t, "rand_like", loc);
  return rand(t.sizes(), like(t, o), loc);
}
Tensor randn_like(const Tensor& t, const TensorOptions& o, SourceLoc loc) {
  detail::impl_of(t, "randn_like", loc);
  return randn(t.sizes(), like(t, o), loc);
}

namespace {
Tensor blob(void* data, const ir::Dims& shape, const ir::Dims& strides, std::function<void(void*)> deleter,
            const TensorOptions& o, const SourceLoc& loc) {
  LOOM_CHECK(data != nullptr || shape.numel() == 0, "from_blob", loc, "data pointer is null");
  LOOM_CHECK(!o.has_device() || o.device().is_cpu(), "from_blob", loc, "only host memory can be borrowed, got device ",
             o.device());
  int64_t extent = shape.numel() ? 1 : 0;  // elements the view can reach
  for (size_t d = 0; d < shape.n; ++d) {
    LOOM_CHECK(strides[d] >= 0, "from_blob", loc, "negative strides are not supported: ", detail::to_ref(strides));
    if (shape.numel()) extent += (shape[d] - 1) * strides[d];
  }
  auto buf = runtime::Buffer::borrow(data, extent * element_size(o.dtype()), Device(kCPU, 0), std::move(deleter));
  return grad::with_requires_grad(detail::from_buffer(std::move(buf), shape, strides, extent, o.dtype(), Device(kCPU, 0)),
                                  o, "from_blob", loc);
}
}  // namespace

Tensor from_blob(void* data, IntArrayRef sizes, const TensorOptions& o, SourceLoc loc) {
  ir::Dims shape = checked_sizes(sizes, "from_blob", loc);
  return blob(data, shape, ir::contiguous_strides(shape), {}, o, loc);
}

Tensor from_blob(void* data, IntArrayRef sizes, IntArrayRef strides, const TensorOptions& o, SourceLoc loc) {
  ir::Dims shape = checked_sizes(sizes, "from_blob", loc);
  LOOM_CHECK(strides.size() == sizes.size(), "from_blob", loc, "sizes ", sizes, " and strides ", strides,
             " must have the same length");
  return blob(data, shape, detail::to_dims(strides, "from_blob", loc), {}, o, loc);
}

Tensor from_blob(void* data, IntArrayRef sizes, std::function<void(void*)> deleter, const TensorOptions& o,
                 SourceLoc loc) {
  ir::Dims shape = checked_sizes(sizes, "from_blob", loc);
  return blob(data, shape, ir::contiguous_strides(shape), std::move(deleter), o, loc);
}

namespace {
template <class U, class T>
void copy_in(void* dst, const std::vector<T>& values) {
  U* p = static_cast<U*>(dst);
  for (size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_same_v<U, bool>) p[i] = static_cast<T>(values[i]) != T(0);
    // A floating value for a narrow integer wraps as the Cast op does.
    else if constexpr (std::is_integral_v<U> && sizeof(U) < 4 && std::is_floating_point_v<T>)
      p[i] = static_cast<U>(static_cast<int64_t>(static_cast<T>(values[i])));
    else p[i] = static_cast<U>(static_cast<T>(values[i]));
  }
}
}  // namespace

template <class T>
Tensor tensor(const std::vector<T>& values, const TensorOptions& o, SourceLoc loc) {
  // As in PyTorch: floating point -> float32, integers -> int64, bool -> bool.
  // The values are converted once, straight to the dtype asked for (a double
  // asked to stay double never passes through float32).
  constexpr ScalarType natural = std::is_same_v<T, bool> ? kBool : std::is_integral_v<T> ? kLong : kFloat;
  const ScalarType dt = o.has_dtype() ? o.dtype() : natural;
  const int64_t n = static_cast<int64_t>(values.size());
  auto buf = runtime::Buffer::allocate(Device(kCPU, 0), n * element_size(dt));
  switch (dt) {
    case kBool: copy_in<bool>(buf->data(), values); break;
    case kInt: copy_in<int32_t>(buf->data(), values); break;
    case kLong: copy_in<int64_t>(buf->data(), values); break;
    case kFloat: copy_in<float>(buf->data(), values); break;
    case kDouble: copy_in<double>(buf->data(), values); break;
    case kBFloat16: copy_in<BFloat16>(buf->data(), values); break;
    case kHalf: copy_in<Half>(buf->data(), values); break;
    case kByte: copy_in<uint8_t>(buf->data(), values); break;
    case kChar: copy_in<int8_t>(buf->data(), values); break;
    case kShort: copy_in<int16_t>(buf->data(), values); break;
  }
  ir::Dims shape(&n, 1);
  Tensor t = detail::from_buffer(std::move(buf), shape, ir::contiguous_strides(shape), n, dt, Device(kCPU, 0));
  return grad::with_requires_grad(t.to(o.device(), loc), o, "tensor", loc);
}

template LOOM_EXPORT Tensor tensor<bool>(const std::vector<bool>&, const TensorOptions&, SourceLoc);
template LOOM_EXPORT Tensor tensor<int32_t>(const std::vector<int32_t>&, const TensorOptions&, SourceLoc);
template LOOM_EXPORT Tensor tensor<int64_t>(const std::vector<int64_t>&, const TensorOptions&, SourceLoc);
template LOOM_EXPORT Tensor tensor<float>(const std::vector<float>&, const TensorOptions&, SourceLoc);
template LOOM_EXPORT Tensor tensor<double>(const std::vector<double>&, const TensorOptions&, SourceLoc);

Tensor scalar_tensor(const Scalar& s, const TensorOptions& o, SourceLoc loc) {
  ScalarType dt = o.has_dtype() ? o.dtype() : kFloat;  // torch.scalar_tensor defaults to the default dtype
  return grad::with_requires_grad(
      full_node(ir::Dims{}, s, dt, detail::resolve_device(o.device(), "scalar_tensor", loc), loc), o, "scalar_tensor", loc);
}

}  // namespace loom
