// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/device.hpp"
#include "loom/core/error.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"

namespace loom {

//! How many kernels each executor has run since start (or reset_launch_counts):
//! the evidence that an assignment took one launch. A host "launch" is one
//! parallel loop of the host executor.
struct launch_counts {
  std::uint64_t host = 0;
  std::uint64_t device = 0;
};

namespace detail {
inline std::atomic<std::uint64_t>& host_launch_counter() {
  static std::atomic<std::uint64_t> c{0};
  return c;
}
inline std::atomic<std::uint64_t>& device_launch_counter() {
  static std::atomic<std::uint64_t> c{0};
  return c;
}
//! Counts one host "launch" (one parallel loop of the host executor).
inline void count_host_launch() { host_launch_counter().fetch_add(1, std::memory_order_relaxed); }
//! Counts one device launch that did not go through launch_kernel (a
//! library call such as a CUB algorithm or cublasLtMatmul).
inline void count_device_launch() { device_launch_counter().fetch_add(1, std::memory_order_relaxed); }
}  // namespace detail

//! Kernels launched so far by loom, per executor. O(1).
//! Example: `auto before = loom::launches(); y = x * 2; assert(loom::launches().host == before.host + 1);`
inline launch_counts launches() {
  return {detail::host_launch_counter().load(), detail::device_launch_counter().load()};
}

//! Sets both launch counters back to zero.
inline void reset_launch_counts() {
  detail::host_launch_counter().store(0);
  detail::device_launch_counter().store(0);
}

namespace detail {
//! Runs f(i) for i in [0, n) on the host executor (OpenMP when available); one
//! "launch". `grain` is the work of one iteration in elements (a row's length
//! for row kernels): threads start when the whole loop is worth it.
template <class F>
void host_for_each(index_t n, const F& f, index_t grain = 1) {
  if (n <= 0) return;
  count_host_launch();
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static) if (n > 1 && n * (grain > 0 ? grain : 1) > 32768)
  for (index_t i = 0; i < n; ++i) f(i);
#else
  (void)grain;
  for (index_t i = 0; i < n; ++i) f(i);
#endif
}

//! host_for_each for loops the compiler may also run in SIMD lanes (`omp
//! for simd`): f(i) must neither read nor write what another iteration
//! writes. The elementwise executor's dense path, where output element i
//! depends on input elements i only. Each thread runs its own copy of f: a
//! copy whose address never escapes stays in registers across the calls f
//! makes (expf), where a shared one would be reloaded after each. Under
//! clang the loop is `omp for` without `simd`: clang warns
//! (-Wpass-failed) about a SIMD loop it cannot vectorize, with no line a
//! pragma could silence, and its vectorizer decides alone.
template <class F>
void host_for_each_simd(index_t n, const F& f) {
  if (n <= 0) return;
  count_host_launch();
#if LOOM_HAS_OPENMP
#pragma omp parallel if (n > 32768)
  {
    const F local = f;
#if defined(__clang__)
#pragma omp for schedule(static)
#else
#pragma omp for simd schedule(simd : static)
#endif
    for (index_t i = 0; i < n; ++i) local(i);
  }
#else
  const F local = f;
  for (index_t i = 0; i < n; ++i) local(i);
#endif
}

#if LOOM_CUDA_COMPILER
//! Number of SMs on `device`, cached; sizes grids.
inline int sm_count(int device) {
  static thread_local int cached_device = -1, cached = 0;
  if (device != cached_device) {
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&cached, cudaDevAttrMultiProcessorCount, device));
    cached_device = device;
  }
  return cached;
}

//! The one grid rule: `want` blocks of work, capped at `blocks_per_sm`
//! resident blocks on every SM of `device` (grid-stride kernels loop over the
//! rest), and at least one block.
inline unsigned grid_size(index_t want, int blocks_per_sm, int device) {
  const index_t cap = static_cast<index_t>(sm_count(device)) * (blocks_per_sm > 0 ? blocks_per_sm : 1);
  return static_cast<unsigned>(want < cap ? (want > 0 ? want : 1) : cap);
}

//! The one launch step: enqueues `kernel` on `s` with `smem` bytes of dynamic
//! shared memory, checks the launch (cuda_error naming the call) and counts
//! it. Every kernel loom launches goes through here.
template <class... P, class... Args>
void launch_kernel(void (*kernel)(P...), dim3 grid, unsigned block, std::size_t smem, cudaStream_t s,
                   const Args&... args) {
  kernel<<<grid, block, smem, s>>>(args...);
  LOOM_CUDA_CHECK(cudaGetLastError());
  count_device_launch();
}

template <class F>
__global__ void for_each_kernel(index_t n, F f) {
  const index_t step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) f(i);
}

//! Enqueues one kernel on `s` running f(i) for i in [0, n); checks the launch.
template <class F>
void device_for_each(index_t n, const F& f, stream_ref s) {
  if (n <= 0) return;
  constexpr int block = 256;
  launch_kernel(for_each_kernel<F>, grid_size((n + block - 1) / block, 16, s.device()), block, 0, s.get(), n, f);
}
#endif

//! Compile-time gate for device work that needs a kernel.
template <class Space>
constexpr void require_cuda_compiler_for() {
  static_assert(!std::is_same_v<Space, device> || cuda_compiler,
                "loom: this operation launches a kernel on device tensors; compile this file with nvcc (a .cu file) "
                "or copy the data to the host with loom::to_host");
}
}  // namespace detail
}  // namespace loom
