// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <math.h>

#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/simd/vmath.hpp"

//! Scalar math for functors: float and double overloads callable from both
//! executors (host and CUDA), used by loom's ops and by users' own functors.
//! Device code calls CUDA's math library; host code calls loom::vmath's
//! branch-free functions where it has them (float: exp, expm1, log, log1p,
//! tanh, erf, sin, cos, pow; double: exp, expm1, log, log1p, tanh), which
//! the host loops run in SIMD lanes, and libm otherwise.
//! Example: `LOOM_HD T operator()(T x) const { return x / (T(1) + loom::math::exp(-x)); }`
namespace loom::math {
#define LOOM_MATH_UNARY(name, f32, f64)              \
  LOOM_HD float name(float x) { return ::f32(x); }   \
  LOOM_HD double name(double x) { return ::f64(x); }
#if LOOM_DEVICE_CODE
#define LOOM_MATH_VECTOR_F(name, f32) \
  LOOM_HD float name(float x) { return ::f32(x); }
#define LOOM_MATH_VECTOR(name, f32, f64) LOOM_MATH_UNARY(name, f32, f64)
#else
#define LOOM_MATH_VECTOR_F(name, f32) \
  LOOM_HD float name(float x) { return vmath::name(x); }
#define LOOM_MATH_VECTOR(name, f32, f64)                   \
  LOOM_HD float name(float x) { return vmath::name(x); }   \
  LOOM_HD double name(double x) { return vmath::name(x); }
#endif
LOOM_MATH_VECTOR(exp, expf, exp)
LOOM_MATH_UNARY(exp2, exp2f, exp2)
LOOM_MATH_VECTOR(expm1, expm1f, expm1)
LOOM_MATH_VECTOR(log, logf, log)
LOOM_MATH_VECTOR(log1p, log1pf, log1p)
LOOM_MATH_UNARY(log2, log2f, log2)
LOOM_MATH_UNARY(sqrt, sqrtf, sqrt)
LOOM_MATH_UNARY(fabs, fabsf, fabs)
LOOM_MATH_UNARY(floor, floorf, floor)
LOOM_MATH_UNARY(ceil, ceilf, ceil)
LOOM_MATH_UNARY(rint, rintf, rint)
LOOM_MATH_VECTOR_F(sin, sinf)
LOOM_MATH_VECTOR_F(cos, cosf)
LOOM_HD double sin(double x) { return ::sin(x); }
LOOM_HD double cos(double x) { return ::cos(x); }
LOOM_MATH_VECTOR(tanh, tanhf, tanh)
LOOM_MATH_VECTOR_F(erf, erff)
LOOM_HD double erf(double x) { return ::erf(x); }
#undef LOOM_MATH_UNARY
#undef LOOM_MATH_VECTOR_F
#undef LOOM_MATH_VECTOR
LOOM_HD float pow(float a, float b) {
#if LOOM_DEVICE_CODE
  return ::powf(a, b);
#else
  return vmath::pow(a, b);
#endif
}
LOOM_HD double pow(double a, double b) { return ::pow(a, b); }
LOOM_HD float fmod(float a, float b) { return ::fmodf(a, b); }
LOOM_HD double fmod(double a, double b) { return ::fmod(a, b); }
LOOM_HD float rsqrt(float x) {
#if LOOM_DEVICE_CODE
  return ::rsqrtf(x);
#else
  return 1.0f / ::sqrtf(x);
#endif
}
LOOM_HD double rsqrt(double x) {
#if LOOM_DEVICE_CODE
  return ::rsqrt(x);
#else
  return 1.0 / ::sqrt(x);
#endif
}
template <class T>
LOOM_HD bool isnan(T x) {
  return x != x;
}
}  // namespace loom::math

namespace loom::detail {
// loom's integers wrap in their type, as PyTorch's do. Signed types as wide
// as int or wider overflow with undefined behaviour in C++, so their
// arithmetic runs in the unsigned type of the same width; narrower types are
// promoted to int (no overflow) and wrap when converted back.
template <class T, bool = std::is_integral_v<T> && std::is_signed_v<T> && (sizeof(T) >= sizeof(int))>
struct wrapping {
  using type = T;
};
template <class T>
struct wrapping<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using wrapping_t = typename wrapping<T>::type;

// NaN-propagating max/min: the first NaN met wins, as in PyTorch.
template <class C, bool Max>
LOOM_HD C nan_extreme(C a, C b) {
  // One select, no branch (bitwise, not short-circuit, operators): a branch
  // per NaN test would put each 16-byte item of a vector load behind
  // branches, and the compiler would issue a thread's loads one at a time.
  // b wins when it is NaN or beyond a, which is !(a >= b) for max: one
  // unordered comparison (setp.ltu), where "b != b | b > a" takes two and
  // an or. Equal values and -0/+0 keep a either way.
  const bool a_nan = a != a;
  const bool b_wins = Max ? !(a >= b) : !(a <= b);
  return ((!a_nan) & b_wins) ? b : a;
}
}  // namespace loom::detail
