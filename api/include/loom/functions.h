// Free functions: factories and ops, spelled as torch:: spells them.
#pragma once
#include <functional>
#include <initializer_list>
#include <optional>
#include <type_traits>
#include <string>
#include <tuple>
#include <vector>

#include <loom/tensor.h>

#pragma GCC visibility push(default)
namespace loom {

// ---- factories (record a node; no data is produced until materialization)
Tensor empty(IntArrayRef sizes, const TensorOptions& o = {}, LOOM_LOC);
Tensor zeros(IntArrayRef sizes, const TensorOptions& o = {}, LOOM_LOC);
Tensor ones(IntArrayRef sizes, const TensorOptions& o = {}, LOOM_LOC);
Tensor full(IntArrayRef sizes, const Scalar& value, const TensorOptions& o = {}, LOOM_LOC);
Tensor arange(const Scalar& end, const TensorOptions& o = {}, LOOM_LOC);
Tensor arange(const Scalar& start, const Scalar& end, const TensorOptions& o = {}, LOOM_LOC);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, const TensorOptions& o = {}, LOOM_LOC);
Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, const TensorOptions& o = {}, LOOM_LOC);
Tensor eye(int64_t n, const TensorOptions& o = {}, LOOM_LOC);
Tensor eye(int64_t n, int64_t m, const TensorOptions& o = {}, LOOM_LOC);
Tensor rand(IntArrayRef sizes, const TensorOptions& o = {}, LOOM_LOC);
Tensor randn(IntArrayRef sizes, const TensorOptions& o = {}, LOOM_LOC);
Tensor randint(int64_t high, IntArrayRef sizes, const TensorOptions& o = kLong, LOOM_LOC);
Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, const TensorOptions& o = kLong, LOOM_LOC);
// A random permutation of 0..n-1 (int64 unless o says otherwise), drawn on the
// host from loom's generator: loom::manual_seed decides it.
Tensor randperm(int64_t n, const TensorOptions& o = kLong, LOOM_LOC);
Tensor empty_like(const Tensor& t, const TensorOptions& o = {}, LOOM_LOC);
Tensor zeros_like(const Tensor& t, const TensorOptions& o = {}, LOOM_LOC);
Tensor ones_like(const Tensor& t, const TensorOptions& o = {}, LOOM_LOC);
Tensor full_like(const Tensor& t, const Scalar& value, const TensorOptions& o = {}, LOOM_LOC);
Tensor rand_like(const Tensor& t, const TensorOptions& o = {}, LOOM_LOC);
Tensor randn_like(const Tensor& t, const TensorOptions& o = {}, LOOM_LOC);

// Borrow memory the caller owns (contiguous unless strides are given). The
// tensor reads and writes it in place; `deleter` runs when loom lets go.
Tensor from_blob(void* data, IntArrayRef sizes, const TensorOptions& o = {}, LOOM_LOC);
Tensor from_blob(void* data, IntArrayRef sizes, IntArrayRef strides, const TensorOptions& o = {}, LOOM_LOC);
Tensor from_blob(void* data, IntArrayRef sizes, std::function<void(void*)> deleter,
                 const TensorOptions& o = {}, LOOM_LOC);

// Copy-in constructors: tensor({1, 2, 3}), tensor(vec).reshape({2, 2}).
// Floating-point values default to float32 and integers to int64, as in PyTorch.
template <class T> Tensor tensor(const std::vector<T>& values, const TensorOptions& o = {}, LOOM_LOC);
template <class T> Tensor tensor(std::initializer_list<T> values, const TensorOptions& o = {}, LOOM_LOC) {
  return tensor(std::vector<T>(values), o, loc);
}
// A 0-dim tensor: torch::tensor(3.5), torch::tensor(1, torch::kLong).
template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
Tensor tensor(T value, const TensorOptions& o = {}, LOOM_LOC) {
  using U = std::conditional_t<std::is_same_v<T, bool>, bool,
                               std::conditional_t<std::is_integral_v<T>, int64_t,
                                                  std::conditional_t<std::is_same_v<T, float>, float, double>>>;
  return tensor(std::vector<U>{static_cast<U>(value)}, o, loc).reshape({}, loc);
}
Tensor scalar_tensor(const Scalar& s, const TensorOptions& o = {}, LOOM_LOC);

