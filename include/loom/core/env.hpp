// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cublas_api.h>
#include <cuda/version>
#include <cuda_runtime_api.h>

#include <sstream>
#include <string>

#include "loom/config.hpp"
#include "loom/core/device.hpp"
#include "loom/core/simd/dispatch.hpp"
#include "loom/core/host_blas.hpp"

#if LOOM_HAS_OPENMP
#include <omp.h>
#endif

namespace loom {
//! The number of threads the host executor runs its loops on:
//! omp_get_max_threads() when the including file is compiled with OpenMP
//! (LOOM_HAS_OPENMP; the CMake target loom::loom brings it where the
//! compiler has it, see docs/00_quickstart.md), else 1. Small loops run on
//! one thread whatever this says. O(1).
//! Example: `std::printf("%d host threads\n", loom::host_threads());`
inline int host_threads() noexcept {
#if LOOM_HAS_OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

namespace detail {
inline std::string cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
}  // namespace detail

//! A human-readable report of loom's environment: loom, the compiler mode
//! (nvcc or a host compiler; OpenMP on with the host executor's threads, or
//! off), what computes host matrix products (host_gemm_backend_name()), CUDA
//! runtime and driver, CCCL and cuBLAS versions, and every usable device
//! with its properties (or why there is none). Never throws for a missing GPU.
//! Its "host SIMD" line names the instruction set of the host's loops
//! (loom::simd::host_isa()).
//! Example: `std::cout << loom::env_report();`
inline std::string env_report() {
  std::ostringstream o;
  o << "loom " << LOOM_VERSION_STRING << " (compiled by " << (detail::cuda_compiler ? "nvcc" : "a host compiler")
    << (LOOM_HAS_OPENMP ? ", OpenMP on, " + std::to_string(host_threads()) + " host threads" : ", OpenMP off")
    << ")\n";
  o << "host SIMD: " << simd::name(simd::host_isa()) << (LOOM_SIMD_DISPATCH ? " (chosen at run time)" : "") << "\n";
  o << "host matmul: " << host_gemm_backend_name() << "\n";
  int runtime = 0, driver = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  (void)cudaDriverGetVersion(&driver);
  (void)cudaGetLastError();
  o << "CUDA runtime " << detail::cuda_version_string(runtime) << ", driver "
    << (driver ? detail::cuda_version_string(driver) : std::string("none")) << "\n";
  o << "CCCL " << CCCL_MAJOR_VERSION << "." << CCCL_MINOR_VERSION << "." << CCCL_PATCH_VERSION << "\n";
  o << "cuBLAS " << CUBLAS_VER_MAJOR << "." << CUBLAS_VER_MINOR << "." << CUBLAS_VER_PATCH << " (headers)\n";
  const int n = gpu::device_count();
  if (n == 0) {
    o << "devices: none (" << gpu::unavailable_reason() << ")\n";
    return o.str();
  }
  o << "devices: " << n << "\n";
  for (int i = 0; i < n; ++i) {
    const auto p = gpu::properties(i);
    o << "  [" << i << "] " << p.name << ", compute capability " << p.cc_major << "." << p.cc_minor << ", "
      << p.sm_count << " SMs, " << (p.total_memory >> 20) << " MiB, L2 " << (p.l2_cache_bytes >> 10) << " KiB, "
      << p.memory_bus_width_bits << "-bit bus, memory pools " << (p.memory_pools_supported ? "yes" : "no") << "\n";
  }
  return o.str();
}
}  // namespace loom
