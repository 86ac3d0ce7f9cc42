// SPDX-License-Identifier: Apache-2.0
#pragma once

// The rows executor's runner: one kernel for an assignment whose tree holds
// row reductions, on the host or the device; and assign_pair (two outputs,
// one kernel).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
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
  plan_precomputed(b, lay.cols);
  info.threads_per_row = 1;
  info.per_row_values = per_row_value_count<B>;
  const bool dense = host_rows_dense(b, lay.cols);
  const bool dense_out = dense && sink.host_vector_ok();
  // Dense rows are read in place by pointer; the cache holds computed values
  // (and the rows of operands read through coordinates).
  const auto plan = plan_row_chip<RO>(b, lay.cols, lay.rows, reuse, 1, row_cache_budget(), !dense, true);
  info.cached_rows = plan.rows;
  info.cached_values = plan.values;
  info.recomputed_values = plan.values_recomputed;
  using ctx_t = row_ctx<slots_of<B>, A>;
  host_for_each(
      lay.rows,
      [&](index_t row) {
        Sink sk = sink;  // a sink's row sums start at 0 for each row
        auto one = [&](const B& bc, const index_t* idx, const index_t* lead, index_t c,
                       const ctx_t& ctx) LOOM_HOST_INLINE { sk.one(bc, idx, lead, c, ctx); };
        auto vec = [&](const B& bc, const index_t* lead, index_t c0, const ctx_t& ctx) LOOM_HOST_INLINE {
          sk.template vec<host_lanes>(bc, lead, c0, ctx);
        };
        if (dense_out)
          host_row<A>(b, plan, lay, row, reuse, dense, one, vec);
        else
          host_row<A>(b, plan, lay, row, reuse, dense, one);
        host_row_end(sk, lay, row);
      },
      lay.cols * static_cast<index_t>(slots_of<B> + 1));
}

// Runs the rows path for a bound tree and a sink over the output layout.
// The tree runs with its shareable subtrees wrapped (keep_values), each
// computed once per row where the cache holds it (plan_row_chip), and on
// the host with its per-row values computed once per row (per_row.hpp) and
// its repeated input-only subtrees once per element (precomputed.hpp).
template <class S, class Sink, class B0, std::size_t RO>
eval_info run_rows(const Sink& sink, const B0& b0, const row_layout<RO>& lay, bool sink_vector_ok) {
  eval_info info;
  info.path = eval_path::rows;
  info.on_device = std::is_same_v<S, device>;
  if constexpr (std::is_same_v<S, host>) {
    (void)sink_vector_ok;
    const auto b =
        keep_values<RO, host_max_kept_tree_leaves>(precompute_values<RO, host_max_precomputed_tree_leaves>(b0));
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
//! The first of its arguments: the root of a row assignment with several
//! outputs.
struct first_of {
  template <class T, class... U>
  LOOM_HD T operator()(T a, U...) const {
    return a;
  }
};
}  // namespace fn

namespace detail::rows {
// assign_pair and assign_with_row_stats: several outputs written by one row
// kernel, the first by e1 and output k by ns[k]. PerRow: outputs 2.. are
// [..., 1], stored once per row; else both outputs have one shape.
template <bool PerRow, class V1, class N1, class... V, class... N>
eval_info assign_outputs(const char* api, const V1& v1, const N1& n1, const std::tuple<V...>& vs,
                         const std::tuple<N...>& ns) {
  using S = typename V1::space;
  constexpr std::size_t RO = V1::rank;
  static_assert(((std::is_same_v<S, typename V::space> && RO == V::rank) && ...),
                "loom: assign_pair and assign_with_row_stats need outputs of the same rank in the same memory space");
  static_assert(RO >= 1, "loom: assign_pair and assign_with_row_stats need outputs of rank 1 or more");
  static_assert(!std::is_const_v<typename V1::element_type> && (!std::is_const_v<typename V::element_type> && ...),
                "loom: cannot assign to a view of const elements");
  detail::require_cuda_compiler_for<S>();
  static_assert((std::is_void_v<typename N1::space> || std::is_same_v<typename N1::space, S>) &&
                    ((std::is_void_v<typename N::space> || std::is_same_v<typename N::space, S>) && ...),
                "loom: an expression lives in another memory space than the outputs; copy it with loom::to_device(x) "
                "or loom::to_host(x)");
  auto want = v1.extents();
  if constexpr (PerRow) want[RO - 1] = 1;
  const auto check_one = [&](const auto& v) {
    if (v.extents() != want)
      throw shape_error(std::string("loom: ") + api + " needs " +
                        (PerRow ? "a second output of the first's shape with a last extent of 1 (" +
                                      shape_string(want) + ")"
                                : std::string("outputs of one shape")) +
                        ", got " + shape_string(v1.extents()) + " and " + shape_string(v.extents()));
    if (may_overlap(v1, v)) throw aliasing_error(std::string("loom: two outputs of ") + api + " overlap");
  };
  std::apply([&](const auto&... v) { (check_one(v), ...); }, vs);
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    const auto pair = [&](const auto& a, const auto& b) {
      if (may_overlap(a, b)) throw aliasing_error(std::string("loom: two outputs of ") + api + " overlap");
    };
    const auto later = [&](auto k) {
      ((K > decltype(k)::value ? pair(std::get<decltype(k)::value>(vs), std::get<K>(vs)) : void()), ...);
    };
    (later(std::integral_constant<std::size_t, K>{}), ...);
  }(std::index_sequence_for<V...>{});
  const auto root = std::apply(
      [&](const auto&... n) { return map_node<fn::first_of, N1, N...>(fn::first_of{}, n1, n...); }, ns);
  detail::check_assignable(v1, n1);
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    (detail::check_assignable(std::get<K>(vs), std::get<K>(ns)), ...);
    if constexpr (std::is_same_v<S, device>) detail::check_devices(root, v1, std::get<K>(vs)...);
  }(std::index_sequence_for<V...>{});
  eval_info info;
  info.on_device = std::is_same_v<S, device>;
  if (v1.size() == 0) return detail::last_eval_slot() = info;
  // Binding against the first output checks every input against it; the
  // others are checked here.
  const auto check_inputs = [&](const auto& v) {
    detail::for_each_leaf(root, [&](const auto& leaf) {
      if (!may_overlap(leaf.v, v)) return;
      bool same = false;
      try {
        same = detail::same_index_map(leaf.v.broadcast_to(v.extents()), v);
      } catch (const shape_error&) {
      }
      if (!same)
        throw aliasing_error(std::string("loom: an output of ") + api + " (shape " + shape_string(v.extents()) +
                             ") overlaps an input under a different index map; evaluate into a new tensor first");
    });
  };
  std::apply([&](const auto&... v) { (check_inputs(v), ...); }, vs);
  detail::bind_info bi;
  const auto b = detail::bind_root(root, v1, bi);
  if constexpr (PerRow) {
    using sink_t = row_sink_stats<typename V1::value_type, RO, typename V::value_type...>;
    const sink_t sink = std::apply(
        [&](const auto&... v) {
          return sink_t{{v1.data(), v1.strides()},
                        tuple<row_out<typename V::value_type, RO>...>(
                            row_out<typename V::value_type, RO>{v.data(), v.strides()}...)};
        },
        vs);
    return detail::last_eval_slot() = run_rows<S>(sink, b, layout_of(v1), sink_vector_ok(v1));
  } else {
    static_assert(sizeof...(V) == 1);
    const auto& v2 = std::get<0>(vs);
    using sink_t = row_sink2<typename V1::value_type, typename std::tuple_element_t<0, std::tuple<V...>>::value_type, RO>;
    const sink_t sink{{v1.data(), v1.strides()}, {v2.data(), v2.strides()}};
    return detail::last_eval_slot() = run_rows<S>(sink, b, layout_of(v1), sink_vector_ok(v1) && sink_vector_ok(v2));
  }
}

