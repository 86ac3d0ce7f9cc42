// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/exec/assign.hpp"
#include "loom/expr/expression.hpp"
#include "loom/ops/arithmetic.hpp"  // so that `x - sum(x).item()` needs no other header
#include "loom/core/reduction_ops.hpp"
#include "loom/reduce/plan.hpp"
#include "loom/reduce/scan/cuda.hpp"
#include "loom/reduce/scan/host.hpp"
#include "loom/reduce/scan/lookback.hpp"
#include "loom/reduce/scan/sink.hpp"
#include "loom/tensor/tensor.hpp"

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

namespace detail::scan {
using reduce::axis_map;
using reduce::check_reducible;
using reduce::make_axis_map;

//! Scans axis `axis_in` of `e` with Op: the values, and with Indices the
//! int64 indices as well (values_indices). Tiles cuts and paces the
//! look-back of a few long rows (a policy type such as lookback_tiles).
template <class Op, bool Indices, class Tiles = lookback_tiles, class E>
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
  std::array<std::size_t, R> order{};  // the other axes, then the scanned one
  std::size_t p = 0;
  for (std::size_t d = 0; d != R; ++d)
    if (d != axis) order[p++] = d;
  order[p] = axis;
  const index_t len = ext[axis];
  const index_t total = shape_size(ext);
  tensor<result, R, S> values(ext);
  tensor<std::int64_t, Indices ? R : 0, S> indices;
  if constexpr (Indices) indices = tensor<std::int64_t, R, S>(ext);
  if (total > 0) {
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
      host_scan(op, b, m, sink, linear, total / len, len);
    } else {
#if LOOM_CUDA_COMPILER
      device_scan_axis<Tiles>(op, b, m, sink, info, linear, ext, axis, total / len, len, current_stream());
#endif
    }
  }
  if constexpr (Indices)
    return values_indices<result, R, S>{std::move(values), std::move(indices)};
  else
    return values;
}
}  // namespace detail::scan

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
  return detail::scan::scan_impl<detail::reduce::sum_op<typename detail::node_t<E>::value_type>, false>(e, axis, kind);
}

//! Cumulative product along `axis`; like cumsum (int64 for integers; exclusive starts at 1).
//! Example: `auto p = loom::cumprod(1.0f - x, 1);`
template <expression E>
[[nodiscard]] auto cumprod(const E& e, int axis, scan_kind kind = scan_kind::inclusive) {
  return detail::scan::scan_impl<detail::reduce::prod_op<typename detail::node_t<E>::value_type>, false>(e, axis, kind);
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
  return detail::scan::scan_impl<detail::reduce::cum_extreme_op<typename detail::node_t<E>::value_type, true>, true>(e, axis,
                                                                                                       kind);
}
template <expression E>
[[nodiscard]] auto cummin(const E& e, int axis, scan_kind kind = scan_kind::inclusive) {
  return detail::scan::scan_impl<detail::reduce::cum_extreme_op<typename detail::node_t<E>::value_type, false>, true>(e, axis,
                                                                                                        kind);
}
}  // namespace loom
