// SPDX-License-Identifier: Apache-2.0
// Catch2 main for the host test programs. Every allocation loom makes starts
// filled with 0xFF bytes (NaN, -1), so an output element that a function
// leaves unwritten fails its comparison even when the function allocates the
// output itself.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <loom/memory/memory.hpp>

int main(int argc, char* argv[]) {
  loom::set_fill_uninitialized(true);
  return Catch::Session().run(argc, argv);
}
