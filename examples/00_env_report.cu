// SPDX-License-Identifier: Apache-2.0
// Prints what loom sees: its version, the compiler mode, the CUDA runtime,
// driver, CCCL and cuBLAS versions, and every GPU. The first thing to run on a
// new machine, and the first thing to paste into a bug report.
#include <cstdio>
#include <iostream>

#include <loom/loom.hpp>

int main() {
  std::cout << loom::env_report();

  // No GPU is not an error: env_report() has already said why there is none.
  if (!loom::gpu::is_available()) {
    std::cout << "no GPU: loom's host executor runs everything here\n";
    return 0;
  }
  const loom::gpu::device_properties p = loom::gpu::properties();  // the current device
  std::printf("current device %d: %s\n", p.id, p.name.c_str());
  std::printf("  compute capability %d.%d, %d SMs\n", p.cc_major, p.cc_minor, p.sm_count);
  std::printf("  %.1f GiB of memory, %d-bit bus, %d KiB of L2\n", static_cast<double>(p.total_memory) / (1 << 30),
              p.memory_bus_width_bits, p.l2_cache_bytes >> 10);
  std::printf("  stream-ordered memory pools: %s\n", p.memory_pools_supported ? "yes" : "no");
  return 0;
}
