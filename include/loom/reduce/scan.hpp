// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/reduce/reduce.hpp"

#if LOOM_CUDA_COMPILER
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#include <cub/device/device_scan.cuh>
#endif

// Scans (cumulative sums, products, maxima and minima) along one axis of any
// expression, fused into the loads like the reductions. Order of combination:
// the host runs each row left to right; the device runs many rows with one
// block per row, and one long row of floating sums or products in fixed
// chunks (three kernels: chunk totals, their scan, each chunk's scan from its
// prefix), so the result depends on the length alone, never on timing; one
// long row of an exact operation (integers, cummax/cummin) is one
// cub::DeviceScan call. Many rows: one block per row
// (cub::BlockScan over tiles of the row, carrying the running prefix), one kernel.
namespace loom {

//! Whether a scan's output i includes element i (inclusive, like
//! torch.cumsum) or stops before it (exclusive: output 0 is the identity).
enum class scan_kind { inclusive, exclusive };

//! Values and their int64 positions along the scanned or sorted axis, as
//! cummax, cummin, sort and topk return them.
template <class T, std::size_t Rank, memory_space Space>
struct values_indices {
  tensor<T, Rank, Space> values;
  tensor<std::int64_t, Rank, Space> indices;
};

namespace detail {
// cummax/cummin: a later element wins ties (PyTorch's cummax gives the last
// index of equal values) and a NaN, once met, stays, with the index of the
// latest NaN, as PyTorch does. Associative, so block and device scans agree.
// The identity (what an exclusive scan writes first) is the lowest value of
// the type for cummax (-inf for floating types; the highest for cummin) with
// index -1: no element. Every element wins against it.
template <class T, bool Max>
struct cum_extreme_op {
  static constexpr const char* name = Max ? "cummax" : "cummin";
  using acc = value_index<compute_t<T>>;
  using result = T;
  LOOM_HD acc identity() const { return {Max ? lowest_of<compute_t<T>>() : highest_of<compute_t<T>>(), -1}; }
  template <class V>
  LOOM_HD acc lift(V v, index_t i) const {
    return {static_cast<compute_t<T>>(v), i};
  }
  LOOM_HD acc operator()(const acc& a, const acc& b) const {
    if (b.v != b.v) return b;
    if (a.v != a.v) return a;
    return (Max ? b.v >= a.v : b.v <= a.v) ? b : a;
  }
  LOOM_HD result finalize(const acc& a, index_t) const { return convert<result>(a.v); }
};

template <class Op>
LOOM_HD std::int64_t index_of(const typename Op::acc& a) {
  if constexpr (std::is_class_v<typename Op::acc>)
    return a.i;
  else
    return 0;
}

//! Where scan position j (in the map's order) lands in a contiguous output.
template <std::size_t R>
struct scan_out {
  axis_map<R> m;
  shape<R> st;  // contiguous strides of the output
  bool linear;  // position j is linear index j

