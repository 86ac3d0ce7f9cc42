// SPDX-License-Identifier: Apache-2.0
// Statistics of 10^7 samples from the host executor (compiled optimized, see
// CMakeLists.txt): moments, Kolmogorov-Smirnov for the uniform and normal
// distributions, chi-square over the bytes of the Philox stream, and the
// fraction dropout keeps.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "loom_test.hpp"

using loom::index_t;

namespace {
constexpr index_t samples = 10'000'000;

struct moments {
  double mean = 0, variance = 0, lo = INFINITY, hi = -INFINITY;
};
moments moments_of(const float* p, index_t n) {
  moments m;
  double sum = 0, sum2 = 0;
  for (index_t i = 0; i < n; ++i) {
    sum += p[i];
    m.lo = std::min(m.lo, static_cast<double>(p[i]));
    m.hi = std::max(m.hi, static_cast<double>(p[i]));
  }
  m.mean = sum / static_cast<double>(n);
  for (index_t i = 0; i < n; ++i) sum2 += (p[i] - m.mean) * (p[i] - m.mean);
  m.variance = sum2 / static_cast<double>(n - 1);
  return m;
}

// Kolmogorov-Smirnov distance of the samples from the distribution function cdf.
template <class Cdf>
double ks_distance(const float* p, index_t n, Cdf cdf) {
  std::vector<float> v(p, p + n);
  std::sort(v.begin(), v.end());
  double d = 0;
  for (index_t i = 0; i < n; ++i) {
    const double f = cdf(static_cast<double>(v[static_cast<std::size_t>(i)]));
    d = std::max({d, static_cast<double>(i + 1) / static_cast<double>(n) - f,
                  f - static_cast<double>(i) / static_cast<double>(n)});
  }
  return d;
}
// Critical KS distance at significance 1e-4 for n samples: sqrt(-ln(alpha / 2) / 2) / sqrt(n).
double ks_critical(index_t n) { return std::sqrt(-std::log(0.5e-4) / 2) / std::sqrt(static_cast<double>(n)); }
}  // namespace

TEST_CASE("rand over 10^7 samples is uniform on [0, 1)", "[rng][stats]") {
  loom::host_tensor<float, 1> u({samples});
  u = loom::rand(20261204, 1);
  const moments m = moments_of(u.data(), samples);
  CHECK(m.lo >= 0.0);
  CHECK(m.hi < 1.0);
  // Five standard errors of the mean (sqrt(1/12 / n)) and of the variance (sqrt((1/80 - 1/144) / n)).
  CHECK(std::fabs(m.mean - 0.5) < 5 * std::sqrt(1.0 / 12 / samples));
  CHECK(std::fabs(m.variance - 1.0 / 12) < 5 * std::sqrt((1.0 / 80 - 1.0 / 144) / samples));
  const double d = ks_distance(u.data(), samples, [](double x) { return x; });
  INFO("KS distance " << d << ", critical " << ks_critical(samples));
  CHECK(d < ks_critical(samples));
}

TEST_CASE("randn over 10^7 samples is standard normal", "[rng][stats]") {
  loom::host_tensor<float, 2> z({3163, 3163});  // just over 10^7, an odd shape
  z = loom::randn(97, 5);
  const index_t n = z.size();
  const moments m = moments_of(z.data(), n);
  CHECK(std::fabs(m.mean) < 5 / std::sqrt(static_cast<double>(n)));
  CHECK(std::fabs(m.variance - 1) < 5 * std::sqrt(2.0 / static_cast<double>(n)));
  CHECK(m.hi <= 5.8);
  CHECK(m.lo >= -5.8);
  const double d = ks_distance(z.data(), n, [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); });
  INFO("KS distance " << d << ", critical " << ks_critical(n));
  CHECK(d < ks_critical(n));
}

TEST_CASE("the bytes of the Philox stream pass a chi-square test", "[rng][stats]") {
  std::vector<std::uint64_t> count(256, 0);
  const std::uint32_t k0 = 0x9e3779b9u, k1 = 7;
  for (std::uint32_t b = 0; b < samples / 4; ++b) {
    const loom::philox_words r = loom::philox4x32_10({{b, 0, 3, 0}}, k0, k1);
    for (std::uint32_t w : r.w)
      for (int byte = 0; byte < 4; ++byte) ++count[(w >> (8 * byte)) & 0xff];
  }
  const double expected = static_cast<double>(samples) / 256.0 * 4;
  double chi2 = 0;
  for (std::uint64_t c : count)
    chi2 += (static_cast<double>(c) - expected) * (static_cast<double>(c) - expected) / expected;
  // 255 degrees of freedom: the 1e-4 upper quantile is about 347 (and a
  // value far below the mean, 255, would be as suspicious).
  INFO("chi-square " << chi2);
  CHECK(chi2 < 347);
  CHECK(chi2 > 175);
}

TEST_CASE("dropout over 10^7 samples keeps 1 - p of the elements, scaled by 1 / (1 - p)", "[rng][stats]") {
  const auto ones = loom::full<float, 1, loom::host>({samples}, 1.0f);
  loom::host_tensor<float, 1> y({samples});
  for (float p : {0.1f, 0.5f, 0.75f}) {
    INFO("p = " << p);
    y = loom::dropout(ones, p, 2026, 40);
    const float scale = 1.0f / (1.0f - p);
    index_t kept = 0, other = 0;
    for (index_t i = 0; i < samples; ++i) {
      if (y.data()[i] == scale)
        ++kept;
      else if (y.data()[i] != 0.0f)
        ++other;
    }
    CHECK(other == 0);
    const double fraction = static_cast<double>(kept) / samples;
    CHECK(std::fabs(fraction - (1 - p)) < 5 * std::sqrt(p * (1 - p) / samples));
  }
}

TEST_CASE("stochastic_round to bf16 is unbiased over 10^7 samples", "[rng][stats]") {
  // 1 + 2^-10 lies an eighth of the way from 1 to the next bf16 value, 1 + 2^-7.
  const float x = 1.0f + 0x1p-10f;
  const auto ones = loom::full<float, 1, loom::host>({samples}, x);
  loom::host_tensor<float, 1> y({samples});
  y = loom::stochastic_round<loom::bf16>(ones, 7, 8);
  index_t up = 0, other = 0;
  for (index_t i = 0; i < samples; ++i) {
    if (y.data()[i] == 1.0f + 0x1p-7f)
      ++up;
    else if (y.data()[i] != 1.0f)
      ++other;
  }
  CHECK(other == 0);
  const double fraction = static_cast<double>(up) / samples;
  CHECK(std::fabs(fraction - 0.125) < 5 * std::sqrt(0.125 * 0.875 / samples));
}
