// SPDX-License-Identifier: Apache-2.0
// The smallest program against an installed loom (find_package(loom)).
#include <cstdio>
#include <iostream>

#include <loom/loom.hpp>

int main() {
  std::cout << loom::env_report();
  loom::host_tensor<float, 2> x({2, 3}, {1, 2, 3, 4, 5, 6});
  float sum = 0;
  for (loom::index_t i = 0; i < x.extent(0); ++i)
    for (loom::index_t j = 0; j < x.extent(1); ++j) sum += x(i, j);
  std::printf("consumer: loom %s, sum of a [2, 3] host tensor = %g\n", loom::version, sum);
  return sum == 21 ? 0 : 1;
}
