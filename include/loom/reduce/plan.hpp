// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/detail/fast_divmod.hpp"
#include "loom/exec/assign.hpp"
#include "loom/expr/expression.hpp"

// How a reduction or a scan walks an expression, decided on the host: the
// order of its elements (axis_map), the outputs and their ranges
// (reduce_layout), and on the device the thread mapping of an axis
// reduction (axis_plan) and whether CUB reads a plain tensor by pointer.
namespace loom::detail::reduce {

//! The checks every reduction, scan and sort makes of its expression at
//! compile time.
template <class Node>
constexpr void check_reducible() {
  static_assert(!std::is_void_v<typename Node::space>,
                "loom: a reduction needs an expression over at least one tensor, not only scalars");
  static_assert(!std::is_same_v<typename Node::space, mixed_space>,
                "loom: an expression mixes host and device tensors; copy one side first with loom::to_device(x) or "
                "loom::to_host(x)");
}

//! Which axes of a rank-R expression are reduced; throws index_error for an
//! axis out of range or given twice.
template <std::size_t R, std::size_t K>
std::array<bool, R> reduced_axes(const std::array<int, K>& axes, const char* name) {
  std::array<bool, R> red{};
  for (std::size_t i = 0; i != K; ++i) {
    const std::size_t a = normalize_axis<R>(axes[i]);
    if (red[a])
      throw index_error(std::string("loom: ") + name + "() got axis " + std::to_string(axes[i]) +
                        " twice (expected distinct axes)");
    red[a] = true;
  }
  return red;
}

//! The walk order of a reduction over the axes `red` of extents `ext`: the
//! kept axes, then the reduced ones; the number of outputs and the elements
//! of each (`k`).
template <std::size_t R>
struct reduce_layout {
  std::array<std::size_t, R> order{};
  index_t outputs = 1, k = 1;
};
template <std::size_t R>
reduce_layout<R> layout_of(const shape<R>& ext, const std::array<bool, R>& red) {
  reduce_layout<R> l;
  std::size_t p = 0;
  for (std::size_t d = 0; d != R; ++d)
    if (!red[d]) {
      l.order[p++] = d;
      l.outputs *= ext[d];
    }
  for (std::size_t d = 0; d != R; ++d)
    if (red[d]) {
      l.order[p++] = d;
      l.k *= ext[d];
    }
  return l;
}

//! The extents of a reduction's result: the kept axes of `ext`, and with
//! Keep the reduced ones too, as extent 1.
template <std::size_t out_rank, bool Keep, std::size_t R>
shape<out_rank> output_shape(const shape<R>& ext, const std::array<bool, R>& red) {
  shape<out_rank> out{};
  if constexpr (out_rank > 0) {
    std::size_t o = 0;
    for (std::size_t d = 0; d != R; ++d)
      if (!red[d] || Keep) out[o++] = red[d] ? 1 : ext[d];
  }
  return out;
}

// ---------------------------------------------------------------------------
// Index maps. A reduction or scan walks the expression's elements in a
// permuted row-major order: the kept (or row) axes first, then the reduced
// (or scanned) axes. axis_map turns a position j in that order into the
// coordinates of the expression.

template <std::size_t R>
struct axis_map {
  fast_divmod div[R > 0 ? R : 1];
  std::uint8_t axis[R > 0 ? R : 1];  // permuted position -> axis of the expression

