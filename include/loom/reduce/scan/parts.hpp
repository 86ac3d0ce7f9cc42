// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/config.hpp"
#include "loom/core/shape.hpp"
#include "loom/detail/fast_divmod.hpp"
#include "loom/reduce/plan.hpp"

// The per-thread parts of the scan kernels for rows of up to 1024 elements
// (warp_scan_kernel) and across rows (cross_scan_kernel,
// cross_lookback_kernel): the kernels call these LOOM_HD functions, and the
// host tests replay the kernels with them.
namespace loom::detail::scan {
using reduce::axis_map;
using reduce::read_at;

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
// 128 threads per row would leave 112 of them idle on rows of 16.) The parts
// are LOOM_HD: the host tests replay the kernel with them.
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

}  // namespace loom::detail::scan
