// loom/nn/embedding_bag.h: each element's row (index_select) weighed by its
// per-sample weight, reduced into its bag's row (scatter_add, or
// scatter_reduce's amax). The bag of element i is the number of bag starts
// at or before i, less one: a cumsum of the starts counted per position, so
// bags are found on the device without reading the offsets back. Elements
// in no bag (padding, past the last offset) go to one extra row, dropped.
#include <loom/autograd.h>
#include <loom/functions.h>
#include <loom/nn/embedding_bag.h>
#include <loom/nn/init.h>


#include "api/src/record.h"

namespace loom {

EmbeddingBagMode::EmbeddingBagMode(Reduction r) : kind(Sum) {
  if (r == kMean) kind = Mean;
  else if (r != kSum) throw Error("EmbeddingBag: mode must be kSum, kMean or kMax");
}

namespace nn {
namespace functional {

Tensor embedding_bag(const Tensor& input, const Tensor& weight, const EmbeddingBagFuncOptions& o, SourceLoc loc) {
  using detail::describe;
  detail::impl_of(input, "embedding_bag", loc);
  detail::impl_of(weight, "embedding_bag", loc);
  LOOM_CHECK(weight.dim() == 2, "embedding_bag", loc, "weight has to be a 2-D tensor, got ", describe(weight));
  LOOM_CHECK(input.dtype() == kLong || input.dtype() == kInt, "embedding_bag", loc,
             "expected an int64 or int32 input of indices, got ", describe(input));
  LOOM_CHECK(input.dim() == 1 || input.dim() == 2, "embedding_bag", loc, "input has to be 1-D or 2-D, got ",
             describe(input));
  const EmbeddingBagMode::Kind mode = o.mode().kind;
  const Tensor& psw = o.per_sample_weights();
  LOOM_CHECK(!psw.defined() || mode == EmbeddingBagMode::Sum, "embedding_bag", loc,
             "per_sample_weights is only supported for mode kSum");
  LOOM_CHECK(!psw.defined() || psw.sizes() == input.sizes(), "embedding_bag", loc,
             "per_sample_weights must have the input's shape ", describe(input), ", got ", describe(psw));
  const TensorOptions longs = TensorOptions(kLong).device(input.device());
  Tensor flat = input.to(kLong, loc).reshape({-1}, loc);
  Tensor offsets = o.offsets();
  const int64_t length = flat.size(0);
  if (input.dim() == 2) {
    LOOM_CHECK(!offsets.defined(), "embedding_bag", loc, "if input is 2-D, then offsets has to be undefined, as input "
               "is treated as a mini-batch of fixed length sequences; got ", describe(offsets));
    offsets = arange(0, length, std::max<int64_t>(input.size(1), 1), longs, loc);
    if (input.size(1) == 0) offsets = zeros({input.size(0)}, longs, loc);
  } else {
    LOOM_CHECK(offsets.defined() && offsets.dim() == 1, "embedding_bag", loc,
               "offsets has to be a 1-D tensor when input is 1-D, got ", offsets.defined() ? describe(offsets) : "none");
    offsets = offsets.to(kLong, loc);
  }
  Tensor starts = o.include_last_offset() ? offsets.narrow(0, 0, std::max<int64_t>(offsets.size(0) - 1, 0), loc) : offsets;
  const int64_t bags = starts.size(0);
  const int64_t dim = weight.size(1);
  if (bags == 0) return zeros({0, dim}, TensorOptions(weight.dtype()).device(weight.device()), loc);
  if (input.dim() == 1) {
    // PyTorch's rules for offsets: the first is 0, they never decrease, and
    // none is past the input. A violation fails when the result is read.
    Tensor ok = offsets.select(0, 0, loc).eq(0, loc).logical_and(offsets.le(length, loc).all(loc), loc);
    if (offsets.size(0) > 1)
      ok = ok.logical_and(offsets.narrow(0, 1, offsets.size(0) - 1, loc)
                              .ge(offsets.narrow(0, 0, offsets.size(0) - 1, loc), loc).all(loc), loc);
    offsets = detail::checked_where(offsets, ok, length + 1, loc);
    starts = o.include_last_offset() ? offsets.narrow(0, 0, bags, loc) : offsets;
  }
  // Element i belongs to bag (number of starts <= i) - 1; positions at or past
  // the last offset (with include_last_offset) belong to no bag. Starts at
  // `length` (empty trailing bags) count in the extra last slot.
  Tensor position = arange(length, longs, loc);
  Tensor starts_at = zeros({length + 1}, longs, loc).scatter_add(0, starts, ones({bags}, longs, loc), loc);
  Tensor bag = starts_at.narrow(0, 0, length, loc).cumsum(0, std::nullopt, loc).sub(1, 1, loc);
  Tensor in_bag = bag.ge(0, loc);
  if (o.include_last_offset()) in_bag = in_bag.logical_and(position.lt(offsets.select(0, -1, loc), loc), loc);
  if (o.padding_idx()) {
    const int64_t pad = *o.padding_idx() < 0 ? *o.padding_idx() + weight.size(0) : *o.padding_idx();
    in_bag = in_bag.logical_and(flat.ne(pad, loc), loc);
  }
  Tensor rows = weight.index_select(0, flat, loc);  // [length, dim]
  const TensorOptions values = TensorOptions(weight.dtype()).device(weight.device());
  Tensor target = where(in_bag, bag, bags, loc);  // row `bags`: no bag
  Tensor index = target.unsqueeze(1, loc).expand({length, dim}, loc);
  Tensor out = zeros({bags + 1, dim}, values, loc);
  if (mode == EmbeddingBagMode::Max)  // an empty bag keeps its zeros
    return out.scatter_reduce(0, index, rows, "amax", false, loc).narrow(0, 0, bags, loc);
  Tensor weighted = psw.defined() ? rows.mul(psw.reshape({-1, 1}, loc).to(weight.dtype(), loc), loc) : rows;
  Tensor sum = out.scatter_add(0, index, weighted, loc).narrow(0, 0, bags, loc);
  if (mode == EmbeddingBagMode::Sum) return sum;
  Tensor count = zeros({bags + 1}, values, loc).scatter_add(0, target, ones({length}, values, loc), loc).narrow(0, 0, bags, loc);
  return sum.div(count.clamp(1, std::nullopt, loc).unsqueeze(1, loc), loc);
}

}  // namespace functional

EmbeddingBagImpl::EmbeddingBagImpl(const EmbeddingBagOptions& o) : options(o) {
  if (o.padding_idx()) {
    const int64_t pad = *o.padding_idx();
    LOOM_CHECK(pad < o.num_embeddings() && pad >= -o.num_embeddings(), "EmbeddingBag", SourceLoc::current(),
               "padding_idx must be within num_embeddings (", o.num_embeddings(), "), got ", pad);
    options.padding_idx(pad < 0 ? pad + o.num_embeddings() : pad);
  }
  weight = register_parameter("weight", loom::empty({o.num_embeddings(), o.embedding_dim()}));
  reset_parameters();
}
void EmbeddingBagImpl::reset_parameters() {
  init::normal_(weight);
  if (options.padding_idx()) {
    NoGradGuard no_grad;
    weight.select(0, *options.padding_idx()).zero_();
  }
}
Tensor EmbeddingBagImpl::forward(const Tensor& input, const Tensor& offsets, const Tensor& per_sample_weights,
                                 SourceLoc loc) {
  return functional::embedding_bag(input, weight,
                                   functional::EmbeddingBagFuncOptions()
                                       .offsets(offsets)
                                       .mode(options.mode())
                                       .per_sample_weights(per_sample_weights)
                                       .include_last_offset(options.include_last_offset())
                                       .padding_idx(options.padding_idx()),
                                   loc);
}
void EmbeddingBagImpl::pretty_print(std::ostream& os) const {
  static const char* modes[] = {"sum", "mean", "max"};
  os << "EmbeddingBag(" << options.num_embeddings() << ", " << options.embedding_dim()
     << ", mode=" << modes[options.mode().kind];
  if (options.padding_idx()) os << ", padding_idx=" << *options.padding_idx();
  os << ")";
}

}  // namespace nn
}  // namespace loom
