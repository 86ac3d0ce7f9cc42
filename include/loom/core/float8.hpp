// SPDX-License-Identifier: Apache-2.0
#pragma once

// The 8-bit floating-point element types and their conversions. Storage is
// CUDA's own types (cuda_fp8.h), so loom tensors interoperate with CUDA code
// and cuBLASLt. Decoding (fp8 -> float) is exact and uses CUDA's conversions.
// Encoding (float -> fp8) is loom's own, in two flavours:
//  - the plain cast (`cast<e4m3>(x)`, assigning into an fp8 tensor) follows
//    ml_dtypes and PyTorch: round to nearest even, and a value beyond the
//    largest finite one becomes NaN (e4m3fn, which has no infinity) or
//    infinity (e5m2); CUDA's own constructors saturate instead;
//  - the saturating conversion used by quantization clamps out-of-range
//    values and infinities to the largest finite value (PTX's .satfinite);
//    NaN stays NaN.
// e8m0 (a power of two, used as a block scale) rounds ties up and has no
// zero and no sign: zero, negative values, infinity and NaN all give NaN.

#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/bits.hpp"

namespace loom {
//! fp8 E4M3 without infinities ("fn": finite, NaN = S.1111.111): 4 exponent
//! bits (bias 7), 3 mantissa bits, largest finite 448, smallest subnormal
//! 2^-9. CUDA's `__nv_fp8_e4m3`; ml_dtypes' and PyTorch's `float8_e4m3fn`.
//! Computed in float. Example: `auto w8 = tensor<e4m3, 2, host>({n, k});`
using float8_e4m3fn = __nv_fp8_e4m3;
//! Short name of float8_e4m3fn.
using e4m3 = float8_e4m3fn;
//! fp8 E5M2 (IEEE-like: infinities and NaNs): 5 exponent bits (bias 15),
//! 2 mantissa bits, largest finite 57344. CUDA's `__nv_fp8_e5m2`; ml_dtypes'
//! and PyTorch's `float8_e5m2`. Computed in float.
using float8_e5m2 = __nv_fp8_e5m2;
//! Short name of float8_e5m2.
using e5m2 = float8_e5m2;
//! fp8 E8M0 without sign, zero or infinity ("fnu"): the value 2^(code - 127)
//! for codes 0..254 and NaN for 255; the block scale of the OCP MX formats.
//! CUDA's `__nv_fp8_e8m0`; ml_dtypes' and PyTorch's `float8_e8m0fnu`.
using float8_e8m0fnu = __nv_fp8_e8m0;
//! Short name of float8_e8m0fnu.
using e8m0 = float8_e8m0fnu;

static_assert(sizeof(e4m3) == 1 && std::is_trivially_copyable_v<e4m3>);
static_assert(sizeof(e5m2) == 1 && std::is_trivially_copyable_v<e5m2>);
static_assert(sizeof(e8m0) == 1 && std::is_trivially_copyable_v<e8m0>);

//! True for loom's 8-bit floating-point element types (e4m3, e5m2, e8m0).
template <class T>
inline constexpr bool is_float8_v =
    std::is_same_v<std::remove_const_t<T>, e4m3> || std::is_same_v<std::remove_const_t<T>, e5m2> ||
    std::is_same_v<std::remove_const_t<T>, e8m0>;

namespace detail::fp8 {
LOOM_HD std::uint32_t float_bits(float f) {
  std::uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

//! Layout of a sign-exponent-mantissa format with subnormals: max_code is
//! the largest finite magnitude's code, overflow_code the magnitude code an
//! unsaturated overflow gives (infinity, or NaN without infinities),
//! nan_code the magnitude code of the NaN a NaN input gives.
template <int ExponentBits, int MantissaBits, std::uint8_t MaxCode, std::uint8_t OverflowCode, std::uint8_t NanCode>
struct ieee_like {
  static constexpr int exponent_bits = ExponentBits;
  static constexpr int mantissa_bits = MantissaBits;
  static constexpr int bias = (1 << (ExponentBits - 1)) - 1;
  static constexpr std::uint8_t max_code = MaxCode;
  static constexpr std::uint8_t overflow_code = OverflowCode;
  static constexpr std::uint8_t nan_code = NanCode;
};
using e4m3_format = ieee_like<4, 3, 0x7e, 0x7f, 0x7f>;
using e5m2_format = ieee_like<5, 2, 0x7b, 0x7c, 0x7e>;

//! float -> sign-magnitude code of format F, rounding to nearest even.
//! `saturate`: out-of-range values and infinities clamp to the largest
//! finite value instead of becoming F's overflow code.
template <class F>
LOOM_HD std::uint8_t encode(float x, bool saturate) {
  const std::uint32_t u = float_bits(x);
  const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | F::nan_code;
  constexpr int drop = 23 - F::mantissa_bits;  // float mantissa bits dropped
  constexpr int min_exponent = 1 - F::bias;    // of F's normal numbers
  const int exponent = static_cast<int>(a >> 23) - 127;
  std::uint32_t magnitude;
  if (a >= 0x00800000u && exponent >= min_exponent) {
    // Normal in F: round the float's bits at F's precision (a carry moves
    // into the exponent by itself), then rebias.
    const std::uint32_t rounded = a + ((a >> drop) & 1u) + ((1u << (drop - 1)) - 1u);
    magnitude = (rounded >> drop) - (static_cast<std::uint32_t>(127 - F::bias) << F::mantissa_bits);
    if (a >= 0x7f800000u || magnitude > F::max_code) magnitude = saturate ? F::max_code : F::overflow_code;
  } else if (a < 0x00800000u) {
    magnitude = 0;  // float subnormals are far below F's smallest subnormal
  } else {
    // Subnormal in F: the value in units of F's smallest subnormal,
    // 2^(min_exponent - mantissa_bits), rounded to nearest even.
    const std::uint32_t significand = (a & 0x007fffffu) | 0x00800000u;
    const int shift = 23 + min_exponent - F::mantissa_bits - exponent;
    if (shift > 25) {
      magnitude = 0;
    } else {
      const std::uint32_t half = 1u << (shift - 1), rest = significand & ((1u << shift) - 1u);
      magnitude = significand >> shift;
      if (rest > half || (rest == half && (magnitude & 1u))) ++magnitude;
    }
  }
  return sign | static_cast<std::uint8_t>(magnitude);
}

//! float -> e8m0 code: 2^round(log2 x) with ties up (ml_dtypes' rounding);
//! zero, negative, infinite and NaN inputs give NaN (255); values below
//! 2^-127 give code 0. `saturate`: an overflow gives 254 (2^127), not NaN.
LOOM_HD std::uint8_t encode_e8m0(float x, bool saturate) {
  const std::uint32_t u = float_bits(x);
  if ((u >> 31) || u == 0 || u >= 0x7f800000u) return (saturate && u == 0x7f800000u) ? 254 : 255;
  // Ties (a mantissa of exactly 1.5) round up. A float subnormal lies in
  // (0, 2^-126): code 0 (2^-127) below 1.5 * 2^-127, code 1 (2^-126) from there.
  const std::uint32_t exponent = u >> 23, mantissa = u & 0x007fffffu;
  const std::uint32_t code = exponent + (mantissa >= (exponent == 0 ? 0x00600000u : 0x00400000u) ? 1u : 0u);
  if (code > 254) return saturate ? 254 : 255;
  return static_cast<std::uint8_t>(code);
}

//! fp8 -> float, exact. A NaN keeps the sign of its code, as in ml_dtypes
//! (CUDA's conversion gives a positive NaN), so -NaN survives a round trip
//! through float, e.g. `cast<e4m3>(x)` stored into an fp8 tensor.
template <class T>
LOOM_HD float decode(T v) {
  const float f = static_cast<float>(v);
  if constexpr (!std::is_same_v<std::remove_const_t<T>, e8m0>) {
    if (f != f && (bits_of(v) & 0x80u)) {
      const std::uint32_t u = float_bits(f) | 0x80000000u;
      float negative;
      memcpy(&negative, &u, 4);
      return negative;
    }
  }
  return f;
}

//! A double rounded to float with round-to-odd: rounding that float again to
//! a format of 12 or fewer significant bits gives the correctly rounded
//! result (no double rounding).
LOOM_HD float round_to_odd(double d) {
  float f = static_cast<float>(d);
  const double back = static_cast<double>(f);
  if (back != d && back - back == 0.0) {  // inexact and finite
    std::uint32_t u = float_bits(f);
    const bool away = (back > d) == (d > 0.0);  // f rounded away from zero
    if (away) --u;
    u |= 1u;
    memcpy(&f, &u, 4);
  }
  return f;
}
}  // namespace detail::fp8

namespace detail {
//! float -> fp8 type T: the plain cast (saturate = false, ml_dtypes' and
//! PyTorch's semantics) or the saturating conversion (saturate = true).
template <class T>
LOOM_HD T to_float8(float x, bool saturate) {
  using U = std::remove_const_t<T>;
  if constexpr (std::is_same_v<U, e4m3>)
    return from_bits<U>(fp8::encode<fp8::e4m3_format>(x, saturate));
  else if constexpr (std::is_same_v<U, e5m2>)
    return from_bits<U>(fp8::encode<fp8::e5m2_format>(x, saturate));
  else
    return from_bits<U>(fp8::encode_e8m0(x, saturate));
}
//! Any arithmetic value -> fp8 type T with the plain cast's semantics
//! (a double or a wide integer is rounded once, not through float twice).
template <class T, class From>
LOOM_HD T to_float8(From v) {
  if constexpr (std::is_same_v<From, double> || std::is_same_v<From, std::int64_t>)
    return to_float8<T>(fp8::round_to_odd(static_cast<double>(v)), false);
  else
    return to_float8<T>(static_cast<float>(v), false);
}
}  // namespace detail
}  // namespace loom
