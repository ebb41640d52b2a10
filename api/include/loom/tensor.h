// loom::Tensor: the handle users hold. Every method records a node; nothing
// is computed until a value is needed (item, to_vector, data_ptr, printing,
// to(kCPU) of a pending tensor, loom::sync()).
//
// Every op takes a trailing `SourceLoc loc = SourceLoc::current()`, so a
// record-time error names the caller's file:line. Operators get theirs
// through TensorArg / ScalarArg, which capture it on conversion.
#pragma once
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include <loom/accessor.h>
#include <loom/array_ref.h>
#include <loom/device.h>
#include <loom/dtype.h>
#include <loom/error.h>
#include <loom/options.h>
#include <loom/scalar.h>

#pragma GCC visibility push(default)
namespace loom {

namespace detail {
struct TensorImpl;
}
namespace autograd {
class Node;
}

#define LOOM_LOC SourceLoc loc = SourceLoc::current()

namespace indexing {
class TensorIndex;
}

class Tensor {
 public:
  Tensor() = default;  // undefined, as a default torch::Tensor
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) noexcept = default;
  ~Tensor() = default;

  // Assigning to a named tensor rebinds it (it then refers to the other
  // tensor's data), as in libtorch. Assigning to a temporary writes into the
  // data it views, as libtorch's rvalue overloads do: `x[0] = y` and
  // `w.grad().data() = g` copy y (g) into that data (copy_, broadcasting),
  // `x.slice(0, 0, 2) = 1.5` fills it (fill_).
  Tensor& operator=(const Tensor& other) & = default;
  Tensor& operator=(Tensor&& other) & noexcept = default;
  Tensor& operator=(const Tensor& src) &&;
  Tensor& operator=(Tensor&& src) &&;
  Tensor& operator=(const Scalar& value) &&;

  // ---- metadata (never materializes)
  bool defined() const { return impl_ != nullptr; }
  IntArrayRef sizes() const;
  int64_t size(int64_t dim) const;
  IntArrayRef strides() const;
  int64_t stride(int64_t dim) const;
  int64_t storage_offset() const;
  int64_t dim() const;
  int64_t ndimension() const { return dim(); }
  int64_t numel() const;
  ScalarType dtype() const;
  ScalarType scalar_type() const { return dtype(); }
  size_t element_size() const { return loom::element_size(dtype()); }
  Device device() const;
  TensorOptions options() const;
  bool is_contiguous() const;
  bool is_cuda() const { return device().is_cuda(); }
  bool is_floating_point() const { return loom::is_floating_point(dtype()); }
  // True while the value is a recorded graph not yet computed.
  bool is_pending() const;
  // Same underlying storage (views of one another, or the same tensor).
  bool is_alias_of(const Tensor& other) const;
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  const std::shared_ptr<detail::TensorImpl>& impl() const { return impl_; }

  // ---- values (materialize: runs the pending graph of this thread and device)
  template <class T> T item(LOOM_LOC) const;
  Scalar item(LOOM_LOC) const;
  // Pointer into the materialized storage at this tensor's offset (libtorch
  // semantics: strided, valid while the tensor lives and is not written again).
  // On a GPU it is a device pointer; loom's work on it may still be queued on
  // loom's stream: call loom::cuda::synchronize() before another stream reads it.
  template <class T> T* data_ptr(LOOM_LOC) const;
  template <class T> const T* const_data_ptr(LOOM_LOC) const { return data_ptr<T>(loc); }
  // libtorch's older spelling of data_ptr<T>().
  template <class T> T* data(LOOM_LOC) const { return data_ptr<T>(loc); }
  // a[i][j] over the materialized CPU memory (loom/accessor.h); a CUDA
  // tensor, or a dim count other than N, is an error naming the call.
  template <class T, size_t N> TensorAccessor<T, N> accessor(LOOM_LOC) const {
    check_accessor(N, loc);
    T* p = data_ptr<T>(loc);
    return TensorAccessor<T, N>(p, sizes().data(), strides().data());
  }
  // The elements in logical (row-major) order.
  template <class T> std::vector<T> to_vector(LOOM_LOC) const;