  LOOM_HD void coords(index_t j, index_t* idx) const {
    std::uint64_t rest = static_cast<std::uint64_t>(j);
    for (std::size_t p = R; p-- > 0;) {
      std::uint64_t q, r;
      div[p].divmod(rest, q, r);
      idx[axis[p]] = static_cast<index_t>(r);
      rest = q;
    }
  }
};

//! Builds the map for `order` (a permutation of the axes) over `ext`, and says
//! whether that order is the plain row-major order (axes of extent 1 aside),
//! in which case position j is linear index j.
template <std::size_t R>
axis_map<R> make_axis_map(const shape<R>& ext, const std::array<std::size_t, R>& order, bool& row_major) {
  axis_map<R> m{};
  row_major = true;
  std::size_t last = 0;
  bool any = false;
  for (std::size_t p = 0; p != R; ++p) {
    const std::size_t a = order[p];
    m.axis[p] = static_cast<std::uint8_t>(a);
    m.div[p] = fast_divmod(static_cast<std::uint64_t>(ext[a] > 0 ? ext[a] : 1));
    if (ext[a] == 1) continue;
    if (any && a < last) row_major = false;
    last = a;
    any = true;
  }
  return m;
}

//! The value of element j (in the map's order) of a bound expression.
template <bool Linear, class B, std::size_t R>
LOOM_HD auto read_at(const B& b, const axis_map<R>& m, index_t j) {
  if constexpr (Linear) {
    return b.at_linear(j);
  } else {
    index_t idx[R > 0 ? R : 1] = {};
    m.coords(j, idx);
    return b.at(idx);
  }
}

// ---------------------------------------------------------------------------
// Axis reductions on the device: one kernel (two when the ranges are split
// into chunks), in one of two thread mappings chosen at run time.
//
//  - Along rows, when the reduced range is innermost (the expression's last
//    axis of extent > 1 is reduced): B threads per output, a block of
//    axis_block threads (then cub::BlockReduce), or for rows of at most
//    warp_row_max elements a warp (then cub::WarpReduce; a block's warps
//    take neighbouring outputs, so its loads for several rows are in flight
//    at once, where a block per short row would have only a few), for rows of at
//    most thread_row_max elements one thread (a block's threads take 128
//    neighbouring rows, where a warp per row of 4 would keep 31 lanes idle). On the
//    contiguous, 16-byte-aligned path thread t combines the row's unaligned
//    head elements t, t + B, ..., then the 16-byte vectors t, t + B, ... (V
//    elements each, left to right), then tail elements t, t + B, ...
//    (B >= V: at most one head and one tail element; B == 1: all of them);
//    otherwise elements t, t + B, t + 2B, ... Rows too few to fill the GPU
//    are cut into `splits` fixed chunks, a block per chunk (a second kernel
//    combines each row's chunks in order).
//  - Across rows, when the last axis of extent > 1 is kept (`sum(x, 0)`):
//    a block takes 32 consecutive outputs, one per thread of a warp, so a
//    warp's loads are consecutive in memory; its cross_lanes warps split the
//    range (lane l combines j = lo + l, lo + l + L, ...), and lane 0 combines
//    the lanes in order. When the outputs are too few to fill the GPU, the
//    range is also split into `splits` fixed chunks (a second kernel
//    combines the chunks' partial results in order).
//
// The per-thread shares (reduce/shares.hpp) are LOOM_HD functions: the host
// tests replay a kernel's plan with them, so which thread reads which element
// is checked without a GPU.

inline constexpr int axis_block = 128;                     // threads per block
inline constexpr int cross_outputs = 32;                   // outputs per block across rows
inline constexpr int cross_lanes = axis_block / cross_outputs;
inline constexpr index_t cross_min_per_lane = 16;          // elements per lane and chunk, at least
inline constexpr index_t row_min_chunk = 64 * axis_block;  // elements per block and chunk along rows, at least
inline constexpr index_t warp_row_max = 1024;              // rows up to this length: a warp per output
inline constexpr index_t thread_row_max = 32;              // rows up to this length: a thread per output

//! How an axis reduction runs on the device (decided on the host).
struct axis_plan {
  bool linear = false;  // contiguous: element (o, j) at o * k + j along rows, line_base(o, inner, k) + j * inner across
  bool vec = false;     // along rows and linear: 16-byte vector loads (every leaf 16-byte aligned)
  bool cross = false;   // across rows (32 outputs per block) instead of along rows (one output per block or warp)
  int row_threads = 0;  // along rows: threads per output, axis_block, 32 (a warp) or 1; 0 across rows
  index_t splits = 1;   // chunks of the reduced range, each a partial result
  index_t chunk = 0;    // elements of the range per chunk (the last may have fewer)
  fast_divmod inner{};  // across rows and linear: the elements of the axes after the reduced ones
};

//! The plan for reducing the axes `red` of an expression of extents `ext`
//! bound with `contiguous`/`aligned` leaves (`outputs` results of `k`
//! elements), on a device of `sms` multiprocessors.
template <std::size_t R>
axis_plan plan_axis_reduce(const shape<R>& ext, const std::array<bool, R>& red, bool contiguous, bool aligned,
                           index_t outputs, index_t k, int sms) {
  axis_plan p;
  // The axes of extent > 1 in order: "kept* reduced*" makes (o, j) linear
  // along rows; "kept* reduced* kept*" (one run of reduced axes) across rows.
  bool seen_red = false, kept_after_red = false;
  int red_runs = 0;
  index_t inner = 1;  // the elements of the axes after the last reduced one
  for (std::size_t d = 0; d != R; ++d) {
    if (ext[d] == 1) continue;
    if (red[d]) {
      red_runs += seen_red && !kept_after_red ? 0 : 1;
      seen_red = true;
      kept_after_red = false;
      inner = 1;
    } else {
      kept_after_red = kept_after_red || seen_red;
      inner *= ext[d];
    }
  }
  bool last_kept = false;
  for (std::size_t d = R; d-- > 0;)
    if (ext[d] != 1) {
      last_kept = !red[d];
      break;
    }
  p.cross = last_kept;
  p.linear = contiguous && red_runs <= 1;
  p.vec = !p.cross && p.linear && aligned;
  p.inner = fast_divmod(static_cast<std::uint64_t>(p.cross ? inner : 1));
  // Enough blocks for 16 per SM (a full GPU of 128-thread blocks): the range
  // in chunks when the outputs alone give fewer, each lane combining at least
  // cross_min_per_lane elements of its chunk (across rows), each block at
  // least row_min_chunk (along rows; chunks a multiple of 16 elements, so all
  // the chunks of a row share its alignment).
  const index_t blocks = p.cross ? (outputs + cross_outputs - 1) / cross_outputs : outputs;
  const index_t want = (static_cast<index_t>(sms > 0 ? sms : 1) * 16 + blocks - 1) / blocks;
  const index_t most = std::max<index_t>(1, k / (p.cross ? cross_lanes * cross_min_per_lane : row_min_chunk));
  const index_t splits = std::clamp<index_t>(want, 1, std::min<index_t>(most, 65535));
  p.chunk = (k + splits - 1) / splits;
  if (!p.cross && splits > 1) p.chunk = (p.chunk + 15) / 16 * 16;
  p.splits = k > 0 ? (k + p.chunk - 1) / p.chunk : 1;
  p.chunk = p.splits > 1 ? p.chunk : k;
  if (!p.cross)
    p.row_threads = p.splits > 1 ? axis_block : (k <= thread_row_max ? 1 : (k <= warp_row_max ? 32 : axis_block));
  return p;
}

//! Linear offset of element 0 of line o of a contiguous expression whose
//! lines (reduced or scanned ranges) of `len` elements are followed by
//! `inner` elements: line o starts at (o / inner) * len * inner + o % inner,
//! and its elements are `inner` apart.
LOOM_HD index_t line_base(index_t o, const fast_divmod& inner, index_t len) {
  std::uint64_t q, r;
  inner.divmod(static_cast<std::uint64_t>(o), q, r);
  return static_cast<index_t>(q) * len * static_cast<index_t>(inner.d) + static_cast<index_t>(r);
}


// A whole tensor of a 4- or 8-byte arithmetic type, contiguous, reduced by
// an op whose lift does not use the element's position (every reduction but
// argmax/argmin): CUB is handed the tensor's pointer, so it runs its own
// vectorized pointer kernel, the kernel a direct cub::DeviceReduce call runs
// (CUB checks the pointer's alignment itself). Fused expressions, 1- and
// 2-byte types (whose CUB pointer loads would be narrower than 16 bytes)
// and argmax/argmin take lift_items.
//
// The accumulator must divide 16 bytes: CUB scales its items per thread by
// the accumulator's size (64 bytes of accumulators per thread on sm_90) and
// clamps its vector length to them, but loads its vector type of the
// unclamped length, 4 elements. With fewer than 4 items per thread (var of
// double: a 24-byte accumulator, 2 items) a thread would load 4 elements
// into 2 items' storage and the last thread of a tile would read past it;
// such ops take lift_items.
template <class Op, class Node>
inline constexpr bool reduces_by_pointer = false;
template <class Op, class T, std::size_t R, class S, class Tag>
inline constexpr bool reduces_by_pointer<Op, leaf_node<T, R, S, Tag>> =
    std::is_arithmetic_v<std::remove_const_t<T>> && !std::is_same_v<std::remove_const_t<T>, bool> &&
    sizeof(T) >= 4 && !requires { Op::positional; } && sizeof(typename Op::acc) <= 16 &&
    16 % sizeof(typename Op::acc) == 0;
}  // namespace loom::detail::reduce
