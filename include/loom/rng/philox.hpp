// SPDX-License-Identifier: Apache-2.0
#pragma once

// Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as
// easy as 1, 2, 3", SC 2011): a counter-based generator, a pure function of
// a 128-bit counter and a 64-bit key, the same in host and device code.

#include <cstdint>

#include "loom/config.hpp"

namespace loom {
//! Four 32-bit words: a Philox counter, or the random bits it maps to.
struct philox_words {
  std::uint32_t w[4];
};

namespace detail::rng {
inline constexpr std::uint32_t philox_m0 = 0xD2511F53u;  // round multipliers
inline constexpr std::uint32_t philox_m1 = 0xCD9E8D57u;
inline constexpr std::uint32_t philox_w0 = 0x9E3779B9u;  // key increments (golden ratio, sqrt(3) - 1)
inline constexpr std::uint32_t philox_w1 = 0xBB67AE85u;

LOOM_HD void philox_round(philox_words& c, std::uint32_t k0, std::uint32_t k1) {
  const std::uint64_t p0 = static_cast<std::uint64_t>(philox_m0) * c.w[0];
  const std::uint64_t p1 = static_cast<std::uint64_t>(philox_m1) * c.w[2];
  const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
  const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
  c = philox_words{{hi1 ^ c.w[1] ^ k0, lo1, hi0 ^ c.w[3] ^ k1, lo0}};
}
}  // namespace detail::rng

//! Philox4x32-10: the 128 random bits of counter `ctr` under key (k0, k1),
//! bit for bit those of Random123's philox4x32 with 10 rounds. About 40
//! integer instructions; no state, no memory.
//! Example: `philox_words r = loom::philox4x32_10({{0, 0, 0, 0}}, 0, 0);`
LOOM_HD philox_words philox4x32_10(philox_words ctr, std::uint32_t k0, std::uint32_t k1) {
  LOOM_UNROLL
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += detail::rng::philox_w0;
      k1 += detail::rng::philox_w1;
    }
    detail::rng::philox_round(ctr, k0, k1);
  }
  return ctr;
}

//! The uniform float in [0, 1) of 32 random bits: the high 24 bits times
//! 2^-24 (exact; every value a multiple of 2^-24, each with probability 2^-24).
LOOM_HD float uniform_from_bits(std::uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1p-24f; }
}  // namespace loom
