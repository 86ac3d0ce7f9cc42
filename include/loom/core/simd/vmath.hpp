// SPDX-License-Identifier: Apache-2.0
#pragma once

// loom::vmath: the host's math without branches or calls, so that a host
// loop over an expression runs it in SIMD lanes at whatever width the loop
// is compiled for (core/simd/dispatch.hpp). float: exp, expm1, log, log1p, tanh,
// erf, sin, cos, pow, gelu and its derivative; double: exp, expm1, log, log1p, tanh. Accuracy
// per function (ulp against a double reference, checked by tests/core's
// test_vmath): docs/02_expressions.md, "Host math and SIMD width".

#include <cstdint>
#include <limits>
#include <type_traits>

#include "loom/core/simd/vmath_double.hpp"
#include "loom/core/simd/vmath_float.hpp"

namespace loom::vmath {
namespace detail {
// The clamps of exp and expm1 (beyond them the result is already infinity,
// 0 or -1) and the largest n for which 1 - 2^-n is not 1.
template <class T>
struct exp_range {
  static constexpr bool is_float = std::is_same_v<T, float>;
  using bits_t = std::conditional_t<is_float, std::uint32_t, std::uint64_t>;
  using signed_t = std::make_signed_t<bits_t>;
  static constexpr T hi = is_float ? T(89) : T(710), lo = is_float ? T(-104) : T(-746);
  static constexpr T m1_lo = is_float ? T(-30) : T(-40);
  static constexpr signed_t one_minus_n = is_float ? 30 : 60;
};

template <class T>
LOOM_VMATH_INLINE T exp(T x) {
  using R = exp_range<T>;
  x = select(x > R::hi, R::hi, x);  // NaN passes both clamps
  x = select(x < R::lo, R::lo, x);
  typename R::bits_t n;
  const T em = expm1_reduced(x, n);
  return scale(T(1) + em, n);
}

template <class T>
LOOM_VMATH_INLINE T expm1(T x) {
  using R = exp_range<T>;
  T c = select(x > R::hi, R::hi, x);
  c = select(c < R::m1_lo, R::m1_lo, c);
  typename R::bits_t n;
  const T em = expm1_reduced(c, n);
  // 2^n (em + 1 - 2^-n): for n = 0 exactly em; 1 - 2^-n is exact while it is not 1.
  const T om = T(1) - pow2i(typename R::bits_t(0) - n);
  const T one_minus = select(static_cast<typename R::signed_t>(n) > R::one_minus_n, T(1), om);
  return select(x == T(0), x, scale(em + one_minus, n));  // keeps -0
}

// log for x whose finite positive value gave r: +inf, 0, negative, NaN selected.
template <class T>
LOOM_VMATH_INLINE T log_specials(T x, T r) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  r = select(x == inf, inf, r);
  r = select(x == T(0), -inf, r);
  r = select(x < T(0), std::numeric_limits<T>::quiet_NaN(), r);
  return select(x != x, x, r);
}

template <class T>
LOOM_VMATH_INLINE T log1p(T x) {
  const T u = T(1) + x;
  // The rounding of 1 + x, added back: log(u) + (x - (u - 1)) / u.
  T c = (x - (u - T(1))) / u;
  c = select((u > T(0)) & (u < std::numeric_limits<T>::infinity()), c, T(0));
  return select(x == T(0), x, log_specials(u, log_finite(u) + c));  // keeps -0
}

// tanh |x| = -e / (e + 2) with e = expm1(-2|x|), with the sign of x.
template <class T>
LOOM_VMATH_INLINE T tanh(T x) {
  const T e = detail::expm1(T(-2) * abs(x));
  return copysign(-e / (e + T(2)), x);
}
}  // namespace detail

//! e^x, branch-free (SIMD lanes in host loops); within 1 ulp (float and double).
LOOM_VMATH_INLINE float exp(float x) { return detail::exp(x); }
//! e^x for double; within 1 ulp.
LOOM_VMATH_INLINE double exp(double x) { return detail::exp(x); }
//! e^x - 1, branch-free, accurate near 0; within 2 ulp.
LOOM_VMATH_INLINE float expm1(float x) { return detail::expm1(x); }
//! e^x - 1 for double; within 2 ulp.
LOOM_VMATH_INLINE double expm1(double x) { return detail::expm1(x); }
//! Natural logarithm, branch-free; within 1 ulp.
LOOM_VMATH_INLINE float log(float x) { return detail::log_specials(x, detail::log_finite(x)); }
//! Natural logarithm for double; within 1 ulp.
LOOM_VMATH_INLINE double log(double x) { return detail::log_specials(x, detail::log_finite(x)); }
//! log(1 + x), branch-free, accurate near 0; within 2 ulp.
LOOM_VMATH_INLINE float log1p(float x) { return detail::log1p(x); }
//! log(1 + x) for double; within 2 ulp.
LOOM_VMATH_INLINE double log1p(double x) { return detail::log1p(x); }
//! Hyperbolic tangent, branch-free, through expm1; within 3 ulp.
LOOM_VMATH_INLINE float tanh(float x) { return detail::tanh(x); }
//! Hyperbolic tangent for double; within 3 ulp.
LOOM_VMATH_INLINE double tanh(double x) { return detail::tanh(x); }

