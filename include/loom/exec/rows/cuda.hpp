// SPDX-License-Identifier: Apache-2.0
#pragma once

// The rows executor on the device: one group of threads (a warp or a block)
// per row, deterministic group reductions, the row cache in shared memory,
// and the row kernel's launch.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/exec/rows/outputs.hpp"
#include "loom/exec/rows/plan.hpp"
#include "loom/expr/row_nodes.hpp"

#if LOOM_CUDA_COMPILER
namespace loom::detail::rows {
// Deterministic reduction of one value per thread over a group of threads_per_row threads
// (a warp when threads_per_row == 32, else the whole block): a fixed shuffle tree per warp,
// then warp results combined in order by every thread. All threads get the
// same bits.
template <class Op, class A>
__device__ __forceinline__ A group_reduce(const Op& op, A v, int threads_per_row, A* smem) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  if (threads_per_row == 32) return __shfl_sync(0xffffffffu, v, 0);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int nw = static_cast<int>(blockDim.x) / 32;
  __syncthreads();  // the previous reduction's readers are done with smem
  if ((threadIdx.x & 31) == 0) smem[warp] = v;
  __syncthreads();
  A r = smem[0];
  for (int w = 1; w < nw; ++w) r = op(r, smem[w]);
  return r;
}

// One reduction of a device pass: this thread's partial result over its
// columns (vec: vector_width columns at c0, below full(); one: column
// full() + k), each in ascending order, then the group's deterministic
// reduction.
template <int vector_width, bool vectorized, class Red, class Ctx, std::size_t R>
struct device_slot_sum {
  using A = typename Red::acc;
  const Red* red;
  A acc;

  __device__ __forceinline__ explicit device_slot_sum(const Red* r) : red(r), acc(typename Red::op{}.identity()) {}
  __device__ __forceinline__ index_t full() const { return vectorized ? red->cols / vector_width * vector_width : 0; }
  __device__ __forceinline__ void vec(const index_t* lead, index_t c0, const Ctx& ctx) {
    if (c0 >= full()) return;
    const typename Red::op op{};
    typename decltype(red->arg)::template regs<vector_width> r;
    red->arg.template row_load<vector_width>(lead, c0, r);
#pragma unroll
    for (int j = 0; j < vector_width; ++j)
      acc = op(acc, op.lift(red->arg.template elem<vector_width>(r, j, ctx), c0 + j));
  }
  __device__ __forceinline__ bool one(index_t* idx, index_t k, const Ctx& ctx) {
    const index_t c = full() + k;
    if (c >= red->cols) return false;
    const typename Red::op op{};
    idx[R - 1] = c;
    acc = op(acc, op.lift(red->arg.at(idx, ctx), c));
    return true;
  }
  __device__ __forceinline__ void finish(Ctx& ctx, int threads_per_row, void* smem) {
    const typename Red::op op{};
    ctx.v[Red::slot] = static_cast<std::remove_cvref_t<decltype(ctx.v[0])>>(
        op.finalize(group_reduce(op, acc, threads_per_row, static_cast<A*>(smem)), red->cols));
  }
};

// One pass over the row computing the reductions of slots S...
// (levels.hpp): each thread's columns once for all of them, then each group
// reduction in slot order.
template <int vector_width, bool vectorized, class A, class B, class Ctx, std::size_t R, std::size_t... S>
__device__ __forceinline__ void device_reduce_pass(const B& b, const index_t* lead, Ctx& ctx, int lane,
                                                   int threads_per_row, A* smem, std::index_sequence<S...>) {
  auto sums = tuple<device_slot_sum<vector_width, vectorized, slot_type_t<B, S>, Ctx, R>...>(
      device_slot_sum<vector_width, vectorized, slot_type_t<B, S>, Ctx, R>(&slot_node<S>(b))...);
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    if constexpr (vectorized) {
      index_t full = 0;
      ((full = get<I>(sums).full() > full ? get<I>(sums).full() : full), ...);
#pragma unroll 1
      for (index_t c0 = static_cast<index_t>(lane) * vector_width; c0 < full;
           c0 += static_cast<index_t>(threads_per_row) * vector_width)
        (get<I>(sums).vec(lead, c0, ctx), ...);
    }
    index_t idx[R];
    for (std::size_t d = 0; d + 1 < R; ++d) idx[d] = lead[d];
#pragma unroll 1
    for (index_t k = lane;; k += threads_per_row) {
      bool more = false;
      ((more |= get<I>(sums).one(idx, k, ctx)), ...);
      if (!more) break;
    }
    (get<I>(sums).finish(ctx, threads_per_row, smem), ...);
  }(std::make_index_sequence<sizeof...(S)>{});
}

