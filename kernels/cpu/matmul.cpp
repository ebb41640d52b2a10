// Integer and bool matrix products [B,M,K] x [B,K,N] -> [B,M,N] (or
// [M,K] x [K,N] -> [M,N]). Floating-point products are not library calls:
// the llvm backend generates them as GEMM kernels with their epilogues
// fused (jit/llvm/gemm.h, runtime/cpu/gemm_driver.h). Integer products are
// rare and exact in any order: plain row-times-matrix loops, split across
// cores by rows.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

#include "kernels/cpu/library.h"

namespace loom::kernels::cpu {

namespace {

// [B,M,K] x [B,K,N], or [M,K] x [K,N] as one batch.
void dims(const View& a, const View& b, int64_t& B, int64_t& M, int64_t& K, int64_t& N) {
  const bool batched = a.shape.n == 3;
  B = batched ? a.shape[0] : 1;
  M = a.shape[a.shape.n - 2];
  K = a.shape[a.shape.n - 1];
  N = b.shape[b.shape.n - 1];
}

// Integers wrap (computed in the unsigned type of the same width, where
// overflow is defined); bool is an or of ands. Exact in any order.
template <class T>
void matmul_exact(const View& a, const View& b, const View& out) {
  int64_t B, M, K, N;
  dims(a, b, B, M, K, N);
  using U = typename std::conditional_t<std::is_same_v<T, bool>, std::type_identity<uint8_t>, std::make_unsigned<T>>::type;
  const U* pa = static_cast<const U*>(a.data);
  const U* pb = static_cast<const U*>(b.data);
  U* pc = static_cast<U*>(out.data);
  auto rows = [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t row = r.begin(); row < r.end(); ++row) {
      const int64_t bi = row / M;
      const U* arow = pa + row * K;
      const U* bmat = pb + bi * K * N;
      U* crow = pc + row * N;
      std::fill(crow, crow + N, U(0));
      for (int64_t k = 0; k < K; ++k) {
        const U av = arow[k];
        const U* brow = bmat + k * N;
        if constexpr (std::is_same_v<T, bool>) {
          if (av)
            for (int64_t j = 0; j < N; ++j) crow[j] |= static_cast<U>(brow[j] != 0);
        } else {
          for (int64_t j = 0; j < N; ++j) crow[j] = static_cast<U>(crow[j] + static_cast<U>(av * brow[j]));
        }
      }
    }
  };
  const int64_t grain = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, N * K));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, B * M, grain), rows);
}

}  // namespace

void matmul(const View& a, const View& b, const View& out) {
  switch (out.dtype) {
    case ScalarType::Float:
    case ScalarType::Double:
    case ScalarType::BFloat16:
    case ScalarType::Half:
      throw LibraryError{"matmul: a floating-point product is a GEMM kernel (jit/llvm/gemm.h), not a library call"};
    case ScalarType::Int: return matmul_exact<int32_t>(a, b, out);
    case ScalarType::Long: return matmul_exact<int64_t>(a, b, out);
    case ScalarType::Bool: return matmul_exact<bool>(a, b, out);
    case ScalarType::Byte: return matmul_exact<uint8_t>(a, b, out);
    case ScalarType::Char: return matmul_exact<int8_t>(a, b, out);
    case ScalarType::Short: return matmul_exact<int16_t>(a, b, out);
  }
}

}  // namespace loom::kernels::cpu
