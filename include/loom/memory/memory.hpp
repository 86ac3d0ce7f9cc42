// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>

#include "loom/core/device.hpp"
#include "loom/core/error.hpp"
#include "loom/core/stream.hpp"

namespace loom {

//! Device-memory accounting for one device, as seen by loom's allocations.
struct memory_stats {
  std::size_t in_use = 0;       //!< bytes currently allocated by loom
  std::size_t peak = 0;         //!< most bytes in use at once since start or reset_peak
  std::size_t allocations = 0;  //!< number of live allocations
};

namespace detail {
inline std::atomic<unsigned char>& fill_byte_value() {
  static std::atomic<unsigned char> b{0xFF};
  return b;
}
inline std::atomic<bool>& fill_uninitialized_flag() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("LOOM_FILL_UNINITIALIZED");
    return e != nullptr && std::string(e) == "1";
  }()};
  return on;
}
}  // namespace detail

//! When on, every allocation loom makes (device memory, pageable and pinned
//! host memory: new tensors made without values, `empty_like`, the results
//! of reductions, scans, sort and top-k, and temporary storage) starts with
//! every byte 0xFF (or `byte`): NaN in float, double, half and bf16, -1 in signed
//! integers, the maximum in unsigned ones. An element that a computation
//! leaves unwritten then reads as NaN or -1 instead of whatever the memory
//! held before, so a test of a function that allocates its own output still
//! runs on a poisoned output. Off by default: it costs a memset per
//! allocation (on the device `cudaMemsetAsync` on the allocation's stream,
//! stream-ordered, no synchronization). The environment variable
//! `LOOM_FILL_UNINITIALIZED=1` turns it on at start; loom's test programs
//! turn it on. `byte` sets another fill (each call sets it; 0x5A is neither
//! NaN nor -1 in any type), for a test whose correct output could equal the
//! default's NaN or -1 (an exclusive cummax writes index -1 first).
//! Example: `loom::set_fill_uninitialized(true);`
inline void set_fill_uninitialized(bool on, unsigned char byte = 0xFF) noexcept {
  detail::fill_byte_value().store(byte, std::memory_order_relaxed);
  detail::fill_uninitialized_flag().store(on, std::memory_order_relaxed);
}

//! Whether new allocations are filled (set_fill_uninitialized).
inline bool fill_uninitialized() noexcept { return detail::fill_uninitialized_flag().load(std::memory_order_relaxed); }
//! The byte new allocations are filled with while fill_uninitialized() is on (0xFF unless set).
inline unsigned char fill_byte() noexcept { return detail::fill_byte_value().load(std::memory_order_relaxed); }