// The reductions of level L: the first of each type in one pass, then each
// copy candidate: the result of its identical earlier reduction when
// reused, else a pass of its own.
template <int vector_width, bool vectorized, class A, class B, class Ctx, std::size_t R, int L>
__device__ __forceinline__ void device_reduce_level(const B& b, const index_t* lead, Ctx& ctx, int lane,
                                                    int threads_per_row, A* smem, std::uint64_t reuse) {
  device_reduce_pass<vector_width, vectorized, A, B, Ctx, R>(b, lead, ctx, lane, threads_per_row, smem,
                                                             level_firsts_t<B, L>{});
  [&]<std::size_t... S>(std::index_sequence<S...>) {
    ((((reuse >> S) & 1) ? void(ctx.v[S] = ctx.v[first_same_slot<B, S>()])
                         : device_reduce_pass<vector_width, vectorized, A, B, Ctx, R>(
                               b, lead, ctx, lane, threads_per_row, smem, std::index_sequence<S>{})),
     ...);
  }(level_copies_t<B, L>{});
}

template <int vector_width, bool vectorized, class A, class B, class Ctx, std::size_t R, int... L>
__device__ __forceinline__ void device_reduce_all(const B& b, const index_t* lead, Ctx& ctx, int lane,
                                                  int threads_per_row, A* smem, std::uint64_t reuse,
                                                  std::integer_sequence<int, L...>) {
  (device_reduce_level<vector_width, vectorized, A, B, Ctx, R, L>(b, lead, ctx, lane, threads_per_row, smem, reuse),
   ...);
}

// Copies `bytes` bytes with threads_per_row threads in units of U (four in flight per
// thread), then the remaining bytes one by one.
template <class U>
__device__ __forceinline__ void device_copy_bytes(const unsigned char* src, unsigned char* dst, index_t bytes, int lane,
                                                  int threads_per_row) {
  const index_t units = bytes / static_cast<index_t>(sizeof(U));
  const U* s = reinterpret_cast<const U*>(src);
  U* d = reinterpret_cast<U*>(dst);
  constexpr int N = 4;
  index_t i = lane;
#pragma unroll 1
  for (; i + (N - 1) * threads_per_row < units; i += N * threads_per_row) {
    U t[N];
#pragma unroll
    for (int u = 0; u < N; ++u) t[u] = s[i + u * threads_per_row];
#pragma unroll
    for (int u = 0; u < N; ++u) d[i + u * threads_per_row] = t[u];
  }
#pragma unroll 1
  for (; i < units; i += threads_per_row) d[i] = s[i];
#pragma unroll 1
  for (index_t b = units * static_cast<index_t>(sizeof(U)) + lane; b < bytes; b += threads_per_row) dst[b] = src[b];
}

// Copies the planned rows of `lead` into the group's cache, threads_per_row threads at a
// time, in the widest unit the row's alignment allows.
template <std::size_t Leaves, std::size_t R>
__device__ __forceinline__ void device_fill_cache(const row_cache_plan<Leaves, R>& plan, const index_t* lead,
                                                  unsigned char* cache, int lane, int threads_per_row) {
#pragma unroll 1
  for (int j = 0; j < plan.rows; ++j) {
    index_t off = 0;
    for (std::size_t d = 0; d + 1 < R; ++d) off += lead[d] * plan.lead_bytes[j][d];
    const unsigned char* src = plan.src[j] + off;
    unsigned char* dst = cache + plan.to[j];
    const auto a = reinterpret_cast<std::uintptr_t>(src);
    if (a % 16 == 0)
      device_copy_bytes<uint4>(src, dst, plan.bytes[j], lane, threads_per_row);
    else if (a % 4 == 0)
      device_copy_bytes<unsigned>(src, dst, plan.bytes[j], lane, threads_per_row);
    else
      device_copy_bytes<unsigned char>(src, dst, plan.bytes[j], lane, threads_per_row);
  }
}

__device__ __forceinline__ void group_sync(int threads_per_row) {
  if (threads_per_row == 32)
    __syncwarp();
  else
    __syncthreads();
}

