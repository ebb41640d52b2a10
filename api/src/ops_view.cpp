// Views: each computes new (sizes, strides, offset) over the same storage and
// records nothing. Reading a view later records one AsStrided node; writing
// through one records a ScatterStrided into the storage (api/src/record.cpp).
#include <loom/functions.h>

#include <optional>

#include "api/src/autograd/hooks.h"
#include "api/src/block_pool.h"
#include "api/src/record.h"

namespace loom {

using detail::impl_of;
using detail::wrap_dim;

namespace {

using Rule = detail::grad::ViewRule;

// `rule` names the view op for autograd (its gradient, rules_view.cpp).
Tensor make_view(const Tensor& t, const ir::Dims& sizes, const ir::Dims& strides, int64_t offset, const Rule& rule,
                 const SourceLoc& loc) {
  // Pooled and member-wise (make_shared would zero-fill the impl, then malloc).
  Tensor v(detail::make_pooled<detail::TensorImpl>(t.impl()->storage, sizes, strides, offset));
  detail::grad::on_view(rule, t, v, loc);
  return v;
}

// Resolves one -1 and checks the element count.
ir::Dims infer_size(IntArrayRef shape, int64_t numel, const char* op, const SourceLoc& loc) {
  ir::Dims out = detail::to_dims(shape, op, loc);
  int64_t known = 1;
  int infer = -1;
  for (size_t d = 0; d < out.n; ++d) {
    if (out[d] == -1) {
      LOOM_CHECK(infer < 0, op, loc, "only one dimension can be inferred in shape ", shape);
      infer = static_cast<int>(d);
    } else {
      LOOM_CHECK(out[d] >= 0, op, loc, "invalid shape dimension ", out[d], " in ", shape);
      known *= out[d];
    }
  }
  if (infer >= 0) {
    LOOM_CHECK(known != 0 && numel % known == 0, op, loc, "shape '", shape, "' is invalid for input of size ", numel);
    out[infer] = numel / known;
  } else {
    LOOM_CHECK(known == numel, op, loc, "shape '", shape, "' is invalid for input of size ", numel);
  }
  return out;
}

// PyTorch's computeStride: strides that let `new_shape` view memory laid out
// as (old_shape, old_strides), or nothing if no such view exists.
std::optional<ir::Dims> view_strides(const ir::Dims& old_shape, const ir::Dims& old_strides, const ir::Dims& new_shape) {
  ir::Dims ns;
  ns.n = new_shape.n;
  const int64_t numel = old_shape.numel();
  if (numel == 0 || old_shape.n == 0) {
    int64_t acc = 1;
    for (int d = static_cast<int>(new_shape.n) - 1; d >= 0; --d) {
      ns[d] = acc;
      acc *= std::max<int64_t>(new_shape[d], 1);
    }
    return ns;
  }
  int view_d = static_cast<int>(new_shape.n) - 1;
  int64_t chunk_base_stride = old_strides[old_shape.n - 1];
  int64_t tensor_numel = 1, view_numel = 1;
  for (int tensor_d = static_cast<int>(old_shape.n) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    if (tensor_d == 0 ||
        (old_shape[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        ns[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return ns;
}

}  // namespace

Tensor Tensor::view(IntArrayRef sizes, SourceLoc loc) const {
  const auto& im = impl_of(*this, "view", loc);
  ir::Dims shape = infer_size(sizes, numel(), "view", loc);
  auto st = view_strides(im.view.sizes, im.view.strides, shape);
  LOOM_CHECK(st.has_value(), "view", loc, "view size ", sizes, " is not compatible with input tensor's size and stride ",
             detail::describe(*this), " (at least one dimension spans across two contiguous subspaces); use .reshape(...) instead");
  return make_view(*this, shape, *st, im.view.offset, {Rule::View}, loc);
}

Tensor Tensor::reshape(IntArrayRef sizes, SourceLoc loc) const {
  const auto& im = impl_of(*this, "reshape", loc);
  ir::Dims shape = infer_size(sizes, numel(), "reshape", loc);
  if (auto st = view_strides(im.view.sizes, im.view.strides, shape))
    return make_view(*this, shape, *st, im.view.offset, {Rule::View}, loc);
  return clone(loc).view(detail::to_ref(shape), loc);
}

Tensor Tensor::permute(IntArrayRef dims, SourceLoc loc) const {
  const auto& im = impl_of(*this, "permute", loc);
  const int64_t nd = im.view.sizes.n;
  LOOM_CHECK(static_cast<int64_t>(dims.size()) == nd, "permute", loc, "number of dims ", dims,
             " doesn't match the number of dimensions of ", detail::describe(*this));
  ir::Dims sizes, strides;
  uint32_t seen = 0;
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, nd, "permute", loc);
    LOOM_CHECK(!(seen >> w & 1), "permute", loc, "repeated dim ", d, " in ", dims);
    seen |= 1u << w;
    sizes.push_back(im.view.sizes[w]);
    strides.push_back(im.view.strides[w]);
  }
  std::vector<int64_t> wrapped;
  for (int64_t d : dims) wrapped.push_back(wrap_dim(d, nd, "permute", loc));
  Rule rule{Rule::Permute};
  rule.dims = wrapped.data();
  return make_view(*this, sizes, strides, im.view.offset, rule, loc);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1, SourceLoc loc) const {
  const auto& im = impl_of(*this, "transpose", loc);
  const int64_t nd = im.view.sizes.n;
  if (nd == 0) {
    wrap_dim(d0, nd, "transpose", loc);
    wrap_dim(d1, nd, "transpose", loc);
    return make_view(*this, im.view.sizes, im.view.strides, im.view.offset, {Rule::View}, loc);
  }
  int64_t a = wrap_dim(d0, nd, "transpose", loc), b = wrap_dim(d1, nd, "transpose", loc);
  ir::Dims sizes = im.view.sizes, strides = im.view.strides;
  std::swap(sizes[a], sizes[b]);
  std::swap(strides[a], strides[b]);
  return make_view(*this, sizes, strides, im.view.offset, {Rule::Transpose, a, b}, loc);
}

Tensor Tensor::t(SourceLoc loc) const {
  LOOM_CHECK(dim() <= 2, "t", loc, "t() expects a tensor with <= 2 dimensions, but self is ", dim(), "D");
  return dim() < 2 ? transpose(0, 0, loc) : transpose(0, 1, loc);
}

Tensor Tensor::expand(IntArrayRef sizes, SourceLoc loc) const {
  const auto& im = impl_of(*this, "expand", loc);
  const int64_t nd = im.view.sizes.n, nn = static_cast<int64_t>(sizes.size());
  LOOM_CHECK(nn >= nd, "expand", loc, "the number of sizes provided (", nn,
             ") must be greater or equal to the number of dimensions in the tensor (", nd, ")");
  LOOM_CHECK(nn <= ir::kMaxDims, "expand", loc, "at most ", ir::kMaxDims, " dims are supported, got ", sizes);
  ir::Dims out, st;
  out.n = st.n = static_cast<uint8_t>(nn);
  for (int64_t i = nn - 1; i >= 0; --i) {
    int64_t k = i - (nn - nd);
    int64_t want = sizes[i];
    if (k < 0) {
      LOOM_CHECK(want >= 0, "expand", loc, "the expanded size of the tensor (", want,
                 ") isn't allowed in a leading, non-existing dimension ", i);
      out[i] = want;
      st[i] = 0;
      continue;
    }
    int64_t have = im.view.sizes[k];
    if (want == -1) want = have;
    LOOM_CHECK(want == have || have == 1, "expand", loc, "the expanded size of the tensor (", want,
               ") must match the existing size (", have, ") at non-singleton dimension ", i, ".  Target sizes: ", sizes,
               ".  Tensor sizes: ", detail::shape_str(im.view.sizes));
    out[i] = want;
    st[i] = want == have ? im.view.strides[k] : 0;
  }
  return make_view(*this, out, st, im.view.offset, {Rule::Expand}, loc);
}

Tensor Tensor::squeeze(SourceLoc loc) const {
  const auto& im = impl_of(*this, "squeeze", loc);
  ir::Dims sizes, strides;
  for (size_t d = 0; d < im.view.sizes.n; ++d)
    if (im.view.sizes[d] != 1) {
      sizes.push_back(im.view.sizes[d]);
      strides.push_back(im.view.strides[d]);
    }
  return make_view(*this, sizes, strides, im.view.offset, {Rule::Squeeze}, loc);
}

Tensor Tensor::squeeze(int64_t dim, SourceLoc loc) const {
  const auto& im = impl_of(*this, "squeeze", loc);
  const int64_t nd = im.view.sizes.n;
  int64_t w = wrap_dim(dim, nd, "squeeze", loc);
  if (nd == 0 || im.view.sizes[w] != 1)
    return make_view(*this, im.view.sizes, im.view.strides, im.view.offset, {Rule::SqueezeDim}, loc);
  ir::Dims sizes, strides;
  for (int64_t d = 0; d < nd; ++d)
    if (d != w) {
      sizes.push_back(im.view.sizes[d]);
      strides.push_back(im.view.strides[d]);
    }
  return make_view(*this, sizes, strides, im.view.offset, {Rule::SqueezeDim}, loc);
}

Tensor Tensor::unsqueeze(int64_t dim, SourceLoc loc) const {
  const auto& im = impl_of(*this, "unsqueeze", loc);
  const int64_t nd = im.view.sizes.n;
  int64_t w = wrap_dim(dim, nd + 1, "unsqueeze", loc);
  LOOM_CHECK(nd < ir::kMaxDims, "unsqueeze", loc, "at most ", ir::kMaxDims, " dims are supported");
  ir::Dims sizes, strides;
  for (int64_t d = 0; d <= nd; ++d) {
    if (d == w) {
      sizes.push_back(1);
      strides.push_back(d < nd ? im.view.sizes[d] * im.view.strides[d] : 1);
    }
    if (d < nd) {
      sizes.push_back(im.view.sizes[d]);
      strides.push_back(im.view.strides[d]);
    }
  }
  return make_view(*this, sizes, strides, im.view.offset, {Rule::Unsqueeze}, loc);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim, SourceLoc loc) const {
  const auto& im = impl_of(*this, "flatten", loc);
  const int64_t nd = im.view.sizes.n;
  if (nd == 0) return reshape({1}, loc);
  int64_t s = wrap_dim(start_dim, nd, "flatten", loc), e = wrap_dim(end_dim, nd, "flatten", loc);
  LOOM_CHECK(s <= e, "flatten", loc, "flatten() has invalid args: start_dim (", start_dim,
             ") cannot come after end_dim (", end_dim, ")");
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < s; ++d) shape.push_back(im.view.sizes[d]);
  int64_t p = 1;
  for (int64_t d = s; d <= e; ++d) p *= im.view.sizes[d];
  shape.push_back(p);
  for (int64_t d = e + 1; d < nd; ++d) shape.push_back(im.view.sizes[d]);
  return reshape(shape, loc);
}

Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step,
                     SourceLoc loc) const {
  const auto& im = impl_of(*this, "slice", loc);
  const int64_t nd = im.view.sizes.n;
  LOOM_CHECK(nd > 0, "slice", loc, "slice() cannot be applied to a 0-dim tensor");
  LOOM_CHECK(step > 0, "slice", loc, "slice step must be positive, got ", step);
  int64_t d = wrap_dim(dim, nd, "slice", loc);
  const int64_t size = im.view.sizes[d];
  int64_t s = start.value_or(0), e = end.value_or(size);
  if (s < 0) s += size;
  if (e < 0) e += size;
  s = std::clamp<int64_t>(s, 0, size);
  e = std::clamp<int64_t>(e, s, size);
  ir::Dims sizes = im.view.sizes, strides = im.view.strides;
  sizes[d] = (e - s + step - 1) / step;
  strides[d] = im.view.strides[d] * step;
  return make_view(*this, sizes, strides, im.view.offset + s * im.view.strides[d], {Rule::Slice, d, s, e, step}, loc);
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length, SourceLoc loc) const {
  const auto& im = impl_of(*this, "narrow", loc);
  const int64_t nd = im.view.sizes.n;
  LOOM_CHECK(nd > 0, "narrow", loc, "narrow() cannot be applied to a 0-dim tensor");
  int64_t d = wrap_dim(dim, nd, "narrow", loc);
  const int64_t size = im.view.sizes[d];
  LOOM_CHECK(start >= -size && start <= size, "narrow", loc, "start (", start, ") out of range for dimension ", dim,
             " of size ", size);
  if (start < 0) start += size;
  LOOM_CHECK(length >= 0 && start + length <= size, "narrow", loc, "start (", start, ") + length (", length,
             ") exceeds dimension size (", size, ")");
  return slice(d, start, start + length, 1, loc);
}

Tensor Tensor::select(int64_t dim, int64_t index, SourceLoc loc) const {
  const auto& im = impl_of(*this, "select", loc);
  const int64_t nd = im.view.sizes.n;
  LOOM_CHECK(nd > 0, "select", loc, "select() cannot be applied to a 0-dim tensor");
  int64_t d = wrap_dim(dim, nd, "select", loc);
  const int64_t size = im.view.sizes[d];
  LOOM_CHECK(index >= -size && index < size, "select", loc, "index ", index, " out of range for tensor of size ",
             detail::shape_str(im.view.sizes), " at dimension ", dim);
  if (index < 0) index += size;
  ir::Dims sizes, strides;
  for (int64_t k = 0; k < nd; ++k)
    if (k != d) {
      sizes.push_back(im.view.sizes[k]);
      strides.push_back(im.view.strides[k]);
    }
  return make_view(*this, sizes, strides, im.view.offset + index * im.view.strides[d], {Rule::Select, d, index}, loc);
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim, SourceLoc loc) const {
  const auto& im = impl_of(*this, "split", loc);
  LOOM_CHECK(im.view.sizes.n > 0, "split", loc, "split expects at least a 1-dimensional tensor");
  LOOM_CHECK(split_size >= 0, "split", loc, "split expects split_size be non-negative, but got ", split_size);
  int64_t d = wrap_dim(dim, im.view.sizes.n, "split", loc);
  const int64_t size = im.view.sizes[d];
  LOOM_CHECK(split_size > 0 || size == 0, "split", loc, "split_size can only be 0 if dimension size is 0");
  std::vector<Tensor> out;
  if (size == 0) return {*this};
  for (int64_t s = 0; s < size; s += split_size) out.push_back(narrow(d, s, std::min(split_size, size - s), loc));
  return out;
}

std::vector<Tensor> Tensor::split(IntArrayRef split_sizes, int64_t dim, SourceLoc loc) const {
  const auto& im = impl_of(*this, "split", loc);
  LOOM_CHECK(im.view.sizes.n > 0, "split", loc, "split expects at least a 1-dimensional tensor");
  int64_t d = wrap_dim(dim, im.view.sizes.n, "split", loc);
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    LOOM_CHECK(s >= 0, "split", loc, "split sizes must be non-negative, got ", split_sizes);
    total += s;
  }
  LOOM_CHECK(total == im.view.sizes[d], "split", loc, "split_with_sizes expects split_sizes to sum exactly to ",
             im.view.sizes[d], " (input tensor's size at dimension ", dim, "), but got split_sizes=", split_sizes);
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    out.push_back(narrow(d, start, s, loc));
    start += s;
  }
  return out;
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim, SourceLoc loc) const {
  const auto& im = impl_of(*this, "chunk", loc);
  LOOM_CHECK(chunks > 0, "chunk", loc, "chunk expects `chunks` to be greater than 0, got: ", chunks);
  LOOM_CHECK(im.view.sizes.n > 0, "chunk", loc, "chunk expects at least a 1-dimensional tensor");
  int64_t d = wrap_dim(dim, im.view.sizes.n, "chunk", loc);
  const int64_t size = im.view.sizes[d];
  // An empty dim still gives `chunks` (empty) pieces, as in PyTorch.
  if (size == 0) return split(std::vector<int64_t>(chunks, 0), d, loc);
  return split((size + chunks - 1) / chunks, d, loc);
}

std::vector<Tensor> Tensor::unbind(int64_t dim, SourceLoc loc) const {
  const auto& im = impl_of(*this, "unbind", loc);
  LOOM_CHECK(im.view.sizes.n > 0, "unbind", loc, "dimension specified as ", dim, " but tensor has no dimensions");
  int64_t d = wrap_dim(dim, im.view.sizes.n, "unbind", loc);
  std::vector<Tensor> out;
  for (int64_t i = 0; i < im.view.sizes[d]; ++i) out.push_back(select(d, i, loc));
  return out;
}

}  // namespace loom