// Seeds the default generator. Random values come from Philox-4x32-10 indexed
// by (seed, offset + element): the same on every backend and thread count.
void manual_seed(uint64_t seed);

// ---- pointwise
Tensor neg(const Tensor& x, LOOM_LOC);
Tensor abs(const Tensor& x, LOOM_LOC);
Tensor exp(const Tensor& x, LOOM_LOC);
Tensor log(const Tensor& x, LOOM_LOC);
Tensor log1p(const Tensor& x, LOOM_LOC);
Tensor expm1(const Tensor& x, LOOM_LOC);
Tensor sqrt(const Tensor& x, LOOM_LOC);
Tensor rsqrt(const Tensor& x, LOOM_LOC);
Tensor sin(const Tensor& x, LOOM_LOC);
Tensor cos(const Tensor& x, LOOM_LOC);
Tensor tanh(const Tensor& x, LOOM_LOC);
Tensor sigmoid(const Tensor& x, LOOM_LOC);
Tensor relu(const Tensor& x, LOOM_LOC);
// approximate: "none" (exact, erf) or "tanh", as torch::gelu.
Tensor gelu(const Tensor& x, const std::string& approximate = "none", LOOM_LOC);
Tensor silu(const Tensor& x, LOOM_LOC);
Tensor erf(const Tensor& x, LOOM_LOC);
// Inverse trigonometric functions; arc* are their NumPy-style aliases.
Tensor atan(const Tensor& x, LOOM_LOC);
Tensor asin(const Tensor& x, LOOM_LOC);
Tensor acos(const Tensor& x, LOOM_LOC);
Tensor arctan(const Tensor& x, LOOM_LOC);
Tensor arcsin(const Tensor& x, LOOM_LOC);
Tensor arccos(const Tensor& x, LOOM_LOC);
// The angle of the point (b, a) in (-pi, pi]; integers promote to float32.
Tensor atan2(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor arctan2(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor floor(const Tensor& x, LOOM_LOC);
Tensor ceil(const Tensor& x, LOOM_LOC);
Tensor round(const Tensor& x, LOOM_LOC);
Tensor trunc(const Tensor& x, LOOM_LOC);  // toward zero; integers are their own result
Tensor fix(const Tensor& x, LOOM_LOC);    // = trunc, as torch.fix
Tensor sign(const Tensor& x, LOOM_LOC);
Tensor reciprocal(const Tensor& x, LOOM_LOC);
Tensor square(const Tensor& x, LOOM_LOC);
Tensor logical_not(const Tensor& x, LOOM_LOC);

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1, LOOM_LOC);
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha = 1, LOOM_LOC);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1, LOOM_LOC);
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha = 1, LOOM_LOC);
Tensor mul(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor mul(const Tensor& a, const Scalar& b, LOOM_LOC);
Tensor div(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor div(const Tensor& a, const Scalar& b, LOOM_LOC);
Tensor pow(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor pow(const Tensor& a, const Scalar& b, LOOM_LOC);
Tensor pow(const Scalar& a, const Tensor& b, LOOM_LOC);
Tensor maximum(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor minimum(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor fmod(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor fmod(const Tensor& a, const Scalar& b, LOOM_LOC);
Tensor remainder(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor remainder(const Tensor& a, const Scalar& b, LOOM_LOC);
Tensor eq(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor ne(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor lt(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor le(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor gt(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor ge(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor logical_and(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor logical_or(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b, LOOM_LOC);
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b, LOOM_LOC);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt, LOOM_LOC);

// ---- reductions
Tensor sum(const Tensor& x, LOOM_LOC);
Tensor sum(const Tensor& x, IntArrayRef dims, bool keepdim = false, LOOM_LOC);
Tensor mean(const Tensor& x, LOOM_LOC);
Tensor mean(const Tensor& x, IntArrayRef dims, bool keepdim = false, LOOM_LOC);
Tensor logsumexp(const Tensor& x, IntArrayRef dims, bool keepdim = false, LOOM_LOC);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false, LOOM_LOC);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false, LOOM_LOC);

// ---- sorting (api/src/ops_sort.cpp). Every sort is stable; NaN is greater
// than every number (last ascending, first descending), as in PyTorch.
// Indices are int64; values are gathered by them, with gather's gradient.
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false, LOOM_LOC);
std::tuple<Tensor, Tensor> sort(const Tensor& x, std::optional<bool> stable, int64_t dim = -1, bool descending = false,
                                LOOM_LOC);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, LOOM_LOC);
// argsort(x, /*stable=*/true, dim): a template taking only a bool, so that
// argsort(x, 1) means dim 1 rather than being ambiguous.
template <class Bool, std::enable_if_t<std::is_same_v<Bool, bool>, int> = 0>
Tensor argsort(const Tensor& x, Bool stable, int64_t dim = -1, bool descending = false, LOOM_LOC) {
  (void)stable;
  return argsort(x, dim, descending, loc);
}
Tensor msort(const Tensor& x, LOOM_LOC);
// The k largest (or smallest) along dim, in sorted order whatever `sorted` says.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true,
                                LOOM_LOC);
std::tuple<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim = -1, bool keepdim = false, LOOM_LOC);

// ---- scans along a dim (api/src/ops_scan.cpp). dtype casts the input first;
// without it integers and bool accumulate in int64, as in PyTorch.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype = std::nullopt, LOOM_LOC);
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype = std::nullopt, LOOM_LOC);
// (values, indices) of the running maximum / minimum: the last index of a
// tie; a NaN, once met, is the extreme from there on.
std::tuple<Tensor, Tensor> cummax(const Tensor& x, int64_t dim, LOOM_LOC);
std::tuple<Tensor, Tensor> cummin(const Tensor& x, int64_t dim, LOOM_LOC);
Tensor logcumsumexp(const Tensor& x, int64_t dim, LOOM_LOC);

// ---- products, joins, indexing, normalizers
Tensor matmul(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor mm(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor bmm(const Tensor& a, const Tensor& b, LOOM_LOC);
// beta * self + alpha * (m1 @ m2)
Tensor addmm(const Tensor& self, const Tensor& m1, const Tensor& m2, const Scalar& beta = 1,
             const Scalar& alpha = 1, LOOM_LOC);
// x @ weight^T + bias, weight: [out, in]
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, LOOM_LOC);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0, LOOM_LOC);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0, LOOM_LOC);
// Draws from each row of non-negative weights (1-D or 2-D, not necessarily
// normalized): int64 [num_samples] or [rows, num_samples]. An invalid row (a
// negative, infinite or NaN weight, a zero sum, or without replacement
// fewer non-zero weights than samples) fails when the samples are read, as
// an out-of-range index at the caller's line.
Tensor multinomial(const Tensor& self, int64_t num_samples, bool replacement = false, LOOM_LOC);
// 1 with probability p (elementwise), in p's dtype; a p outside [0, 1]
// fails when the result is read.
Tensor bernoulli(const Tensor& p, LOOM_LOC);
// 1 with probability p, in self's shape and dtype.
Tensor bernoulli(const Tensor& self, double p, LOOM_LOC);
// Einstein summation, as torch::einsum: "ij,jk->ik", "bhqd,bhkd->bhqk",
// "...ij->...ji", "ii->i" (a diagonal), implicit output when "->" is left
// out; size-1 dimensions broadcast. Floating operands contract through
// batched products.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& tensors, LOOM_LOC);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, LOOM_LOC);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, LOOM_LOC);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, LOOM_LOC);
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, LOOM_LOC);
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value, LOOM_LOC);
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce, LOOM_LOC);
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value, std::string_view reduce,
               LOOM_LOC);
