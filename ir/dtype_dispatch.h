// dispatch_dtype: runs a typed loop for a dtype known only at run time.
// One switch for every place that computes over raw buffers (the reference
// backend's evaluators, the CPU library kernels), so a new dtype is added
// in one place.
#pragma once
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <loom/bfloat16.h>
#include <loom/dtype.h>
#include <loom/half.h>

namespace loom::ir {

// The 16-bit floats, whose arithmetic goes through float: each result is
// computed in float32 and rounded back once.
template <class T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;

// Calls f.template operator()<T>() with T the C++ type of `t`, as
//   dispatch_dtype(t, [&]<class T>() { fill(static_cast<T*>(p), n); });
// A value that is not a ScalarType (a corrupted one) is never run as some
// default type: `unknown(t)` reports it (it must throw), by default as
// std::invalid_argument.
template <class F, class Unknown>
decltype(auto) dispatch_dtype(ScalarType t, F&& f, Unknown&& unknown) {
  switch (t) {
    case ScalarType::Bool: return f.template operator()<bool>();
    case ScalarType::Int: return f.template operator()<int32_t>();
    case ScalarType::Long: return f.template operator()<int64_t>();
    case ScalarType::Float: return f.template operator()<float>();
    case ScalarType::Double: return f.template operator()<double>();
    case ScalarType::BFloat16: return f.template operator()<BFloat16>();
    case ScalarType::Half: return f.template operator()<Half>();
    case ScalarType::Byte: return f.template operator()<uint8_t>();
    case ScalarType::Char: return f.template operator()<int8_t>();
    case ScalarType::Short: return f.template operator()<int16_t>();
  }
  unknown(t);
  throw std::logic_error("dispatch_dtype: the unknown-dtype handler returned");
}

template <class F>
decltype(auto) dispatch_dtype(ScalarType t, F&& f) {
  return dispatch_dtype(t, std::forward<F>(f), [](ScalarType bad) {
    throw std::invalid_argument("dispatch_dtype: " + std::to_string(static_cast<int>(bad)) + " is not a dtype");
  });
}

}  // namespace loom::ir
