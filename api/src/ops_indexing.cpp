// Tensor::index and index_put_ with torch::indexing's indices, as PyTorch's
// applySlicing and advanced indexing:
// - integers select, slices slice, None unsqueezes, Ellipsis stands for the
//   dims no index names: views of self, recording nothing;
// - a bool scalar is a new dim of size 1 indexed by [0] (true) or [] (false);
// - tensor indices (a bool mask becomes its nonzero columns, one per dim it
//   covers) broadcast together; the indexed dims are read as one flat dim
//   by index_select of their row-major linear index, and the broadcast
//   shape takes the first indexed dim's place when the indexed dims are
//   adjacent, else it goes first (PyTorch's rule);
// - negative indices wrap, and each index is checked against its dim at
//   run time (an IndexCheck node) before it joins the linear index, so an
//   index out of range fails instead of aliasing another element.
// index_put_ computes the indexed view's new value out of place
// (index_copy, or index_add when accumulating) and copy_s it into the view,
// so versions, views and autograd are copy_'s.
#include <loom/functions.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "api/src/record.h"

namespace loom {

using detail::describe;
using detail::impl_of;
using indexing::TensorIndex;

namespace {

// The basic indices applied, and the tensor index of each dim of the view
// (undefined where none).
struct Applied {
  Tensor view;
  std::vector<Tensor> tensors;
  bool any = false;
};

Applied apply_basic(const Tensor& self, const std::vector<TensorIndex>& indices, const char* op, const SourceLoc& loc) {
  impl_of(self, op, loc);
  int64_t consumed = 0;
  bool ellipsis = false;
  for (const TensorIndex& ix : indices) {
    LOOM_CHECK(!ix.bad_string(), op, loc, "a string index must be \"...\"");
    if (ix.is_integer() || ix.is_slice()) ++consumed;
    if (ix.is_tensor()) {
      impl_of(ix.tensor(), op, loc);
      consumed += ix.tensor().dtype() == kBool ? std::max<int64_t>(ix.tensor().dim(), 0) : 1;
    }
    if (ix.is_ellipsis()) {
      LOOM_CHECK(!ellipsis, op, loc, "an index can only have a single ellipsis ('...')");
      ellipsis = true;
    }
  }
  LOOM_CHECK(consumed <= self.dim(), op, loc, "too many indices for tensor of dimension ", self.dim(), " (got ",
             consumed, ", tensor ", describe(self), ")");
  Applied a;
  a.view = self;
  int64_t dim = 0;
  auto note = [&](int64_t at, const Tensor& t) {
    if (static_cast<int64_t>(a.tensors.size()) <= at) a.tensors.resize(static_cast<size_t>(at) + 1);
    a.tensors[static_cast<size_t>(at)] = t;
    a.any = true;
  };
  const TensorOptions longs = TensorOptions(kLong).device(self.device());
  for (const TensorIndex& ix : indices) {
    switch (ix.type()) {
      case indexing::TensorIndexType::Integer:
        a.view = a.view.select(dim, ix.integer(), loc);
        break;
      case indexing::TensorIndexType::Slice: {
        const indexing::Slice& s = ix.slice();
        const int64_t step = s.step().value_or(1);
        LOOM_CHECK(step > 0, op, loc, "step must be greater than zero, got ", step);
        a.view = a.view.slice(dim, s.start(), s.stop(), step, loc);
        ++dim;
        break;
      }
      case indexing::TensorIndexType::None:
        a.view = a.view.unsqueeze(dim, loc);
        ++dim;
        break;
      case indexing::TensorIndexType::Ellipsis:
        dim += self.dim() - consumed;
        break;
      case indexing::TensorIndexType::Boolean:
        a.view = a.view.unsqueeze(dim, loc);
        note(dim, ix.boolean() ? zeros({1}, longs, loc) : zeros({0}, longs, loc));
        ++dim;
        break;
      case indexing::TensorIndexType::Tensor: {
        const Tensor& t = ix.tensor();
        detail::check_same_device(self, t, op, loc);
        if (t.dtype() == kBool) {
          for (int64_t k = 0; k < t.dim(); ++k)
            LOOM_CHECK(t.size(k) == a.view.size(dim + k), op, loc, "The shape of the mask ", t.sizes(), " at index ", k,
                       " does not match the shape of the indexed tensor ", a.view.sizes(), " at index ", dim + k);
          if (t.dim() == 0) {  // a 0-d mask is a bool scalar
            a.view = a.view.unsqueeze(dim, loc);
            note(dim, t.item<bool>(loc) ? zeros({1}, longs, loc) : zeros({0}, longs, loc));
            ++dim;
            break;
          }
          std::vector<Tensor> cols = nonzero(t, loc).unbind(1, loc);
          for (int64_t k = 0; k < t.dim(); ++k) note(dim + k, cols[static_cast<size_t>(k)]);
          dim += t.dim();
        } else {
          LOOM_CHECK(t.dtype() == kLong || t.dtype() == kInt, op, loc,
                     "tensors used as indices must be long, int or bool tensors, got ", describe(t));
          note(dim, t);
          ++dim;
        }
        break;
      }
    }
  }
  if (a.any) a.tensors.resize(static_cast<size_t>(a.view.dim()));
  return a;
}

// The advanced part: the view's indexed dims first, flattened, and the
// checked linear index into them.
struct Advanced {
  std::vector<int64_t> perm;      // indexed dims first, then the rest
  std::vector<int64_t> bshape;    // the broadcast index shape
  std::vector<int64_t> rest;      // sizes of the dims not indexed
  int64_t flat = 1;               // product of the indexed dims' sizes
  Tensor linear;                  // [numel(bshape)] int64
  bool first = false;             // the broadcast dims go first
  int64_t at = 0;                 // else: where they go
};

Advanced plan(const Applied& a, const char* op, const SourceLoc& loc) {
  Advanced p;
  std::vector<int64_t> indexed;
  std::vector<Tensor> idx;
  for (int64_t d = 0; d < a.view.dim(); ++d)
    if (a.tensors[static_cast<size_t>(d)].defined()) {
      indexed.push_back(d);
      idx.push_back(a.tensors[static_cast<size_t>(d)]);
    }
  ir::Dims b = detail::shape_of(idx[0]);
  for (size_t i = 1; i < idx.size(); ++i) b = detail::broadcast_shapes(b, detail::shape_of(idx[i]), op, loc);
  p.bshape = detail::to_ref(b).vec();
  for (size_t i = 1; i < indexed.size(); ++i)
    if (indexed[i] != indexed[i - 1] + 1) p.first = true;
  p.at = indexed[0];
  p.perm = indexed;
  for (int64_t d = 0; d < a.view.dim(); ++d)
    if (!a.tensors[static_cast<size_t>(d)].defined()) {
      p.perm.push_back(d);
      p.rest.push_back(a.view.size(d));
    }
  const TensorOptions longs = TensorOptions(kLong).device(a.view.device());
  Tensor linear = zeros(p.bshape, longs, loc);
  for (size_t i = 0; i < indexed.size(); ++i) {
    const int64_t size = a.view.size(indexed[i]);
    Tensor t = idx[i].to(kLong, loc);
    t = where(t.lt(0, loc), t.add(size, 1, loc), t, loc);
    auto check = detail::new_node(ir::Op::IndexCheck, kLong, t.device(), detail::shape_of(t), detail::read(t, loc), loc);
    check->scalar[0] = detail::rt_scalar(size);
    check->num_scalars = 1;
    linear = linear.mul(size, loc).add(detail::wrap(std::move(check)), 1, loc);
    p.flat *= size;
  }
  p.linear = linear.reshape({-1}, loc);
  return p;
}

// The view with its indexed dims flattened into dim 0: [flat, rest...].
Tensor flattened(const Tensor& view, const Advanced& p, const SourceLoc& loc) {
  std::vector<int64_t> shape{p.flat};
  shape.insert(shape.end(), p.rest.begin(), p.rest.end());
  return view.permute(p.perm, loc).reshape(shape, loc);
}

// Where the result's dims come from: [bshape..., rest...] moved so bshape
// sits at `at` when the indexed dims were adjacent.
std::vector<int64_t> result_perm(const Advanced& p) {
  const int64_t nb = static_cast<int64_t>(p.bshape.size()), nr = static_cast<int64_t>(p.rest.size());
  std::vector<int64_t> order;
  if (p.first) {
    order.resize(static_cast<size_t>(nb + nr));
    std::iota(order.begin(), order.end(), 0);
    return order;
  }
  for (int64_t k = 0; k < p.at; ++k) order.push_back(nb + k);
  for (int64_t k = 0; k < nb; ++k) order.push_back(k);
  for (int64_t k = p.at; k < nr; ++k) order.push_back(nb + k);
  return order;
}

Tensor gathered(const Tensor& view, const Advanced& p, const SourceLoc& loc) {
  std::vector<int64_t> shape = p.bshape;
  shape.insert(shape.end(), p.rest.begin(), p.rest.end());
  return flattened(view, p, loc).index_select(0, p.linear, loc).reshape(shape, loc).permute(result_perm(p), loc);
}

Tensor index_impl(const Tensor& self, const std::vector<TensorIndex>& indices, const SourceLoc& loc) {
  Applied a = apply_basic(self, indices, "index", loc);
  if (!a.any) return a.view;
  return gathered(a.view, plan(a, "index", loc), loc);
}

Tensor& put_impl(Tensor& self, const std::vector<TensorIndex>& indices, const Tensor& rhs, bool accumulate,
                 const SourceLoc& loc) {
  const char* op = "index_put_";
  impl_of(rhs, op, loc);
  Applied a = apply_basic(self, indices, op, loc);
  LOOM_CHECK(rhs.dtype() == self.dtype(), op, loc, "Index put requires the source and destination dtypes match, got ",
             describe(self), " for the destination and ", describe(rhs), " for the source");
  Tensor v = rhs.device() == self.device() ? rhs : rhs.to(self.device(), loc);
  if (!a.any) {
    a.view.copy_(accumulate ? a.view.add(v, 1, loc) : v, loc);
    return self;
  }
  const Advanced p = plan(a, op, loc);
  // The values in the gathered result's layout, then in [numel(bshape), rest...].
  std::vector<int64_t> out_shape = p.bshape;
  out_shape.insert(out_shape.end(), p.rest.begin(), p.rest.end());
  const std::vector<int64_t> order = result_perm(p);
  std::vector<int64_t> result_shape(order.size());
  for (size_t k = 0; k < order.size(); ++k) result_shape[k] = out_shape[static_cast<size_t>(order[k])];
  std::vector<int64_t> inverse(order.size());
  for (size_t k = 0; k < order.size(); ++k) inverse[static_cast<size_t>(order[k])] = static_cast<int64_t>(k);
  std::vector<int64_t> rows{p.linear.size(0)};
  rows.insert(rows.end(), p.rest.begin(), p.rest.end());
  Tensor values = v.expand(result_shape, loc).permute(inverse, loc).reshape(rows, loc);
  Tensor flat = flattened(a.view, p, loc);
  Tensor updated = accumulate ? flat.index_add(0, p.linear, values, 1, loc) : flat.index_copy(0, p.linear, values, loc);
  // Back to the view's layout: unflatten, then undo the permutation.
  std::vector<int64_t> permuted;
  for (int64_t d : p.perm) permuted.push_back(a.view.size(d));
  std::vector<int64_t> undo(p.perm.size());
  for (size_t k = 0; k < p.perm.size(); ++k) undo[static_cast<size_t>(p.perm[k])] = static_cast<int64_t>(k);
  a.view.copy_(updated.reshape(permuted, loc).permute(undo, loc), loc);
  return self;
}

std::vector<TensorIndex> from_optionals(const std::vector<std::optional<Tensor>>& indices) {
  std::vector<TensorIndex> out;
  for (const auto& t : indices) {
    if (t) out.emplace_back(*t);
    else out.emplace_back(indexing::Slice());
  }
  return out;
}

}  // namespace

Tensor Tensor::index(std::initializer_list<TensorIndex> indices, SourceLoc loc) const {
  return index_impl(*this, std::vector<TensorIndex>(indices), loc);
}
Tensor Tensor::index(const std::vector<TensorIndex>& indices, SourceLoc loc) const { return index_impl(*this, indices, loc); }
Tensor Tensor::index(const std::vector<std::optional<Tensor>>& indices, SourceLoc loc) const {
  return index_impl(*this, from_optionals(indices), loc);
}

Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, const Tensor& rhs, bool accumulate, SourceLoc loc) {
  return put_impl(*this, std::vector<TensorIndex>(indices), rhs, accumulate, loc);
}
Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, const Scalar& v, SourceLoc loc) {
  return put_impl(*this, std::vector<TensorIndex>(indices), scalar_tensor(v, TensorOptions(dtype()).device(device()), loc),
                  false, loc);
}
Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& rhs, bool accumulate, SourceLoc loc) {
  return put_impl(*this, indices, rhs, accumulate, loc);
}
Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Scalar& v, SourceLoc loc) {
  return put_impl(*this, indices, scalar_tensor(v, TensorOptions(dtype()).device(device()), loc), false, loc);
}
Tensor& Tensor::index_put_(const std::vector<std::optional<Tensor>>& indices, const Tensor& values, bool accumulate,
                           SourceLoc loc) {
  return put_impl(*this, from_optionals(indices), values, accumulate, loc);
}
Tensor Tensor::index_put(const std::vector<std::optional<Tensor>>& indices, const Tensor& values, bool accumulate,
                         SourceLoc loc) const {
  Tensor out = clone(loc);
  return out.index_put_(indices, values, accumulate, loc);
}
Tensor index_put(const Tensor& self, const std::vector<std::optional<Tensor>>& indices, const Tensor& values,
                 bool accumulate, SourceLoc loc) {
  return self.index_put(indices, values, accumulate, loc);
}

}  // namespace loom