// reduce: "sum", "prod", "mean", "amax" or "amin".
Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce,
                      bool include_self = true, LOOM_LOC);
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha = 1,
                 LOOM_LOC);
Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, LOOM_LOC);
Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value, LOOM_LOC);
Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& value, LOOM_LOC);
// Data-dependent sizes: each reads its input (or mask) to the host, as
// PyTorch's CUDA ops do. _unique/_unique2/unique_dim always sort (PyTorch
// leaves the order for sorted=false unspecified); each NaN stays apart.
Tensor nonzero(const Tensor& x, LOOM_LOC);
Tensor argwhere(const Tensor& x, LOOM_LOC);
std::vector<Tensor> nonzero_numpy(const Tensor& x, LOOM_LOC);
std::vector<Tensor> where(const Tensor& condition, LOOM_LOC);
Tensor masked_select(const Tensor& x, const Tensor& mask, LOOM_LOC);
Tensor masked_scatter(const Tensor& x, const Tensor& mask, const Tensor& source, LOOM_LOC);
std::tuple<Tensor, Tensor> _unique(const Tensor& x, bool sorted = true, bool return_inverse = false, LOOM_LOC);
std::tuple<Tensor, Tensor, Tensor> _unique2(const Tensor& x, bool sorted = true, bool return_inverse = false,
                                            bool return_counts = false, LOOM_LOC);
