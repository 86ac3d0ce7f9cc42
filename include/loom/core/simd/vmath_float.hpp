// SPDX-License-Identifier: Apache-2.0
#pragma once

// The float kernels of loom::vmath (core/simd/vmath.hpp): Cephes-style range
// reductions and polynomials for exp and log, erf's two pieces, and sin,
// cos and pow worked in double inside.

#include <cstdint>
#include <limits>

#include "loom/core/simd/vmath_common.hpp"

namespace loom::vmath {
namespace detail {
// x = n ln2 + r with |r| <= ln2 / 2; returns expm1(r) and sets n. Valid for
// |x| < 2^22 ln2; callers clamp.
LOOM_VMATH_INLINE float expm1_reduced(float x, std::uint32_t& n) {
  const float z = x * 1.44269504088896341f + round_magic_f;
  n = bits(z) - bits(round_magic_f);
  const float k = static_cast<float>(static_cast<std::int32_t>(n));
  // ln2 in two parts, the first with 9 bits: k * 0.693359375 is exact.
  const float r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return r + r * r * p;
}

// log(x) for x > 0 finite, or garbage where the caller selects a special value.
LOOM_VMATH_INLINE float log_finite(float x) {
  const bool sub = x < 0x1p-126f;  // subnormals (and 0) scaled to normal numbers
  const float xs = x * 0x1p23f;  // arms computed first: g++ keeps a trapping op in a branch
  const std::uint32_t u = bits(select(sub, xs, x));
  std::int32_t e = static_cast<std::int32_t>(u >> 23) - (sub ? 126 + 23 : 126);
  const float m = as_float((u & 0x007fffffu) | 0x3f000000u);  // [0.5, 1)
  const bool low = m < 0.707106781186547524f;
  e = low ? e - 1 : e;
  const float f2 = (m + m) - 1.0f, f1 = m - 1.0f;
  const float f = select(low, f2, f1);  // [sqrt(1/2) - 1, sqrt(2) - 1], exact
  const float ef = static_cast<float>(e);
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = f * z * p + ef * -2.12194440e-4f;
  y = y - 0.5f * z;
  return (f + y) + ef * 0.693359375f;
}

// sin (Cos false) or cos of x: x reduced in double by multiples of pi/2
// (pi/2 in three parts, the first two of 26 bits: exact for |x| < 2^27 pi/2),
// the quadrant taken from the reduction's low bits.
template <bool Cos>
LOOM_VMATH_INLINE float sincos(float xf) {
  const double x = xf;
  const double z = x * 0.63661977236758134308 + round_magic_d;
  const double k = z - round_magic_d;
  double r = x - k * 0x1.921fb58000000p+0;
  r = r - k * -0x1.dde9740000000p-27;
  r = r - k * 0x1.1a62633145c07p-54;
  // Beyond |x| = 2^27 pi/2 the reduction is inexact: r stays in range, so
  // the result stays in [-1, 1].
  r = detail::select(r > 0.8, 0.8, r);
  r = detail::select(r < -0.8, -0.8, r);
  const double r2 = r * r;
  double s = -2.5052108385441718775e-8;
  s = s * r2 + 2.7557319223985890653e-6;
  s = s * r2 - 1.9841269841269841270e-4;
  s = s * r2 + 8.3333333333333333333e-3;
  s = s * r2 - 1.6666666666666666667e-1;
  s = r + r * r2 * s;
  double c = -2.7557319223985890653e-7;
  c = c * r2 + 2.4801587301587301587e-5;
  c = c * r2 - 1.3888888888888888889e-3;
  c = c * r2 + 4.1666666666666666667e-2;
  c = c * r2 - 0.5;
  c = 1.0 + r2 * c;
  // Quadrant q = k mod 4 (k + 1 for cos): cos for odd q, negated for q >= 2.
  const std::uint64_t q = bits(z) + (Cos ? 1u : 0u);
  const std::uint64_t odd = 0 - (q & 1u);
  const std::uint64_t v = (bits(c) & odd) | (bits(s) & ~odd);
  const float y = static_cast<float>(as_double(v ^ ((q << 62) & 0x8000000000000000ull)));
  return detail::select(!Cos & (xf == 0.0f), xf, y);  // sin keeps -0
}

// log2(x) in double for x > 0 finite (a float's value), accurate to about
// 2^-50: pow's logarithm.
LOOM_VMATH_INLINE double log2_wide(double x) {
  const std::uint64_t u = bits(x);
  // The exponent field as a double without an int64 conversion.
  double e = as_double((u >> 52) | 0x4330000000000000ull) - 0x1p52 - 1023.0;
  double m = as_double((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull);  // [1, 2)
  const bool high = m > 1.41421356237309504880;
  const double mh = m * 0.5, eh = e + 1.0;
  m = select(high, mh, m);
  e = select(high, eh, e);
  const double f = m - 1.0;
  const double s = f / (2.0 + f);  // log(m) = 2 atanh(s), |s| <= 0.172
  const double s2 = s * s;
  double p = 2.0 / 15;
  p = p * s2 + 2.0 / 13;
  p = p * s2 + 2.0 / 11;
  p = p * s2 + 2.0 / 9;
  p = p * s2 + 2.0 / 7;
  p = p * s2 + 2.0 / 5;
  p = p * s2 + 2.0 / 3;
  const double ln = 2.0 * s + s * s2 * p;
  return e + ln * 1.44269504088896340736;
}

// 2^t in double for t in [-200, 200], relative error about 2^-50.
LOOM_VMATH_INLINE double exp2_wide(double t) {
  const double z = t + round_magic_d;
  const std::uint64_t n = bits(z) - bits(round_magic_d);
  const double g = (t - (z - round_magic_d)) * 0.69314718055994530942;  // |g| <= ln2 / 2
  double p = 1.0 / 3628800;
  p = p * g + 1.0 / 362880;
  p = p * g + 1.0 / 40320;
  p = p * g + 1.0 / 5040;
  p = p * g + 1.0 / 720;
  p = p * g + 1.0 / 120;
  p = p * g + 1.0 / 24;
  p = p * g + 1.0 / 6;
  p = p * g + 0.5;
  p = p * g + 1.0;
  p = p * g + 1.0;
  return p * pow2i(n);
}
// erf(a) for 0 <= a < 0.921875: an odd polynomial, its leading term exact.
LOOM_VMATH_INLINE float erf_small(float a) {
  const float z = a * a;
  float p = 8.410934824468811e-05f;
  p = p * z - 0.0008153761868139144f;
  p = p * z + 0.005202174582122412f;
  p = p * z - 0.02685995686834003f;
  p = p * z + 0.11283708427094552f;
  p = p * z - 0.3761263494324869f;
  p = p * z + 0.1283791669008165f;  // 2 / sqrt(pi) - 1: the leading term a added exactly
  return a + a * p;
}
// q(a) ~ log(erfc(a)) for a >= 0.921875 (clamped at 3.925, where erf
// rounds to 1): erf(a) = 1 - exp(q(a)).
LOOM_VMATH_INLINE float erfc_log(float a) {
  const float t = select(a < 3.925f, a, 3.925f);
  float q = -2.137917528994176e-05f;
  q = q * t + 0.0004376333024560272f;
  q = q * t - 0.004185886757928904f;
  q = q * t + 0.025157083855850845f;
  q = q * t - 0.10833625746980088f;
  q = q * t - 0.6332976773817421f;
  q = q * t - 1.129538424815171f;
  return q * t + 0.0001793985357999736f;
}
}  // namespace detail
}  // namespace loom::vmath
