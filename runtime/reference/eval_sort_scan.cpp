// Sorting and scanning along a dim. ArgSort: the plainest stable sort of
// each row's positions by a comparison of its values, as PyTorch's stable
// sort defines it (the library kernels sort keys built from the bits
// instead; this comparison is what they are held to). Scan: each row
// walked in order, as PyTorch's CPU cumsum / cumprod / cummax / cummin.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "runtime/reference/eval.h"

namespace loom::runtime::reference {

namespace {

// A value as the comparison sees it: bfloat16 and float16 as float, bool as 0 or 1.
template <class T>
auto comparable(T v) {
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) return static_cast<float>(v);
  else if constexpr (std::is_same_v<T, bool>) return static_cast<int>(v);
  else return v;
}

template <class V>
bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>) return std::isnan(v);
  else return false;
}

// Whether a comes strictly before b: NaN is greater than every number and
// equal to every NaN, so NaNs end an ascending row and start a descending one.
template <class V>
bool before(V a, V b, bool descending) {
  if (descending) std::swap(a, b);
  if (is_nan(a)) return false;
  return is_nan(b) || a < b;
}

}  // namespace

void eval_argsort(const EvalContext& c) {
  const ir::Dims& xs = *c.in[0]->shape;
  const int dim = static_cast<int>(c.step.attr[0]);
  const bool descending = c.step.attr[1] != 0;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= xs[d];
  for (int d = dim + 1; d < xs.n; ++d) inner *= xs[d];
  const int64_t len = xs.n == 0 ? 1 : xs[dim];
  auto* out = static_cast<int64_t*>(c.out);
  dispatch_dtype(c.in[0]->dtype, [&]<class T>() {
    const T* x = c.in[0]->as<T>();
    std::vector<int64_t> pos(static_cast<size_t>(len));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t q = 0; q < inner; ++q) {
        const T* row = x + o * len * inner + q;
        std::iota(pos.begin(), pos.end(), int64_t{0});
        std::stable_sort(pos.begin(), pos.end(), [&](int64_t a, int64_t b) {
          return before(comparable(row[a * inner]), comparable(row[b * inner]), descending);
        });
        for (int64_t k = 0; k < len; ++k) out[(o * len + k) * inner + q] = pos[static_cast<size_t>(k)];
      }
  });
}

// Sums and products accumulate as PyTorch's CPU kernels do: float and
// double in double, bfloat16 in float, integers wrapping in their width.
void eval_scan(const EvalContext& c) {
  const ir::Dims& xs = *c.in[0]->shape;
  const int dim = static_cast<int>(c.step.attr[0]);
  const auto kind = static_cast<ir::ScanKind>(c.step.attr[1]);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= xs[d];
  for (int d = dim + 1; d < xs.n; ++d) inner *= xs[d];
  const int64_t len = xs.n == 0 ? 1 : xs[dim];
  dispatch_dtype(c.in[0]->dtype, [&]<class T>() {
    const T* x = c.in[0]->as<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t q = 0; q < inner; ++q) {
        auto at = [&](int64_t k) { return (o * len + k) * inner + q; };
        switch (kind) {
          case ir::ScanKind::Sum:
          case ir::ScanKind::Prod: {
            T* out = static_cast<T*>(c.out);
            const bool sum = kind == ir::ScanKind::Sum;
            if constexpr (std::is_same_v<T, bool>) {
              bool acc = !sum;
              for (int64_t k = 0; k < len; ++k) out[at(k)] = acc = sum ? (acc || x[at(k)]) : (acc && x[at(k)]);
            } else if constexpr (std::is_integral_v<T>) {
              using U = std::make_unsigned_t<T>;
              U acc = sum ? 0 : 1;
              for (int64_t k = 0; k < len; ++k) {
                acc = sum ? static_cast<U>(acc + static_cast<U>(x[at(k)])) : static_cast<U>(acc * static_cast<U>(x[at(k)]));
                out[at(k)] = static_cast<T>(acc);
              }
            } else {
              using A = std::conditional_t<std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>, float, double>;
              A acc = sum ? 0 : 1;
              for (int64_t k = 0; k < len; ++k) {
                const A v = static_cast<A>(x[at(k)]);
                acc = sum ? acc + v : acc * v;
                out[at(k)] = static_cast<T>(acc);
              }
            }
            break;
          }
          case ir::ScanKind::ArgMax:
          case ir::ScanKind::ArgMin: {
            auto* out = static_cast<int64_t*>(c.out);
            const bool max = kind == ir::ScanKind::ArgMax;
            auto best = comparable(x[at(0)]);
            int64_t pos = 0;
            for (int64_t k = 0; k < len; ++k) {
              const auto v = comparable(x[at(k)]);
              if (is_nan(v) || (!is_nan(best) && (max ? v >= best : v <= best))) {
                best = v;
                pos = k;
              }
              out[at(k)] = pos;
            }
            break;
          }
          default: c.fail("scan: unknown kind " + std::to_string(c.step.attr[1]));
        }
      }
  });
}

}  // namespace loom::runtime::reference