namespace detail {
inline constexpr int max_devices = 64;
struct device_counters {
  std::atomic<std::size_t> in_use{0}, peak{0}, allocations{0};
};
inline std::array<device_counters, max_devices>& counters() {
  static std::array<device_counters, max_devices> c;
  return c;
}
inline device_counters& counters_for(int device) {
  if (device < 0 || device >= max_devices)
    throw index_error("loom: device " + std::to_string(device) + " is outside loom's device table");
  return counters()[static_cast<std::size_t>(device)];
}
inline void note_alloc(int device, std::size_t bytes) {
  auto& c = counters_for(device);
  const std::size_t now = c.in_use.fetch_add(bytes) + bytes;
  c.allocations.fetch_add(1);
  std::size_t p = c.peak.load();
  while (now > p && !c.peak.compare_exchange_weak(p, now)) {
  }
}
inline void note_free(int device, std::size_t bytes) noexcept {
  auto& c = counters()[static_cast<std::size_t>(device)];
  c.in_use.fetch_sub(bytes);
  c.allocations.fetch_sub(1);
}

// Per device: whether loom has set up the release threshold of the
// device's current memory pool.
struct pool_setup {
  std::atomic<bool> done{false};
  std::mutex m;
};
inline std::array<pool_setup, max_devices>& pool_setups() {
  static std::array<pool_setup, max_devices> p;
  return p;
}

// CUDA's memory pools start with a release threshold of 0: at every
// synchronization (an event or a stream waited on, `item()`, `to_host`) a
// pool gives the memory of freed allocations back to the driver, and the
// next allocation has it mapped again, in host time, before its kernel can
// be queued: on every reduction's result and temporary storage. Before its
// first allocation on a device, loom raises the threshold of that device's
// current pool from 0 to the maximum, so the pool keeps what it reserved
// for the next allocations (as a caching allocator does). A threshold that
// is not 0 (the program set one) is left as it is, and the environment
// variable LOOM_KEEP_POOL_MEMORY=0 (read once) leaves every threshold as it
// is. release_pool_memory() gives the unused memory back.
inline bool parse_keep_pool_memory(const char* e) {
  if (e == nullptr || *e == '\0' || std::string(e) == "1") return true;
  if (std::string(e) == "0") return false;
  throw value_error(std::string("loom: LOOM_KEEP_POOL_MEMORY must be 0 or 1, got '") + e + "'");
}
inline void keep_pool_memory(int device) {
  (void)counters_for(device);  // the range check, with its message
  auto& p = pool_setups()[static_cast<std::size_t>(device)];
  if (p.done.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(p.m);
  if (p.done.load(std::memory_order_relaxed)) return;
  static const bool keep = parse_keep_pool_memory(std::getenv("LOOM_KEEP_POOL_MEMORY"));
  if (!keep) {
    p.done.store(true, std::memory_order_release);
    return;
  }
  cudaMemPool_t pool = nullptr;
  LOOM_CUDA_CHECK(cudaDeviceGetMemPool(&pool, device));
  std::uint64_t threshold = 0;
  LOOM_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  if (threshold == 0) {
    threshold = std::numeric_limits<std::uint64_t>::max();
    LOOM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  }
  p.done.store(true, std::memory_order_release);
}

// After a failed cudaMallocAsync on `s` (the error already cleared): gives
// the memory that the pool keeps unused (frees the host has seen complete)
// back to the driver and tries once more. It waits for nothing: loom hides
// no synchronization. Not while `s` is being captured into a graph.
inline cudaError_t retry_after_trim(void** p, std::size_t bytes, stream_ref s) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaMemPool_t pool = nullptr;
  if (cudaStreamIsCapturing(s.get(), &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone ||
      cudaDeviceGetMemPool(&pool, s.device()) != cudaSuccess || cudaMemPoolTrimTo(pool, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaErrorMemoryAllocation;
  }
  return cudaMallocAsync(p, bytes, s.get());
}

//! Allocates `bytes` of device memory from CUDA's stream-ordered pool on `s`
//! (the pool keeps freed memory for reuse: keep_pool_memory). When the
//! device is full, the memory the pool keeps unused is given back and the
//! allocation tried once more. Throws out_of_memory (with
//! requested/free/total) or device_unavailable.
inline void* device_allocate(std::size_t bytes, stream_ref s) {
  if (bytes == 0) return nullptr;
  gpu::require_device("allocating device memory");
  keep_pool_memory(s.device());
  int prev = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != s.device()) LOOM_CUDA_CHECK(cudaSetDevice(s.device()));
  void* p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, bytes, s.get());
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    e = retry_after_trim(&p, bytes, s);
  }
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    std::size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    (void)cudaGetLastError();
    if (prev != s.device()) LOOM_CUDA_RELEASE(cudaSetDevice(prev));
    throw out_of_memory(bytes, free_b, total_b, s.device());
  }
  if (e == cudaSuccess && fill_uninitialized()) {
    const cudaError_t f = cudaMemsetAsync(p, fill_byte(), bytes, s.get());
    if (f != cudaSuccess) {
      LOOM_CUDA_RELEASE(cudaFreeAsync(p, s.get()));
      if (prev != s.device()) LOOM_CUDA_RELEASE(cudaSetDevice(prev));
      throw_cuda(f, "cudaMemsetAsync", __FILE__, __LINE__);
    }
  }
  if (prev != s.device()) LOOM_CUDA_RELEASE(cudaSetDevice(prev));
  if (e != cudaSuccess) throw_cuda(e, "cudaMallocAsync", __FILE__, __LINE__);
  note_alloc(s.device(), bytes);
  return p;
}

