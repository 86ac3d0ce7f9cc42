// SPDX-License-Identifier: Apache-2.0
#pragma once

// The double kernels of loom::vmath (core/simd/vmath.hpp): fdlibm's range
// reductions for exp and log with Taylor polynomials of enough terms for
// double.

#include <cstdint>
#include <limits>

#include "loom/core/simd/vmath_common.hpp"

namespace loom::vmath {
namespace detail {
// x = n ln2 + r with |r| <= ln2 / 2; returns expm1(r) and sets n (|x| < 2^20).
LOOM_VMATH_INLINE double expm1_reduced(double x, std::uint64_t& n) {
  const double z = x * 1.44269504088896338700 + round_magic_d;
  n = bits(z) - bits(round_magic_d);
  const double k = z - round_magic_d;
  // fdlibm's ln2 in two parts, the first with 32 bits: k * ln2_hi is exact.
  const double r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
  double p = 1.0 / 6227020800;
  p = p * r + 1.0 / 479001600;
  p = p * r + 1.0 / 39916800;
  p = p * r + 1.0 / 3628800;
  p = p * r + 1.0 / 362880;
  p = p * r + 1.0 / 40320;
  p = p * r + 1.0 / 5040;
  p = p * r + 1.0 / 720;
  p = p * r + 1.0 / 120;
  p = p * r + 1.0 / 24;
  p = p * r + 1.0 / 6;
  p = p * r + 0.5;
  return r + r * r * p;
}

// log(x) for x > 0 finite (fdlibm's e_log.c with Taylor coefficients).
LOOM_VMATH_INLINE double log_finite(double x) {
  const bool sub = x < 0x1p-1022;
  const double xs = x * 0x1p54;
  const std::uint64_t u = bits(select(sub, xs, x));
  double e = as_double((u >> 52) | 0x4330000000000000ull) - 0x1p52 - select(sub, 1023.0 + 54.0, 1023.0);
  double m = as_double((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull);  // [1, 2)
  const bool high = m > 1.41421356237309504880;
  const double mh = m * 0.5, eh = e + 1.0;
  m = select(high, mh, m);
  e = select(high, eh, e);
  const double f = m - 1.0;
  const double s = f / (2.0 + f);
  const double z = s * s;
  double p = 2.0 / 21;
  p = p * z + 2.0 / 19;
  p = p * z + 2.0 / 17;
  p = p * z + 2.0 / 15;
  p = p * z + 2.0 / 13;
  p = p * z + 2.0 / 11;
  p = p * z + 2.0 / 9;
  p = p * z + 2.0 / 7;
  p = p * z + 2.0 / 5;
  p = p * z + 2.0 / 3;
  const double hfsq = 0.5 * f * f;
  const double rr = z * p;
  return e * 6.93147180369123816490e-01 - ((hfsq - (s * (hfsq + rr) + e * 1.90821492927058770002e-10)) - f);
}

}  // namespace detail
}  // namespace loom::vmath
