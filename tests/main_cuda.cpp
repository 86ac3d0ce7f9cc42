// SPDX-License-Identifier: Apache-2.0
// Catch2 main for the [cuda] test programs: exits 77 (ctest's SKIP_RETURN_CODE)
// when no usable GPU is present, so ctest reports "Skipped", never "Passed".
// As on the host, every allocation loom makes starts filled with 0xFF bytes.
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
  return Catch::Session().run(argc, argv);
}
