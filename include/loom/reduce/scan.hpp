// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
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
#include <cuda/atomic>
#endif

// Scans (cumulative sums, products, maxima and minima) along one axis of any
// expression, fused into the loads like the reductions. Order of combination:
// the host runs each row left to right; the device runs many rows with a
// warp per task of short rows or a block per long row, and one long row of
// floating sums or products in one pass over tiles whose prefixes come from
// a look-back that folds the earlier tiles' aggregates in tile order (see
// lookback_scan_kernel), so the result depends on the length alone, never
// on timing; one long row of an exact operation (integers, cummax/cummin)
// is one cub::DeviceScan call, a few long rows of any operation the same
// look-back. Many rows: rows of up to 1024 a warp per task of whole rows
// (warp_scan_kernel), longer ones a block per row (cub::BlockScan over
// tiles of the row, carrying the running prefix), one kernel; along an axis
// that is not the last of a contiguous input, 32 neighbouring rows per
// block instead (cross_scan_kernel), one kernel; few long lines there, a
// block per chunk of 256 positions of 32 lines with a look-back over each
// line's earlier chunks (cross_lookback_kernel), one kernel.
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
using reduce::axis_map;
using reduce::check_reducible;
using reduce::cum_extreme_op;
using reduce::highest_of;
using reduce::line_base;
using reduce::lowest_of;
using reduce::make_axis_map;
using reduce::read_at;
using reduce::value_index;
#if LOOM_CUDA_COMPILER
using reduce::run_cub;
#endif
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
  LOOM_HD void operator()(index_t j, const typename Op::acc& a) const { put(where.offset(j), a); }
  //! Writes a result at offset `off` of the contiguous output.
  LOOM_HD void put(index_t off, const typename Op::acc& a) const {
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
  // Position q of a line of `len` elements at output offsets base,
  // base + stride, ... (a contiguous output scanned across rows) has the
  // inclusive result a.
  template <class A>
  LOOM_HD void strided(index_t base, index_t stride, index_t q, index_t len, const A& a) const {
    if (!exclusive) {
      w.put(base + q * stride, a);
      return;
    }
    if (q + 1 < len) w.put(base + (q + 1) * stride, a);
    if (q == 0) w.put(base, op.identity());
  }
};

// ---------------------------------------------------------------------------
// Scans across rows: a contiguous expression scanned along an axis that is
// not its last (`cumsum(x, 0)`, `cumsum(x, 1)` of a [B, T, C] tensor). Line o
// (one output row of the scan) is at linear offsets line_base(o) + q * inner,
// inner being the product of the extents after the scanned axis. On the
// device a block takes 32 consecutive lines, one per lane, so each warp reads
// and writes 32 neighbouring elements; its cross_scan_warps warps take
// consecutive runs of cross_scan_items positions of a step: each thread scans
// its run, then adds the prefix folded from the line's carry and the runs of
// the warps before it, in warp order. The order of combination depends on
// the shape alone. The per-thread parts are LOOM_HD: the host tests replay
// the kernel with them.
inline constexpr int cross_scan_warps = 16;
inline constexpr int cross_scan_items = 8;
inline constexpr index_t cross_scan_step = static_cast<index_t>(cross_scan_warps) * cross_scan_items;

//! Loads positions q0, q0 + 1, ... (cross_scan_items of them, the identity
//! past the line's end) of the line at `base` and scans them in place.
template <class Op, class B>
LOOM_HD void cross_scan_run(const Op& op, const B& b, index_t base, index_t inner, index_t len, index_t q0,
                            typename Op::acc (&v)[cross_scan_items]) {
  if (q0 + cross_scan_items <= len) {  // a whole run: its loads are issued together, no branch between them
    LOOM_UNROLL
    for (int u = 0; u < cross_scan_items; ++u) v[u] = op.lift(b.at_linear(base + (q0 + u) * inner), q0 + u);
  } else {
    LOOM_UNROLL
    for (int u = 0; u < cross_scan_items; ++u) {
      const index_t q = q0 + u;
      v[u] = q < len ? op.lift(b.at_linear(base + q * inner), q) : op.identity();
    }
  }
  LOOM_UNROLL
  for (int u = 1; u < cross_scan_items; ++u) v[u] = op(v[u - 1], v[u]);
}

//! The prefix of warp `warp`'s run: the line's carry, then the last values
//! of the runs of warps 0 .. warp - 1 (`total(k)`), in order; the carry then
//! becomes the line's prefix after the whole step (the runs of warps warp ..
//! cross_scan_warps - 1 added too), the same value in every warp.
template <class Op, class Total>
LOOM_HD typename Op::acc cross_scan_prefix(const Op& op, const Total& total, int warp, typename Op::acc& carry) {
  typename Op::acc prefix = carry;
  for (int k = 0; k < warp; ++k) prefix = op(prefix, total(k));
  carry = prefix;
  for (int k = warp; k < cross_scan_warps; ++k) carry = op(carry, total(k));
  return prefix;
}

//! Writes a thread's run (positions q0, q0 + 1, ... of the line at `base`)
//! from its prefix.
template <class Sink, class Op>
LOOM_HD void cross_scan_write(const Sink& w, const Op& op, index_t base, index_t stride, index_t len, index_t q0,
                              const typename Op::acc& prefix, const typename Op::acc (&v)[cross_scan_items]) {
  LOOM_UNROLL
  for (int u = 0; u < cross_scan_items; ++u)
    if (q0 + u < len) w.strided(base, stride, q0 + u, len, op(prefix, v[u]));
}

