// Element types and PyTorch's type-promotion lattice (bool < int < float).
#pragma once
#include <cstdint>
#include <ostream>
#include <string_view>

#include <loom/bfloat16.h>
#include <loom/half.h>

#pragma GCC visibility push(default)
namespace loom {

// The numeric values are part of the graph's canonical form: append only.
enum class ScalarType : uint8_t {
  Bool = 0, Int = 1, Long = 2, Float = 3, Double = 4, BFloat16 = 5, Half = 6, Byte = 7, Char = 8, Short = 9
};
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
// IEEE binary16, computed the same way (float32, rounded per op).
inline constexpr ScalarType kHalf = ScalarType::Half;
inline constexpr ScalarType kFloat16 = ScalarType::Half;
// uint8, int8, int16: computed in their own width, wrapping as PyTorch's.
inline constexpr ScalarType kByte = ScalarType::Byte;
inline constexpr ScalarType kUInt8 = ScalarType::Byte;
inline constexpr ScalarType kChar = ScalarType::Char;
inline constexpr ScalarType kInt8 = ScalarType::Char;
inline constexpr ScalarType kShort = ScalarType::Short;
inline constexpr ScalarType kInt16 = ScalarType::Short;

// torch/types.h's short names for the dtypes loom has.
inline constexpr ScalarType kU8 = kUInt8;
inline constexpr ScalarType kI8 = kInt8;
inline constexpr ScalarType kI16 = kInt16;
inline constexpr ScalarType kI32 = kInt32;
inline constexpr ScalarType kI64 = kInt64;
inline constexpr ScalarType kF16 = kFloat16;
inline constexpr ScalarType kF32 = kFloat32;
inline constexpr ScalarType kF64 = kFloat64;

inline constexpr int kNumDTypes = 10;

constexpr size_t element_size(ScalarType t) {
  switch (t) {
    case ScalarType::Bool: return 1;
    case ScalarType::Int: return 4;
    case ScalarType::Long: return 8;
    case ScalarType::Float: return 4;
    case ScalarType::Double: return 8;
    case ScalarType::BFloat16: return 2;
    case ScalarType::Half: return 2;
    case ScalarType::Byte: return 1;
    case ScalarType::Char: return 1;
    case ScalarType::Short: return 2;
  }
  return 0;
}
constexpr bool is_floating_point(ScalarType t) { return t == kFloat || t == kDouble || t == kBFloat16 || t == kHalf; }
constexpr bool is_integral(ScalarType t, bool include_bool = false) {
  return t == kInt || t == kLong || t == kByte || t == kChar || t == kShort || (include_bool && t == kBool);
}
// The 16-bit floats, stored narrow and computed in float32 (c10's
// isReducedFloatingType).
constexpr bool is_reduced_floating_point(ScalarType t) { return t == kBFloat16 || t == kHalf; }
// Whether the type holds negative numbers (c10's isSignedType): all but
// bool and uint8.
constexpr bool is_signed_type(ScalarType t) { return t != kBool && t != kByte; }
// PyTorch's names: Float, Double, Int, Long, Bool, BFloat16, Half, Byte,
// Char, Short.
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
template <> struct CppType<Half> { static constexpr ScalarType value = kHalf; };
template <> struct CppType<uint8_t> { static constexpr ScalarType value = kByte; };
template <> struct CppType<int8_t> { static constexpr ScalarType value = kChar; };
template <> struct CppType<int16_t> { static constexpr ScalarType value = kShort; };
template <class T> inline constexpr ScalarType dtype_of = CppType<T>::value;

}  // namespace loom
#pragma GCC visibility pop
