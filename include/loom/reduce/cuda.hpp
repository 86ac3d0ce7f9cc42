// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/stream.hpp"
#include "loom/exec/assign.hpp"
#include "loom/core/reduction_ops.hpp"
#include "loom/reduce/plan.hpp"
#include "loom/reduce/shares.hpp"

#if LOOM_CUDA_COMPILER
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_output_iterator.h>

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>
#endif

// The CUDA executor of reductions: a whole tensor by cub::DeviceReduce (CUB
// runs one kernel, or two for inputs larger than one tile), along axes by
// axis_reduce_kernel in the thread mapping of its axis_plan (and
// axis_combine_kernel when the ranges are split into chunks).
namespace loom::detail::reduce {

#if LOOM_CUDA_COMPILER
// Item v of what CUB reduces: vector_width consecutive elements of a
// contiguous, aligned expression loaded as 16-byte vectors and combined left
// to right, or, with vector_width == 1, one element by coordinates. Every
// vector item is whole (the last n % vector_width elements are combined by
// finalize_fn): an item has no branch, so the compiler can issue all of a
// thread's loads of a tile before their first use, as for CUB's own
// vectorized pointer loads.
template <class Op, class B, int vector_width, bool Linear, std::size_t R>
struct lift_items {
  Op op;
  B b;
  axis_map<R> m;

