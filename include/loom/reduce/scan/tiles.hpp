// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/reduction_ops.hpp"
#include "loom/reduce/plan.hpp"
#include "loom/reduce/scan/sink.hpp"

#if LOOM_CUDA_COMPILER
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cub/block/block_load.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#endif

// The device building blocks of the scans: lifting the expression's
// elements as CUB's input, moving accumulators between lanes, and scanning
// a tile of Block x Items elements with cub::BlockScan.
namespace loom::detail::scan {
#if LOOM_CUDA_COMPILER
using reduce::axis_map;
using reduce::read_at;

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

// Any trivially copyable accumulator moved between lanes in 32-bit words,
// each word by `move` (a shuffle). A (value, index) pair moves member by
// member: its padding is never copied (a float's pair is 3 words, not 4),
// and no copy of the whole struct goes through local memory (which the
// warp scan of cummax over a fused float tree cannot afford).
template <class A, class Move>
__device__ __forceinline__ A warp_move(const A& a, const Move& move);
template <class C, class Move>
__device__ __forceinline__ reduce::value_index<C> warp_move(const reduce::value_index<C>& a, const Move& move) {
  return {warp_move(a.v, move), warp_move(a.i, move)};
}
template <class A, class Move>
__device__ __forceinline__ A warp_move(const A& a, const Move& move) {
  constexpr int words = static_cast<int>((sizeof(A) + 3) / 4);
  unsigned w[words] = {};
  memcpy(w, &a, sizeof(A));
  LOOM_UNROLL
  for (int i = 0; i < words; ++i) w[i] = move(w[i]);
  A r;
  memcpy(&r, w, sizeof(A));
  return r;
}

// Lane `src`'s `a` in every lane: numbers by one __shfl_sync, cummax/cummin's
// value and index as 32-bit words (warp_move: a double's pair moved whole
// would go through local memory in the look-back across rows).
template <class A>
__device__ __forceinline__ A warp_shfl(const A& a, int src) {
  if constexpr (std::is_arithmetic_v<A>)
    return __shfl_sync(0xffffffffu, a, src);
  else
    return warp_move(a, [src](unsigned x) { return __shfl_sync(0xffffffffu, x, src); });
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

template <class Writer, class Op>
struct shifted_writer {
  inclusive_sink<Writer, Op> w;
  index_t t0, row0, row_end;
  template <class A>
  LOOM_HD void operator()(index_t i, const A& a) const {
    w(t0 + i, a, row0, row_end);
  }
};

template <int Block, int Items, class Op, cub::BlockScanAlgorithm Algo = cub::BLOCK_SCAN_RAKING>
struct tile_scan {
  using acc = typename Op::acc;
  using load_t = cub::BlockLoad<acc, Block, Items, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using scan_t = cub::BlockScan<acc, Block, Algo>;
  using store_t = cub::BlockStore<acc, Block, Items, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  union temp {
    typename load_t::TempStorage load;
    typename scan_t::TempStorage scan;
    typename store_t::TempStorage store;
  };
  static constexpr index_t tile = static_cast<index_t>(Block) * Items;

  // A whole tile loads and stores without bounds checks, so a thread issues
  // its Items loads back to back; only a range's last tile checks each one.
  template <class In>
  __device__ static void load(temp& tmp, In in, acc (&items)[Items], int valid, const Op& op) {
    if (valid == tile)
      load_t(tmp.load).Load(in, items);
    else
      load_t(tmp.load).Load(in, items, valid, op.identity());
  }
  template <class Out>
  __device__ static void store(temp& tmp, Out out, acc (&items)[Items], int valid) {
    if (valid == tile)
      store_t(tmp.store).Store(out, items);
    else
      store_t(tmp.store).Store(out, items, valid);
  }

  // Scans positions [begin, end) of the row [row0, row_end) starting from `start`.
  template <bool Linear, class B, class Writer, std::size_t R>
  __device__ static void run(temp& tmp, const inclusive_sink<Writer, Op>& w, const Op& op, const B& b,
                             const axis_map<R>& m, index_t begin, index_t end, index_t row0, index_t row_end,
                             const acc& start) {
    running_prefix<Op> prefix{op, start};
    for (index_t t0 = begin; t0 < end; t0 += tile) {
      const int valid = static_cast<int>(end - t0 < tile ? end - t0 : tile);
      acc items[Items];
      const auto in = thrust::make_transform_iterator(thrust::counting_iterator<index_t>(t0),
                                                      lift_scan_at<Op, B, Linear, R>{op, b, m, row0});
      load(tmp, in, items, valid, op);
      __syncthreads();
      scan_t(tmp.scan).InclusiveScan(items, items, op, prefix);
      __syncthreads();
      store(tmp, thrust::make_tabulate_output_iterator(shifted_writer<Writer, Op>{w, t0, row0, row_end}), items, valid);
      __syncthreads();
    }
  }
};

#endif
}  // namespace loom::detail::scan
