// SPDX-License-Identifier: Apache-2.0
// Catch2 main for the [cuda] test programs: exits 77 (ctest's SKIP_RETURN_CODE)
// when no usable GPU is present, so ctest reports "Skipped", never "Passed".
// As on the host, every allocation loom makes starts filled with 0xFF bytes.
// A program in which a release (a free, a stream or event destroyed in a
// destructor) failed fails too: those cannot throw, loom counts them.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <loom/core/device.hpp>
#include <loom/memory/memory.hpp>

int main(int argc, char* argv[]) {
  if (!loom::gpu::is_available()) {
    std::printf("loom: skipping the [cuda] tests: %s\n", loom::gpu::unavailable_reason().c_str());
    return 77;
  }
  loom::set_fill_uninitialized(true);
  const int rc = Catch::Session().run(argc, argv);
  if (const std::size_t n = loom::release_error_count(); n != 0) {
    std::fprintf(stderr, "loom: %zu release calls failed during the tests; the latest: %s\n", n,
                 loom::last_release_error().c_str());
    return rc != 0 ? rc : 1;
  }
  return rc;
}