  LOOM_HD typename Op::acc operator()(index_t v) const {
    if constexpr (vector_width == 1) {
      return op.lift(read_at<Linear>(b, m, v), v);
    } else {
      const index_t i0 = v * vector_width;
      typename B::template regs<vector_width> r;
      b.template load<vector_width>(i0, r);
      typename Op::acc a = op.lift(b.template elem<vector_width>(r, 0), i0);
      for (int j = 1; j < vector_width; ++j) a = op(a, op.lift(b.template elem<vector_width>(r, j), i0 + j));
      return a;
    }
  }
};

// Applied once to CUB's result: combines the elements [tail, count) that no
// whole vector item held (none on the coordinates path: tail == count), then
// finalizes. One type for both paths of an expression, so CUB's second-pass
// kernel (partials in, this out) is compiled once for both.
template <class Op, class B>
struct finalize_fn {
  Op op;
  B b;
  index_t tail, count;
  LOOM_HD typename Op::result operator()(typename Op::acc a) const {
    for (index_t i = tail; i < count; ++i) a = op(a, op.lift(b.at_linear(i), i));
    return op.finalize(a, count);
  }
};

//! Runs one CUB algorithm: asks for its temp storage size, takes that from
//! the stream-ordered pool (freed in stream order on every path), runs it.
template <class Call>
void run_cub(const Call& call, stream_ref s) {
  std::size_t bytes = 0;
  LOOM_CUDA_CHECK(call(static_cast<void*>(nullptr), bytes));
  scratch<device> tmp(bytes > 0 ? bytes : 1, s);
  LOOM_CUDA_CHECK(call(tmp.p, bytes));
  LOOM_CUDA_CHECK(cudaGetLastError());
  count_device_launch();
}

template <class Op, class T>
struct lift_value {
  Op op;
  LOOM_HD typename Op::acc operator()(T v) const { return op.lift(static_cast<compute_t<T>>(v), 0); }
};

// Sums and means of floating accumulators combine by a plain a + b, so CUB
// is handed cuda::std::plus<> for them: CUB reduces a thread's 16 items of
// a tile as a tree for plus<> (5 adds deep) and one after the other for
// any other functor (17 dependent adds, about 70 cycles before the next
// tile's loads can issue), so with plus<> the kernel is the one
// cub::DeviceReduce::Sum runs, instruction for instruction (the PTX check
// compares the two). Integer accumulators keep loom's wrapping add (CUB reduces 8-byte
// items one after the other either way).
template <class Op>
inline constexpr bool adds_plainly = false;
template <class T>
inline constexpr bool adds_plainly<sum_op<T>> = std::is_floating_point_v<typename sum_op<T>::acc>;
template <class T>
inline constexpr bool adds_plainly<mean_op<T>> = std::is_floating_point_v<typename mean_op<T>::acc>;

template <class Op, class T, std::size_t R>
void device_reduce_pointer(const Op& op, const bound_leaf<T, R>& b, index_t n, typename Op::result* out,
                           stream_ref s) {
  auto out_it = thrust::make_transform_output_iterator(out, finalize_fn<Op, bound_leaf<T, R>>{op, b, n, n});
  const auto combine = [&] {
    if constexpr (adds_plainly<Op>)
      return ::cuda::std::plus<>{};
    else
      return op;
  }();
  run_cub(
      [&](void* tmp, std::size_t& bytes) {
        return cub::DeviceReduce::TransformReduce(tmp, bytes, b.p, out_it, n, combine, lift_value<Op, T>{op},
                                                  op.identity(), s.get());
      },
      s);
}

template <class Op, class B, int vector_width, bool Linear, std::size_t R>
void device_reduce_all(const Op& op, const B& b, const axis_map<R>& m, index_t n, typename Op::result* out,
                       stream_ref s) {
  const index_t items = n / vector_width;  // vector_width == 1, or n >= vector_width (a whole vector at least)
  const lift_items<Op, B, vector_width, Linear, R> lift{op, b, m};
  auto out_it = thrust::make_transform_output_iterator(out, finalize_fn<Op, B>{op, b, items * vector_width, n});
  run_cub(
      [&](void* tmp, std::size_t& bytes) {
        return cub::DeviceReduce::TransformReduce(tmp, bytes, thrust::counting_iterator<index_t>(0), out_it, items,
                                                  op, lift, op.identity(), s.get());
      },
      s);
}

// Along rows: one block, warp or thread per output (grid-stride over
// outputs; plan.row_threads). Across rows: block (x, y) takes tiles of 32
// outputs x, x + gridDim.x, ... over chunk y of the range. See the thread
// mappings at axis_plan.
template <int vector_width, bool Linear, class Op, class B, std::size_t R>
__global__ void __launch_bounds__(axis_block)
    axis_reduce_kernel(typename Op::result* out, typename Op::acc* partial, Op op, B b, axis_map<R> m,
                       index_t outputs, index_t k, axis_plan plan) {
  using acc = typename Op::acc;
  using block_reduce = cub::BlockReduce<acc, axis_block>;
  struct lane_accs {
    acc v[axis_block];
  };
  __shared__ typename block_reduce::TempStorage tmp;
  __shared__ cub::Uninitialized<lane_accs> lanes;
  const int t = static_cast<int>(threadIdx.x);
  const index_t s = blockIdx.y, lo = s * plan.chunk, hi = lo + plan.chunk < k ? lo + plan.chunk : k;
  if (!plan.cross) {
    const auto share = [&]<bool Wide>(index_t o, int u, int nt, std::bool_constant<Wide>) {
      if constexpr (Linear && vector_width > 1)
        if (plan.vec) return row_share_vec<vector_width, Wide>(op, b, o * k + lo, hi - lo, u, nt, lo);
      return row_share<Linear>(op, b, m, o * k + lo, hi - lo, u, nt, lo);
    };
    if (plan.row_threads == 1) {  // a thread per output (rows of at most thread_row_max, one chunk)
      const index_t step = static_cast<index_t>(gridDim.x) * axis_block;
      for (index_t o = static_cast<index_t>(blockIdx.x) * axis_block + t; o < outputs; o += step)
        out[o] = op.finalize(share(o, 0, 1, std::false_type{}), k);
      return;
    }
    if (plan.row_threads == 32) {  // a warp per output (short rows, one chunk)
      using warp_reduce = cub::WarpReduce<acc>;
      constexpr int warps = axis_block / 32;
      __shared__ typename warp_reduce::TempStorage wtmp[warps];
      const int warp = t / 32, lane = t % 32;
      for (index_t o = static_cast<index_t>(blockIdx.x) * warps + warp; o < outputs;
           o += static_cast<index_t>(gridDim.x) * warps) {
        const acc total = warp_reduce(wtmp[warp]).Reduce(share(o, lane, 32, std::true_type{}), op);
        if (lane == 0) out[o] = op.finalize(total, k);
        __syncwarp();  // wtmp[warp] is reused by the warp's next output
      }
      return;
    }
    for (index_t o = blockIdx.x; o < outputs; o += gridDim.x) {
      const acc total = block_reduce(tmp).Reduce(share(o, t, axis_block, std::true_type{}), op);
      if (t == 0) {
        if (plan.splits == 1)
          out[o] = op.finalize(total, k);
        else
          partial[s * outputs + o] = total;
      }
      __syncthreads();  // tmp is reused by the next output
    }
    return;
  }
  const int x = t % cross_outputs, lane = t / cross_outputs;
  const index_t tiles = (outputs + cross_outputs - 1) / cross_outputs;
  for (index_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const index_t o = tile * cross_outputs + x;
    const index_t base = Linear && o < outputs ? line_base(o, plan.inner, k) : 0;
    lanes.Alias().v[t] = o < outputs ? cross_share<Linear>(op, b, m, o, base, static_cast<index_t>(plan.inner.d), k,
                                                           lo, hi, lane)
                                     : op.identity();
    __syncthreads();
    if (lane == 0 && o < outputs) {
      acc a = lanes.Alias().v[x];
      for (int l = 1; l < cross_lanes; ++l) a = op(a, lanes.Alias().v[l * cross_outputs + x]);
      if (plan.splits == 1)
        out[o] = op.finalize(a, k);
      else
        partial[s * outputs + o] = a;
    }
    __syncthreads();  // lanes is reused by the next tile
  }
}

// Combines the chunks' partial results of each output in chunk order.
template <class Op>
__global__ void __launch_bounds__(256) axis_combine_kernel(typename Op::result* out, const typename Op::acc* partial,
                                                           Op op, index_t outputs, index_t splits, index_t k) {
  const index_t step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t o = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < outputs; o += step) {
    typename Op::acc a = partial[o];
    for (index_t s = 1; s < splits; ++s) a = op(a, partial[s * outputs + o]);
    out[o] = op.finalize(a, k);
  }
}