  LOOM_HD index_t offset(index_t j) const {
    if (linear) return j;
    index_t idx[R > 0 ? R : 1] = {};
    m.coords(j, idx);
    index_t off = 0;
    for (std::size_t d = R; d-- > 0;) off += idx[d] * st[d];
    return off;
  }
};

template <class Op, bool Indices, std::size_t R>
struct scan_writer {
  typename Op::result* out;
  std::int64_t* idx;
  Op op;
  scan_out<R> where;
  LOOM_HD void operator()(index_t j, const typename Op::acc& a) const {
    const index_t off = where.offset(j);
    out[off] = op.finalize(a, 0);
    if constexpr (Indices) idx[off] = index_of<Op>(a);
  }
};

// Every scan runs inclusive; an exclusive one is the same scan written one
// position later along the row (the inclusive result at k is the exclusive
// result at k + 1), with the identity at the row's first position. So on the
// device inclusive and exclusive share every kernel (compile time):
// `exclusive` is a run-time flag. The host loop writes through it too.
template <class W, class Op>
struct inclusive_sink {
  W w;
  Op op;
  bool exclusive;
  // Position j of the row [row0, row_end) has the inclusive result a.
  template <class A>
  LOOM_HD void operator()(index_t j, const A& a, index_t row0, index_t row_end) const {
    if (!exclusive) {
      w(j, a);
      return;
    }
    if (j + 1 < row_end) w(j + 1, a);
    if (j == row0) w(j, op.identity());
  }
};

#if LOOM_CUDA_COMPILER
template <class Op, class B, bool Linear, std::size_t R>
struct lift_scan_item {
  Op op;
  B b;
  axis_map<R> m;
  LOOM_HD typename Op::acc operator()(index_t j) const { return op.lift(read_at<Linear>(b, m, j), j); }
};

// Hands each tile its prefix: the aggregate of the row's earlier tiles.
template <class Op>
struct running_prefix {
  Op op;
  typename Op::acc total;
  __device__ typename Op::acc operator()(const typename Op::acc& tile) {
    const typename Op::acc before = total;
    total = op(total, tile);
    return before;
  }
};

template <int Block, bool Linear, class Op, class B, class W, std::size_t R>
__global__ void __launch_bounds__(Block)
    segment_scan_kernel(inclusive_sink<W, Op> w, Op op, B b, axis_map<R> m, index_t rows, index_t len) {
  using block_scan = cub::BlockScan<typename Op::acc, Block>;
  __shared__ typename block_scan::TempStorage tmp;
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    running_prefix<Op> prefix{op, op.identity()};
    for (index_t k0 = 0; k0 < len; k0 += Block) {
      const index_t k = k0 + threadIdx.x;
      const typename Op::acc v = k < len ? op.lift(read_at<Linear>(b, m, r * len + k), k) : op.identity();
      typename Op::acc o;
      block_scan(tmp).InclusiveScan(v, o, op, prefix);
      __syncthreads();  // tmp is reused by the next tile
      if (k < len) w(r * len + k, o, r * len, r * len + len);
    }
  }
}

// Scan positions [t0, t0 + Block * Items) (fewer at the end of a range):
// each thread loads Items consecutive elements (through shared memory, so
// the loads and stores stay coalesced), cub::BlockScan scans the tile with a
// running prefix, and the results are stored the same way. `row0` is the
// position of the row's first element (cummax/cummin index from it).
template <class Op>
inline constexpr int scan_items = sizeof(typename Op::acc) <= 4 ? 16 : (sizeof(typename Op::acc) <= 8 ? 8 : 4);

template <class Op, class B, bool Linear, std::size_t R>
struct lift_scan_at {
  Op op;
  B b;
  axis_map<R> m;
  index_t row0;
  LOOM_HD typename Op::acc operator()(index_t j) const { return op.lift(read_at<Linear>(b, m, j), j - row0); }
};

template <class W, class Op>
struct shifted_writer {
  inclusive_sink<W, Op> w;
  index_t t0, row0, row_end;
  template <class A>
  LOOM_HD void operator()(index_t i, const A& a) const {
    w(t0 + i, a, row0, row_end);
  }
};

template <int Block, int Items, class Op>
struct tile_scan {
  using acc = typename Op::acc;
  using load_t = cub::BlockLoad<acc, Block, Items, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using scan_t = cub::BlockScan<acc, Block>;
  using store_t = cub::BlockStore<acc, Block, Items, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  union temp {
    typename load_t::TempStorage load;
    typename scan_t::TempStorage scan;
    typename store_t::TempStorage store;
  };
  static constexpr index_t tile = static_cast<index_t>(Block) * Items;

