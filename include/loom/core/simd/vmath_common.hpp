// SPDX-License-Identifier: Apache-2.0
#pragma once

// Helpers of loom::vmath (vmath_float.hpp, vmath_double.hpp): bit moves and
// powers of two written so that the compiler keeps them in SIMD lanes (no
// branch, no call, no int64 <-> double conversion, which x86 lacks below
// AVX-512).

#include <bit>
#include <cstdint>

// Forces inlining of loom::vmath's functions into the loop that calls them,
// so a loop compiled for AVX2 (core/simd/dispatch.hpp) runs them in AVX2 lanes.
#if defined(__GNUC__) || defined(__clang__)
#define LOOM_VMATH_INLINE [[gnu::always_inline]] inline
#else
#define LOOM_VMATH_INLINE inline
#endif

namespace loom::vmath::detail {
LOOM_VMATH_INLINE std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }
LOOM_VMATH_INLINE std::uint64_t bits(double x) { return std::bit_cast<std::uint64_t>(x); }
LOOM_VMATH_INLINE float as_float(std::uint32_t u) { return std::bit_cast<float>(u); }
LOOM_VMATH_INLINE double as_double(std::uint64_t u) { return std::bit_cast<double>(u); }

// |x|, and x with the sign of s (bit operations: no libm call).
LOOM_VMATH_INLINE float abs(float x) { return as_float(bits(x) & 0x7fffffffu); }
LOOM_VMATH_INLINE double abs(double x) { return as_double(bits(x) & 0x7fffffffffffffffull); }
LOOM_VMATH_INLINE float copysign(float x, float s) {
  return as_float((bits(x) & 0x7fffffffu) | (bits(s) & 0x80000000u));
}
LOOM_VMATH_INLINE double copysign(double x, double s) {
  return as_double((bits(x) & 0x7fffffffffffffffull) | (bits(s) & 0x8000000000000000ull));
}

// c ? a : b through bit masks: a ternary lets g++ move the computation of
// an arm into a branch (to skip it when unused), which then keeps the loop
// out of SIMD lanes under -ftrapping-math.
LOOM_VMATH_INLINE float select(bool c, float a, float b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return as_float((bits(a) & m) | (bits(b) & ~m));
}
LOOM_VMATH_INLINE double select(bool c, double a, double b) {
  const std::uint64_t m = 0u - static_cast<std::uint64_t>(c);
  return as_double((bits(a) & m) | (bits(b) & ~m));
}

// 2^n for an integer n in [-126, 127] (float) or [-1022, 1023] (double),
// given as the bits of n in two's complement: an exponent field.
LOOM_VMATH_INLINE float pow2i(std::uint32_t n) { return as_float((n + 127u) << 23); }
LOOM_VMATH_INLINE double pow2i(std::uint64_t n) { return as_double((n + 1023ull) << 52); }

// y * 2^n for n in [-252, 254] (float) or [-2044, 2046] (double): two
// normal factors, so results that overflow or fall into the subnormals
// round once, as a correctly scaled product does.
LOOM_VMATH_INLINE float scale(float y, std::uint32_t n) {
  const std::uint32_t n1 = static_cast<std::uint32_t>(static_cast<std::int32_t>(n) >> 1);
  return y * pow2i(n1) * pow2i(n - n1);
}
LOOM_VMATH_INLINE double scale(double y, std::uint64_t n) {
  // Halved with a logical shift of n biased to positive (x86 has no 64-bit
  // arithmetic shift below AVX-512).
  const std::uint64_t n1 = ((n + 4096u) >> 1) - 2048u;
  return y * pow2i(n1) * pow2i(n - n1);
}

// Round-to-nearest of t through the sum with 1.5 * 2^23 (2^52): the integer
// comes from the sum's low bits, so -ffast-math cannot fold it away.
inline constexpr float round_magic_f = 0x1.8p23f;
inline constexpr double round_magic_d = 0x1.8p52;
}  // namespace loom::vmath::detail