// The outputs and expressions of assign_with_row_stats' (stat, stat_e) pairs.
template <class Args, std::size_t... K>
auto stat_outputs(const Args& args, std::index_sequence<K...>) {
  return std::make_tuple(detail::as_view(std::get<2 * K>(args))...);
}
template <class Args, std::size_t... K>
auto stat_nodes(const Args& args, std::index_sequence<K...>) {
  return std::make_tuple(detail::as_node(std::get<2 * K + 1>(args))...);
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
  return detail::rows::assign_outputs<false>("assign_pair", detail::as_view(out1), detail::as_node(e1),
                                             std::make_tuple(detail::as_view(out2)),
                                             std::make_tuple(detail::as_node(e2)));
}

//! Evaluates `e` into `out` and per-row expressions (shape [..., 1], such as
//! row statistics) into their outputs (out's shape with a last extent of 1)
//! in ONE row kernel, given as pairs `stat, stat_e, ...`; row reductions
//! used by several are computed once per row. For example a softmax with
//! the max and sum its backward reads (docs/08_gradients.md):
//! `assign_with_row_stats(y, sm(x), m, saved_value<0>(sm)(x), s, saved_value<1>(sm)(x))`.
//! The outputs must not overlap each other.
template <tensor_like O1, operand E1, class... Stats>
  requires(sizeof...(Stats) >= 2 && sizeof...(Stats) % 2 == 0)
eval_info assign_with_row_stats(O1&& out, const E1& e, Stats&&... stats) {
  const auto args = std::forward_as_tuple(stats...);
  constexpr auto pairs = std::make_index_sequence<sizeof...(Stats) / 2>{};
  return detail::rows::assign_outputs<true>("assign_with_row_stats", detail::as_view(out), detail::as_node(e),
                                            detail::rows::stat_outputs(args, pairs),
                                            detail::rows::stat_nodes(args, pairs));
}

//! Evaluates `e` into `out` and a per-row expression `stat_e` (shape
//! [..., 1], such as a row statistic) into `stat` (out's shape with a last
//! extent of 1) in ONE row kernel; row reductions used by both are computed
//! once per row. For example a per-row fp8 quantization that writes its
//! scales: `assign_with_row_stat(q, quantize<e4m3>(x, s), scale, s)` with
//! `s = row_scale<e4m3>(x)`. The outputs must not overlap each other.
template <tensor_like O1, operand E1, tensor_like O2, operand E2>
eval_info assign_with_row_stat(O1&& out, const E1& e, O2&& stat, const E2& stat_e) {
  return detail::rows::assign_outputs<true>("assign_with_row_stat", detail::as_view(out), detail::as_node(e),
                                            std::make_tuple(detail::as_view(stat)),
                                            std::make_tuple(detail::as_node(stat_e)));
}
}  // namespace loom