  // Scans positions [begin, end) of the row [row0, row_end) starting from `start`.
  template <bool Linear, class B, class W, std::size_t R>
  __device__ static void run(temp& tmp, const inclusive_sink<W, Op>& w, const Op& op, const B& b,
                             const axis_map<R>& m, index_t begin, index_t end, index_t row0, index_t row_end,
                             const acc& start) {
    running_prefix<Op> prefix{op, start};
    for (index_t t0 = begin; t0 < end; t0 += tile) {
      const int valid = static_cast<int>(end - t0 < tile ? end - t0 : tile);
      acc items[Items];
      const auto in = thrust::make_transform_iterator(thrust::counting_iterator<index_t>(t0),
                                                      lift_scan_at<Op, B, Linear, R>{op, b, m, row0});
      load_t(tmp.load).Load(in, items, valid, op.identity());
      __syncthreads();
      scan_t(tmp.scan).InclusiveScan(items, items, op, prefix);
      __syncthreads();
      store_t(tmp.store).Store(thrust::make_tabulate_output_iterator(shifted_writer<W, Op>{w, t0, row0, row_end}),
                               items, valid);
      __syncthreads();
    }
  }
};

// Many rows of more than one tile's worth: a block per row (grid-stride over
// rows), tile after tile.
template <int Block, bool Linear, class Op, class B, class W, std::size_t R>
__global__ void __launch_bounds__(Block)
    row_tile_scan_kernel(inclusive_sink<W, Op> w, Op op, B b, axis_map<R> m, index_t rows, index_t len) {
  using ts = tile_scan<Block, scan_items<Op>, Op>;
  __shared__ typename ts::temp tmp;
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x)
    ts::template run<Linear>(tmp, w, op, b, m, r * len, r * len + len, r * len, r * len + len, op.identity());
}

// One long row of a floating sum or product in chunks of a fixed length:
// each chunk's total (a fixed tree), the exclusive scan of the totals (one
// block), then each chunk scanned from its prefix. The order of combination
// depends on the row's length alone, so results are bitwise reproducible.
constexpr int chunk_block = 256;
constexpr index_t scan_chunk = 16 * chunk_block;

template <int Block, bool Linear, class Op, class B, std::size_t R>
__global__ void __launch_bounds__(Block)
    chunk_total_kernel(typename Op::acc* totals, Op op, B b, axis_map<R> m, index_t len) {
  using block_reduce = cub::BlockReduce<typename Op::acc, Block>;
  __shared__ typename block_reduce::TempStorage tmp;
  const index_t begin = static_cast<index_t>(blockIdx.x) * scan_chunk;
  typename Op::acc a = op.identity();
  LOOM_UNROLL
  for (int it = 0; it < static_cast<int>(scan_chunk / Block); ++it) {
    const index_t k = begin + it * Block + threadIdx.x;
    if (k < len) a = op(a, op.lift(read_at<Linear>(b, m, k), k));
  }
  const typename Op::acc t = block_reduce(tmp).Reduce(a, op);
  if (threadIdx.x == 0) totals[blockIdx.x] = t;
}

template <int Block, class Op>
__global__ void __launch_bounds__(Block) chunk_prefix_kernel(typename Op::acc* totals, Op op, index_t n) {
  using block_scan = cub::BlockScan<typename Op::acc, Block>;
  __shared__ typename block_scan::TempStorage tmp;
  running_prefix<Op> prefix{op, op.identity()};
  for (index_t k0 = 0; k0 < n; k0 += Block) {
    const index_t k = k0 + threadIdx.x;
    const typename Op::acc v = k < n ? totals[k] : op.identity();
    typename Op::acc o;
    block_scan(tmp).ExclusiveScan(v, o, op, prefix);
    __syncthreads();
    if (k < n) totals[k] = o;
  }
}

template <int Block, bool Linear, class Op, class B, class W, std::size_t R>
__global__ void __launch_bounds__(Block)
    chunk_scan_kernel(inclusive_sink<W, Op> w, Op op, B b, axis_map<R> m, const typename Op::acc* prefixes,
                      index_t len) {
  using ts = tile_scan<Block, scan_items<Op>, Op>;
  __shared__ typename ts::temp tmp;
  const index_t begin = static_cast<index_t>(blockIdx.x) * scan_chunk;
  const index_t end = begin + scan_chunk < len ? begin + scan_chunk : len;
  ts::template run<Linear>(tmp, w, op, b, m, begin, end, 0, len, prefixes[blockIdx.x]);
}

