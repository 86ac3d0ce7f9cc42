// SPDX-License-Identifier: Apache-2.0
#pragma once

// The packed 4-bit element types: two values per byte, the first (even
// index along the row) in the low nibble, as PyTorch's float4_e2m1fn_x2,
// ml_dtypes and cuBLASLt store them. A tensor of these holds bytes; its
// innermost extent is half the logical one. Values enter expressions through
// loom::unpack (expr/unpack.hpp) or loom::low / loom::high (nn/quantize.hpp)
// and are written by the packing quantizers.

#include <cuda_fp4.h>
#include <math.h>

#include <cstdint>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/bits.hpp"

namespace loom {
//! Two fp4 E2M1 values in one byte (low nibble first): sign, 2 exponent bits
//! (bias 1), 1 mantissa bit; the values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
//! negatives; no infinity, no NaN. CUDA's `__nv_fp4x2_e2m1`; PyTorch's
//! `float4_e2m1fn_x2`. Example: `tensor<fp4x2, 2, device> w4({n, k / 2});`
using float4_e2m1fn_x2 = __nv_fp4x2_e2m1;
//! Short name of float4_e2m1fn_x2.
using fp4x2 = float4_e2m1fn_x2;

//! Two signed 4-bit integers (-8..7, two's complement) in one byte, low
//! nibble first. Example: `tensor<int4x2, 2, host> w4({n, k / 2});`
struct int4x2 {
  std::uint8_t bits;  //!< the first value in bits 0-3, the second in bits 4-7
};

static_assert(sizeof(fp4x2) == 1 && std::is_trivially_copyable_v<fp4x2>);
static_assert(sizeof(int4x2) == 1 && std::is_trivially_copyable_v<int4x2>);

//! True for the packed 4-bit element types (fp4x2, int4x2).
template <class T>
inline constexpr bool is_packed4_v =
    std::is_same_v<std::remove_const_t<T>, fp4x2> || std::is_same_v<std::remove_const_t<T>, int4x2>;

namespace detail::fp4 {
//! The value of an E2M1 code (the low 4 bits of `code`), without branches:
//! codes 2-7 are normal numbers whose exponent and mantissa bits, shifted
//! into a float's, need the bias moved from 1 to 127; codes 0 and 1 are 0
//! and 0.5 (the subnormal); bit 3 is the sign.
LOOM_HD float decode(std::uint8_t code) {
  const std::uint32_t m = code & 0x7u;
  const std::uint32_t magnitude = m >= 2 ? (m << 22) + (126u << 23) : m * (126u << 23);
  const std::uint32_t bits = magnitude | (static_cast<std::uint32_t>(code & 0x8u) << 28);
  float v;
  memcpy(&v, &bits, sizeof(v));
  return v;
}
//! float -> E2M1 code: round to nearest even, saturating at +-6; NaN gives
//! 0x7 (+6), as CUDA's conversion does (E2M1 has no NaN).
LOOM_HD std::uint8_t encode(float x) {
  if (!(x == x)) return 0x7u;
  const std::uint8_t sign = x < 0.0f || (x == 0.0f && 1.0f / x < 0.0f) ? 0x8u : 0x0u;
  const float a = x < 0.0f ? -x : x;
  // Midpoints between consecutive magnitudes; at a tie the even code wins.
  std::uint8_t m;
  if (a <= 0.25f)
    m = 0;
  else if (a < 0.75f)
    m = 1;
  else if (a <= 1.25f)
    m = 2;
  else if (a < 1.75f)
    m = 3;
  else if (a <= 2.5f)
    m = 4;
  else if (a < 3.5f)
    m = 5;
  else if (a <= 5.0f)
    m = 6;
  else
    m = 7;
  return sign | m;
}
}  // namespace detail::fp4

namespace detail::int4 {
//! The value of a two's complement 4-bit code (the low 4 bits of `code`).
LOOM_HD int decode(std::uint8_t code) { return static_cast<int>(code & 0xfu) - ((code & 0x8u) ? 16 : 0); }
//! float -> 4-bit code: round to nearest even, saturating at -8 and 7; NaN gives 0.
LOOM_HD std::uint8_t encode(float x) {
  if (!(x == x)) return 0;
  const float c = x < -8.0f ? -8.0f : (x > 7.0f ? 7.0f : x);
  return static_cast<std::uint8_t>(static_cast<int>(rintf(c)) & 0xf);
}
}  // namespace detail::int4

namespace detail {
//! The byte of a packed 4-bit pair.
template <class P>
LOOM_HD std::uint8_t packed_byte(P p) {
  if constexpr (std::is_same_v<std::remove_const_t<P>, int4x2>)
    return p.bits;
  else
    return bits_of(p);
}
//! A packed pair from its byte.
template <class P>
LOOM_HD P packed_from_byte(std::uint8_t b) {
  if constexpr (std::is_same_v<P, int4x2>)
    return int4x2{b};
  else
    return from_bits<P>(b);
}
//! The value of a 4-bit code (the low 4 bits of `nibble`) of packed type P, as a float.
template <class P>
LOOM_HD float decode4(std::uint8_t nibble) {
  if constexpr (std::is_same_v<std::remove_const_t<P>, int4x2>)
    return static_cast<float>(int4::decode(nibble));
  else
    return fp4::decode(nibble);
}
//! The value of nibble `High` (0: the first, low nibble) of a packed pair.
template <int High, class P>
LOOM_HD float unpack4(P p) {
  return decode4<P>(static_cast<std::uint8_t>(packed_byte(p) >> (4 * High)));
}
//! Two floats encoded (rounded, saturated) into a packed pair, `first` in the low nibble.
template <class P>
LOOM_HD P pack4(float first, float second) {
  if constexpr (std::is_same_v<P, int4x2>)
    return int4x2{static_cast<std::uint8_t>(int4::encode(first) | (int4::encode(second) << 4))};
  else
    return from_bits<P>(static_cast<std::uint8_t>(fp4::encode(first) | (fp4::encode(second) << 4)));
}
}  // namespace detail
}  // namespace loom
