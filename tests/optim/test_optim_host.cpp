// SPDX-License-Identifier: Apache-2.0
// The optimizer tests on the host executor.
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#include "optim_cases.inl"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

// The update rules' host square root (optim.hpp's sqrt_rn, which runs in
// SIMD lanes) against the C library's correctly rounded sqrtf: random bit
// patterns of every class (the whole range was checked once exhaustively),
// the neighbours of squares and midpoints, and the special values.
TEST_CASE("the optimizers' host square root equals sqrtf bit for bit", "[optim]") {
  std::mt19937_64 g(loom_test::seed_for("sqrt_rn"));
  const auto same = [](float x) {
    const float got = loom::optim::detail::sqrt_rn(x), want = std::sqrt(x);
    if (std::isnan(want)) return std::isnan(got);
    return std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want);
  };
  int wrong = 0;
  for (int i = 0; i < (1 << 18); ++i) wrong += !same(std::bit_cast<float>(static_cast<std::uint32_t>(g())));
  for (std::uint32_t k = 1; k < 5000; k += 3) {  // squares of small integers and their neighbours
    const auto sq = std::bit_cast<std::uint32_t>(static_cast<float>(k) * static_cast<float>(k));
    for (std::uint32_t d : {sq - 1, sq, sq + 1}) wrong += !same(std::bit_cast<float>(d));
  }
  constexpr float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, inf, -inf, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::max(), 2.0f, 0.5f})
    wrong += !same(x);
  CHECK(wrong == 0);
  CHECK(std::signbit(loom::optim::detail::sqrt_rn(-0.0f)));
}
