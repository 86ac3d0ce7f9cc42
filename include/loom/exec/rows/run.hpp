// SPDX-License-Identifier: Apache-2.0
#pragma once

// The rows executor's runner: one kernel for an assignment whose tree holds
// row reductions, on the host or the device; and assign_pair (two outputs,
// one kernel).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/exec/assign.hpp"
#include "loom/exec/checks.hpp"
#include "loom/exec/eval_info.hpp"
#include "loom/exec/rows/cuda.hpp"
#include "loom/exec/rows/host.hpp"
#include "loom/exec/rows/plan.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/expr/shared_rows.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail {
namespace rows {
// The rows path on the host: rows in parallel, each row's reductions, then
// its output pass (host_row), over tree `b` with its per-row values wrapped.
template <class Sink, class B, std::size_t RO>
void run_rows_host(const Sink& sink, B b, const row_layout<RO>& lay, const row_passes_plan& passes,
                   eval_info& info) {
  using A = std::conditional_t<uses_double<B>, double, float>;
  const std::uint64_t reuse = passes.reuse;
  info.threads_per_row = 1;
  info.per_row_values = per_row_value_count<B>;
  const bool dense = host_rows_dense(b, lay.cols);
  const bool dense_out = dense && sink.host_vector_ok();
  // Dense rows are read in place by pointer; the cache holds computed values
  // (and the rows of operands read through coordinates).
  const auto plan = plan_row_chip<RO>(b, lay.cols, lay.rows, reuse, 1, row_cache_budget(), !dense);
  info.cached_rows = plan.rows;
  info.cached_values = plan.values;
  info.recomputed_values = plan.values_recomputed;
  using ctx_t = row_ctx<slots_of<B>, A>;
  auto one = [&](const B& bc, const index_t* idx, const index_t* lead, index_t c, const ctx_t& ctx) {
    sink.one(bc, idx, lead, c, ctx);
  };
  auto vec = [&](const B& bc, const index_t* lead, index_t c0, const ctx_t& ctx) {
    sink.template vec<host_lanes>(bc, lead, c0, ctx);
  };
  host_for_each(
      lay.rows,
      [&](index_t row) {
        if (dense_out)
          host_row<A>(b, plan, lay, row, reuse, dense, one, vec);
        else
          host_row<A>(b, plan, lay, row, reuse, dense, one);
      },
      lay.cols * static_cast<index_t>(slots_of<B> + 1));
}

// Runs the rows path for a bound tree and a sink over the output layout.
// The tree runs with its shareable subtrees wrapped (keep_values), each
// computed once per row where the cache holds it (plan_row_chip), and on
// the host with its per-row values computed once per row (per_row.hpp).
template <class S, class Sink, class B0, std::size_t RO>
eval_info run_rows(const Sink& sink, const B0& b0, const row_layout<RO>& lay, bool sink_vector_ok) {
  eval_info info;
  info.path = eval_path::rows;
  info.on_device = std::is_same_v<S, device>;
  if constexpr (std::is_same_v<S, host>) {
    (void)sink_vector_ok;
    const auto b = keep_values<RO, host_max_kept_tree_leaves>(b0);
    const row_passes_plan passes = plan_row_passes(b, lay.cols);
    info.row_passes = passes.passes;
    run_rows_host(sink, wrap_row_values(b), lay, passes, info);
  } else {
#if LOOM_CUDA_COMPILER
    using B = decltype(keep_values<RO>(b0));
    B b = keep_values<RO>(b0);
    const row_passes_plan passes = plan_row_passes(b, lay.cols);
    info.row_passes = passes.passes;
    using A = std::conditional_t<uses_double<B>, double, float>;
    const std::uint64_t reuse = passes.reuse;
    constexpr int vector_width = row_vector_width<B, Sink::smallest>();
    const int threads_per_row = passes.threads_per_row;
    const stream_ref s = current_stream();
    const index_t groups = 256 / threads_per_row;
    const std::size_t budget = std::min(row_cache_budget(), smem_per_block(s.device()));
    // Whether the cache is on never changes the vector form (it would change
    // each lane's order of summation, hence the bits of the results): it is
    // taken from the tree before the cache's plan.
    const bool vec = sink_vector_ok && rows_vector_ok<vector_width>(b, lay.cols);
    const auto plan = plan_row_chip<RO>(b, lay.cols, lay.rows, reuse, static_cast<std::size_t>(groups), budget);
    const std::size_t smem = plan.on ? static_cast<std::size_t>(groups) * plan.group_bytes : 0;
    const index_t want = (lay.rows + groups - 1) / groups;
    const unsigned grid = grid_size(want, threads_per_row == 32 ? 8 : 4, s.device());
    info.threads_per_row = threads_per_row;
    info.vector_width = vec ? vector_width : 1;
    info.cached_rows = plan.rows;
    info.cached_values = plan.values;
    info.recomputed_values = plan.values_recomputed;
    if (lay.rows > 0) {
      auto kernel = vec ? row_kernel<vector_width, true, A, RO, Sink, B, leaf_count<B>>
                        : row_kernel<vector_width, false, A, RO, Sink, B, leaf_count<B>>;
      launch_row_kernel(kernel, grid, 256, smem, s.get(), sink, b, lay, threads_per_row, reuse, plan);
    }
#else
    (void)sink;
    (void)b0;
    (void)lay;
    (void)sink_vector_ok;
#endif
  }
  return info;
}

}  // namespace rows