//! Error function for float, branch-free: an odd polynomial below 0.921875,
//! 1 - exp(q(|x|)) above; within 2 ulp.
LOOM_VMATH_INLINE float erf(float x) {
  const float a = detail::abs(x);
  const float large = 1.0f - exp(detail::erfc_log(a));
  const float r = detail::copysign(detail::select(a < 0.921875f, detail::erf_small(a), large), x);
  return detail::select(x != x, x, r);
}

//! GELU of float, branch-free in both forms (`tanh_form` may vary at run
//! time without a branch in the loop): 0.5 x (1 + t), t = tanh(sqrt(2/pi)
//! (x + 0.044715 x^3)) or erf(x / sqrt 2), one expm1 for either
//! (tanh |u| = -e / (e + 2) with e = expm1(-2|u|); erf(a) = -expm1(q(a))).
LOOM_VMATH_INLINE float gelu(float x, bool tanh_form) {
  const float u = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
  const float a = detail::abs(x * 0.70710678118654752440f), au = detail::abs(u);
  const float e = expm1(detail::select(tanh_form, -2.0f * au, detail::erfc_log(a)));
  const float erf_a = detail::select(a < 0.921875f, detail::erf_small(a), -e);
  const float t = detail::select(tanh_form, detail::copysign(-e / (e + 2.0f), u), detail::copysign(erf_a, x));
  return 0.5f * x * (1.0f + t);
}

//! The derivative of GELU of float, branch-free in both forms: 0.5 (1 + t)
//! + 0.5 x (1 - t^2) u' with t and u as in gelu (one expm1), or
//! 0.5 (1 + erf(x / sqrt 2)) + x phi(x) (one expm1 and one exp).
LOOM_VMATH_INLINE float gelu_derivative(float x, bool tanh_form) {
  constexpr float k = 0.79788456080286535588f;
  const float x2 = x * x;
  const float u = k * (x + 0.044715f * x2 * x);
  const float a = detail::abs(x * 0.70710678118654752440f), au = detail::abs(u);
  const float e = expm1(detail::select(tanh_form, -2.0f * au, detail::erfc_log(a)));
  const float erf_a = detail::select(a < 0.921875f, detail::erf_small(a), -e);
  const float t = detail::select(tanh_form, detail::copysign(-e / (e + 2.0f), u), detail::copysign(erf_a, x));
  const float tanh_part = 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x2);
  const float erf_part = x * 0.39894228040143267794f * exp(detail::select(tanh_form, 0.0f, -0.5f * x2));
  return 0.5f * (1.0f + t) + detail::select(tanh_form, tanh_part, erf_part);
}

//! Sine for float, branch-free; within 1 ulp for |x| < 2^27 pi/2, in [-1, 1] beyond.
LOOM_VMATH_INLINE float sin(float x) { return detail::sincos<false>(x); }
//! Cosine for float, branch-free; within 1 ulp for |x| < 2^27 pi/2, in [-1, 1] beyond.
LOOM_VMATH_INLINE float cos(float x) { return detail::sincos<true>(x); }

//! x^y for float, branch-free: 2^(y log2|x|) in double, then C99's special
//! cases (negative x with integer y, zeros, infinities, NaN); within 1 ulp.
LOOM_VMATH_INLINE float pow(float x, float y) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  const float ax = detail::abs(x), ay = detail::abs(y);
  double t = static_cast<double>(y) * detail::log2_wide(ax);
  t = detail::select(t > 200.0, 200.0, t);
  t = detail::select(t < -200.0, -200.0, t);
  float r = static_cast<float>(detail::exp2_wide(t));
  // y an integer: |y| >= 2^23, or |y| unchanged by rounding; odd below 2^24.
  const bool y_int = (ay >= 0x1p23f) | ((ay + 0x1p23f) - 0x1p23f == ay);
  const float ay_c = detail::select(ay < 0x1p24f, ay, 0.0f);
  const bool y_odd = y_int & ((static_cast<std::int32_t>(ay_c) & 1) != 0);
  r = detail::select(ax == 0.0f, detail::select(y < 0.0f, inf, 0.0f), r);
  r = detail::select(ax == inf, detail::select(y < 0.0f, 0.0f, inf), r);
  r = detail::select(((x < 0.0f) & (x > -inf) & !y_int & (ay != inf)), std::numeric_limits<float>::quiet_NaN(), r);
  const float nan = x + y;
  r = detail::select(((x != x) | (y != y)), nan, r);
  r = detail::select(y_odd, detail::copysign(r, x), r);  // a negative base (-0 too) keeps its sign for odd y
  r = detail::select(((ax == 1.0f) & ((x == 1.0f) | (ay == inf))), 1.0f, r);
  return detail::select(y == 0.0f, 1.0f, r);
}
}  // namespace loom::vmath