  // ---- conversion and copies
  Tensor to(ScalarType t, LOOM_LOC) const;
  Tensor to(Device d, LOOM_LOC) const;
  Tensor to(DeviceType d, LOOM_LOC) const { return to(Device(d), loc); }  // t.to(kCUDA), as in libtorch
  Tensor to(Device d, ScalarType t, LOOM_LOC) const;
  Tensor to(const TensorOptions& o, LOOM_LOC) const;
  Tensor cpu(LOOM_LOC) const { return to(Device(kCPU), loc); }
  Tensor cuda(LOOM_LOC) const { return to(Device(kCUDA, 0), loc); }
  Tensor contiguous(LOOM_LOC) const;
  Tensor clone(LOOM_LOC) const;
  // The same data with no autograd history (shares the storage and its version).
  Tensor detach() const;
  Tensor& detach_();
  // The same data without history (libtorch's Tensor::data()): writes through
  // it (`p.grad().data().mul_(c)`, `p.data() = w`) change this tensor's data
  // and are not recorded for autograd.
  Tensor data() const { return detach(); }

  // ---- autograd (loom/autograd.h); backward records the gradient ops, it runs nothing
  bool requires_grad() const;
  // Makes a leaf record gradients; only floating-point tensors can.
  Tensor& requires_grad_(bool requires_grad = true, LOOM_LOC);
  Tensor& set_requires_grad(bool requires_grad, LOOM_LOC) { return requires_grad_(requires_grad, loc); }
  // No grad_fn: made by the user (or not requiring grad), not by a differentiable op.
  bool is_leaf() const;
  // The gradient accumulated by backward() (undefined until then).
  const Tensor& grad() const;
  Tensor& mutable_grad();
  // The node that computes this tensor's inputs' gradients; null for leaves.
  std::shared_ptr<autograd::Node> grad_fn() const;
  int64_t output_nr() const;
  // Counts in-place writes to the storage; a saved tensor checks it in backward.
  int64_t _version() const;
  // Keeps .grad() of a non-leaf after backward.
  void retain_grad(LOOM_LOC) const;
  bool retains_grad() const;
  // Accumulates d(this)/d(leaf) into every leaf's .grad(); `gradient` defaults
  // to ones for a one-element tensor. With `inputs`, only those leaves.
  void backward(const Tensor& gradient = {}, std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false, const std::vector<Tensor>& inputs = {}, LOOM_LOC) const;

  // ---- pointwise
  Tensor neg(LOOM_LOC) const;
  Tensor abs(LOOM_LOC) const;
  Tensor exp(LOOM_LOC) const;
  Tensor log(LOOM_LOC) const;
  Tensor log1p(LOOM_LOC) const;
  Tensor expm1(LOOM_LOC) const;
  Tensor sqrt(LOOM_LOC) const;
  Tensor rsqrt(LOOM_LOC) const;
  Tensor sin(LOOM_LOC) const;
  Tensor cos(LOOM_LOC) const;
  Tensor tanh(LOOM_LOC) const;
  Tensor sigmoid(LOOM_LOC) const;
  Tensor relu(LOOM_LOC) const;
  Tensor erf(LOOM_LOC) const;
  Tensor atan(LOOM_LOC) const;
  Tensor asin(LOOM_LOC) const;
  Tensor acos(LOOM_LOC) const;
  Tensor arctan(LOOM_LOC) const;
  Tensor arcsin(LOOM_LOC) const;
  Tensor arccos(LOOM_LOC) const;
  Tensor atan2(const Tensor& other, LOOM_LOC) const;
  Tensor arctan2(const Tensor& other, LOOM_LOC) const;
  Tensor floor(LOOM_LOC) const;
  Tensor ceil(LOOM_LOC) const;
  Tensor round(LOOM_LOC) const;
  Tensor trunc(LOOM_LOC) const;
  Tensor fix(LOOM_LOC) const { return trunc(loc); }
  Tensor sign(LOOM_LOC) const;
  Tensor reciprocal(LOOM_LOC) const;
  Tensor logical_not(LOOM_LOC) const;
  Tensor square(LOOM_LOC) const;

