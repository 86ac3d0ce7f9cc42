// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "loom/config.hpp"

namespace loom {
namespace detail {
template <class To, class From>
LOOM_HD To bits_as(From v) {
  static_assert(sizeof(To) == sizeof(From));
#if LOOM_DEVICE_CODE
  To out;
  memcpy(&out, &v, sizeof(To));
  return out;
#else
  return std::bit_cast<To>(v);
#endif
}

// float -> IEEE binary16, round to nearest even; Inf stays Inf, NaN stays (quiet) NaN.
LOOM_HD std::uint16_t float_to_half_bits(float f) {
#if LOOM_DEVICE_CODE
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  std::uint32_t u = bits_as<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  std::uint32_t out;
  if (u >= 0x47800000u) {  // |f| >= 65536, Inf or NaN
    out = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (u < 0x38800000u) {  // result is subnormal or zero: let float addition round
    // Adding 0.5 aligns the binary16 subnormal unit (2^-24) with float's last mantissa bit.
    const float magic = bits_as<float>(0x3f000000u);
    out = bits_as<std::uint32_t>(bits_as<float>(u) + magic) - 0x3f000000u;
  } else {
    const std::uint32_t odd = (u >> 13) & 1u;
    u += 0xc8000fffu + odd;  // rebias exponent (127 -> 15) and round half to even
    out = u >> 13;
  }
  return static_cast<std::uint16_t>(out | sign);
#endif
}

LOOM_HD float half_bits_to_float(std::uint16_t h) {
#if LOOM_DEVICE_CODE
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24
    return bits_as<float>(bits_as<std::uint32_t>(mag) | sign);
  }
  if (exp == 31) return bits_as<float>(sign | 0x7f800000u | (mant << 13));
  return bits_as<float>(sign | ((exp + 112u) << 23) | (mant << 13));
#endif
}

// float -> bfloat16, round to nearest even; NaN stays a quiet NaN.
LOOM_HD std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t u = bits_as<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

LOOM_HD float bf16_bits_to_float(std::uint16_t b) {
  return bits_as<float>(static_cast<std::uint32_t>(b) << 16);
}
}  // namespace detail

//! IEEE binary16 storage type. Arithmetic converts to float (loom computes
//! half data in float and rounds once on store).
//! Example: `loom::half h = 1.5f; float f = h;`
struct half {
  std::uint16_t bits_ = 0;
  half() = default;
  template <class U>
    requires std::is_arithmetic_v<U>
  LOOM_HD half(U v) : bits_(detail::float_to_half_bits(static_cast<float>(v))) {}
  LOOM_HD operator float() const { return detail::half_bits_to_float(bits_); }
  //! Builds a half from its 16 raw bits.
  LOOM_HD static half from_bits(std::uint16_t b) {
    half h;
    h.bits_ = b;
    return h;
  }
};

//! bfloat16 storage type (8 exponent bits, 7 mantissa bits); computed in float.
//! Example: `loom::bf16 b = 3.0f;`
struct bf16 {
  std::uint16_t bits_ = 0;
  bf16() = default;
  template <class U>
    requires std::is_arithmetic_v<U>
  LOOM_HD bf16(U v) : bits_(detail::float_to_bf16_bits(static_cast<float>(v))) {}
  LOOM_HD operator float() const { return detail::bf16_bits_to_float(bits_); }
  //! Builds a bf16 from its 16 raw bits.
  LOOM_HD static bf16 from_bits(std::uint16_t b) {
    bf16 h;
    h.bits_ = b;
    return h;
  }
};
//! Alias spelled like the dtype name.
using bfloat16 = bf16;

static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>);
static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable_v<bf16>);

//! The element types a tensor may hold.
enum class dtype : std::uint8_t { bool_, int8, uint8, int32, int64, float16, bfloat16, float32, float64 };

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
template <class T, class = void>
inline constexpr bool has_dtype = false;
template <class T>
inline constexpr bool has_dtype<T, std::void_t<decltype(dtype_of<T>::value)>> = true;
}  // namespace detail

//! Satisfied by the types a tensor may hold: bool, int8, uint8, int32, int64,
//! half, bf16, float, double.
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
  }
  return "unknown";
}

//! Size of one element of dtype `d`, in bytes.
constexpr std::size_t dtype_size(dtype d) {
  switch (d) {
    case dtype::bool_: case dtype::int8: case dtype::uint8: return 1;
    case dtype::float16: case dtype::bfloat16: return 2;
    case dtype::int32: case dtype::float32: return 4;
    case dtype::int64: case dtype::float64: return 8;
  }
  return 0;
}

//! The type in which loom computes values of T: float for half and bf16, T otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<std::remove_const_t<T>, half> ||
                                         std::is_same_v<std::remove_const_t<T>, bf16>,
                                     float, std::remove_const_t<T>>;

//! True for the floating-point element types (half, bf16, float, double).
template <class T>
inline constexpr bool is_floating_v =
    std::is_floating_point_v<std::remove_const_t<T>> || std::is_same_v<std::remove_const_t<T>, half> ||
    std::is_same_v<std::remove_const_t<T>, bf16>;
}  // namespace loom
