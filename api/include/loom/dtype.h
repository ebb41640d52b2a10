// Element types and PyTorch's type-promotion lattice (bool < int < float).
#pragma once
#include <cstdint>
#include <ostream>
#include <string_view>

#include <loom/bfloat16.h>

#pragma GCC visibility push(default)
namespace loom {

// The numeric values are part of the graph's canonical form: append only.
enum class ScalarType : uint8_t { Bool = 0, Int = 1, Long = 2, Float = 3, Double = 4, BFloat16 = 5 };
using DType = ScalarType;

inline constexpr ScalarType kBool = ScalarType::Bool;
inline constexpr ScalarType kInt32 = ScalarType::Int;
inline constexpr ScalarType kInt = ScalarType::Int;
inline constexpr ScalarType kInt64 = ScalarType::Long;
inline constexpr ScalarType kLong = ScalarType::Long;
inline constexpr ScalarType kFloat32 = ScalarType::Float;
inline constexpr ScalarType kFloat = ScalarType::Float;
inline constexpr ScalarType kFloat64 = ScalarType::Double;
inline constexpr ScalarType kDouble = ScalarType::Double;
// Stored in 16 bits; every op computes in float32 and rounds its result
// (round to nearest even) to bfloat16, as PyTorch eager does.
inline constexpr ScalarType kBFloat16 = ScalarType::BFloat16;

// torch/types.h's short names for the dtypes loom has.
inline constexpr ScalarType kI32 = kInt32;
inline constexpr ScalarType kI64 = kInt64;
inline constexpr ScalarType kF32 = kFloat32;
inline constexpr ScalarType kF64 = kFloat64;

inline constexpr int kNumDTypes = 6;

constexpr size_t element_size(ScalarType t) {
  switch (t) {
    case ScalarType::Bool: return 1;
    case ScalarType::Int: return 4;
    case ScalarType::Long: return 8;
    case ScalarType::Float: return 4;
    case ScalarType::Double: return 8;
    case ScalarType::BFloat16: return 2;
  }
  return 0;
}
constexpr bool is_floating_point(ScalarType t) { return t == kFloat || t == kDouble || t == kBFloat16; }
constexpr bool is_integral(ScalarType t, bool include_bool = false) {
  return t == kInt || t == kLong || (include_bool && t == kBool);
}
// PyTorch's names: Float, Double, Int, Long, Bool, BFloat16.
std::string_view to_string(ScalarType t);
std::ostream& operator<<(std::ostream& os, ScalarType t);

// The promoted type of two operands of the same priority (torch.promote_types).
ScalarType promote_types(ScalarType a, ScalarType b);

// Maps a C++ type to its ScalarType (used by item<T>, data_ptr<T>, from_blob).
template <class T> struct CppType;
template <> struct CppType<bool> { static constexpr ScalarType value = kBool; };
template <> struct CppType<int32_t> { static constexpr ScalarType value = kInt; };
template <> struct CppType<int64_t> { static constexpr ScalarType value = kLong; };
template <> struct CppType<float> { static constexpr ScalarType value = kFloat; };
template <> struct CppType<double> { static constexpr ScalarType value = kDouble; };
template <> struct CppType<BFloat16> { static constexpr ScalarType value = kBFloat16; };
template <class T> inline constexpr ScalarType dtype_of = CppType<T>::value;

}  // namespace loom
#pragma GCC visibility pop
