// SPDX-License-Identifier: Apache-2.0
#include <cmath>
#include <cstring>

#include "loom_test.hpp"

namespace {
// Independent references, in double: round a non-negative finite value to an
// integer, half to even.
double rne(double q) {
  const double f = std::floor(q);
  const double d = q - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

// Encodes x to a binary format with `mant_bits` mantissa bits and exponent
// bias `bias`, max exponent field `emax_field` (all ones = Inf/NaN).
std::uint32_t ref_encode(double x, int mant_bits, int bias, int emax_field) {
  const std::uint32_t sign = std::signbit(x) ? 1u : 0u;
  const std::uint32_t sign_bit = sign << (mant_bits + (emax_field == 31 ? 5 : 8));
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign_bit | (static_cast<std::uint32_t>(emax_field) << mant_bits);
  const double min_normal = std::ldexp(1.0, 1 - bias);
  std::uint32_t mag;
  if (a < min_normal) {
    mag = static_cast<std::uint32_t>(rne(a / std::ldexp(1.0, 1 - bias - mant_bits)));
  } else {
    int e;
    const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
    --e;
    double q = rne((m * 2 - 1) * std::ldexp(1.0, mant_bits));
    if (q == std::ldexp(1.0, mant_bits)) {
      q = 0;
      ++e;
    }
    const int field = e + bias;
    if (field >= emax_field)
      mag = static_cast<std::uint32_t>(emax_field) << mant_bits;
    else
      mag = (static_cast<std::uint32_t>(field) << mant_bits) | static_cast<std::uint32_t>(q);
  }
  return sign_bit | mag;
}

double ref_decode_half(std::uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0) return s * std::ldexp(static_cast<double>(m), -24);
  if (e == 31) return m ? std::nan("") : s * INFINITY;
  return s * std::ldexp(1.0 + m / 1024.0, e - 15);
}

float random_float_any_magnitude(std::mt19937_64& g) {
  std::uint32_t bits = static_cast<std::uint32_t>(g());
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
}  // namespace

TEST_CASE("half decodes every bit pattern exactly", "[core][dtype]") {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float got = loom::detail::from_bits<loom::half>(static_cast<std::uint16_t>(b));
    const double want = ref_decode_half(static_cast<std::uint16_t>(b));
    INFO("bits 0x" << std::hex << b);
    if (std::isnan(want))
      REQUIRE(std::isnan(got));
    else
      REQUIRE(static_cast<double>(got) == want);
  }
}

TEST_CASE("half rounds floats to nearest even when converting", "[core][dtype]") {
  std::mt19937_64 g(loom_test::seed_for("half rne"));
  auto check = [](float f) {
    const std::uint16_t got = loom::detail::bits_of(loom::half(f));
    INFO("f = " << f);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(static_cast<float>(loom::detail::from_bits<loom::half>(got))));
      return;
    }
    REQUIRE(got == ref_encode(f, 10, 15, 31));
  };
  for (int i = 0; i < 200000; ++i) {
    // Spread over the half range, including subnormals and overflow.
    std::uniform_real_distribution<double> e(-27, 17), m(1, 2);
    float f = static_cast<float>(std::ldexp(m(g), static_cast<int>(e(g))));
    if (g() & 1) f = -f;
    check(f);
  }
  for (int i = 0; i < 20000; ++i) check(random_float_any_magnitude(g));
  // Exact ties: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10 (rounds to even: 1).
  check(1.0f + std::ldexp(1.0f, -11));
  check(1.0f + 3 * std::ldexp(1.0f, -11));
  check(65504.0f);
  check(65519.99f);
  check(65520.0f);
  check(std::ldexp(1.0f, -25));  // halfway to the smallest subnormal: rounds to 0
  check(std::ldexp(1.5f, -25));
  check(-0.0f);
  check(INFINITY);
  check(-INFINITY);
  check(NAN);
}

TEST_CASE("bf16 rounds floats to nearest even and decodes exactly", "[core][dtype]") {
  std::mt19937_64 g(loom_test::seed_for("bf16 rne"));
  auto check = [](float f) {
    const std::uint16_t got = loom::detail::bits_of(loom::bf16(f));
    INFO("f = " << f);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(static_cast<float>(loom::detail::from_bits<loom::bf16>(got))));
      return;
    }
    REQUIRE(got == ref_encode(f, 7, 127, 255));
    // Decoding is exact: the top 16 bits of a float.
    const double back = static_cast<float>(loom::detail::from_bits<loom::bf16>(got));
    if (std::isfinite(back)) REQUIRE(std::fabs(back - f) <= std::fabs(f) * std::ldexp(1.0, -8) + std::ldexp(1.0, -134));
  };
  for (int i = 0; i < 200000; ++i) check(random_float_any_magnitude(g));
  check(1.0f + std::ldexp(1.0f, -8));      // tie: rounds down to 1 (even)
  check(1.0f + 3 * std::ldexp(1.0f, -8));  // tie: rounds up to even
  check(3.3895314e38f);                    // rounds to Inf
  check(-0.0f);
  check(INFINITY);
  check(NAN);
}

TEST_CASE("dtype traits name sizes and compute types", "[core][dtype]") {
  CHECK(loom::dtype_of<float> == loom::dtype::float32);
  CHECK(loom::dtype_of<const loom::bf16> == loom::dtype::bfloat16);
  CHECK(loom::dtype_name(loom::dtype_of<loom::half>) == "float16");
  CHECK(loom::dtype_name(loom::dtype_of<bool>) == "bool");
  CHECK(loom::dtype_name(loom::dtype_of<std::int64_t>) == "int64");
  CHECK(loom::dtype_size(loom::dtype::bfloat16) == 2);
  CHECK(loom::dtype_size(loom::dtype::float64) == 8);
  STATIC_REQUIRE(std::is_same_v<loom::compute_t<loom::half>, float>);
  STATIC_REQUIRE(std::is_same_v<loom::compute_t<loom::bf16>, float>);
  STATIC_REQUIRE(std::is_same_v<loom::compute_t<double>, double>);
  STATIC_REQUIRE(loom::element<std::uint8_t>);
  STATIC_REQUIRE(!loom::element<long double>);
  STATIC_REQUIRE(!loom::element<std::uint32_t>);
  STATIC_REQUIRE(loom::is_floating_v<loom::bf16>);
  STATIC_REQUIRE(!loom::is_floating_v<int>);
}
