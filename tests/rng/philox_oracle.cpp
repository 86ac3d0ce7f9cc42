// SPDX-License-Identifier: Apache-2.0
// loom::philox4x32_10 against Random123's philox4x32 (10 rounds), bit for
// bit, on fixed and random counters and keys. Random123 (Debian's
// librandom123-dev, installed by scripts/common.sh) is a test-only oracle;
// without its header this program exits 77, which ctest reports as Skipped.
#include <cstdint>
#include <cstdio>
#include <random>

#include <loom/rng/philox.hpp>

#if __has_include(<Random123/philox.h>)
#include <Random123/philox.h>

int main() {
  std::mt19937_64 g(0x5eed);
  long bad = 0;
  const long cases = 1'000'000;
  for (long n = 0; n < cases; ++n) {
    r123::Philox4x32 oracle;
    r123::Philox4x32::ctr_type c;
    r123::Philox4x32::key_type k;
    for (auto& w : c.v) w = static_cast<std::uint32_t>(g());
    for (auto& w : k.v) w = static_cast<std::uint32_t>(g());
    if (n < 4) {  // the extremes
      for (auto& w : c.v) w = n % 2 ? 0xffffffffu : 0;
      for (auto& w : k.v) w = n / 2 ? 0xffffffffu : 0;
    }
    const r123::Philox4x32::ctr_type want = oracle(c, k);
    const loom::philox_words got = loom::philox4x32_10({{c.v[0], c.v[1], c.v[2], c.v[3]}}, k.v[0], k.v[1]);
    for (int j = 0; j < 4; ++j)
      if (got.w[j] != want.v[j] && bad++ < 5)
        std::printf("counter %08x %08x %08x %08x key %08x %08x word %d: loom %08x, Random123 %08x\n", c.v[0], c.v[1],
                    c.v[2], c.v[3], k.v[0], k.v[1], j, got.w[j], want.v[j]);
  }
  std::printf("philox4x32_10 against Random123: %ld counters, %ld words differ\n", cases, bad);
  return bad == 0 ? 0 : 1;
}
#else
int main() {
  std::printf("Random123/philox.h not found (Debian: apt-get install librandom123-dev): oracle test skipped\n");
  return 77;
}
#endif