  Tensor add(const Tensor& other, const Scalar& alpha = 1, LOOM_LOC) const;
  Tensor add(const Scalar& other, const Scalar& alpha = 1, LOOM_LOC) const;
  Tensor sub(const Tensor& other, const Scalar& alpha = 1, LOOM_LOC) const;
  Tensor sub(const Scalar& other, const Scalar& alpha = 1, LOOM_LOC) const;
  Tensor mul(const Tensor& other, LOOM_LOC) const;
  Tensor mul(const Scalar& other, LOOM_LOC) const;
  Tensor div(const Tensor& other, LOOM_LOC) const;
  Tensor div(const Scalar& other, LOOM_LOC) const;
  Tensor pow(const Tensor& exponent, LOOM_LOC) const;
  Tensor pow(const Scalar& exponent, LOOM_LOC) const;
  Tensor maximum(const Tensor& other, LOOM_LOC) const;
  Tensor minimum(const Tensor& other, LOOM_LOC) const;
  Tensor fmod(const Tensor& other, LOOM_LOC) const;
  Tensor fmod(const Scalar& other, LOOM_LOC) const;
  Tensor remainder(const Tensor& other, LOOM_LOC) const;
  Tensor remainder(const Scalar& other, LOOM_LOC) const;
  Tensor eq(const Tensor& other, LOOM_LOC) const;
  Tensor eq(const Scalar& other, LOOM_LOC) const;
  Tensor ne(const Tensor& other, LOOM_LOC) const;
  Tensor ne(const Scalar& other, LOOM_LOC) const;
  Tensor lt(const Tensor& other, LOOM_LOC) const;
  Tensor lt(const Scalar& other, LOOM_LOC) const;
  Tensor le(const Tensor& other, LOOM_LOC) const;
  Tensor le(const Scalar& other, LOOM_LOC) const;
  Tensor gt(const Tensor& other, LOOM_LOC) const;
  Tensor gt(const Scalar& other, LOOM_LOC) const;
  Tensor ge(const Tensor& other, LOOM_LOC) const;
  Tensor ge(const Scalar& other, LOOM_LOC) const;
  Tensor logical_and(const Tensor& other, LOOM_LOC) const;
  Tensor logical_or(const Tensor& other, LOOM_LOC) const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt, LOOM_LOC) const;
  Tensor clamp_min(const Scalar& min, LOOM_LOC) const;
  Tensor clamp_max(const Scalar& max, LOOM_LOC) const;
  Tensor where(const Tensor& condition, const Tensor& other, LOOM_LOC) const;

  // ---- in place (the tensor keeps its storage; views of it see the write)
  Tensor& add_(const Tensor& other, const Scalar& alpha = 1, LOOM_LOC);
  Tensor& add_(const Scalar& other, const Scalar& alpha = 1, LOOM_LOC);
  Tensor& sub_(const Tensor& other, const Scalar& alpha = 1, LOOM_LOC);
  Tensor& sub_(const Scalar& other, const Scalar& alpha = 1, LOOM_LOC);
  Tensor& mul_(const Tensor& other, LOOM_LOC);
  Tensor& mul_(const Scalar& other, LOOM_LOC);
  Tensor& div_(const Tensor& other, LOOM_LOC);
  Tensor& div_(const Scalar& other, LOOM_LOC);
  Tensor& pow_(const Scalar& exponent, LOOM_LOC);
  Tensor& pow_(const Tensor& exponent, LOOM_LOC);
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt, LOOM_LOC);
  Tensor& neg_(LOOM_LOC);
  Tensor& abs_(LOOM_LOC);
  Tensor& exp_(LOOM_LOC);
  Tensor& log_(LOOM_LOC);
  Tensor& sqrt_(LOOM_LOC);
  Tensor& tanh_(LOOM_LOC);
  Tensor& atan_(LOOM_LOC);
  Tensor& asin_(LOOM_LOC);
  Tensor& acos_(LOOM_LOC);
  Tensor& atan2_(const Tensor& other, LOOM_LOC);
  Tensor& sigmoid_(LOOM_LOC);
  Tensor& relu_(LOOM_LOC);
  Tensor& floor_(LOOM_LOC);
  Tensor& round_(LOOM_LOC);
  Tensor& trunc_(LOOM_LOC);
  Tensor& copy_(const Tensor& src, LOOM_LOC);
  Tensor& fill_(const Scalar& value, LOOM_LOC);
  Tensor& zero_(LOOM_LOC);
  // In-place initializers and comparisons, as libtorch's: the values come
  // from loom's generator (manual_seed decides them); a comparison writes
  // 1 or 0 in this tensor's dtype.
  Tensor& uniform_(double from = 0, double to = 1, LOOM_LOC);
  Tensor& normal_(double mean = 0, double std = 1, LOOM_LOC);
  Tensor& bernoulli_(double p = 0.5, LOOM_LOC);
  Tensor bernoulli(LOOM_LOC) const;
  Tensor bernoulli(double p, LOOM_LOC) const;
  Tensor multinomial(int64_t num_samples, bool replacement = false, LOOM_LOC) const;
  Tensor& random_(int64_t from, int64_t to, LOOM_LOC);
  Tensor& eq_(const Tensor& other, LOOM_LOC);
  Tensor& eq_(const Scalar& other, LOOM_LOC);
  Tensor& ne_(const Tensor& other, LOOM_LOC);
  Tensor& ne_(const Scalar& other, LOOM_LOC);
  Tensor& lt_(const Tensor& other, LOOM_LOC);
  Tensor& lt_(const Scalar& other, LOOM_LOC);
  Tensor& le_(const Tensor& other, LOOM_LOC);
  Tensor& le_(const Scalar& other, LOOM_LOC);
  Tensor& gt_(const Tensor& other, LOOM_LOC);
  Tensor& gt_(const Scalar& other, LOOM_LOC);
  Tensor& ge_(const Tensor& other, LOOM_LOC);
  Tensor& ge_(const Scalar& other, LOOM_LOC);

  // ---- reductions (dims may be negative; keepdim as in PyTorch)
  Tensor sum(LOOM_LOC) const;
  Tensor sum(IntArrayRef dims, bool keepdim = false, std::optional<ScalarType> dtype = std::nullopt, LOOM_LOC) const;
  Tensor mean(LOOM_LOC) const;
  Tensor mean(IntArrayRef dims, bool keepdim = false, LOOM_LOC) const;
  Tensor prod(LOOM_LOC) const;
  Tensor prod(int64_t dim, bool keepdim = false, LOOM_LOC) const;
  Tensor max(LOOM_LOC) const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false, LOOM_LOC) const;
  Tensor min(LOOM_LOC) const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false, LOOM_LOC) const;
  Tensor amax(IntArrayRef dims = {}, bool keepdim = false, LOOM_LOC) const;
  Tensor amin(IntArrayRef dims = {}, bool keepdim = false, LOOM_LOC) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false, LOOM_LOC) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false, LOOM_LOC) const;
  // Over every element: var(), var(false). The flag is a template taking
  // only a bool, so that var(0) and var({0}) mean dim 0, as in Python
  // (with a plain bool overload C++ would convert 0 or {0} to `false` and
  // silently reduce over everything, unbiased: libtorch's own trap).
  Tensor var(LOOM_LOC) const { return var_all(true, loc); }
  template <class Bool, std::enable_if_t<std::is_same_v<Bool, bool>, int> = 0>
  Tensor var(Bool unbiased, LOOM_LOC) const { return var_all(unbiased, loc); }
  Tensor var(IntArrayRef dims, bool unbiased = true, bool keepdim = false, LOOM_LOC) const;
  Tensor std(LOOM_LOC) const { return var_all(true, loc).sqrt(loc); }
  template <class Bool, std::enable_if_t<std::is_same_v<Bool, bool>, int> = 0>
  Tensor std(Bool unbiased, LOOM_LOC) const { return var_all(unbiased, loc).sqrt(loc); }
  Tensor std(IntArrayRef dims, bool unbiased = true, bool keepdim = false, LOOM_LOC) const;
  Tensor logsumexp(IntArrayRef dims, bool keepdim = false, LOOM_LOC) const;
  Tensor all(LOOM_LOC) const;
  Tensor all(int64_t dim, bool keepdim = false, LOOM_LOC) const;
  Tensor any(LOOM_LOC) const;
  Tensor any(int64_t dim, bool keepdim = false, LOOM_LOC) const;
  Tensor norm(const Scalar& p = 2, LOOM_LOC) const;
  Tensor norm(const Scalar& p, IntArrayRef dims, bool keepdim = false, LOOM_LOC) const;

  // ---- sorting (loom::sort, functions.h, says how)
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false, LOOM_LOC) const;
  std::tuple<Tensor, Tensor> sort(std::optional<bool> stable, int64_t dim = -1, bool descending = false, LOOM_LOC) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, LOOM_LOC) const;
  template <class Bool, std::enable_if_t<std::is_same_v<Bool, bool>, int> = 0>
  Tensor argsort(Bool stable, int64_t dim = -1, bool descending = false, LOOM_LOC) const {
    (void)stable;  // every sort is stable
    return argsort(dim, descending, loc);
  }
  Tensor msort(LOOM_LOC) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true, LOOM_LOC) const;
  std::tuple<Tensor, Tensor> kthvalue(int64_t k, int64_t dim = -1, bool keepdim = false, LOOM_LOC) const;

  // ---- scans (loom::cumsum, functions.h, says how)
  Tensor cumsum(int64_t dim, std::optional<ScalarType> dtype = std::nullopt, LOOM_LOC) const;
  Tensor cumprod(int64_t dim, std::optional<ScalarType> dtype = std::nullopt, LOOM_LOC) const;
  std::tuple<Tensor, Tensor> cummax(int64_t dim, LOOM_LOC) const;
  std::tuple<Tensor, Tensor> cummin(int64_t dim, LOOM_LOC) const;
  Tensor logcumsumexp(int64_t dim, LOOM_LOC) const;

  // ---- views (share storage; writes through them reach the base)
  Tensor view(IntArrayRef sizes, LOOM_LOC) const;
  Tensor reshape(IntArrayRef sizes, LOOM_LOC) const;
  Tensor view_as(const Tensor& other, LOOM_LOC) const { return view(other.sizes(), loc); }
  Tensor reshape_as(const Tensor& other, LOOM_LOC) const { return reshape(other.sizes(), loc); }
  Tensor permute(IntArrayRef dims, LOOM_LOC) const;
  Tensor transpose(int64_t dim0, int64_t dim1, LOOM_LOC) const;
  Tensor t(LOOM_LOC) const;
  Tensor expand(IntArrayRef sizes, LOOM_LOC) const;
  Tensor expand_as(const Tensor& other, LOOM_LOC) const { return expand(other.sizes(), loc); }
  Tensor squeeze(LOOM_LOC) const;
  Tensor squeeze(int64_t dim, LOOM_LOC) const;
  Tensor unsqueeze(int64_t dim, LOOM_LOC) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1, LOOM_LOC) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length, LOOM_LOC) const;
  Tensor slice(int64_t dim = 0, std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt, int64_t step = 1, LOOM_LOC) const;
  Tensor select(int64_t dim, int64_t index, LOOM_LOC) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0, LOOM_LOC) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0, LOOM_LOC) const;
  std::vector<Tensor> split(IntArrayRef split_sizes, int64_t dim = 0, LOOM_LOC) const;
  std::vector<Tensor> unbind(int64_t dim = 0, LOOM_LOC) const;

  // ---- products, indexing, normalizers
  Tensor matmul(const Tensor& other, LOOM_LOC) const;
  Tensor mm(const Tensor& other, LOOM_LOC) const;
  Tensor bmm(const Tensor& other, LOOM_LOC) const;
  Tensor index_select(int64_t dim, const Tensor& index, LOOM_LOC) const;
  Tensor gather(int64_t dim, const Tensor& index, LOOM_LOC) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src, LOOM_LOC) const;
  Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src, LOOM_LOC);
  // The scatter family (ops_scatter.cpp). With duplicate indices, assign
  // keeps the last in the index's row-major order (PyTorch: unspecified).
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src, LOOM_LOC) const;
  Tensor scatter(int64_t dim, const Tensor& index, const Scalar& value, LOOM_LOC) const;
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce, LOOM_LOC) const;
  Tensor scatter(int64_t dim, const Tensor& index, const Scalar& value, std::string_view reduce, LOOM_LOC) const;
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src, LOOM_LOC);
  Tensor& scatter_(int64_t dim, const Tensor& index, const Scalar& value, LOOM_LOC);
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce, LOOM_LOC);
  Tensor& scatter_(int64_t dim, const Tensor& index, const Scalar& value, std::string_view reduce, LOOM_LOC);
  Tensor scatter_reduce(int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce,
                        bool include_self = true, LOOM_LOC) const;
  Tensor& scatter_reduce_(int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce,
                          bool include_self = true, LOOM_LOC);
  Tensor index_add(int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha = 1, LOOM_LOC) const;
  Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha = 1, LOOM_LOC);
  Tensor index_copy(int64_t dim, const Tensor& index, const Tensor& source, LOOM_LOC) const;
  Tensor& index_copy_(int64_t dim, const Tensor& index, const Tensor& source, LOOM_LOC);
  Tensor index_fill(int64_t dim, const Tensor& index, const Scalar& value, LOOM_LOC) const;
  Tensor index_fill(int64_t dim, const Tensor& index, const Tensor& value, LOOM_LOC) const;
  Tensor& index_fill_(int64_t dim, const Tensor& index, const Scalar& value, LOOM_LOC);
  Tensor& index_fill_(int64_t dim, const Tensor& index, const Tensor& value, LOOM_LOC);
  // Indexing as libtorch's torch::indexing (ops_indexing.cpp, loom/indexing.h):
  // basic indices give views, tensor indices gather (PyTorch's advanced
  // indexing). index_put_ writes through self; accumulate sums duplicates,
  // otherwise the last duplicate wins.
  Tensor index(std::initializer_list<indexing::TensorIndex> indices, LOOM_LOC) const;
  Tensor index(const std::vector<indexing::TensorIndex>& indices, LOOM_LOC) const;
  Tensor index(const std::vector<std::optional<Tensor>>& indices, LOOM_LOC) const;
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& rhs, bool accumulate = false,
                     LOOM_LOC);
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const Scalar& v, LOOM_LOC);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& rhs, bool accumulate = false,
                     LOOM_LOC);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Scalar& v, LOOM_LOC);
  Tensor& index_put_(const std::vector<std::optional<Tensor>>& indices, const Tensor& values, bool accumulate = false,
                     LOOM_LOC);
  Tensor index_put(const std::vector<std::optional<Tensor>>& indices, const Tensor& values, bool accumulate = false,
                   LOOM_LOC) const;
  // Data-dependent sizes (ops_select.cpp): these read to the host.
  Tensor nonzero(LOOM_LOC) const;
  Tensor argwhere(LOOM_LOC) const;
  std::vector<Tensor> nonzero_numpy(LOOM_LOC) const;
  Tensor masked_select(const Tensor& mask, LOOM_LOC) const;
  Tensor masked_scatter(const Tensor& mask, const Tensor& source, LOOM_LOC) const;
  Tensor& masked_scatter_(const Tensor& mask, const Tensor& source, LOOM_LOC);
  Tensor softmax(int64_t dim, std::optional<ScalarType> dtype = std::nullopt, LOOM_LOC) const;
  Tensor log_softmax(int64_t dim, std::optional<ScalarType> dtype = std::nullopt, LOOM_LOC) const;
  Tensor tril(int64_t diagonal = 0, LOOM_LOC) const;
  Tensor triu(int64_t diagonal = 0, LOOM_LOC) const;

  // ---- composite ops (ops_composite.cpp: built from the ops above)
  Tensor repeat(IntArrayRef repeats, LOOM_LOC) const;
  Tensor repeat_interleave(int64_t repeats, std::optional<int64_t> dim = std::nullopt, LOOM_LOC) const;
  Tensor repeat_interleave(const Tensor& repeats, std::optional<int64_t> dim = std::nullopt, LOOM_LOC) const;
  Tensor flip(IntArrayRef dims, LOOM_LOC) const;
  Tensor roll(IntArrayRef shifts, IntArrayRef dims = {}, LOOM_LOC) const;
  Tensor masked_fill(const Tensor& mask, const Scalar& value, LOOM_LOC) const;
  Tensor masked_fill(const Tensor& mask, const Tensor& value, LOOM_LOC) const;
  Tensor& masked_fill_(const Tensor& mask, const Scalar& value, LOOM_LOC);
  Tensor isnan(LOOM_LOC) const;
  Tensor isinf(LOOM_LOC) const;
  Tensor isfinite(LOOM_LOC) const;
  Tensor clamp(const Tensor& min, const Tensor& max, LOOM_LOC) const;
  Tensor outer(const Tensor& other, LOOM_LOC) const;
  Tensor diag(int64_t diagonal = 0, LOOM_LOC) const;
  Tensor sinh(LOOM_LOC) const;
  Tensor cosh(LOOM_LOC) const;
  Tensor tan(LOOM_LOC) const;
  Tensor diagonal(int64_t offset = 0, LOOM_LOC) const;
  Tensor baddbmm(const Tensor& batch1, const Tensor& batch2, const Scalar& beta = 1, const Scalar& alpha = 1,
                 LOOM_LOC) const;

  // ---- compound assignment (in place, as in libtorch)
  Tensor& operator+=(const Tensor& o) { return add_(o); }
  Tensor& operator+=(const Scalar& o) { return add_(o); }
  Tensor& operator-=(const Tensor& o) { return sub_(o); }
  Tensor& operator-=(const Scalar& o) { return sub_(o); }
  Tensor& operator*=(const Tensor& o) { return mul_(o); }
  Tensor& operator*=(const Scalar& o) { return mul_(o); }
  Tensor& operator/=(const Tensor& o) { return div_(o); }
  Tensor& operator/=(const Scalar& o) { return div_(o); }

 private:
  Tensor var_all(bool unbiased, SourceLoc loc) const;  // var() and std() over every element
  void check_accessor(size_t dims, SourceLoc loc) const;  // accessor<T, N>(): N dims, on the CPU
  std::shared_ptr<detail::TensorImpl> impl_;
};

