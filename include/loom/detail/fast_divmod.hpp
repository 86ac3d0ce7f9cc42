// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

#include "loom/config.hpp"

namespace loom::detail {
__extension__ typedef unsigned __int128 uint128_t;  // g++/nvcc extension; silences -Wpedantic

// Division by a run-time constant through a precomputed multiplier (the
// round-up method of Granlund and Montgomery, 1994): one 64x64->128 high
// multiply, an add and a shift instead of a 64-bit division. Exact for every
// dividend below 2^63 and every divisor from 1 to 2^63.
struct fast_divmod {
  std::uint64_t d = 1;
  std::uint64_t m = 1;
  unsigned shift = 0;

  fast_divmod() = default;
  // Host only, and out of line: a 128-bit division that every binding of an
  // expression calls, compiled once instead of inline at each call.
  LOOM_NOINLINE explicit fast_divmod(std::uint64_t divisor) : d(divisor) {
    unsigned l = 0;
    while (l < 63 && (std::uint64_t{1} << l) < divisor) ++l;
    shift = l;
    const uint128_t num = static_cast<uint128_t>((std::uint64_t{1} << l) - divisor) << 64;
    m = static_cast<std::uint64_t>(num / divisor) + 1;
  }

  LOOM_HD std::uint64_t div(std::uint64_t n) const {
#if LOOM_DEVICE_CODE
    const std::uint64_t t = __umul64hi(m, n);
#else
    const std::uint64_t t = static_cast<std::uint64_t>((static_cast<uint128_t>(m) * n) >> 64);
#endif
    return (t + n) >> shift;
  }
  //! q = n / d and r = n % d.
  LOOM_HD void divmod(std::uint64_t n, std::uint64_t& q, std::uint64_t& r) const {
    q = div(n);
    r = n - q * d;
  }
};
}  // namespace loom::detail
