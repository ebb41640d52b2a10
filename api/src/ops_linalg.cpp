// Matrix products. Every form records one MatMul node over [B,M,K] x [B,K,N]
// of one dtype, or over [M,K] x [K,N] for two matrices (no reshape nodes
// around the most common product): the api reshapes, expands and folds
// operands into those forms exactly as torch.matmul does, so a backend
// implements a single product and the result shapes (and error texts) are
// PyTorch's.
#include <loom/functions.h>

#include <string>
#include <vector>

#include "api/src/autocast.h"
#include "api/src/autograd/hooks.h"
#include "api/src/nn/attention.h"
#include "api/src/record.h"

namespace loom {

using detail::describe;
using detail::impl_of;

namespace {

std::string mat(int64_t r, int64_t c) { return std::to_string(r) + "x" + std::to_string(c); }

bool is_one(const Scalar& s) { return s.isFloatingPoint() ? s.toDouble() == 1.0 : s.toLong() == 1; }
bool is_zero(const Scalar& s) { return s.isFloatingPoint() ? s.toDouble() == 0.0 : s.toLong() == 0; }

void check_operands(const Tensor& a, const Tensor& b, const char* op, const SourceLoc& loc) {
  impl_of(a, op, loc);
  impl_of(b, op, loc);
  detail::check_same_device(a, b, op, loc);
  LOOM_CHECK(a.dtype() == b.dtype(), op, loc, "expected m1 and m2 to have the same dtype, but got: ", a.dtype(),
             " != ", b.dtype(), " (", describe(a), " and ", describe(b), ")");
  // PyTorch has no bool matrix product either; failing here beats a kernel that would.
  LOOM_CHECK(a.dtype() != kBool, op, loc, "not implemented for 'Bool' (", describe(a), " and ", describe(b), ")");
}

Tensor mm2(const Tensor& a, const Tensor& b, const char* op, const SourceLoc& loc);

// A bfloat16 or float16 product accumulates in float32 and is rounded once
// (PyTorch's rule). On a GPU that is one GEMM kernel on the tensor cores
// (kernels/cuda/gemm_template.cu, LoomGemmBf16 and its float16 form). The
// CPU has no 16-bit GEMM: there it is recorded as a float32 product of the
// widened operands, narrowed after (the narrowing fuses into the GEMM's
// epilogue, each widening is a pointwise kernel).
bool widen_bf16(const Tensor& a) { return is_reduced_floating_point(a.dtype()) && !a.device().is_cuda(); }

// The primitive: a [B,M,K] x b [B,K,N] -> [B,M,N]. Shapes are checked by the caller.
Tensor product(const Tensor& a, const Tensor& b, const SourceLoc& loc) {
  if (widen_bf16(a)) return product(a.to(kFloat, loc), b.to(kFloat, loc), loc).to(a.dtype(), loc);
  const int64_t dims[3] = {a.size(0), a.size(1), b.size(2)};
  Tensor out = detail::wrap(detail::new_node(ir::Op::MatMul, a.dtype(), a.device(), ir::Dims(dims, 3),
                                             {detail::read(a, loc), detail::read(b, loc)}, loc));
  if (detail::needs_grad(a, b)) [[unlikely]] detail::grad::bmm(a, b, out, loc);
  return out;
}

// 2-D x 2-D.
Tensor mm2(const Tensor& a, const Tensor& b, const char* op, const SourceLoc& loc) {
  // Both are 2-D (the callers check): their sizes read in place, not through
  // Tensor::size's dim checks (60 instructions each, four per product).
  const ir::Dims& as = a.impl()->view.sizes;
  const ir::Dims& bs = b.impl()->view.sizes;
  LOOM_CHECK(as[1] == bs[0], op, loc, "mat1 and mat2 shapes cannot be multiplied (", mat(as[0], as[1]), " and ",
             mat(bs[0], bs[1]), ")");
  if (widen_bf16(a)) return mm2(a.to(kFloat, loc), b.to(kFloat, loc), op, loc).to(a.dtype(), loc);
  if (detail::needs_grad(a, b)) [[unlikely]]
    return detail::grad::mm(a, b, [&] { return mm2(a, b, op, loc); }, loc);
  const int64_t dims[2] = {as[0], bs[1]};
  return detail::wrap(detail::new_node2(ir::Op::MatMul, a.dtype(), a.device(), ir::Dims(dims, 2), detail::read(a, loc),
                                        detail::read(b, loc), loc));
}

// 2-D x 1-D.
Tensor mv(const Tensor& a, const Tensor& v, const char* op, const SourceLoc& loc) {
  const int64_t m = a.size(0), k = a.size(1);
  LOOM_CHECK(k == v.size(0), op, loc, "size mismatch, got input (", m, "), mat (", mat(m, k), "), vec (", v.size(0), ")");
  return product(a.unsqueeze(0, loc), v.reshape({1, k, 1}, loc), loc).reshape({m}, loc);
}

Tensor matmul_impl(const Tensor& a_in, const Tensor& b_in, const char* op, const SourceLoc& loc) {
  const Tensor a = detail::autocast::lower(a_in, loc), b = detail::autocast::lower(b_in, loc);
  check_operands(a, b, op, loc);
  const int64_t da = a.dim(), db = b.dim();
  LOOM_CHECK(da > 0 && db > 0, op, loc, "both arguments to matmul need to be at least 1D, but they are ", da, "D and ",
             db, "D (", describe(a), " and ", describe(b), ")");
  if (da == 1 && db == 1) {
    const int64_t k = a.size(0);
    LOOM_CHECK(k == b.size(0), op, loc, "inconsistent tensor size, expected tensor [", k, "] and src [", b.size(0),
               "] to have the same number of elements, but got ", k, " and ", b.size(0), " elements respectively");
    return product(a.reshape({1, 1, k}, loc), b.reshape({1, k, 1}, loc), loc).reshape(std::vector<int64_t>{}, loc);
  }
  if (da == 2 && db == 1) return mv(a, b, op, loc);
  if (da == 1 && db == 2) return mm2(a.unsqueeze(0, loc), b, op, loc).squeeze(0, loc);
  if (da == 2 && db == 2) return mm2(a, b, op, loc);

  if (da >= 3 && db <= 2) {
    // Fold a's batch dims into its rows: one [rows, K] product, no copy of b per batch.
    std::vector<int64_t> out(a.sizes().begin(), a.sizes().end() - 1);
    int64_t rows = 1;
    for (int64_t s : out) rows *= s;
    Tensor a2 = a.reshape({rows, a.size(-1)}, loc);
    Tensor r = db == 2 ? mm2(a2, b, op, loc) : mv(a2, b, op, loc);
    if (db == 2) out.push_back(b.size(1));
    return r.view(out, loc);
  }

  // softmax(q kᵀ · s) v written out, in inference: one fused attention node.
  if (da >= 3 && db == da)
    if (std::optional<Tensor> fused = detail::recognize_attention(a, b, loc)) return *fused;

  // General batched case: broadcast the batch dims, expand both, one product.
  const int64_t n = da > 1 ? a.size(-2) : 1, k1 = a.size(-1);
  const int64_t k2 = db > 1 ? b.size(-2) : b.size(0), p = db > 1 ? b.size(-1) : 1;
  std::vector<int64_t> ba(a.sizes().begin(), a.sizes().end() - std::min<int64_t>(da, 2));
  std::vector<int64_t> bb(b.sizes().begin(), b.sizes().end() - std::min<int64_t>(db, 2));
  ir::Dims batch = detail::broadcast_shapes(ir::Dims(ba.data(), ba.size()), ir::Dims(bb.data(), bb.size()), op, loc);
  const int64_t B = batch.numel();
  LOOM_CHECK(k1 == k2, op, loc, "Expected size for first two dimensions of batch2 tensor to be: [", B, ", ", k1,
             "] but got: [", B, ", ", k2, "] (", describe(a), " and ", describe(b), ")");
  std::vector<int64_t> ea(batch.begin(), batch.end()), eb = ea, out = ea;
  ea.insert(ea.end(), {n, k1});
  eb.insert(eb.end(), {k2, p});
  Tensor a3 = (da == 1 ? a.unsqueeze(0, loc) : a).expand(ea, loc).reshape({B, n, k1}, loc);
  Tensor b3 = (db == 1 ? b.unsqueeze(1, loc) : b).expand(eb, loc).reshape({B, k2, p}, loc);
  if (da > 1) out.push_back(n);
  if (db > 1) out.push_back(p);
  return product(a3, b3, loc).view(out, loc);
}

void check_matrix(const Tensor& t, const char* what, const char* op, const SourceLoc& loc) {
  LOOM_CHECK(impl_of(t, op, loc).view.sizes.n == 2, op, loc, what, " must be a matrix, got ", t.dim(), "-D tensor (",
             describe(t), ")");
}

Tensor addmm_impl(const Tensor& self_in, const Tensor& m1_in, const Tensor& m2_in, const Scalar& beta,
                  const Scalar& alpha, const char* op, const SourceLoc& loc) {
  impl_of(self_in, op, loc);
  const Tensor self = detail::autocast::lower(self_in, loc), m1 = detail::autocast::lower(m1_in, loc),
               m2 = detail::autocast::lower(m2_in, loc);
  check_matrix(m1, "mat1", op, loc);
  check_matrix(m2, "mat2", op, loc);
  check_operands(m1, m2, op, loc);
  detail::check_same_device(self, m1, op, loc);
  LOOM_CHECK(self.dtype() == m1.dtype(), op, loc, "self and mat1 must have the same dtype, but got ", self.dtype(),
             " and ", m1.dtype(), " (", describe(self), " and ", describe(m1), ")");
  if (!is_floating_point(m1.dtype())) {
    LOOM_CHECK(!beta.isFloatingPoint(), op, loc, "for integral input tensors, argument beta must not be a floating point number");
    LOOM_CHECK(!alpha.isFloatingPoint(), op, loc, "for integral input tensors, argument alpha must not be a floating point number");
  }
  if (detail::needs_grad(self) || detail::needs_grad(m1, m2)) [[unlikely]]
    return detail::grad::addmm(self, m1, m2, beta, alpha,
                               [&] { return addmm_impl(self, m1, m2, beta, alpha, op, loc); }, loc);
  Tensor prod = mm2(m1, m2, op, loc);
  const ir::Dims out = detail::shape_of(prod);
  LOOM_CHECK(detail::broadcast_shapes(detail::shape_of(self), out, op, loc) == out, op, loc, "self ", describe(self),
             " cannot be broadcast to the shape of mat1 @ mat2 ", detail::shape_str(out));
  if (!is_one(alpha)) prod = prod.mul(alpha, loc);
  // beta == 0 means self is not read at all: its NaNs and infs must not leak in.
  if (is_zero(beta)) return prod;
  return add(is_one(beta) ? self : self.mul(beta, loc), prod, 1, loc);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, SourceLoc loc) { return matmul_impl(a, b, "matmul", loc); }
Tensor Tensor::matmul(const Tensor& other, SourceLoc loc) const { return matmul_impl(*this, other, "matmul", loc); }

Tensor mm(const Tensor& a_in, const Tensor& b_in, SourceLoc loc) {
  const Tensor a = detail::autocast::lower(a_in, loc), b = detail::autocast::lower(b_in, loc);
  check_matrix(a, "self", "mm", loc);
  check_matrix(b, "mat2", "mm", loc);
  check_operands(a, b, "mm", loc);
  return mm2(a, b, "mm", loc);
}
Tensor Tensor::mm(const Tensor& other, SourceLoc loc) const { return loom::mm(*this, other, loc); }

Tensor bmm(const Tensor& a_in, const Tensor& b_in, SourceLoc loc) {
  const Tensor a = detail::autocast::lower(a_in, loc), b = detail::autocast::lower(b_in, loc);
  LOOM_CHECK(impl_of(a, "bmm", loc).view.sizes.n == 3, "bmm", loc, "batch1 must be a 3D tensor, got ", describe(a));
  LOOM_CHECK(impl_of(b, "bmm", loc).view.sizes.n == 3, "bmm", loc, "batch2 must be a 3D tensor, got ", describe(b));
  check_operands(a, b, "bmm", loc);
  LOOM_CHECK(a.size(0) == b.size(0), "bmm", loc, "batch1 and batch2 must have same number of batches, got ", a.size(0),
             " and ", b.size(0));
  LOOM_CHECK(a.size(2) == b.size(1), "bmm", loc, "Expected size for first two dimensions of batch2 tensor to be: [",
             a.size(0), ", ", a.size(2), "] but got: [", b.size(0), ", ", b.size(1), "] (", describe(a), " and ",
             describe(b), ")");
  return product(a, b, loc);
}
Tensor Tensor::bmm(const Tensor& other, SourceLoc loc) const { return loom::bmm(*this, other, loc); }

Tensor addmm(const Tensor& self, const Tensor& m1, const Tensor& m2, const Scalar& beta, const Scalar& alpha,
             SourceLoc loc) {
  return addmm_impl(self, m1, m2, beta, alpha, "addmm", loc);
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, SourceLoc loc) {
  impl_of(x_in, "linear", loc);
  impl_of(weight_in, "linear", loc);
  const Tensor x = detail::autocast::lower(x_in, loc), weight = detail::autocast::lower(weight_in, loc),
               bias = detail::autocast::lower(bias_in, loc);
  const int64_t wd = impl_of(weight, "linear", loc).view.sizes.n;
  LOOM_CHECK(wd == 1 || wd == 2, "linear", loc, "weight must be 1-D or 2-D ([out_features, in_features]), got ",
             describe(weight));
  if (bias.defined()) {
    detail::check_same_device(x, bias, "linear", loc);
    LOOM_CHECK(bias.dtype() == x.dtype(), "linear", loc, "expected bias to have the dtype of the input, but got ",
               describe(bias), " and ", describe(x));
  }
  // The 2-D case with bias is one addmm, as in PyTorch (lets a backend fuse the bias).
  if (x.dim() == 2 && wd == 2 && bias.defined()) return addmm_impl(bias, x, weight.t(loc), 1, 1, "linear", loc);
  Tensor r = matmul_impl(x, weight.t(loc), "linear", loc);
  if (!bias.defined()) return r;
  const ir::Dims out = detail::shape_of(r);
  LOOM_CHECK(detail::broadcast_shapes(detail::shape_of(bias), out, "linear", loc) == out, "linear", loc, "bias ",
             describe(bias), " cannot be broadcast to the output shape ", detail::shape_str(out));
  return add(r, bias, 1, loc);
}

}  // namespace loom