// Rows of up to 1024 elements along the last axis of the scan's map (the
// device gives longer rows to the tile kernels): a warp per task of whole
// rows, warp_scan_rows(len) of them (256 / len, at least one), in passes of
// warp_scan_span positions. Lane l takes positions p + 32u + l (u = 0 .. 7)
// of the pass at p and loads all eight first, with no branch between them.
// Each run of 32 positions is then scanned across the warp: a segmented
// scan over the lanes (at d = 1, 2, 4, 8, 16, lane l adds lane l - d's
// partial while that lane is in its row: l >= d and k >= d, k its position
// in the row), then the carry (the inclusive value of the position before
// the run, lane 31's of the run before) when its row began before the run
// (k > l). The order of combination depends on the shape alone. (A block of
// 128 threads per row, as before, left 112 of them idle on rows of 16.) The
// parts are LOOM_HD: the host tests replay the kernel with them.
inline constexpr int warp_scan_items = 8;
inline constexpr index_t warp_scan_span = static_cast<index_t>(32) * warp_scan_items;

//! Rows per task of the warp scan: as many whole rows as fill a pass, at least one.
LOOM_HD index_t warp_scan_rows(index_t len) { return len < warp_scan_span ? warp_scan_span / len : 1; }

//! Lane `lane`'s positions p + 32u + lane of a task ending at `end`: their
//! positions k in their rows (`len` divides; rows of at most 1024, so k is
//! an int) and lifted values, the identity past `end` (where the lane reads
//! position end - 1 and drops it, so the loads never wait on a branch).
template <bool Linear, class Op, class B, std::size_t R>
LOOM_HD void warp_scan_load(const Op& op, const B& b, const axis_map<R>& m, const fast_divmod& len, index_t p,
                            index_t end, int lane, typename Op::acc (&x)[warp_scan_items], int (&k)[warp_scan_items]) {
  LOOM_UNROLL
  for (int u = 0; u < warp_scan_items; ++u) {
    const index_t j = p + static_cast<index_t>(u) * 32 + lane, jc = j < end ? j : end - 1;
    std::uint64_t q, r;
    len.divmod(static_cast<std::uint64_t>(jc), q, r);
    k[u] = static_cast<int>(r);
    const auto a = op.lift(read_at<Linear>(b, m, jc), static_cast<index_t>(r));
    x[u] = j < end ? a : op.identity();
  }
}

//! One level of the segmented warp scan: `y` is lane lane - d's partial
//! (the lane's own value where lane < d), added when that lane is in this
//! lane's row.
template <class Op>
LOOM_HD typename Op::acc warp_scan_level(const Op& op, const typename Op::acc& x, const typename Op::acc& y, int k,
                                         int lane, int d) {
  return lane >= d && k >= d ? op(y, x) : x;
}

//! A run's value after the carry (the inclusive value before the run) when
//! this lane's row began before the run, else after the identity (as the
//! host's loop starts each row: a sum of -0 alone is +0 on both).
template <class Op>
LOOM_HD typename Op::acc warp_scan_carry(const Op& op, const typename Op::acc& carry, const typename Op::acc& x, int k,
                                         int lane) {
  return op(k > lane ? carry : op.identity(), x);
}

// Few long lines across rows (fewer groups of 32 lines than the GPU holds
// blocks of cross_scan_kernel, the scanned axis longer than a chunk):
// cross_lookback_kernel cuts each group's lines into chunks of
// cross_chunk_steps steps (cross_chunk positions) and gives every chunk of
// every group a block, one pass over the input. A chunk's block scans its
// steps as cross_scan_kernel does, from the identity, then takes each line's
// prefix from a look-back over that line's earlier chunks (lookback_walk, a
// warp per line), which folds them left to right in chunk order: the result
// depends on the shape alone. Chunks are tiles of the look-back, numbered
// chunk by chunk (ticket t: chunk t / groups of group t % groups), so a block
// only waits for blocks that started before it. The parts below are LOOM_HD:
// the host tests replay the kernel with them.
inline constexpr int cross_chunk_steps = 2;
inline constexpr index_t cross_chunk = static_cast<index_t>(cross_chunk_steps) * cross_scan_step;

//! The first position of warp `warp`'s run in step `step` of chunk `chunk`.
LOOM_HD index_t cross_chunk_q0(index_t chunk, int step, int warp) {
  return chunk * cross_chunk + static_cast<index_t>(step) * cross_scan_step +
         static_cast<index_t>(warp) * cross_scan_items;
}

