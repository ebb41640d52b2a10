// dispatch_dtype: runs a typed loop for a dtype known only at run time.
// One switch for every place that computes over raw buffers (the reference
// backend's evaluators, the CPU library kernels), so a new dtype is added
// in one place.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

#include <loom/bfloat16.h>
#include <loom/dtype.h>

namespace loom::ir {

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