std::tuple<Tensor, Tensor, Tensor> unique_dim(const Tensor& x, int64_t dim, bool sorted = true,
                                              bool return_inverse = false, bool return_counts = false, LOOM_LOC);
std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor& x, bool return_inverse = false,
                                                      bool return_counts = false,
                                                      std::optional<int64_t> dim = std::nullopt, LOOM_LOC);
Tensor index_put(const Tensor& self, const std::vector<std::optional<Tensor>>& indices, const Tensor& values,
                 bool accumulate = false, LOOM_LOC);
Tensor embedding(const Tensor& weight, const Tensor& indices, LOOM_LOC);
Tensor softmax(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype = std::nullopt, LOOM_LOC);
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype = std::nullopt, LOOM_LOC);
// num_classes = -1 infers it from the data (a materialization point, as in PyTorch).
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1, LOOM_LOC);
Tensor tril(const Tensor& x, int64_t diagonal = 0, LOOM_LOC);
Tensor triu(const Tensor& x, int64_t diagonal = 0, LOOM_LOC);
// Composite ops, as torch's free functions (the Tensor methods of the same names).
Tensor flip(const Tensor& x, IntArrayRef dims, LOOM_LOC);
Tensor roll(const Tensor& x, IntArrayRef shifts, IntArrayRef dims = {}, LOOM_LOC);
Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim = std::nullopt, LOOM_LOC);
// A count per element along dim (read to the host: it decides the size).
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim = std::nullopt, LOOM_LOC);
// [0, 1, ...] each repeated its count of times: repeat_interleave({1, 2}) = {0, 1, 1}.
Tensor repeat_interleave(const Tensor& repeats, LOOM_LOC);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value, LOOM_LOC);
Tensor isnan(const Tensor& x, LOOM_LOC);
Tensor isinf(const Tensor& x, LOOM_LOC);
Tensor isfinite(const Tensor& x, LOOM_LOC);
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max, LOOM_LOC);
Tensor outer(const Tensor& a, const Tensor& b, LOOM_LOC);
Tensor diag(const Tensor& x, int64_t diagonal = 0, LOOM_LOC);
Tensor sinh(const Tensor& x, LOOM_LOC);
Tensor cosh(const Tensor& x, LOOM_LOC);
Tensor tan(const Tensor& x, LOOM_LOC);
Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, const Scalar& beta = 1,
               const Scalar& alpha = 1, LOOM_LOC);

// PyTorch's result_type for two operands (tensor priority over scalars).
ScalarType result_type(const Tensor& a, const Tensor& b);
ScalarType result_type(const Tensor& a, const Scalar& b);

}  // namespace loom
#pragma GCC visibility pop