// One row, device: the planned rows of `lead` into the group's cache and
// `bc` rebased onto them, then the reductions into ctx, level by level.
template <int vector_width, bool vectorized, class A, std::size_t R, class B, class Ctx, std::size_t Leaves>
__device__ __forceinline__ void device_row_reductions(B& bc, const row_cache_plan<Leaves, R>& plan, const index_t* lead,
                                                      unsigned char* cache, Ctx& ctx, int lane, int threads_per_row,
                                                      A* smem, std::uint64_t reuse) {
  if (plan.on) {
    device_fill_cache(plan, lead, cache, lane, threads_per_row);
    rebase_leaves(bc, plan, lead, cache);
    group_sync(threads_per_row);
  }
  device_reduce_all<vector_width, vectorized, A, B, Ctx, R>(bc, lead, ctx, lane, threads_per_row, smem, reuse,
                                                            std::make_integer_sequence<int, slot_levels<B>::count>{});
}

struct add_op {
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return a + b;
  }
};

// After a row's output pass: a sink that writes rows as sums (outputs.hpp)
// adds its threads' partial sums (every thread of the group takes part; the
// first stores).
template <class Sink, class A>
__device__ __forceinline__ void device_row_end(Sink& sk, const index_t* lead, int lane, int threads_per_row,
                                               A* smem) {
  if constexpr (sink_sums_rows<Sink>()) {
    static_assert(std::is_same_v<typename Sink::acc, A>,
                  "loom: internal error: a sink's row sums take the kernel's accumulation type");
    sk.end_row(lead, lane == 0, [&](const A* part) { return group_reduce(add_op{}, part[0], threads_per_row, smem); });
  }
}

// The output pass of one row of `cols` columns: vec(c0) for vector_width columns at a
// time (the vector form), then one(idx, c) for the rest.
template <int vector_width, bool vectorized, std::size_t R, class Vector, class One>
__device__ __forceinline__ void device_row_output(const index_t* lead, index_t cols, int lane, int threads_per_row,
                                                  Vector&& vec, One&& one) {
  index_t c = lane;
  if constexpr (vectorized) {
    const index_t full = cols / vector_width * vector_width;
#pragma unroll 1
    for (index_t c0 = static_cast<index_t>(lane) * vector_width; c0 < full;
         c0 += static_cast<index_t>(threads_per_row) * vector_width)
      vec(c0);
    c = full + lane;
  }
  index_t idx[R];
  for (std::size_t d = 0; d + 1 < R; ++d) idx[d] = lead[d];
#pragma unroll 1
  for (; c < cols; c += threads_per_row) {
    idx[R - 1] = c;
    one(idx, c);
  }
}

// The most bytes of loaded values and indices that one vector step of any
// pass holds: the output tree's, or those of the reduction arguments that
// one level's shared pass computes together (a copy candidate's own pass
// holds no more than its level's first of the type).
template <class B, int vector_width, std::size_t... S>
constexpr std::size_t level_step_regs(std::index_sequence<S...>) {
  return (std::size_t{0} + ... + sizeof(typename decltype(slot_type_t<B, S>::arg)::template regs<vector_width>));
}
template <class B, int vector_width, int... L>
constexpr std::size_t row_step_regs(std::integer_sequence<int, L...>) {
  std::size_t most = sizeof(typename B::template regs<vector_width>);
  ((most = std::max(most, level_step_regs<B, vector_width>(level_firsts_t<B, L>{}))), ...);
  return most;
}

// Blocks of 256 threads per SM that a row kernel's launch bounds ask for,
// which caps its registers per thread (65536 / (256 * blocks)): 4 (64
// registers) for a tree whose vector steps hold at most row_light_regs
// bytes (softmax, log_softmax, rms_norm, layer_norm: 48-80 bytes), 2 (128
// registers) for heavier ones, which need more than 64 (96-496 bytes: the
// backward passes, add_rms_norm, cross-entropy, masked softmax, derived
// gradients). The block count is in the bounds because the thread count
// alone lets ptxas cap the light kernels below what they need
// (docs/performance.md has the ptxas figures and the trade).
inline constexpr std::size_t row_light_regs = 80;
template <class B, int vector_width>
inline constexpr int row_min_blocks =
    row_step_regs<B, vector_width>(std::make_integer_sequence<int, slot_levels<B>::count>{}) <= row_light_regs ? 4
                                                                                                            : 2;

