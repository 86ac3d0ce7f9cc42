// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/index_fault.hpp"

namespace loom::gpu {

//! What a GPU is, as loom reports it.
struct device_properties {
  int id = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;        //!< compute capability
  std::size_t total_memory = 0;          //!< bytes of device memory
  int l2_cache_bytes = 0;
  int memory_bus_width_bits = 0;
  bool memory_pools_supported = false;   //!< cudaMallocAsync available
};

namespace detail {
struct probe_result {
  int count = 0;
  std::string reason;  // empty when at least one device is usable
};

inline probe_result probe() {
  probe_result r;
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  (void)cudaGetLastError();
  if (e == cudaSuccess && n > 0) {
    r.count = n;
    return r;
  }
  if (driver == 0)
    r.reason = "no CUDA driver is installed (libcuda could not be loaded)";
  else if (e == cudaErrorInsufficientDriver || driver < runtime)
    r.reason = "the CUDA driver (version " + std::to_string(driver) + ") is older than the CUDA runtime loom was built with (version " +
               std::to_string(runtime) + "); update the driver";
  else if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0))
    r.reason = "the CUDA driver found no GPU";
  else
    r.reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  return r;
}

inline const probe_result& cached_probe() {
  static const probe_result r = probe();
  return r;
}
}  // namespace detail

//! Number of usable GPUs; 0 when there is no driver or no device. Never throws.
inline int device_count() noexcept { return detail::cached_probe().count; }

//! True when at least one GPU can be used. Never throws.
//! Example: `if (loom::gpu::is_available()) { ... }`
inline bool is_available() noexcept { return device_count() > 0; }

//! Why no GPU can be used ("" when one can): no driver, a driver older than the
//! runtime, or no device.
inline std::string unavailable_reason() { return detail::cached_probe().reason; }

//! Throws loom::device_unavailable, saying why, unless a GPU can be used.
inline void require_device(const char* what = "this operation") {
  if (!is_available())
    throw device_unavailable(std::string("loom: ") + what + " needs a GPU, but " + unavailable_reason());
}

//! The calling thread's current device (throws device_unavailable without a GPU).
inline int current_device() {
  require_device("gpu::current_device()");
  int d = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

//! Makes `id` the calling thread's current device.
inline void set_device(int id) {
  require_device("gpu::set_device()");
  if (id < 0 || id >= device_count())
    throw index_error("loom: device " + std::to_string(id) + " does not exist (" + std::to_string(device_count()) +
                      " device(s))");
  LOOM_CUDA_CHECK(cudaSetDevice(id));
}

//! Properties of device `id` (default: the current one).
inline device_properties properties(int id = -1) {
  if (id < 0) id = current_device();
  require_device("gpu::properties()");
  if (id >= device_count())
    throw index_error("loom: device " + std::to_string(id) + " does not exist (" + std::to_string(device_count()) +
                      " device(s))");
  cudaDeviceProp p{};
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&p, id));
  device_properties out;
  out.id = id;
  out.name = p.name;
  out.sm_count = p.multiProcessorCount;
  out.cc_major = p.major;
  out.cc_minor = p.minor;
  out.total_memory = p.totalGlobalMem;
  out.l2_cache_bytes = p.l2CacheSize;
  out.memory_bus_width_bits = p.memoryBusWidth;
  int pools = 0;
  LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, id));
  out.memory_pools_supported = pools != 0;
  return out;
}

//! Blocks until all work on the current device has finished; then throws
//! the index_error of an out-of-range index a kernel recorded, if any.
inline void device_synchronize() {
  require_device("gpu::device_synchronize()");
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  loom::detail::raise_index_fault();
}
}  // namespace loom::gpu