template <int vector_width, bool Linear, class Op, class B, std::size_t R>
void device_reduce_axes(const Op& op, const B& b, const axis_map<R>& m, index_t outputs, index_t k,
                        const axis_plan& plan, typename Op::result* out, stream_ref s) {
  using acc = typename Op::acc;
  const index_t per_block = plan.cross ? cross_outputs : axis_block / plan.row_threads;
  const index_t blocks = (outputs + per_block - 1) / per_block;
  const dim3 grid(grid_size(blocks, 16, s.device()), static_cast<unsigned>(plan.splits));
  const auto launch = [&](acc* partial) {
    launch_kernel(axis_reduce_kernel<vector_width, Linear, Op, B, R>, grid, axis_block, 0, s.get(), out, partial, op,
                  b, m, outputs, k, plan);
  };
  if (plan.splits == 1) {
    launch(nullptr);
    return;
  }
  scratch<device> part(static_cast<std::size_t>(plan.splits * outputs) * sizeof(acc), s);
  launch(static_cast<acc*>(part.p));
  launch_kernel(axis_combine_kernel<Op>, grid_size((outputs + 255) / 256, 16, s.device()), 256, 0, s.get(), out,
                static_cast<const acc*>(part.p), op, outputs, plan.splits, k);
}

//! Reduces all `k` elements of the bound expression `b` (node type Node, in
//! the order of `m`; `linear` when that is b's linear order) into out[0].
//! Two compiled paths per expression, not three: a contiguous input (CUB's
//! pointer path for a plain tensor, else 16-byte items) and the coordinates
//! path. An unaligned contiguous input (a slice at an odd offset) and one
//! shorter than a vector take the coordinates path unless it is a plain
//! tensor.
template <class Node, class Op, class B, std::size_t R>
void device_reduce_whole(const Op& op, const B& b, const axis_map<R>& m, const bind_info& info, bool linear,
                         index_t k, typename Op::result* out, stream_ref s) {
  constexpr int vector_width = vector_width_of<Node>;
  if constexpr (reduces_by_pointer<Op, Node>) {
    if (linear)
      device_reduce_pointer(op, b, k, out, s);
    else
      device_reduce_all<Op, B, 1, false>(op, b, m, k, out, s);
  } else if (linear && info.aligned && k >= vector_width) {
    device_reduce_all<Op, B, vector_width, true>(op, b, m, k, out, s);
  } else {
    device_reduce_all<Op, B, 1, false>(op, b, m, k, out, s);
  }
}

//! Reduces the axes `red` of the bound expression `b` (node type Node,
//! extents `ext`, in the order of `m`) into `outputs` results of `k`
//! elements each, in the thread mapping plan_axis_reduce chooses.
template <class Node, class Op, class B, std::size_t R>
void device_reduce_along_axes(const Op& op, const B& b, const axis_map<R>& m, const shape<R>& ext,
                              const std::array<bool, R>& red, const bind_info& info, index_t outputs, index_t k,
                              typename Op::result* out, stream_ref s) {
  constexpr int vector_width = vector_width_of<Node>;
  const axis_plan plan = plan_axis_reduce(ext, red, info.contiguous, info.aligned, outputs, k, sm_count(s.device()));
  if (plan.linear)
    device_reduce_axes<vector_width, true>(op, b, m, outputs, k, plan, out, s);
  else
    device_reduce_axes<vector_width, false>(op, b, m, outputs, k, plan, out, s);
}
#endif
}  // namespace loom::detail::reduce
