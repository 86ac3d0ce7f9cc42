// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/bits.hpp"
#include "loom/core/float4.hpp"
#include "loom/core/float8.hpp"

namespace loom {
//! IEEE binary16: CUDA's own `__half`, so loom tensors interoperate with CUDA
//! code and `half` means the same type with or without `using namespace loom`.
//! loom computes half data in float and rounds once (to nearest even) on store.
//! Example: `loom::half h = 1.5f; float f = h;`
using half = __half;
//! bfloat16 (8 exponent bits, 7 mantissa bits): CUDA's `__nv_bfloat16`;
//! computed in float like half.
using bf16 = __nv_bfloat16;
//! Alias spelled like the dtype name.
using bfloat16 = bf16;

static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>);
static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable_v<bf16>);

//! The element types a tensor may hold.
enum class dtype : std::uint8_t {
  bool_,
  int8,
  uint8,
  int32,
  int64,
  float16,
  bfloat16,
  float32,
  float64,
  float8_e4m3fn,
  float8_e5m2,
  float8_e8m0fnu,
  float4_e2m1fn_x2,
  int4x2
};

namespace detail {
template <class T>
struct dtype_of;
template <> struct dtype_of<bool> { static constexpr dtype value = dtype::bool_; };
template <> struct dtype_of<std::int8_t> { static constexpr dtype value = dtype::int8; };
template <> struct dtype_of<std::uint8_t> { static constexpr dtype value = dtype::uint8; };
template <> struct dtype_of<std::int32_t> { static constexpr dtype value = dtype::int32; };
template <> struct dtype_of<std::int64_t> { static constexpr dtype value = dtype::int64; };
template <> struct dtype_of<half> { static constexpr dtype value = dtype::float16; };
template <> struct dtype_of<bf16> { static constexpr dtype value = dtype::bfloat16; };
template <> struct dtype_of<float> { static constexpr dtype value = dtype::float32; };
template <> struct dtype_of<double> { static constexpr dtype value = dtype::float64; };
template <> struct dtype_of<e4m3> { static constexpr dtype value = dtype::float8_e4m3fn; };
template <> struct dtype_of<e5m2> { static constexpr dtype value = dtype::float8_e5m2; };
template <> struct dtype_of<e8m0> { static constexpr dtype value = dtype::float8_e8m0fnu; };
template <> struct dtype_of<fp4x2> { static constexpr dtype value = dtype::float4_e2m1fn_x2; };
template <> struct dtype_of<int4x2> { static constexpr dtype value = dtype::int4x2; };
template <class T, class = void>
inline constexpr bool has_dtype = false;
template <class T>
inline constexpr bool has_dtype<T, std::void_t<decltype(dtype_of<T>::value)>> = true;
}  // namespace detail

//! Satisfied by the types a tensor may hold: bool, int8, uint8, int32, int64,
//! half, bf16, float, double, e4m3, e5m2, e8m0, and the packed 4-bit pairs
//! fp4x2 and int4x2 (bytes; see core/float4.hpp).
template <class T>
concept element = detail::has_dtype<std::remove_const_t<T>>;

//! The dtype tag of element type T, e.g. `dtype_of<float> == dtype::float32`.
template <element T>
inline constexpr dtype dtype_of = detail::dtype_of<std::remove_const_t<T>>::value;

//! The dtype's name as NumPy/PyTorch spell it ("float32", "bfloat16", "bool").
constexpr std::string_view dtype_name(dtype d) {
  switch (d) {
    case dtype::bool_: return "bool";
    case dtype::int8: return "int8";
    case dtype::uint8: return "uint8";
    case dtype::int32: return "int32";
    case dtype::int64: return "int64";
    case dtype::float16: return "float16";
    case dtype::bfloat16: return "bfloat16";
    case dtype::float32: return "float32";
    case dtype::float64: return "float64";
    case dtype::float8_e4m3fn: return "float8_e4m3fn";
    case dtype::float8_e5m2: return "float8_e5m2";
    case dtype::float8_e8m0fnu: return "float8_e8m0fnu";
    case dtype::float4_e2m1fn_x2: return "float4_e2m1fn_x2";
    case dtype::int4x2: return "int4x2";
  }
  return "unknown";
}

//! Size of one element of dtype `d`, in bytes.
constexpr std::size_t dtype_size(dtype d) {
  switch (d) {
    case dtype::bool_: case dtype::int8: case dtype::uint8: return 1;
    case dtype::float8_e4m3fn: case dtype::float8_e5m2: case dtype::float8_e8m0fnu: return 1;
    case dtype::float4_e2m1fn_x2: case dtype::int4x2: return 1;
    case dtype::float16: case dtype::bfloat16: return 2;
    case dtype::int32: case dtype::float32: return 4;
    case dtype::int64: case dtype::float64: return 8;
  }
  return 0;
}

//! True for the element types narrower than float that loom computes in
//! float: half, bf16 and the fp8 types.
template <class T>
inline constexpr bool is_reduced_float_v =
    std::is_same_v<std::remove_const_t<T>, half> || std::is_same_v<std::remove_const_t<T>, bf16> || is_float8_v<T>;

//! The type in which loom computes values of T: float for half, bf16 and
//! fp8, T otherwise.
template <class T>
using compute_t = std::conditional_t<is_reduced_float_v<T>, float, std::remove_const_t<T>>;

//! True for the floating-point element types (half, bf16, fp8, float, double).
template <class T>
inline constexpr bool is_floating_v = std::is_floating_point_v<std::remove_const_t<T>> || is_reduced_float_v<T>;

namespace detail {
//! Converts a computed value to the output element type (rounding once).
//! half and bf16 convert through CUDA's conversion functions, which stay
//! declared where a build defines __CUDA_NO_HALF_CONVERSIONS__,
//! __CUDA_NO_BFLOAT16_CONVERSIONS__ and __CUDA_NO_HALF_OPERATORS__ (PyTorch
//! compiles its CUDA extensions so).
template <class To, class From>
LOOM_HD To convert(From v) {
  if constexpr (std::is_same_v<To, From>)
    return v;
  else if constexpr (std::is_same_v<From, half>)
    return convert<To>(__half2float(v));
  else if constexpr (std::is_same_v<From, bf16>)
    return convert<To>(__bfloat162float(v));
  else if constexpr (is_float8_v<From>)
    return convert<To>(fp8::decode(v));
  else if constexpr (std::is_same_v<To, bool>)
    return v != From(0);
  else if constexpr (is_float8_v<To>)
    return to_float8<To>(v);
  else if constexpr (std::is_same_v<To, half>)
    return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<To, bf16>)
    return __float2bfloat16_rn(static_cast<float>(v));
  else
    return static_cast<To>(v);
}
}  // namespace detail
}  // namespace loom