// Operator operands that remember where the expression was written.
struct TensorArg {
  const Tensor& t;
  SourceLoc loc;
  TensorArg(const Tensor& t, SourceLoc l = SourceLoc::current()) : t(t), loc(l) {}  // NOLINT
};
// Taken by const reference: by value it is 32 bytes passed in memory, which
// the caller built with narrow stores and copied with 16-byte loads that the
// CPU cannot forward from them (a stall that was ~10% of recording x * 0.99).
struct ScalarArg {
  Scalar s;
  SourceLoc loc;
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  ScalarArg(T v, SourceLoc l = SourceLoc::current()) : s(v), loc(l) {}  // NOLINT
  ScalarArg(const Scalar& v, SourceLoc l = SourceLoc::current()) : s(v), loc(l) {}  // NOLINT
};

Tensor operator-(TensorArg a);
Tensor operator+(const Tensor& a, TensorArg b);
Tensor operator+(const Tensor& a, const ScalarArg& b);
Tensor operator+(const ScalarArg& a, const Tensor& b);
Tensor operator-(const Tensor& a, TensorArg b);
Tensor operator-(const Tensor& a, const ScalarArg& b);
Tensor operator-(const ScalarArg& a, const Tensor& b);
Tensor operator*(const Tensor& a, TensorArg b);
Tensor operator*(const Tensor& a, const ScalarArg& b);
Tensor operator*(const ScalarArg& a, const Tensor& b);
Tensor operator/(const Tensor& a, TensorArg b);
Tensor operator/(const Tensor& a, const ScalarArg& b);
Tensor operator/(const ScalarArg& a, const Tensor& b);
Tensor operator%(const Tensor& a, TensorArg b);
Tensor operator%(const Tensor& a, const ScalarArg& b);
Tensor operator==(const Tensor& a, TensorArg b);
Tensor operator==(const Tensor& a, const ScalarArg& b);
Tensor operator!=(const Tensor& a, TensorArg b);
Tensor operator!=(const Tensor& a, const ScalarArg& b);
Tensor operator<(const Tensor& a, TensorArg b);
Tensor operator<(const Tensor& a, const ScalarArg& b);
Tensor operator<=(const Tensor& a, TensorArg b);
Tensor operator<=(const Tensor& a, const ScalarArg& b);
Tensor operator>(const Tensor& a, TensorArg b);
Tensor operator>(const Tensor& a, const ScalarArg& b);
Tensor operator>=(const Tensor& a, TensorArg b);
Tensor operator>=(const Tensor& a, const ScalarArg& b);
Tensor operator&(const Tensor& a, TensorArg b);  // logical and of bool tensors
Tensor operator|(const Tensor& a, TensorArg b);
Tensor operator~(TensorArg a);                   // logical not of a bool tensor
Tensor operator!(TensorArg a);

// Prints like libtorch (values, then "[ CPUFloatType{2,3} ]"). Materializes.
std::ostream& operator<<(std::ostream& os, const Tensor& t);


}  // namespace loom
#pragma GCC visibility pop

#include <loom/indexing.h>
