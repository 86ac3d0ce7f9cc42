// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/stream.hpp"
#include "loom/detail/fast_divmod.hpp"
#include "loom/exec/assign.hpp"
#include "loom/reduce/cuda.hpp"
#include "loom/reduce/plan.hpp"
#include "loom/reduce/scan/lookback.hpp"
#include "loom/reduce/scan/parts.hpp"
#include "loom/reduce/scan/sink.hpp"
#include "loom/reduce/scan/tiles.hpp"

#if LOOM_CUDA_COMPILER
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cub/device/device_scan.cuh>
#endif

// The CUDA executor of scans: the kernels and the choice among them (see
// device_scan and device_cross_scan).
namespace loom::detail::scan {
#if LOOM_CUDA_COMPILER
using reduce::axis_map;
using reduce::line_base;
using reduce::run_cub;

// See warp_scan_items: a warp per task of whole rows, grid-stride over tasks.
inline constexpr int warp_scan_block = 256;

template <bool Linear, class Op, class B, class Writer, std::size_t R>
__global__ void __launch_bounds__(warp_scan_block)
    warp_scan_kernel(inclusive_sink<Writer, Op> w, Op op, B b, axis_map<R> m, index_t rows, index_t len,
                     fast_divmod div) {
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

// Many rows of more than one tile's worth: a block per row (grid-stride over
// rows), tile after tile.
template <int Block, bool Linear, class Op, class B, class Writer, std::size_t R>
__global__ void __launch_bounds__(Block)
    row_tile_scan_kernel(inclusive_sink<Writer, Op> w, Op op, B b, axis_map<R> m, index_t rows, index_t len) {
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

// A look-back tiles policy (see lookback_tiles) with its zeros filled in.
template <class Tiles, class Op>
struct lookback_geometry {
  static constexpr int block = Tiles::block > 0 ? Tiles::block : chunk_block;
  static constexpr int items = Tiles::items > 0 ? Tiles::items : scan_items<Op>;
  using tile_t = tile_scan<block, items, Op, Tiles::warp_scans ? cub::BLOCK_SCAN_WARP_SCANS : cub::BLOCK_SCAN_RAKING>;
  static_assert(block % 32 == 0 && block >= 32 && block <= 1024,
                "loom: a look-back tile's block is a whole number of warps, at most 1024 threads");
};

template <bool Linear, class Tiles, class Op, class B, class Writer, std::size_t R>
__global__ void __launch_bounds__(lookback_geometry<Tiles, Op>::block)
    lookback_scan_kernel(inclusive_sink<Writer, Op> w, Op op, B b, axis_map<R> m, index_t len, index_t tiles_per_row,
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
  ts::store(tmp, thrust::make_tabulate_output_iterator(shifted_writer<Writer, Op>{w, t0, row0, row0 + len}), items,
            valid);
}

// Rows: each its own look-back (tiles never look past their row's first).
template <bool Linear, class Tiles, class Op, class B, class Writer, std::size_t R>
void lookback_scan(const Op& op, const B& b, const axis_map<R>& m, const inclusive_sink<Writer, Op>& w, index_t rows,
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
  launch_kernel(lookback_scan_kernel<Linear, Tiles, Op, B, Writer, R>, static_cast<unsigned>(tiles), geometry::block, 0,
                s.get(), w, op, b, m, len, tiles_per_row, st);
}

// Scans across rows (see cross_scan_run): block x takes lines 32x .. 32x + 31.
template <class Op, class B, class Writer>
__global__ void __launch_bounds__(cross_scan_warps * 32)
    cross_scan_kernel(inclusive_sink<Writer, Op> w, Op op, B b, index_t lines, index_t len, fast_divmod inner) {
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
// One block per SM in the launch bounds (up to 128 registers): a bool
// sum's kernel needs 108 and the int32 sum's 80, more than the 64 the
// thread count alone would let ptxas use (one block of 512 per SM either
// way).
template <class Op, class B, class Writer>
__global__ void __launch_bounds__(cross_scan_warps * 32, 1)
    cross_lookback_kernel(inclusive_sink<Writer, Op> w, Op op, B b, index_t lines, index_t len, fast_divmod inner,
                          index_t groups, index_t chunks, lookback_state<typename Op::acc> st) {
  using acc = typename Op::acc;
  constexpr unsigned poll_ns = lookback_tiles::poll_ns;
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
template <class Op, class B, class Writer>
void cross_lookback_scan(const Op& op, const B& b, const inclusive_sink<Writer, Op>& w, index_t lines, index_t len,
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
  launch_kernel(cross_lookback_kernel<Op, B, Writer>, static_cast<unsigned>(tiles), cross_scan_warps * 32, 0, s.get(),
                w, op, b, lines, len, fast_divmod(static_cast<std::uint64_t>(inner)), groups, chunks, st);
}

template <class Op, class B, class Writer>
void device_cross_scan(const Op& op, const B& b, const inclusive_sink<Writer, Op>& w, index_t lines, index_t len,
                       index_t inner, stream_ref s) {
  const index_t tiles = (lines + 31) / 32;
  if (tiles < static_cast<index_t>(sm_count(s.device())) * 4 && len > cross_chunk) {
    cross_lookback_scan(op, b, w, lines, len, inner, s);
    return;
  }
  launch_kernel(cross_scan_kernel<Op, B, Writer>, grid_size(tiles, 4, s.device()), cross_scan_warps * 32, 0, s.get(), w,
                op, b, lines, len, fast_divmod(static_cast<std::uint64_t>(inner)));
}

template <bool Linear, class Op, class B, class Writer, std::size_t R>
void launch_warp_scan(const Op& op, const B& b, const axis_map<R>& m, const inclusive_sink<Writer, Op>& w, index_t rows,
                      index_t len, stream_ref s) {
  const index_t per = warp_scan_rows(len), tasks = (rows + per - 1) / per;
  const index_t want = (tasks + warp_scan_block / 32 - 1) / (warp_scan_block / 32);
  launch_kernel(warp_scan_kernel<Linear, Op, B, Writer, R>, grid_size(want, 2048 / warp_scan_block, s.device()),
                warp_scan_block, 0, s.get(), w, op, b, m, rows, len, fast_divmod(static_cast<std::uint64_t>(len)));
}

template <bool Linear, class Tiles, class Op, class B, class Writer, std::size_t R>
void device_scan(const Op& op, const B& b, const axis_map<R>& m, const inclusive_sink<Writer, Op>& w, index_t rows,
                 index_t len, stream_ref s) {
  // Rows too few for a block each to fill the GPU (fewer than 8 per SM)
  // take the look-back, whose tiles spread every row over the whole GPU;
  // a single row of an exact operation takes cub::DeviceScan instead.
  const index_t cap = static_cast<index_t>(sm_count(s.device())) * 32;
  if constexpr (!is_floating_v<typename Op::acc>) {
    if (rows == 1) {
      auto in = thrust::make_transform_iterator(thrust::counting_iterator<index_t>(0),
                                                lift_scan_item<Op, B, Linear, R>{op, b, m});
      auto out = thrust::make_tabulate_output_iterator(shifted_writer<Writer, Op>{w, 0, 0, len});
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
    launch_kernel(row_tile_scan_kernel<256, Linear, Op, B, Writer, R>, grid_size(rows, 32, s.device()), 256, 0, s.get(),
                  w, op, b, m, rows, len);
  else
    launch_warp_scan<Linear>(op, b, m, w, rows, len, s);
}

//! Scans axis `axis` of the bound expression `b` (extents `ext`, in the
//! order of `m`, `linear` when that is b's linear order) into `sink`: rows
//! along the map's last axis, or, for a contiguous input scanned along an
//! axis that is not its last, lines across rows.
template <class Tiles, class Op, class B, class Writer, std::size_t R>
void device_scan_axis(const Op& op, const B& b, const axis_map<R>& m, const inclusive_sink<Writer, Op>& sink,
                      const bind_info& info, bool linear, const shape<R>& ext, std::size_t axis, index_t rows,
                      index_t len, stream_ref s) {
  index_t inner = 1;
  for (std::size_t d = axis + 1; d < R; ++d) inner *= ext[d];
  if (linear)
    device_scan<true, Tiles>(op, b, m, sink, rows, len, s);
  else if (info.contiguous && inner > 1)
    device_cross_scan(op, b, sink, rows, len, inner, s);
  else
    device_scan<false, Tiles>(op, b, m, sink, rows, len, s);
}
#endif
}  // namespace loom::detail::scan
