// SPDX-License-Identifier: Apache-2.0
// loom used from a host compiler (g++) through add_subdirectory.
#include <cstdio>

#include <loom/loom.hpp>

int main() {
  loom::host_tensor<float, 2> x({2, 3}, {1, 2, 3, 4, 5, 6});
  auto col = loom::contiguous(x.t().slice(1));  // column 1: [2, 5]
  std::printf("subproject: loom %s, compiled by %s, column 1 = [%g, %g]\n", loom::version,
              LOOM_CUDA_COMPILER ? "nvcc" : "a host compiler", col(0), col(1));
  std::printf("subproject: host executor on %d thread(s), OpenMP %s\n", loom::host_threads(),
              LOOM_HAS_OPENMP ? "on" : "off");
  return col(0) == 2 && col(1) == 5 ? 0 : 1;
}