//! A thread's runs of every step of chunk `chunk` of the line at `base`,
//! each scanned in place (see cross_scan_run). When they are all whole, all
//! their loads are issued together, with no branch between them.
template <class Op, class B>
LOOM_HD void cross_chunk_runs(const Op& op, const B& b, index_t base, index_t inner, index_t len, index_t chunk,
                              int warp, typename Op::acc (&v)[cross_chunk_steps][cross_scan_items]) {
  if (cross_chunk_q0(chunk, cross_chunk_steps - 1, warp) + cross_scan_items <= len) {
    LOOM_UNROLL
    for (int s = 0; s < cross_chunk_steps; ++s) {
      const index_t q0 = cross_chunk_q0(chunk, s, warp);
      LOOM_UNROLL
      for (int u = 0; u < cross_scan_items; ++u) v[s][u] = op.lift(b.at_linear(base + (q0 + u) * inner), q0 + u);
    }
    LOOM_UNROLL
    for (int s = 0; s < cross_chunk_steps; ++s) {
      LOOM_UNROLL
      for (int u = 1; u < cross_scan_items; ++u) v[s][u] = op(v[s][u - 1], v[s][u]);
    }
  } else {
    LOOM_UNROLL
    for (int s = 0; s < cross_chunk_steps; ++s)
      cross_scan_run(op, b, base, inner, len, cross_chunk_q0(chunk, s, warp), v[s]);
  }
}

//! Ticket `id` of a cross look-back launch over `groups` groups of 32 lines:
//! its chunk and group (32-bit: a launch takes fewer than 2^31 tiles).
LOOM_HD void cross_tile_of(index_t id, index_t groups, index_t& chunk, index_t& group) {
  chunk = static_cast<index_t>(static_cast<std::uint32_t>(id) / static_cast<std::uint32_t>(groups));
  group = id - chunk * groups;
}

//! A position's inclusive value in chunk `chunk`: the line's prefix (the
//! fold of its earlier chunks) combined with the value within the chunk;
//! chunk 0 has no prefix.
template <class Op>
LOOM_HD typename Op::acc cross_chunk_value(const Op& op, index_t chunk, const typename Op::acc& prefix,
                                           const typename Op::acc& within) {
  return chunk > 0 ? op(prefix, within) : within;
}

// The look-back scan's tile states (see lookback_state).
enum : unsigned { tile_pending = 0, tile_aggregate = 1, tile_inclusive = 2 };

//! A tile's status and float value as one 64-bit word: the value's bits
//! above, the status below (a published word is never 0, the pending word).
LOOM_HD std::uint64_t lookback_pack(unsigned status, float v) {
#if defined(__CUDA_ARCH__)
  const std::uint32_t bits = __float_as_uint(v);
#else
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
#endif
  return static_cast<std::uint64_t>(bits) << 32 | status;
}
LOOM_HD unsigned lookback_status(std::uint64_t w) { return static_cast<unsigned>(w & 0xffffffffu); }
LOOM_HD float lookback_value(std::uint64_t w) {
  const auto bits = static_cast<std::uint32_t>(w >> 32);
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
#endif
}

//! The look-back scan's prefix for a tile (see lookback_scan_kernel) from
//! what its walk found: the window that holds the nearest inclusive tile, in
//! which lane l read tile end - 1 - l and lane `first` that inclusive prefix
//! (`lane(l)`), and the `kept` windows walked before it without one
//! (`saved(k, l)`: window k, lane l; window 0 is the nearest to the tile).
//! Folded left to right in tile order: the inclusive prefix, the aggregates
//! after it in its window (lanes first - 1 .. 0), then the kept windows from
//! the farthest (lanes 31 .. 0 each). Which tile was found changes where the
//! fold starts, never its value.
inline constexpr int lookback_windows = 8;  // windows of 32 tiles kept while looking back

// Windows each warp of the look-back across rows keeps (see
// cross_lookback_kernel): its 16 warps' windows share the block's static
// shared memory (48 KB at most), so 16-byte accumulators (cummax/cummin's
// value and index) keep 4 windows (32 KB), the others 8 (at most 32 KB).
template <class A>
inline constexpr int cross_windows = sizeof(A) > 8 ? 4 : lookback_windows;

//! What a row's first tile publishes as its inclusive prefix: its aggregate
//! after the identity, as the host's loop starts each row (a tile of -0 sums
//! to -0 alone; +0 then, so that the later tiles' prefixes are +0 too).
template <class Op>
LOOM_HD typename Op::acc lookback_first(const Op& op, const typename Op::acc& aggregate) {
  return op(op.identity(), aggregate);
}

// How the look-back scan of a few long rows (one floating row, or a few rows) cuts and paces its tiles:
// Block threads x Items elements per tile (0: loom's choice, 256 x 16 for
// 4-byte accumulators, 256 x 8 for double and int64, 256 x 4 for the value
// and index of cummax/cummin), cub::BlockScan's raking or
// warp-scans algorithm, a wait of WaitNs before the first window is read
// (only in grids of at least 500 tiles), and PollNs between two reads of a
// tile that has published nothing yet. cumsum, cumprod, cummax and cummin
// use the default; bench_reduce_gpu instantiates other choices (CUB's own sm_90 tuning of
// cub::DeviceScan among them) and times them against it. Any choice gives
// a correct, run-to-run reproducible scan; the tile length changes where the
// partial sums are rounded, so results differ between choices in the last bits.
template <int Block = 0, int Items = 0, bool WarpScans = false, unsigned WaitNs = 0, unsigned PollNs = 32>
struct lookback_tiles {
  static constexpr int block = Block, items = Items;
  static constexpr bool warp_scans = WarpScans;
  static constexpr unsigned wait_ns = WaitNs, poll_ns = PollNs;
};