template <class O, std::size_t RO, class S, class N>
eval_info row_assign_impl(const view<O, RO, S>& out, const N& e) {
  static_assert(RO >= 1, "loom: row reductions need an output of rank 1 or more");
  bind_info bi;
  const auto b = bind_root(e, out, bi);
  const rows::row_sink1<O, RO> sink{{out.data(), out.strides()}};
  return rows::run_rows<S>(sink, b, rows::layout_of(out), rows::sink_vector_ok(out));
}
}  // namespace loom::detail

namespace loom {
namespace fn {
//! The first of its arguments: the root of a two-output row assignment.
struct first_of {
  template <class T>
  LOOM_HD T operator()(T a, T) const {
    return a;
  }
};
}  // namespace fn

namespace detail::rows {
// assign_pair and assign_with_row_stat: two outputs written by one row
// kernel; PerRow: the second output is [..., 1], stored once per row.
template <bool PerRow, class O1, class E1, class O2, class E2>
eval_info assign_two(O1&& out1, const E1& e1, O2&& out2, const E2& e2, const char* api) {
  const auto v1 = detail::as_view(out1);
  const auto v2 = detail::as_view(out2);
  using V1 = decltype(v1);
  using V2 = decltype(v2);
  using S = typename V1::space;
  constexpr std::size_t RO = V1::rank;
  static_assert(std::is_same_v<S, typename V2::space> && RO == V2::rank,
                "loom: assign_pair and assign_with_row_stat need two outputs of the same rank in the same memory "
                "space");
  static_assert(RO >= 1, "loom: assign_pair and assign_with_row_stat need outputs of rank 1 or more");
  static_assert(!std::is_const_v<typename V1::element_type> && !std::is_const_v<typename V2::element_type>,
                "loom: cannot assign to a view of const elements");
  detail::require_cuda_compiler_for<S>();
  using N1 = detail::node_t<E1>;
  using N2 = detail::node_t<E2>;
  static_assert((std::is_void_v<typename N1::space> || std::is_same_v<typename N1::space, S>) &&
                    (std::is_void_v<typename N2::space> || std::is_same_v<typename N2::space, S>),
                "loom: an expression lives in another memory space than the outputs; copy it with loom::to_device(x) "
                "or loom::to_host(x)");
  auto want2 = v1.extents();
  if constexpr (PerRow) want2[RO - 1] = 1;
  if (v2.extents() != want2)
    throw shape_error(
        std::string("loom: ") + api + " needs " +
        (PerRow ? "a second output of the first's shape with a last extent of 1 (" + shape_string(want2) + ")"
                : std::string("outputs of one shape")) +
        ", got " + shape_string(v1.extents()) + " and " + shape_string(v2.extents()));
  if (may_overlap(v1, v2)) throw aliasing_error(std::string("loom: the two outputs of ") + api + " overlap");
  const map_node<fn::first_of, N1, N2> both(fn::first_of{}, detail::as_node(e1), detail::as_node(e2));
  detail::check_assignable(v1, detail::get<0>(both.children));
  detail::check_assignable(v2, detail::get<1>(both.children));
  if constexpr (std::is_same_v<S, device>) detail::check_devices(both, v1, v2);
  eval_info info;
  info.on_device = std::is_same_v<S, device>;
  if (v1.size() == 0) return detail::last_eval_slot() = info;
  // Binding against the first output checks every input against it; the
  // second output is checked here.
  detail::for_each_leaf(both, [&](const auto& leaf) {
    if (!may_overlap(leaf.v, v2)) return;
    bool same = false;
    try {
      same = detail::same_index_map(leaf.v.broadcast_to(v2.extents()), v2);
    } catch (const shape_error&) {
    }
    if (!same)
      throw aliasing_error(std::string("loom: the second output of ") + api + " (shape " + shape_string(v2.extents()) +
                           ") overlaps an input under a different index map; evaluate into a new tensor first");
  });
  detail::bind_info bi;
  const auto b = detail::bind_root(both, v1, bi);
  using sink_t = row_sink2<typename V1::value_type, typename V2::value_type, RO, PerRow>;
  const sink_t sink{{v1.data(), v1.strides()}, {v2.data(), v2.strides()}};
  return detail::last_eval_slot() =
             run_rows<S>(sink, b, layout_of(v1), sink_vector_ok(v1) && (PerRow || sink_vector_ok(v2)));
}
}  // namespace detail::rows

//! Evaluates two expressions into two outputs of one shape in ONE kernel:
//! row reductions are computed once per row for both, and each element of
//! both outputs is computed before either is stored. For example a residual
//! add that also writes its sum: `assign_pair(h, x + r, y, rms_norm(x + r, w))`.
//! The outputs must not overlap each other; an output may be an input under
//! the same index map.
template <tensor_like O1, operand E1, tensor_like O2, operand E2>
eval_info assign_pair(O1&& out1, const E1& e1, O2&& out2, const E2& e2) {
  return detail::rows::assign_two<false>(out1, e1, out2, e2, "assign_pair");
}

//! Evaluates `e` into `out` and a per-row expression `stat_e` (shape
//! [..., 1], such as a row statistic) into `stat` (out's shape with a last
//! extent of 1) in ONE row kernel; row reductions used by both are computed
//! once per row. For example a per-row fp8 quantization that writes its
//! scales: `assign_with_row_stat(q, quantize<e4m3>(x, s), scale, s)` with
//! `s = row_scale<e4m3>(x)`. The outputs must not overlap each other.
template <tensor_like O1, operand E1, tensor_like O2, operand E2>
eval_info assign_with_row_stat(O1&& out, const E1& e, O2&& stat, const E2& stat_e) {
  return detail::rows::assign_two<true>(out, e, stat, stat_e, "assign_with_row_stat");
}
}  // namespace loom