// One group of threads_per_row threads per row (threads_per_row = 32: a warp per row; threads_per_row = blockDim: a
// block per row): the planned rows into the group's part of the shared
// cache, every reduction slot in order, then the output pass.
template <int vector_width, bool vectorized, class A, std::size_t R, class Sink, class B, std::size_t Leaves>
__global__ void __launch_bounds__(256, (row_min_blocks<B, vector_width>))
    row_kernel(Sink sink, B b, row_layout<R> lay, int threads_per_row, std::uint64_t reuse,
               __grid_constant__ const row_cache_plan<Leaves, R> plan) {
  __shared__ A smem[32];
  extern __shared__ __align__(16) unsigned char row_cache_smem[];
  unsigned char* cache = row_cache_smem + static_cast<std::size_t>(threadIdx.x / threads_per_row) * plan.group_bytes;
  const int lane = static_cast<int>(threadIdx.x) % threads_per_row;
  const index_t groups_per_block = blockDim.x / threads_per_row;
  const index_t group = static_cast<index_t>(blockIdx.x) * groups_per_block + threadIdx.x / threads_per_row;
  const index_t step = static_cast<index_t>(gridDim.x) * groups_per_block;
#pragma unroll 1
  for (index_t row = group; row < lay.rows; row += step) {
    index_t lead[R > 1 ? R - 1 : 1];
    lay.lead_of(row, lead);
    B bc = b;
    row_ctx<slots_of<B>, A> ctx;
    device_row_reductions<vector_width, vectorized>(bc, plan, lead, cache, ctx, lane, threads_per_row, smem, reuse);
    Sink sk = sink;  // a sink's row sums start at 0 for each row
    device_row_output<vector_width, vectorized, R>(
        lead, lay.cols, lane, threads_per_row, [&](index_t c0) { sk.template vec<vector_width>(bc, lead, c0, ctx); },
        [&](const index_t* idx, index_t c) { sk.one(bc, idx, lead, c, ctx); });
    device_row_end(sk, lead, lane, threads_per_row, smem);
    if (plan.on) group_sync(threads_per_row);  // the next row's copy overwrites the cache
  }
}

// Raises `kernel`'s dynamic shared memory limit on the current device (where
// cudaFuncSetAttribute sets it) to all a row kernel's block may ask for
// there (smem_per_block), once per kernel and device. The limit belongs to
// the kernel, not to a launch: raising it to each launch's own need would let
// another host thread that launches the same kernel with a smaller need in
// between lower it under this launch.
inline std::size_t smem_per_block(int device);
inline void allow_row_smem(const void* kernel) {
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex m;
  static std::set<std::pair<const void*, int>> raised;
  const std::lock_guard<std::mutex> lock(m);
  if (raised.count({kernel, device}) != 0) return;
  LOOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem_per_block(device))));
  raised.insert({kernel, device});
}

// Whether `smem` bytes of dynamic shared memory need a row kernel's limit
// raised: without it, static and dynamic shared memory together must fit
// 48 KiB, and the kernels keep up to 1 KiB static (see smem_per_block).
inline bool row_smem_needs_raise(std::size_t smem) { return smem + 1024 > (std::size_t{48} << 10); }

// Launches a row kernel with `smem` bytes of dynamic shared memory (raising
// the kernel's limit first when row_smem_needs_raise: allow_row_smem),
// checks the launch and counts it.
template <class... P, class... Args>
void launch_row_kernel(void (*kernel)(P...), unsigned grid, unsigned block, std::size_t smem, cudaStream_t s,
                       const Args&... args) {
  if (row_smem_needs_raise(smem)) allow_row_smem(reinterpret_cast<const void*>(kernel));
  launch_kernel(kernel, grid, block, smem, s, args...);
}

// What one block of a row kernel may ask for as dynamic shared memory on
// `device` (the opt-in limit less 1 KiB for the kernels' static shared
// memory), cached per thread.
inline std::size_t smem_per_block(int device) {
  static thread_local int cached_device = -1;
  static thread_local std::size_t cached = 0;
  if (device != cached_device) {
    int optin = 0;
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cached = optin > 1024 ? static_cast<std::size_t>(optin) - 1024 : 0;
    cached_device = device;
  }
  return cached;
}
}  // namespace loom::detail::rows
#endif