//! Returns memory from device_allocate to the pool, ordered after the work
//! already queued on `s`; so a kernel on `s` that still reads it is safe.
//! A failed free is counted (release_error_count), not thrown.
inline void device_free(void* p, std::size_t bytes, stream_ref s) noexcept {
  if (!p) return;
  LOOM_CUDA_RELEASE(cudaFreeAsync(p, s.get()));
  note_free(s.device(), bytes);
}

//! Page-locked host memory (fast, truly asynchronous transfers). Needs a
//! driver. Throws out_of_memory (memory_kind::pinned_host) when it cannot be had.
inline void* pinned_allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  gpu::require_device("allocating pinned host memory");
  void* p = nullptr;
  const cudaError_t e = cudaMallocHost(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw out_of_memory(bytes, memory_kind::pinned_host);
  }
  LOOM_CUDA_CHECK(e);
  if (fill_uninitialized()) std::memset(p, fill_byte(), bytes);
  return p;
}
inline void pinned_free(void* p) noexcept {
  if (p) LOOM_CUDA_RELEASE(cudaFreeHost(p));
}

//! Alignment of pageable host allocations: enough for any vector load.
inline constexpr std::size_t host_alignment = 64;

//! Pageable host memory aligned to host_alignment. Throws out_of_memory
//! (memory_kind::pageable_host) when it cannot be had.
inline void* host_allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  // aligned_alloc takes a multiple of the alignment; a size that cannot be rounded up cannot be had either.
  if (bytes > std::numeric_limits<std::size_t>::max() - (host_alignment - 1))
    throw out_of_memory(bytes, memory_kind::pageable_host);
  const std::size_t rounded = (bytes + host_alignment - 1) / host_alignment * host_alignment;
  void* p = std::aligned_alloc(host_alignment, rounded);
  if (!p) throw out_of_memory(bytes, memory_kind::pageable_host);
  if (fill_uninitialized()) std::memset(p, fill_byte(), bytes);
  return p;
}
inline void host_free(void* p) noexcept { std::free(p); }
}  // namespace detail

//! loom's device-memory statistics for `device` (default: the current one).
//! O(1), no synchronization.
inline memory_stats device_memory_stats(int device = -1) {
  if (device < 0) device = gpu::current_device();
  auto& c = detail::counters_for(device);
  return {c.in_use.load(), c.peak.load(), c.allocations.load()};
}

//! Resets the peak of `device` (default: current) to the bytes now in use.
inline void reset_peak_memory(int device = -1) {
  if (device < 0) device = gpu::current_device();
  auto& c = detail::counters_for(device);
  c.peak.store(c.in_use.load());
}

//! Gives the device memory that the current pool of `device` (default: the
//! current device) keeps unused back to the driver, for other allocators and
//! processes. loom's pools keep the memory of freed tensors and temporaries
//! for reuse (docs/01_tensors.md, "Memory"). A free whose stream the host
//! has not yet seen reach it (by a synchronization) may still be kept, so
//! synchronize first to give back all of it.
//! Example: `loom::gpu::device_synchronize(); loom::release_pool_memory();`
inline void release_pool_memory(int device = -1) {
  if (device < 0) device = gpu::current_device();
  gpu::require_device("release_pool_memory()");
  if (device >= gpu::device_count())
    throw index_error("loom: device " + std::to_string(device) + " does not exist (" +
                      std::to_string(gpu::device_count()) + " device(s))");
  cudaMemPool_t pool = nullptr;
  LOOM_CUDA_CHECK(cudaDeviceGetMemPool(&pool, device));
  LOOM_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
}
}  // namespace loom
