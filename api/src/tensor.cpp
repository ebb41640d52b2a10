// Tensor's own methods: metadata, materialized access (item, data_ptr,
// to_vector), conversions and copies.
#include <loom/functions.h>
#include <loom/runtime.h>
#include <loom/tensor.h>

#include <cstring>

#include "api/src/autograd/hooks.h"
#include "api/src/lazy.h"
#include "api/src/record.h"

namespace loom {

using detail::impl_of;

// ---------------------------------------------------------------- metadata
IntArrayRef Tensor::sizes() const { return detail::to_ref(impl_of(*this, "sizes", SourceLoc::current()).view.sizes); }
IntArrayRef Tensor::strides() const { return detail::to_ref(impl_of(*this, "strides", SourceLoc::current()).view.strides); }
int64_t Tensor::size(int64_t d) const {
  auto loc = SourceLoc::current();
  const auto& im = impl_of(*this, "size", loc);
  LOOM_CHECK(im.view.sizes.n > 0, "size", loc, "dimension specified as ", d, " but tensor has no dimensions");
  return im.view.sizes[detail::wrap_dim(d, im.view.sizes.n, "size", loc)];
}
int64_t Tensor::stride(int64_t d) const {
  auto loc = SourceLoc::current();
  const auto& im = impl_of(*this, "stride", loc);
  LOOM_CHECK(im.view.sizes.n > 0, "stride", loc, "dimension specified as ", d, " but tensor has no dimensions");
  return im.view.strides[detail::wrap_dim(d, im.view.sizes.n, "stride", loc)];
}
int64_t Tensor::storage_offset() const { return impl_of(*this, "storage_offset", SourceLoc::current()).view.offset; }
int64_t Tensor::dim() const { return impl_of(*this, "dim", SourceLoc::current()).view.sizes.n; }
int64_t Tensor::numel() const { return impl_of(*this, "numel", SourceLoc::current()).view.sizes.numel(); }
ScalarType Tensor::dtype() const { return impl_of(*this, "dtype", SourceLoc::current()).storage->dtype; }
Device Tensor::device() const { return impl_of(*this, "device", SourceLoc::current()).storage->device; }
TensorOptions Tensor::options() const {
  return TensorOptions().dtype(dtype()).device(device()).requires_grad(impl_->requires_grad);
}
bool Tensor::is_contiguous() const {
  const auto& v = impl_of(*this, "is_contiguous", SourceLoc::current()).view;
  if (v.sizes.numel() == 0) return true;  // as in PyTorch: no element is out of place
  int64_t expect = 1;
  for (int d = static_cast<int>(v.sizes.n) - 1; d >= 0; --d) {
    if (v.sizes[d] != 1 && v.strides[d] != expect) return false;
    expect *= v.sizes[d];
  }
  return true;
}
bool Tensor::is_pending() const { return impl_of(*this, "is_pending", SourceLoc::current()).storage->pending(); }
bool Tensor::is_alias_of(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage == other.impl_->storage;
}

// ---------------------------------------------------------------- values
namespace {

// Materializes t's storage and returns its buffer (host or GPU).
runtime::BufferPtr materialized(const Tensor& t, const char* op, const SourceLoc& loc) {
  const auto& im = impl_of(t, op, loc);
  detail::materialize(im.storage);
  runtime::BufferPtr b = im.storage->buffer();
  LOOM_CHECK(b != nullptr, op, loc, "internal error: storage not materialized after sync");
  return b;
}

// The elements a view reaches, readable on the host: the storage itself on
// the CPU; on a GPU, a copy of the span from the view's lowest to highest
// element (item() copies one element, not the whole storage).
struct HostElements {
  runtime::BufferPtr buffer;
  std::vector<char> copy;
  const void* base = nullptr;  // element `first` of the storage
  int64_t first = 0;
};

HostElements host_elements(const Tensor& t, const char* op, const SourceLoc& loc) {
  const auto& im = impl_of(t, op, loc);
  HostElements h;
  h.buffer = materialized(t, op, loc);
  if (h.buffer->device().is_cpu()) {
    h.base = h.buffer->data();
    return h;
  }
  int64_t lo = im.view.offset, hi = im.view.offset;
  for (int d = 0; d < im.view.sizes.n; ++d) {
    if (im.view.sizes[d] == 0) return h;
    const int64_t reach = (im.view.sizes[d] - 1) * im.view.strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  const size_t es = element_size(im.storage->dtype);
  h.copy.resize(static_cast<size_t>(hi - lo + 1) * es);
  runtime::BufferPtr staging = runtime::Buffer::borrow(h.copy.data(), h.copy.size(), Device(kCPU, 0), {});
  runtime::copy_bytes(*staging, 0, *h.buffer, static_cast<size_t>(lo) * es, h.copy.size());
  h.base = h.copy.data();
  h.first = lo;
  return h;
}

template <class T>
T read_element(const void* base, ScalarType dt, int64_t i) {
  T v{};
  switch (dt) {
    case kBool: v = static_cast<T>(static_cast<const bool*>(base)[i]); break;
    case kInt: v = static_cast<T>(static_cast<const int32_t*>(base)[i]); break;
    case kLong: v = static_cast<T>(static_cast<const int64_t*>(base)[i]); break;
    case kFloat: v = static_cast<T>(static_cast<const float*>(base)[i]); break;
    case kDouble: v = static_cast<T>(static_cast<const double*>(base)[i]); break;
    case kBFloat16: v = static_cast<T>(static_cast<float>(static_cast<const BFloat16*>(base)[i])); break;
    case kHalf: v = static_cast<T>(static_cast<float>(static_cast<const Half*>(base)[i])); break;
    case kByte: v = static_cast<T>(static_cast<const uint8_t*>(base)[i]); break;
    case kChar: v = static_cast<T>(static_cast<const int8_t*>(base)[i]); break;
    case kShort: v = static_cast<T>(static_cast<const int16_t*>(base)[i]); break;
  }
  return v;
}

// Calls f(offset) for every element of the view in row-major order.
template <class F>
void for_each_offset(const detail::ViewSpec& v, F&& f) {
  const int nd = v.sizes.n;
  const int64_t n = v.sizes.numel();
  std::array<int64_t, ir::kMaxDims> idx{};
  int64_t off = v.offset;
  for (int64_t i = 0; i < n; ++i) {
    f(off);
    for (int d = nd - 1; d >= 0; --d) {
      off += v.strides[d];
      if (++idx[d] < v.sizes[d]) break;
      off -= v.strides[d] * v.sizes[d];
      idx[d] = 0;
    }
  }
}

}  // namespace

template <class T>
T Tensor::item(SourceLoc loc) const {
  const auto& im = impl_of(*this, "item", loc);
  LOOM_CHECK(im.view.sizes.numel() == 1, "item", loc, "a Tensor with ", im.view.sizes.numel(),
             " elements cannot be converted to Scalar (", detail::describe(*this), ")");
  HostElements h = host_elements(*this, "item", loc);
  return read_element<T>(h.base, im.storage->dtype, im.view.offset - h.first);
}

Scalar Tensor::item(SourceLoc loc) const {
  switch (dtype()) {
    case kBool: return Scalar(item<bool>(loc));
    case kByte: case kChar: case kShort: case kInt:
    case kLong: return Scalar(item<int64_t>(loc));
    default: return Scalar(item<double>(loc));
  }
}

template <class T>
T* Tensor::data_ptr(SourceLoc loc) const {
  const auto& im = impl_of(*this, "data_ptr", loc);
  LOOM_CHECK(im.storage->dtype == dtype_of<T>, "data_ptr", loc, "expected scalar type ", dtype_of<T>,
             " but found ", im.storage->dtype);
  auto b = materialized(*this, "data_ptr", loc);
  return b->as<T>() + im.view.offset;
}

template <class T>
std::vector<T> Tensor::to_vector(SourceLoc loc) const {
  const auto& im = impl_of(*this, "to_vector", loc);
  HostElements h = host_elements(*this, "to_vector", loc);
  std::vector<T> out;
  out.reserve(im.view.sizes.numel());
  const ScalarType dt = im.storage->dtype;
  for_each_offset(im.view, [&](int64_t off) { out.push_back(read_element<T>(h.base, dt, off - h.first)); });
  return out;
}

#define LOOM_INSTANTIATE(T)                                  \
  template T Tensor::item<T>(SourceLoc) const;               \
  template T* Tensor::data_ptr<T>(SourceLoc) const;          \
  template std::vector<T> Tensor::to_vector<T>(SourceLoc) const;
LOOM_INSTANTIATE(bool)
LOOM_INSTANTIATE(int32_t)
LOOM_INSTANTIATE(int64_t)
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(double)
LOOM_INSTANTIATE(BFloat16)
LOOM_INSTANTIATE(Half)
LOOM_INSTANTIATE(uint8_t)
LOOM_INSTANTIATE(int8_t)
LOOM_INSTANTIATE(int16_t)
#undef LOOM_INSTANTIATE

// ---------------------------------------------------------------- conversion and copies
Tensor Tensor::to(ScalarType t, SourceLoc loc) const {
  impl_of(*this, "to", loc);
  if (t == dtype()) return *this;
  Tensor out = detail::wrap(detail::read_as(*this, t, loc));
  detail::grad::on_copy("ToCopyBackward0", *this, out, loc);
  return out;
}

Tensor Tensor::to(Device d, SourceLoc loc) const {
  impl_of(*this, "to", loc);
  d = detail::resolve_device(d, "to", loc);
  if (d == device()) return *this;
  // Crossing devices is a materialization point of the source (its value
  // must exist before it can be copied). The copy itself is issued at once,
  // asynchronously on the GPU's stream: it is data movement, not a kernel
  // worth fusing, and it lets the next graph take the copy as an input.
  Tensor src = contiguous(loc);
  detail::materialize(src.impl()->storage);
  runtime::BufferPtr from = src.impl()->storage->buffer();
  const int64_t n = src.numel();
  const size_t es = loom::element_size(dtype());
  runtime::BufferPtr to = runtime::Buffer::allocate(d, static_cast<size_t>(n) * es);
  runtime::copy_bytes(*to, 0, *from, static_cast<size_t>(src.impl()->view.offset) * es, static_cast<size_t>(n) * es);
  ir::Dims shape = src.impl()->view.sizes;
  Tensor out = detail::from_buffer(std::move(to), shape, ir::contiguous_strides(shape), n, dtype(), d);
  detail::grad::on_copy("ToCopyBackward0", *this, out, loc);
  return out;
}

Tensor Tensor::to(Device d, ScalarType t, SourceLoc loc) const { return to(d, loc).to(t, loc); }
Tensor Tensor::to(const TensorOptions& o, SourceLoc loc) const {
  Tensor r = *this;
  if (o.has_device()) r = r.to(o.device(), loc);
  if (o.has_dtype()) r = r.to(o.dtype(), loc);
  return r;
}

Tensor Tensor::clone(SourceLoc loc) const {
  impl_of(*this, "clone", loc);
  Tensor out = detail::wrap(detail::copy_node(detail::read(*this, loc), loc));
  detail::grad::on_copy("CloneBackward0", *this, out, loc);
  return out;
}

Tensor Tensor::contiguous(SourceLoc loc) const {
  impl_of(*this, "contiguous", loc);
  return is_contiguous() ? *this : clone(loc);
}

Tensor& Tensor::operator=(const Tensor& src) && {
  copy_(src, SourceLoc::current());
  return *this;
}
Tensor& Tensor::operator=(Tensor&& src) && {
  copy_(src, SourceLoc::current());
  return *this;
}
Tensor& Tensor::operator=(const Scalar& value) && {
  fill_(value, SourceLoc::current());
  return *this;
}

Tensor Tensor::detach() const {
  const auto& self = impl_of(*this, "detach", SourceLoc::current());
  auto im = std::make_shared<detail::TensorImpl>();
  im->storage = self.storage;  // shares the data and its version counter, not the history
  im->view = self.view;
  return Tensor(std::move(im));
}

}  // namespace loom
