// SPDX-License-Identifier: Apache-2.0
// The smallest program against an installed loom (find_package(loom)).
#include <cstdio>
#include <iostream>

#include <loom/loom.hpp>

#if CONSUMER_EXPECTS_OPENMP && !LOOM_HAS_OPENMP
#error "loom::loom brings OpenMP here (LOOM_OPENMP_FOUND), but this file was compiled without it"
#endif
#if CONSUMER_EXPECTS_BLAS && !LOOM_HAS_BLAS
#error "loom::loom brings a BLAS here (LOOM_BLAS_FOUND), but this file was compiled without it"
#endif
#if CONSUMER_EXPECTS_CUDNN && !LOOM_HAS_CUDNN
#error "loom::loom brings cuDNN here (LOOM_CUDNN_FOUND), but this file was compiled without it"
#endif
#if LOOM_HAS_OPENMP
#include <omp.h>
#endif

int main() {
  std::cout << loom::env_report();
  loom::host_tensor<float, 2> x({2, 3}, {1, 2, 3, 4, 5, 6});
  float sum = 0;
  for (loom::index_t i = 0; i < x.extent(0); ++i)
    for (loom::index_t j = 0; j < x.extent(1); ++j) sum += x(i, j);
  std::printf("consumer: loom %s, sum of a [2, 3] host tensor = %g\n", loom::version, sum);
  // With OpenMP the host executor runs its loops on OpenMP's threads.
  const int threads = loom::host_threads();
  std::printf("consumer: host executor on %d thread(s), OpenMP %s\n", threads, LOOM_HAS_OPENMP ? "on" : "off");
#if LOOM_HAS_OPENMP
  if (threads != omp_get_max_threads()) return 1;
#endif
  // With a BLAS the host matmul calls it (linked through loom::loom).
  loom::host_tensor<float, 2> p({2, 2});
  p = loom::matmul(x, x.t());
  std::printf("consumer: host matmul on %s; x x^T = [%g, %g; %g, %g]\n", loom::host_gemm_backend_name().c_str(),
              p(0, 0), p(0, 1), p(1, 0), p(1, 1));
  if (p(0, 0) != 14 || p(0, 1) != 32 || p(1, 1) != 77) return 1;
#if LOOM_HAS_CUDNN
  // With cuDNN, conv2d takes device tensors; libcudnn is linked through loom::loom.
  std::printf("consumer: cuDNN %zu for convolution on device tensors\n", loom::cudnn_version());
  if (loom::cudnn_version() < 90000) return 1;
#endif
  return sum == 21 ? 0 : 1;
}