template <bool Linear, class Op, class B, class W, std::size_t R>
void chunked_scan(const Op& op, const B& b, const axis_map<R>& m, const inclusive_sink<W, Op>& w, index_t len,
                  stream_ref s) {
  using acc = typename Op::acc;
  const index_t chunks = (len + scan_chunk - 1) / scan_chunk;
  scratch<device> totals(static_cast<std::size_t>(chunks) * sizeof(acc), s);
  acc* const t = static_cast<acc*>(totals.p);
  const auto grid = static_cast<unsigned>(chunks);
  chunk_total_kernel<chunk_block, Linear><<<grid, chunk_block, 0, s.get()>>>(t, op, b, m, len);
  LOOM_CUDA_CHECK(cudaGetLastError());
  chunk_prefix_kernel<1024><<<1, 1024, 0, s.get()>>>(t, op, chunks);
  LOOM_CUDA_CHECK(cudaGetLastError());
  chunk_scan_kernel<chunk_block, Linear><<<grid, chunk_block, 0, s.get()>>>(w, op, b, m, t, len);
  LOOM_CUDA_CHECK(cudaGetLastError());
  device_launch_counter().fetch_add(3, std::memory_order_relaxed);
}

template <bool Linear, class Op, class B, class W, std::size_t R>
void device_scan(const Op& op, const B& b, const axis_map<R>& m, const inclusive_sink<W, Op>& w, index_t rows,
                 index_t len, stream_ref s) {
  if constexpr (is_floating_v<typename Op::acc>) {
    if (rows == 1 && len > scan_chunk) {
      chunked_scan<Linear>(op, b, m, w, len, s);
      return;
    }
  } else if (rows == 1) {
    auto in = thrust::make_transform_iterator(thrust::counting_iterator<index_t>(0),
                                              lift_scan_item<Op, B, Linear, R>{op, b, m});
    auto out = thrust::make_tabulate_output_iterator(shifted_writer<W, Op>{w, 0, 0, len});
    run_cub(
        [&](void* tmp, std::size_t& bytes) {
          return cub::DeviceScan::InclusiveScan(tmp, bytes, in, out, op, len, s.get());
        },
        s);
    return;
  }
  const index_t cap = static_cast<index_t>(sm_count(s.device())) * 32;
  const unsigned grid = static_cast<unsigned>(rows < cap ? rows : cap);
  if (len > 1024)
    row_tile_scan_kernel<256, Linear><<<grid, 256, 0, s.get()>>>(w, op, b, m, rows, len);
  else
    segment_scan_kernel<128, Linear><<<grid, 128, 0, s.get()>>>(w, op, b, m, rows, len);
  LOOM_CUDA_CHECK(cudaGetLastError());
  device_launch_counter().fetch_add(1, std::memory_order_relaxed);
}
#endif

template <class Op, bool Indices, class E>
auto scan_impl(const E& e, int axis_in, scan_kind kind) {
  using node = node_t<E>;
  check_reducible<node>();
  constexpr std::size_t R = node::rank;
  static_assert(R > 0, "loom: a scan needs an expression of rank 1 or more (it runs along an axis)");
  using S = typename node::space;
  using result = typename Op::result;
  require_cuda_compiler_for<S>();
  const node n = as_node(e);
  const std::size_t axis = normalize_axis<R>(axis_in);
  const shape<R> ext = n.extents();
  std::array<std::size_t, R> order{};
  std::size_t p = 0;
  for (std::size_t d = 0; d != R; ++d)
    if (d != axis) order[p++] = d;
  order[p] = axis;
  const index_t len = ext[axis];
  const index_t total = shape_size(ext);

  tensor<result, R, S> values(ext);
  tensor<std::int64_t, Indices ? R : 0, S> indices;
  if constexpr (Indices) indices = tensor<std::int64_t, R, S>(ext);
  if (total == 0) {
    if constexpr (Indices)
      return values_indices<result, R, S>{std::move(values), std::move(indices)};
    else
      return values;
  }
  const index_t rows = total / len;
  bool row_major = false;
  const axis_map<R> m = make_axis_map(ext, order, row_major);
  bind_info info;
  const auto b = bind_for_read(n, ext, info);
  const bool linear = info.contiguous && row_major;
  const Op op{};
  const scan_writer<Op, Indices, R> w{values.data(), Indices ? indices.data() : nullptr, op,
                                      scan_out<R>{m, contiguous_strides(ext), row_major}};
  const inclusive_sink<scan_writer<Op, Indices, R>, Op> sink{w, op, kind == scan_kind::exclusive};

  if constexpr (std::is_same_v<S, host>) {
    auto run = [&](auto linear_tag) {
      constexpr bool L = decltype(linear_tag)::value;
      host_launch_counter().fetch_add(1, std::memory_order_relaxed);
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static) if (total > 32768)
#endif
      for (index_t r = 0; r < rows; ++r) {
        typename Op::acc a = op.identity();
        for (index_t k = 0; k < len; ++k) {
          const index_t j = r * len + k;
          a = op(a, op.lift(read_at<L>(b, m, j), k));
          sink(j, a, r * len, r * len + len);
        }
      }
    };
    if (linear)
      run(std::true_type{});
    else
      run(std::false_type{});
  } else {
#if LOOM_CUDA_COMPILER
    const stream_ref s = current_stream();
    if (linear)
      device_scan<true>(op, b, m, sink, rows, len, s);
    else
      device_scan<false>(op, b, m, sink, rows, len, s);
#endif
  }
  if constexpr (Indices)
    return values_indices<result, R, S>{std::move(values), std::move(indices)};
  else
    return values;
}
}  // namespace detail