template <class Op, class Lane, class Saved>
LOOM_HD typename Op::acc lookback_fold(const Op& op, int first, int kept, const Lane& lane, const Saved& saved) {
  typename Op::acc r = lane(first);
  for (int l = first - 1; l >= 0; --l) r = op(r, lane(l));
  for (int k = kept - 1; k >= 0; --k)
    for (int l = 31; l >= 0; --l) r = op(r, saved(k, l));
  return r;
}

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

// Any trivially copyable accumulator moved between lanes in 32-bit words,
// each word by `move` (a shuffle).
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
// value and index as 32-bit words (warp_move; on double it made the look-back
// across rows spill more, ptxas -v).
template <class A>
__device__ __forceinline__ A warp_shfl(const A& a, int src) {
  if constexpr (std::is_arithmetic_v<A>)
    return __shfl_sync(0xffffffffu, a, src);
  else
    return warp_move(a, [src](unsigned x) { return __shfl_sync(0xffffffffu, x, src); });
}

// See warp_scan_items: a warp per task of whole rows, grid-stride over tasks.
inline constexpr int warp_scan_block = 256;

template <bool Linear, class Op, class B, class W, std::size_t R>
__global__ void __launch_bounds__(warp_scan_block)
    warp_scan_kernel(inclusive_sink<W, Op> w, Op op, B b, axis_map<R> m, index_t rows, index_t len, fast_divmod div) {
  using acc = typename Op::acc;
  constexpr index_t warps = warp_scan_block / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const index_t per = warp_scan_rows(len), tasks = (rows + per - 1) / per;
  for (index_t t = blockIdx.x * warps + threadIdx.x / 32; t < tasks; t += static_cast<index_t>(gridDim.x) * warps) {
    const index_t begin = t * per * len, end = ((t + 1) * per < rows ? (t + 1) * per : rows) * len;
    acc carry = op.identity();
    for (index_t p = begin; p < end; p += warp_scan_span) {
      acc x[warp_scan_items];
      int k[warp_scan_items];
      warp_scan_load<Linear>(op, b, m, div, p, end, lane, x, k);
      LOOM_UNROLL
      for (int u = 0; u < warp_scan_items; ++u) {
        LOOM_UNROLL
        for (int d = 1; d < 32; d *= 2)
          x[u] = warp_scan_level(
              op, x[u],
              warp_move(x[u], [d](unsigned v) { return __shfl_up_sync(0xffffffffu, v, static_cast<unsigned>(d)); }),
              k[u], lane, d);
        x[u] = warp_scan_carry(op, carry, x[u], k[u], lane);
        carry = warp_move(x[u], [](unsigned v) { return __shfl_sync(0xffffffffu, v, 31); });
        const index_t j = p + static_cast<index_t>(u) * 32 + lane;
        if (j < end) w(j, x[u], j - k[u], j - k[u] + len);
      }
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
      load(tmp, in, items, valid, op);
      __syncthreads();
      scan_t(tmp.scan).InclusiveScan(items, items, op, prefix);
      __syncthreads();
      store(tmp, thrust::make_tabulate_output_iterator(shifted_writer<W, Op>{w, t0, row0, row_end}), items, valid);
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

// One long row (or a few) of a scan in one pass, deterministic (floating
// sums and products; integer ones and cummax/cummin are exact in any order,
// and take it for a few long rows, a single one going to cub::DeviceScan):
// tiles of chunk_block x scan_items elements take a ticket (an atomic
// counter: the order in which they start, so a tile only ever waits for
// tiles that are already running); each scans its tile, publishes its
// aggregate, and looks back for the nearest earlier tile that published its
// inclusive prefix. It then folds the aggregates after that one in tile
// order, left to right:
//   prefix(i) = (((incl(j) + agg(j + 1)) + agg(j + 2)) + ...) + agg(i - 1),
// which is incl(i - 1) = incl(i - 2) + agg(i - 1) unrolled down to j: the
// same value whichever j the look-back found. So every prefix, hence every
// result, depends on the data and the length alone, never on which tile
// published first. No value is combined atomically; the input is read once.
constexpr int chunk_block = 256;
constexpr index_t scan_chunk = 16 * chunk_block;  // one block per row up to this length

// A tile's state while the look-back runs, for each tile of the row:
// pending (nothing published yet), then its aggregate, then its inclusive
// prefix. A reader needs the status and the value it goes with.
// Float accumulators (float, half and bf16 scan in float) keep both in one
// 64-bit word, published with one release store and read with one acquire
// load, so a window of the walk costs one round trip to memory. Others
// (double, the int64 of integer sums and products, cummax/cummin's value
// and index) keep the value beside a status word (a 16-byte load is not
// single-copy atomic): the reader loads the status, then the value it names
// (two round trips).
template <class A>
struct lookback_split {
  A* agg;            // each tile's aggregate
  A* incl;           // each tile's inclusive prefix
  unsigned* status;  // tile_pending -> tile_aggregate -> tile_inclusive
  unsigned* ticket;  // tiles started

  static std::size_t bytes(index_t tiles) {
    return 2 * static_cast<std::size_t>(tiles) * sizeof(A) + (static_cast<std::size_t>(tiles) + 1) * sizeof(unsigned);
  }
  // The state in `p` (of bytes(tiles)) and the part to zero before the scan.
  static lookback_split at(void* p, index_t tiles, void*& zero, std::size_t& zero_bytes) {
    A* const a = static_cast<A*>(p);
    unsigned* const s = reinterpret_cast<unsigned*>(a + 2 * tiles);
    zero = s;
    zero_bytes = (static_cast<std::size_t>(tiles) + 1) * sizeof(unsigned);
    return {a, a + tiles, s, s + tiles};
  }
  using status_ref = cuda::atomic_ref<unsigned, cuda::thread_scope_device>;
  __device__ void publish(index_t t, unsigned st, const A& v) const {
    (st == tile_inclusive ? incl : agg)[t] = v;
    status_ref(status[t]).store(st, cuda::memory_order_release);
  }
  // Waits until tile t has published (PollNs between reads); returns its status and sets v.
  template <unsigned PollNs>
  __device__ unsigned read(index_t t, A& v) const {
    unsigned f;
    while ((f = status_ref(status[t]).load(cuda::memory_order_acquire)) == tile_pending) __nanosleep(PollNs);
    v = f == tile_inclusive ? incl[t] : agg[t];
    return f;
  }
};

template <class A>
struct lookback_packed {
  static_assert(std::is_same_v<A, float>);
  std::uint64_t* word;  // per tile: lookback_pack(status, value); 0 while pending
  unsigned* ticket;     // tiles started

  static std::size_t bytes(index_t tiles) {
    return static_cast<std::size_t>(tiles) * sizeof(std::uint64_t) + sizeof(unsigned);
  }
  static lookback_packed at(void* p, index_t tiles, void*& zero, std::size_t& zero_bytes) {
    zero = p;
    zero_bytes = bytes(tiles);
    std::uint64_t* const w = static_cast<std::uint64_t*>(p);
    return {w, reinterpret_cast<unsigned*>(w + tiles)};
  }
  using word_ref = cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device>;
  __device__ void publish(index_t t, unsigned st, const A& v) const {
    word_ref(word[t]).store(lookback_pack(st, v), cuda::memory_order_release);
  }
  template <unsigned PollNs>
  __device__ unsigned read(index_t t, A& v) const {
    for (;;) {
      const std::uint64_t x = word_ref(word[t]).load(cuda::memory_order_acquire);
      if (lookback_status(x) != tile_pending) {
        v = lookback_value(x);
        return lookback_status(x);
      }
      __nanosleep(PollNs);
    }
  }
};

template <class A>
using lookback_state = std::conditional_t<std::is_same_v<A, float>, lookback_packed<A>, lookback_split<A>>;

// A lookback_tiles choice with its defaults filled in.
template <class Tiles, class Op>
struct lookback_geometry {
  static constexpr int block = Tiles::block > 0 ? Tiles::block : chunk_block;
  static constexpr int items = Tiles::items > 0 ? Tiles::items : scan_items<Op>;
  using tile_t = tile_scan<block, items, Op, Tiles::warp_scans ? cub::BLOCK_SCAN_WARP_SCANS : cub::BLOCK_SCAN_RAKING>;
  static_assert(block % 32 == 0 && block >= 32 && block <= 1024,
                "loom: a look-back tile's block is a whole number of warps, at most 1024 threads");
};

// One warp's look-back for tile `tile` (> 0) of a run of tiles whose tile 0
// is state entry `state0` (a row of the look-back scan; a line of the scan
// across rows): the fold of the earlier tiles' aggregates, in every lane.
// Window [end - 32, end): lane l reads tile end - 1 - l. Windows with no
// inclusive prefix are kept in `saved` (at most Windows of them,
// lookback_windows in the row look-back; past that the walk starts again
// from this tile: the nearer tiles publish theirs meanwhile). Tile 0 of a
// run is always inclusive and started before every other tile of it, so a
// walk ends there at the latest; it never reads another run's tiles.
template <unsigned PollNs, class Op, class State, int Windows>
__device__ __forceinline__ typename Op::acc lookback_walk(const State& st, const Op& op, index_t state0, index_t tile,
                                                          int lane, typename Op::acc (&saved)[Windows][32]) {
  using acc = typename Op::acc;
  index_t end = tile;
  int kept = 0;
  for (;;) {
    const index_t j = end - 1 - lane;
    // Lanes past tile 0 read tile 0 (published: it started first) and drop it.
    acc v;
    unsigned f = st.template read<PollNs>(state0 + (j >= 0 ? j : 0), v);
    if (j < 0) {
      f = tile_pending;
      v = op.identity();
    }
    const unsigned found = __ballot_sync(0xffffffffu, f == tile_inclusive);
    if (found != 0) {
      const int first = __ffs(found) - 1;  // the nearest inclusive tile
      return lookback_fold(
          op, first, kept,
          [&](int l) { return warp_shfl(v, l); },
          [&](int k, int l) { return saved[k][l]; });
    }
    if (kept == Windows) {
      kept = 0;
      end = tile;
      continue;
    }
    saved[kept][lane] = v;
    __syncwarp();
    ++kept;
    end -= 32;
  }
}

template <bool Linear, class Tiles, class Op, class B, class W, std::size_t R>
__global__ void __launch_bounds__(lookback_geometry<Tiles, Op>::block)
    lookback_scan_kernel(inclusive_sink<W, Op> w, Op op, B b, axis_map<R> m, index_t len, index_t tiles_per_row,
                         lookback_state<typename Op::acc> st) {
  using acc = typename Op::acc;
  constexpr int Items = lookback_geometry<Tiles, Op>::items;
  using ts = typename lookback_geometry<Tiles, Op>::tile_t;
  __shared__ typename ts::temp tmp;
  __shared__ acc saved[lookback_windows][32];
  __shared__ acc prefix_sh;
  __shared__ index_t tile_sh;
  if (threadIdx.x == 0) tile_sh = atomicAdd(st.ticket, 1u);
  __syncthreads();
  // The ticket numbers the tiles of all rows, row after row; `tile` counts
  // within the row, whose tile 0 is state entry `row_state`.
  // (32-bit: lookback_scan launches fewer than 2^31 tiles.)
  const index_t id = tile_sh,
                row = static_cast<unsigned>(id) / static_cast<unsigned>(tiles_per_row), tile = id - row * tiles_per_row;
  const index_t row_state = id - tile, row0 = row * len, at = tile * ts::tile, t0 = row0 + at;
  const int valid = static_cast<int>(len - at < ts::tile ? len - at : ts::tile);
  acc items[Items];
  const auto in = thrust::make_transform_iterator(thrust::counting_iterator<index_t>(t0),
                                                  lift_scan_at<Op, B, Linear, R>{op, b, m, row0});
  ts::load(tmp, in, items, valid, op);
  __syncthreads();
  acc aggregate;
  typename ts::scan_t(tmp.scan).InclusiveScan(items, items, op, aggregate);
  if (threadIdx.x < 32) {
    const int lane = static_cast<int>(threadIdx.x);
    if (tile == 0) {
      if (lane == 0) st.publish(id, tile_inclusive, lookback_first(op, aggregate));
    } else {
      if (lane == 0) st.publish(id, tile_aggregate, aggregate);
      if constexpr (Tiles::wait_ns > 0)
        if (gridDim.x >= 500) __nanosleep(Tiles::wait_ns);  // let the tiles before publish theirs first
      const acc r = lookback_walk<Tiles::poll_ns>(st, op, row_state, tile, lane, saved);
      if (lane == 0) {
        prefix_sh = r;
        st.publish(id, tile_inclusive, op(r, aggregate));
      }
    }
  }
  __syncthreads();
  {
    // A row's first tile from the identity, as the host starts each row (a
    // sum of -0 alone is +0 on both).
    const acc prefix = tile > 0 ? prefix_sh : op.identity();
    LOOM_UNROLL
    for (int i = 0; i < Items; ++i) items[i] = op(prefix, items[i]);
  }
  ts::store(tmp, thrust::make_tabulate_output_iterator(shifted_writer<W, Op>{w, t0, row0, row0 + len}), items,
            valid);
}

// Rows: each its own look-back (tiles never look past their row's first).
template <bool Linear, class Tiles, class Op, class B, class W, std::size_t R>
void lookback_scan(const Op& op, const B& b, const axis_map<R>& m, const inclusive_sink<W, Op>& w, index_t rows,
                   index_t len, stream_ref s) {
  using acc = typename Op::acc;
  using geometry = lookback_geometry<Tiles, Op>;
  constexpr index_t tile = geometry::tile_t::tile;
  const index_t tiles_per_row = (len + tile - 1) / tile, tiles = rows * tiles_per_row;
  if (tiles > index_t{0x7fffffff})
    throw value_error("loom: a scan of " + std::to_string(rows) + " rows of " + std::to_string(len) +
                      " elements takes " + std::to_string(tiles) + " tiles, more than one launch holds (2^31 - 1)");
  using state_t = lookback_state<acc>;
  scratch<device> state(state_t::bytes(tiles), s);
  void* zero = nullptr;
  std::size_t zero_bytes = 0;
  const state_t st = state_t::at(state.p, tiles, zero, zero_bytes);
  LOOM_CUDA_CHECK(cudaMemsetAsync(zero, 0, zero_bytes, s.get()));
  launch_kernel(lookback_scan_kernel<Linear, Tiles, Op, B, W, R>, static_cast<unsigned>(tiles), geometry::block, 0,
                s.get(), w, op, b, m, len, tiles_per_row, st);
}

// Scans across rows (see cross_scan_run): block x takes lines 32x .. 32x + 31.
template <class Op, class B, class W>
__global__ void __launch_bounds__(cross_scan_warps * 32)
    cross_scan_kernel(inclusive_sink<W, Op> w, Op op, B b, index_t lines, index_t len, fast_divmod inner) {
  using acc = typename Op::acc;
  __shared__ acc totals[cross_scan_warps][32];
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const index_t tiles = (lines + 31) / 32, stride = static_cast<index_t>(inner.d);
  for (index_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const index_t o = tile * 32 + lane;
    const bool live = o < lines;
    const index_t base = live ? line_base(o, inner, len) : 0;
    acc carry = op.identity();
    for (index_t p0 = 0; p0 < len; p0 += cross_scan_step) {
      const index_t q0 = p0 + static_cast<index_t>(warp) * cross_scan_items;
      acc v[cross_scan_items];
      if (live) {
        cross_scan_run(op, b, base, stride, len, q0, v);
      } else {
        LOOM_UNROLL
        for (int u = 0; u < cross_scan_items; ++u) v[u] = op.identity();
      }
      totals[warp][lane] = v[cross_scan_items - 1];
      __syncthreads();
      const acc prefix = cross_scan_prefix(op, [&](int k) { return totals[k][lane]; }, warp, carry);
      if (live) cross_scan_write(w, op, base, stride, len, q0, prefix, v);
      __syncthreads();  // totals is rewritten by the next step
    }
  }
}

// See cross_chunk_steps. Warp w walks lines w and w + 16 of its group.
template <class Op, class B, class W>
__global__ void __launch_bounds__(cross_scan_warps * 32)
    cross_lookback_kernel(inclusive_sink<W, Op> w, Op op, B b, index_t lines, index_t len, fast_divmod inner,
                          index_t groups, index_t chunks, lookback_state<typename Op::acc> st) {
  using acc = typename Op::acc;
  constexpr unsigned poll_ns = lookback_tiles<>::poll_ns;
  __shared__ acc totals[cross_scan_warps][32];
  __shared__ acc saved[cross_scan_warps][cross_windows<acc>][32];
  __shared__ acc prefix_sh[32];
  __shared__ index_t tile_sh;
  static_assert(sizeof(totals) + sizeof(saved) + sizeof(prefix_sh) + sizeof(tile_sh) <= 48 * 1024,
                "loom: the look-back across rows keeps more windows than 48 KB of static shared memory hold");
  if (threadIdx.x == 0) tile_sh = atomicAdd(st.ticket, 1u);
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  index_t chunk, group;
  cross_tile_of(tile_sh, groups, chunk, group);
  const index_t o = group * 32 + lane, stride = static_cast<index_t>(inner.d);
  const bool live = o < lines;
  const index_t base = live ? line_base(o, inner, len) : 0;
  acc v[cross_chunk_steps][cross_scan_items];
  if (live) {
    cross_chunk_runs(op, b, base, stride, len, chunk, warp, v);
  } else {
    LOOM_UNROLL
    for (int s = 0; s < cross_chunk_steps; ++s) {
      LOOM_UNROLL
      for (int u = 0; u < cross_scan_items; ++u) v[s][u] = op.identity();
    }
  }
  acc within[cross_chunk_steps];
  acc carry = op.identity();  // then the chunk's aggregate of this lane's line
  LOOM_UNROLL
  for (int s = 0; s < cross_chunk_steps; ++s) {
    totals[warp][lane] = v[s][cross_scan_items - 1];
    __syncthreads();
    within[s] = cross_scan_prefix(op, [&](int k) { return totals[k][lane]; }, warp, carry);
    // After the last step, carry is the chunk's aggregate of this lane's
    // line: published before the barrier, so that the inclusive prefix a
    // walking warp publishes after it always lands last.
    if (s == cross_chunk_steps - 1 && warp == 0 && live)
      st.publish(o * chunks + chunk, chunk == 0 ? tile_inclusive : tile_aggregate, carry);
    __syncthreads();  // totals is rewritten by the next step
  }
  if (chunk > 0) {
    LOOM_UNROLL
    for (int i = 0; i < 32 / cross_scan_warps; ++i) {
      const int li = warp + i * cross_scan_warps;
      const index_t line = group * 32 + li;
      const acc aggregate = warp_shfl(carry, li);
      __syncwarp();  // the walk before read saved[warp]; this one writes it
      if (line < lines) {  // the same for the whole warp
        const acc r = lookback_walk<poll_ns>(st, op, line * chunks, chunk, lane, saved[warp]);
        if (lane == 0) {
          prefix_sh[li] = r;
          st.publish(line * chunks + chunk, tile_inclusive, op(r, aggregate));
        }
      }
    }
  }
  __syncthreads();
  if (live) {
    const acc prefix = chunk > 0 ? prefix_sh[lane] : op.identity();
    LOOM_UNROLL
    for (int s = 0; s < cross_chunk_steps; ++s)
      cross_scan_write(w, op, base, stride, len, cross_chunk_q0(chunk, s, warp),
                       cross_chunk_value(op, chunk, prefix, within[s]), v[s]);
  }
}

// Few long lines across rows: every chunk of every group of 32 lines a block.
template <class Op, class B, class W>
void cross_lookback_scan(const Op& op, const B& b, const inclusive_sink<W, Op>& w, index_t lines, index_t len,
                         index_t inner, stream_ref s) {
  using state_t = lookback_state<typename Op::acc>;
  const index_t groups = (lines + 31) / 32, chunks = (len + cross_chunk - 1) / cross_chunk, tiles = groups * chunks;
  if (tiles > index_t{0x7fffffff})
    throw value_error("loom: a scan across rows of " + std::to_string(lines) + " lines of " + std::to_string(len) +
                      " elements takes " + std::to_string(tiles) + " tiles, more than one launch holds (2^31 - 1)");
  const index_t states = lines * chunks;  // one per line and chunk
  scratch<device> state(state_t::bytes(states), s);
  void* zero = nullptr;
  std::size_t zero_bytes = 0;
  const state_t st = state_t::at(state.p, states, zero, zero_bytes);
  LOOM_CUDA_CHECK(cudaMemsetAsync(zero, 0, zero_bytes, s.get()));
  launch_kernel(cross_lookback_kernel<Op, B, W>, static_cast<unsigned>(tiles), cross_scan_warps * 32, 0, s.get(), w,
                op, b, lines, len, fast_divmod(static_cast<std::uint64_t>(inner)), groups, chunks, st);
}

template <class Op, class B, class W>
void device_cross_scan(const Op& op, const B& b, const inclusive_sink<W, Op>& w, index_t lines, index_t len,
                       index_t inner, stream_ref s) {
  const index_t tiles = (lines + 31) / 32;
  if (tiles < static_cast<index_t>(sm_count(s.device())) * 4 && len > cross_chunk) {
    cross_lookback_scan(op, b, w, lines, len, inner, s);
    return;
  }
  launch_kernel(cross_scan_kernel<Op, B, W>, grid_size(tiles, 4, s.device()), cross_scan_warps * 32, 0, s.get(), w, op,
                b, lines, len, fast_divmod(static_cast<std::uint64_t>(inner)));
}

template <bool Linear, class Op, class B, class W, std::size_t R>
void launch_warp_scan(const Op& op, const B& b, const axis_map<R>& m, const inclusive_sink<W, Op>& w, index_t rows,
                      index_t len, stream_ref s) {
  const index_t per = warp_scan_rows(len), tasks = (rows + per - 1) / per;
  const index_t want = (tasks + warp_scan_block / 32 - 1) / (warp_scan_block / 32);
  launch_kernel(warp_scan_kernel<Linear, Op, B, W, R>, grid_size(want, 2048 / warp_scan_block, s.device()),
                warp_scan_block, 0, s.get(), w, op, b, m, rows, len, fast_divmod(static_cast<std::uint64_t>(len)));
}

template <bool Linear, class Tiles, class Op, class B, class W, std::size_t R>
void device_scan(const Op& op, const B& b, const axis_map<R>& m, const inclusive_sink<W, Op>& w, index_t rows,
                 index_t len, stream_ref s) {
  // Rows too few for a block each to fill the GPU (fewer than 8 per SM)
  // take the look-back, whose tiles spread every row over the whole GPU;
  // a single row of an exact operation takes cub::DeviceScan instead.
  const index_t cap = static_cast<index_t>(sm_count(s.device())) * 32;
  if constexpr (!is_floating_v<typename Op::acc>) {
    if (rows == 1) {
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
  }
  if (len > scan_chunk && rows < cap / 4) {
    lookback_scan<Linear, Tiles>(op, b, m, w, rows, len, s);
    return;
  }
  if (len > 1024)
    launch_kernel(row_tile_scan_kernel<256, Linear, Op, B, W, R>, grid_size(rows, 32, s.device()), 256, 0, s.get(), w,
                  op, b, m, rows, len);
  else
    launch_warp_scan<Linear>(op, b, m, w, rows, len, s);
}
#endif

template <class Op, bool Indices, class Tiles = lookback_tiles<>, class E>
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
      count_host_launch();
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
    index_t inner = 1;
    for (std::size_t d = axis + 1; d < R; ++d) inner *= ext[d];
    if (linear)
      device_scan<true, Tiles>(op, b, m, sink, rows, len, s);
    else if (info.contiguous && inner > 1)
      device_cross_scan(op, b, sink, rows, len, inner, s);
    else
      device_scan<false, Tiles>(op, b, m, sink, rows, len, s);
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
//! warp per 256 / len rows up to 1024 long, else a block per row; 32
//! neighbouring rows per block along an axis that is not the last of a
//! contiguous input, and for few long lines there, a block per 256
//! positions of 32 lines, each line's earlier chunks folded in order by a
//! look-back); rows longer than 4096, fewer than 8 per SM (a single
//! floating row, or a few rows), take one kernel over all their tiles
//! (4096, or 2048 for double and int64, each prefix folded from the earlier
//! tiles of its row in tile order; the input read once); a single row of
//! integers or bools, of any length, one cub::DeviceScan call (their int64
//! sums are exact in any order).
//! Example: `auto c = loom::cumsum(x, -1);`, `auto offs = loom::cumsum(counts, 0, loom::scan_kind::exclusive);`
template <expression E>
[[nodiscard]] auto cumsum(const E& e, int axis, scan_kind kind = scan_kind::inclusive) {
  return detail::scan_impl<detail::reduce::sum_op<typename detail::node_t<E>::value_type>, false>(e, axis, kind);
}

//! Cumulative product along `axis`; like cumsum (int64 for integers; exclusive starts at 1).
//! Example: `auto p = loom::cumprod(1.0f - x, 1);`
template <expression E>
[[nodiscard]] auto cumprod(const E& e, int axis, scan_kind kind = scan_kind::inclusive) {
  return detail::scan_impl<detail::reduce::prod_op<typename detail::node_t<E>::value_type>, false>(e, axis, kind);
}

//! Running maximum / minimum along `axis` with the int64 index where it was
//! attained (values and indices), inclusive (torch.cummax) or exclusive:
//! position i then holds the extreme of the elements before i, and position
//! 0 holds the identity, the lowest value of the type for cummax (-inf for
//! floating types; the highest, +inf, for cummin) with index -1. Ties take
//! the later index and a NaN propagates, as torch.cummax does. Exact in any
//! order, so a single row is one cub::DeviceScan call; many rows, a few
//! long ones, or lines across rows as cumsum (tiles of 1024 for a few long
//! rows).
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