//! Cumulative sum along `axis` of any expression (fused into the loads):
//! inclusive (torch.cumsum) or exclusive (output 0 is 0). Result type
//! sum_result_t<T> (int64 for bool/integers; half stays half, accumulated in
//! float), same shape. Host: one loop, rows in parallel, each left to right.
//! Device, bitwise reproducible run to run: many rows take one kernel (a
//! block per row); a single row (rank 1 or one row) longer than 4096 takes
//! three kernels for floating types (fixed chunks of 4096: totals, their
//! scan, the chunks' scans; the input is read twice) and one
//! cub::DeviceScan call for integers, whose sums are exact in any order.
//! Example: `auto c = loom::cumsum(x, -1);`, `auto offs = loom::cumsum(counts, 0, loom::scan_kind::exclusive);`
template <expression E>
[[nodiscard]] auto cumsum(const E& e, int axis, scan_kind kind = scan_kind::inclusive) {
  return detail::scan_impl<detail::sum_op<typename detail::node_t<E>::value_type>, false>(e, axis, kind);
}

//! Cumulative product along `axis`; like cumsum (int64 for integers; exclusive starts at 1).
//! Example: `auto p = loom::cumprod(1.0f - x, 1);`
template <expression E>
[[nodiscard]] auto cumprod(const E& e, int axis, scan_kind kind = scan_kind::inclusive) {
  return detail::scan_impl<detail::prod_op<typename detail::node_t<E>::value_type>, false>(e, axis, kind);
}

//! Running maximum / minimum along `axis` with the int64 index where it was
//! attained (values and indices), inclusive (torch.cummax) or exclusive:
//! position i then holds the extreme of the elements before i, and position
//! 0 holds the identity, the lowest value of the type for cummax (-inf for
//! floating types; the highest, +inf, for cummin) with index -1. Ties take
//! the later index and a NaN propagates, as torch.cummax does. Exact in any
//! order, so a single row is one cub::DeviceScan call; many rows as cumsum.
//! Example: `auto [v, i] = loom::cummax(x, 0);`,
//!          `auto [before, at] = loom::cummin(x, -1, loom::scan_kind::exclusive);`
template <expression E>
[[nodiscard]] auto cummax(const E& e, int axis, scan_kind kind = scan_kind::inclusive) {
  return detail::scan_impl<detail::cum_extreme_op<typename detail::node_t<E>::value_type, true>, true>(e, axis,
                                                                                                       kind);
}
template <expression E>
[[nodiscard]] auto cummin(const E& e, int axis, scan_kind kind = scan_kind::inclusive) {
  return detail::scan_impl<detail::cum_extreme_op<typename detail::node_t<E>::value_type, false>, true>(e, axis,
                                                                                                        kind);
}
}  // namespace loom
