// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/exec/assign.hpp"
#include "loom/exec/eval_info.hpp"
#include "loom/exec/rows/cuda.hpp"
#include "loom/exec/rows/host.hpp"
#include "loom/exec/rows/plan.hpp"
#include "loom/exec/rows/run.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/expr/shared_rows.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

// A rows assignment that also sums extra expressions over the rows (column
// sums), deterministically and without atomics, in two kernels:
//
//  1. one row kernel that writes the output and, for a fixed set of
//     consecutive rows per thread block, accumulates per-column partial sums
//     of K extra expressions (evaluated at the same elements, sharing the
//     output's row reductions) into a pool temporary `partials` [P, K, C];
//  2. one row reduction over the transposed partials ([C, P] per extra)
//     that writes the K sums (assign_pair when K == 2).
//
// Block p of P always takes rows [p * rows_per_block, (p + 1) * rows_per_block)
// and sums them in a fixed order, so a result depends only on the data, the
// shape and the grid (P: the device's SM count times the blocks of the kernel
// that fit on an SM beside the accumulators' shared memory, whatever the row
// cache's budget), never on timing.
namespace loom {
//! Where a rows-with-column-sums evaluation kept its per-column accumulators.
enum class column_partials : std::uint8_t {
  none,           //!< no row kernel ran (no rows or no columns)
  host,           //!< host executor: in the block's row of the partials tensor
  shared_memory,  //!< device: in shared memory, one copy per warp (or block) of a thread block
  global_memory,  //!< device: rows too long for shared memory; in the block's row of the partials tensor
};

//! What the last rows-with-column-sums evaluation of the calling thread did
//! (layer_norm_backward, rms_norm_backward).
struct column_sums_info {
  eval_info rows;                                    //!< the row kernel (threads per row, vector width, row passes)
  int kernels = 0;                                   //!< launches: 2 (1 without rows, 0 without columns)
  index_t blocks = 0;                                //!< P: blocks of consecutive rows, one partial row [K, C] each
  index_t rows_per_block = 0;                        //!< rows of each block (the last may have fewer)
  column_partials partials = column_partials::none;  //!< where the block's accumulators lived
};

//! The calling thread's last rows-with-column-sums evaluation: kernels, the
//! number of row blocks (partial rows) and where the accumulators lived. O(1).
//! Example: `auto g = loom::rms_norm_backward(x, w, dy); assert(loom::last_column_sums().kernels == 2);`
inline column_sums_info last_column_sums() { return detail::last_slot<column_sums_info>(); }

namespace detail {
namespace rows {
// The root of the bound tree: child 0 is the output, children 1..K the extras.
struct colsum_root {
  template <class T, class... U>
  LOOM_HD T operator()(T a, U...) const {
    return a;
  }
};

// Host: blocks of at least 8 rows where N allows, at most 64 blocks (the
// partials tensor stays small). The device picks its own split from its
// occupancy, so the host's column sums are not bitwise the device's; each
// executor is deterministic run to run.
inline constexpr index_t host_colsum_rows = 8;
inline constexpr index_t host_colsum_max_blocks = 64;

struct colsum_plan {
  index_t blocks = 0;
  index_t rows_per_block = 0;
};

// Consecutive rows per block: about `per_block` rows per block (fewer blocks
// when N is small), at most `cap` blocks, and no empty block.
inline colsum_plan plan_colsum(index_t rows, index_t per_block, index_t cap) {
  if (rows <= 0) return {};
  const index_t want = std::min((rows + per_block - 1) / per_block, cap > 0 ? cap : 1);
  const index_t per = (rows + want - 1) / want;
  return {(rows + per - 1) / per, per};
}

// Evaluates output and extras at one element (`one`) or vector_width elements (`vec`),
// adds extra k into acc[k * cols + column], then stores the output (unless
// `store` is false: only the column sums are wanted, and the output's own
// values are not computed).
template <class O, std::size_t R, std::size_t K>
struct colsum_sink {
  row_out<O, R> o;
  bool store = true;

  template <class A, class B, class Ctx>
  LOOM_HD void one(const B& b, const index_t* idx, const index_t* lead, index_t c, const Ctx& ctx, A* acc,
                   index_t cols) const {
    if (store) {
      const O v = convert<O>(detail::get<0>(b.ch).at(idx, ctx));
      add_one(b, idx, c, ctx, acc, cols, std::make_index_sequence<K>{});
      o.p[o.offset(lead, c)] = v;
    } else {
      add_one(b, idx, c, ctx, acc, cols, std::make_index_sequence<K>{});
    }
  }
  template <int vector_width, class A, class B, class Ctx>
  LOOM_HD void vec(const B& b, const index_t* lead, index_t c0, const Ctx& ctx, A* acc, index_t cols) const {
    typename B::template regs<vector_width> r;
    b.template row_load<vector_width>(lead, c0, r);
    vec_regs<O, vector_width> v;
    LOOM_UNROLL
    for (int j = 0; j < vector_width; ++j) {
      if (store) v.v[j] = convert<O>(detail::get<0>(b.ch).template elem<vector_width>(detail::get<0>(r.c), j, ctx));
      add_vec<vector_width>(b, r, j, c0, ctx, acc, cols, std::make_index_sequence<K>{});
    }
    if (store) vec_store<O, vector_width>(o.p + o.offset(lead, c0), v);
  }

 private:
  template <class A, class B, class Ctx, std::size_t... I>
  LOOM_HD static void add_one(const B& b, const index_t* idx, index_t c, const Ctx& ctx, A* acc, index_t cols,
                              std::index_sequence<I...>) {
    ((acc[static_cast<index_t>(I) * cols + c] += static_cast<A>(detail::get<I + 1>(b.ch).at(idx, ctx))), ...);
  }
  template <int vector_width, class A, class B, class Regs, class Ctx, std::size_t... I>
  LOOM_HD static void add_vec(const B& b, const Regs& r, int j, index_t c0, const Ctx& ctx, A* acc, index_t cols,
                              std::index_sequence<I...>) {
    ((acc[static_cast<index_t>(I) * cols + c0 + j] +=
      static_cast<A>(detail::get<I + 1>(b.ch).template elem<vector_width>(detail::get<I + 1>(r.c), j, ctx))),
     ...);
  }
};

#if LOOM_CUDA_COMPILER
// Block p takes rows [p * per, p * per + per); its groups of threads_per_row threads (a
// warp, or the whole block for long rows) take every groups-th of them. Each
// thread owns fixed columns (the same for every row), so it adds into its
// group's accumulators without races; the groups' copies are then summed in
// order into partials[p]. With in_shared false (one group, rows too long for
// shared memory) the accumulators are partials[p] itself.
// The rows that several passes read are copied into the row cache (after
// the accumulators in shared memory) as in row_kernel.
template <int vector_width, bool vectorized, class A, std::size_t R, std::size_t K, class Sink, class B,
          std::size_t Leaves>
__global__ void __launch_bounds__(256)
    row_colsum_kernel(Sink sink, B b, row_layout<R> lay, int threads_per_row, std::uint64_t reuse, index_t per,
                      A* partials, bool in_shared, __grid_constant__ const row_cache_plan<Leaves, R> cplan,
                      std::size_t acc_bytes) {
  __shared__ A smem[32];
  extern __shared__ __align__(16) unsigned char colsum_smem[];
  const index_t cols = lay.cols;
  const index_t width = static_cast<index_t>(K) * cols;
  const int groups = static_cast<int>(blockDim.x) / threads_per_row;
  const int group = static_cast<int>(threadIdx.x) / threads_per_row;
  const int lane = static_cast<int>(threadIdx.x) % threads_per_row;
  A* const mine = partials + static_cast<index_t>(blockIdx.x) * width;
  A* const base = in_shared ? reinterpret_cast<A*>(colsum_smem) : mine;
#pragma unroll 1
  for (index_t i = static_cast<index_t>(threadIdx.x); i < groups * width; i += static_cast<index_t>(blockDim.x))
    base[i] = A(0);
  __syncthreads();
  A* const acc = base + group * width;
  unsigned char* const cache = colsum_smem + acc_bytes + static_cast<std::size_t>(group) * cplan.group_bytes;
  const index_t first = static_cast<index_t>(blockIdx.x) * per;
  const index_t last = first + per < lay.rows ? first + per : lay.rows;
#pragma unroll 1
  for (index_t row = first + group; row < last; row += groups) {
    index_t lead[R > 1 ? R - 1 : 1];
    lay.lead_of(row, lead);
    B bc = b;
    row_ctx<slots_of<B>, A> ctx;
    device_row_reductions<vector_width, vectorized>(bc, cplan, lead, cache, ctx, lane, threads_per_row, smem, reuse);
    device_row_output<vector_width, vectorized, R>(
        lead, cols, lane, threads_per_row,
        [&](index_t c0) { sink.template vec<vector_width>(bc, lead, c0, ctx, acc, cols); },
        [&](const index_t* idx, index_t c) { sink.one(bc, idx, lead, c, ctx, acc, cols); });
    if (cplan.on) group_sync(threads_per_row);  // the next row's copy overwrites the cache
  }
  if (!in_shared) return;
  __syncthreads();
#pragma unroll 1
  for (index_t i = static_cast<index_t>(threadIdx.x); i < width; i += static_cast<index_t>(blockDim.x)) {
    A s = base[i];
    for (int w = 1; w < groups; ++w) s += base[w * width + i];
    mine[i] = s;
  }
}
#endif

// Kernel 1 on the host: blocks of consecutive rows in parallel, each
// accumulating its partial column sums in its row of `partials`.
template <class A, std::size_t K, class S, class O, std::size_t RO, class B>
void colsum_rows_host(const B& b0, const colsum_sink<O, RO, K>& sink, const row_layout<RO>& lay,
                      const row_passes_plan& passes, tensor<A, 3, S>& partials, column_sums_info& ci, eval_info& info) {
  const auto b = wrap_row_values(b0);  // per-row values once per row (per_row.hpp)
  using BW = std::remove_const_t<decltype(b)>;
  info.per_row_values = per_row_value_count<BW>;
  const std::uint64_t reuse = passes.reuse;
  const index_t cols = lay.cols, width = static_cast<index_t>(K) * cols;
  const colsum_plan plan = plan_colsum(lay.rows, host_colsum_rows, host_colsum_max_blocks);
  partials = tensor<A, 3, S>(shape<3>{plan.blocks, static_cast<index_t>(K), cols});
  info.threads_per_row = 1;
  ci.blocks = plan.blocks;
  ci.rows_per_block = plan.rows_per_block;
  ci.partials = plan.blocks > 0 ? column_partials::host : column_partials::none;
  A* const parts = partials.data();
  const bool dense = host_rows_dense(b, cols);
  // Dense rows are read in place by pointer (run_rows_host).
  const auto cplan = plan_row_cache<RO>(b, cols, lay.rows, reuse, 1, dense ? 0 : row_cache_budget());
  info.cached_rows = cplan.rows;
  host_for_each(
      plan.blocks,
      [&](index_t p) {
        A* const acc = parts + p * width;
        std::fill(acc, acc + width, A(0));
        const index_t first = p * plan.rows_per_block, last = std::min(first + plan.rows_per_block, lay.rows);
        for (index_t row = first; row < last; ++row)
          host_row<A>(b, cplan, lay, row, reuse, dense,
                      [&](const BW& bc, const index_t* idx, const index_t* lead, index_t c,
                          const row_ctx<slots_of<BW>, A>& ctx) { sink.one(bc, idx, lead, c, ctx, acc, cols); });
      },
      plan.rows_per_block * cols * static_cast<index_t>(slots_of<BW> + 1 + K));
}

#if LOOM_CUDA_COMPILER
// Kernel 1 on the device: one row kernel whose blocks accumulate their
// partial column sums in shared memory (or, for long rows, in `partials`).
template <class A, std::size_t K, class S, class O, std::size_t RO, class B>
void colsum_rows_device(const view<O, RO, S>& out, const B& b, const colsum_sink<O, RO, K>& sink,
                        const row_layout<RO>& lay, const row_passes_plan& passes, tensor<A, 3, S>& partials,
                        column_sums_info& ci, eval_info& info) {
  const std::uint64_t reuse = passes.reuse;
  const index_t cols = lay.cols, width = static_cast<index_t>(K) * cols;
  constexpr int vector_width = row_vector_width<B, sizeof(O)>();
  // As the row kernel: a warp per row for short rows, a block of 256 per row
  // for long ones. Short rows: as many warps per block (up to 8) as the
  // default 48 KiB of shared memory holds copies of the accumulators
  // ([K, C] each, at most 32 KiB). Long rows: one copy, up to the opt-in
  // limit; longer rows accumulate in the partials tensor instead.
  const int threads_per_row = passes.threads_per_row;
  const stream_ref s = current_stream();
  const std::size_t per_block = smem_per_block(s.device());
  const std::size_t copy_bytes = static_cast<std::size_t>(width) * sizeof(A);
  constexpr std::size_t default_smem = std::size_t{48} << 10;
  int groups = 1;
  if (threads_per_row == 32)
    groups = static_cast<int>(std::clamp<std::size_t>(copy_bytes > 0 ? default_smem / copy_bytes : 8, 1, 8));
  const bool in_shared =
      copy_bytes * static_cast<std::size_t>(groups) <= (threads_per_row == 32 ? default_smem : per_block);
  // The row cache takes what the accumulators leave of the budget.
  const std::size_t acc_bytes = in_shared ? (copy_bytes * static_cast<std::size_t>(groups) + 15) / 16 * 16 : 0;
  const std::size_t room = per_block > acc_bytes ? per_block - acc_bytes : 0;
  const auto cplan = plan_row_cache<RO>(b, cols, lay.rows, reuse, static_cast<std::size_t>(groups),
                                        std::min(row_cache_budget(), room));
  const std::size_t smem = acc_bytes + (cplan.on ? static_cast<std::size_t>(groups) * cplan.group_bytes : 0);
  const int threads = threads_per_row == 32 ? 32 * groups : 256;
  const bool vec = row_out_vector_ok(out) && rows_vector_ok<vector_width>(b, cols);  // as run_rows: never by the cache
  constexpr std::size_t Leaves = leaf_count<B>;
  using Sink = colsum_sink<O, RO, K>;
  auto kernel = vec ? row_colsum_kernel<vector_width, true, A, RO, K, Sink, B, Leaves>
                    : row_colsum_kernel<vector_width, false, A, RO, K, Sink, B, Leaves>;
  // About one wave: as many blocks as fit on the SMs at once, which the
  // occupancy calculator gives from the kernel's registers, its threads and
  // the shared memory of its accumulators (the general form uses about 120
  // registers, so two blocks of 256 per SM, not the eight that threads
  // alone would allow); and at least 4 rows per group of threads where N
  // allows. So the partials [P, K, C] stay small next to x and dy. The row
  // cache is left out of the count: P decides which rows each partial sum
  // takes, so it must not change with the cache's budget (with the cache,
  // fewer blocks may fit at once, and the rest run after them).
  if (row_smem_needs_raise(smem))  // before the query: it counts 0 blocks past the limit
    allow_row_smem(reinterpret_cast<const void*>(kernel));
  int per_sm = 0;
  LOOM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, acc_bytes));
  const index_t cap = static_cast<index_t>(sm_count(s.device())) * std::max<index_t>(per_sm, 1);
  const colsum_plan plan = plan_colsum(lay.rows, static_cast<index_t>(groups) * 4, cap);
  partials = tensor<A, 3, S>(shape<3>{plan.blocks, static_cast<index_t>(K), cols});
  info.threads_per_row = threads_per_row;
  info.vector_width = vec ? vector_width : 1;
  info.cached_rows = cplan.rows;
  ci.blocks = plan.blocks;
  ci.rows_per_block = plan.rows_per_block;
  ci.partials = plan.blocks == 0 ? column_partials::none
                                 : (in_shared ? column_partials::shared_memory : column_partials::global_memory);
  if (plan.blocks > 0) {
    launch_row_kernel(kernel, static_cast<unsigned>(plan.blocks), static_cast<unsigned>(threads), smem, s.get(), sink,
                      b, lay, threads_per_row, reuse, plan.rows_per_block, partials.data(), in_shared, cplan,
                      acc_bytes);
  }
}
#endif

// Kernel 1: the output rows and the partial column sums of the K extras,
// partials [P, K, cols] (allocated here, P from the plan).
template <class A, std::size_t K, class S, class O, std::size_t RO, class B>
eval_info run_rows_colsum(bool store, const view<O, RO, S>& out, const B& b, tensor<A, 3, S>& partials,
                          column_sums_info& ci) {
  static_assert(std::is_same_v<A, std::conditional_t<uses_double<B>, double, float>>);
  const row_layout<RO> lay = layout_of(out);
  const colsum_sink<O, RO, K> sink{{out.data(), out.strides()}, store};
  eval_info info;
  info.path = eval_path::rows;
  info.on_device = std::is_same_v<S, device>;
  const row_passes_plan passes = plan_row_passes(b, lay.cols);
  info.row_passes = passes.passes;
  if constexpr (std::is_same_v<S, host>) {
    colsum_rows_host<A, K, S>(b, sink, lay, passes, partials, ci, info);
  } else {
#if LOOM_CUDA_COMPILER
    colsum_rows_device<A, K, S>(out, b, sink, lay, passes, partials, ci, info);
#else
    (void)sink;
#endif
  }
  return info;
}

template <class SumView>
void check_column_sum_output(const SumView& sum, index_t cols) {
  static_assert(SumView::rank == 1, "loom: a column sum is written to a tensor of rank 1");
  static_assert(!std::is_const_v<typename SumView::element_type>, "loom: cannot assign to a view of const elements");
  if (sum.extent(0) != cols)
    throw shape_error("loom: a column sum over rows of length " + std::to_string(cols) + " needs an output of shape [" +
                      std::to_string(cols) + "], got " + shape_string(sum.extents()));
}

}  // namespace rows

// Kernel 1 of a rows assignment with column sums: evaluates `e` into `out`
// (with `store` false, `out` gives only the shape of the rows: its data is
// not touched and may be null, and `e`'s values are not computed, though the
// row reductions it holds are) and sums each of the K
// extra expressions (K = 1 or 2) over the rows into per-block partials
// [P, K, C] (see the top of this file). The extras share the output's row
// reductions: a reduction of the same type over the same data is computed
// once per row. Kernel 2 is the caller's: column_sum_of.
template <class A, class S>
struct column_partial_sums {
  column_sums_info info;
  tensor<A, 3, S> partials;
};
template <class Out, class E, class... X>
auto column_partials(bool store, Out&& out_in, const E& e, const X&... extras) {
  constexpr std::size_t K = sizeof...(X);
  static_assert(K == 1 || K == 2, "loom: a row kernel sums one or two expressions over its rows");
  const auto out = as_view(out_in);
  using VO = decltype(out);
  using S = typename VO::space;
  constexpr std::size_t RO = VO::rank;
  static_assert(RO >= 1 && !std::is_const_v<typename VO::element_type>,
                "loom: assign_with_column_sums writes a tensor of rank 1 or more");
  require_cuda_compiler_for<S>();
  const auto root =
      map_node<rows::colsum_root, node_t<E>, node_t<X>...>(rows::colsum_root{}, as_node(e), as_node(extras)...);
  static_assert(std::is_same_v<typename decltype(root)::space, S>,
                "loom: the expressions must live in the output's memory space (loom::to_device, loom::to_host)");
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (check_assignable(out, detail::get<I>(root.children)), ...);
  }(std::make_index_sequence<K + 1>{});
  if constexpr (std::is_same_v<S, device>) check_devices(root, out);

  bind_info bi;
  const auto b = bind_root(root, out, bi);
  using A = std::conditional_t<uses_double<std::remove_const_t<decltype(b)>>, double, float>;
  column_partial_sums<A, S> r{{}, tensor<A, 3, S>(shape<3>{0, static_cast<index_t>(K), out.extent(RO - 1)})};
  if (out.size() > 0) {
    r.info.rows = rows::run_rows_colsum<A, K>(store, out, b, r.partials, r.info);
    r.info.kernels = 1;
  } else {
    r.info.rows.on_device = std::is_same_v<S, device>;
  }
  return r;
}

// The partial sums of extra k as the rows of a [C, P] view: kernel 2 is their
// row sums, `assign(sum.unsqueeze(1), row_sum(column_sum_of(partials, k)))`.
template <class A, class S>
auto column_sum_of(const tensor<A, 3, S>& partials, index_t k) {
  return partials.view().slice(whole, k, whole).t();
}

// Kernel 2: writes each column sum (a [C] view; one or two) as the row sum
// of its partials ([C, P]: column_sum_of), the pair in one kernel. Returns
// the kernels run: none when C is 0.
template <class A, class S, class Sum0, class... Sum1>
int finish_column_sums(const tensor<A, 3, S>& partials, const Sum0& sum0, const Sum1&... sum1) {
  static_assert(sizeof...(Sum1) <= 1, "loom: a row kernel sums one or two expressions over its rows");
  if (partials.extent(2) == 0) return 0;
  if constexpr (sizeof...(Sum1) == 0)
    assign(sum0.unsqueeze(1), row_sum(column_sum_of(partials, 0)));
  else
    assign_pair(sum0.unsqueeze(1), row_sum(column_sum_of(partials, 0)), sum1.unsqueeze(1)...,
                row_sum(column_sum_of(partials, 1)));
  return 1;
}

// Evaluates `e` into `out` and sum_rows(x_k) into sum_k (k < K, K = 1 or 2,
// each of shape [C] for an output [..., C]) in two kernels; see the top of
// this file and column_partials.
template <class Out, class E, class... SumsAndExtras>
column_sums_info assign_with_column_sums(Out&& out, const E& e, SumsAndExtras&&... se) {
  constexpr std::size_t K = sizeof...(SumsAndExtras) / 2;
  static_assert(sizeof...(SumsAndExtras) % 2 == 0 && (K == 1 || K == 2),
                "loom: assign_with_column_sums takes one or two (sum, expression) pairs");
  const auto args = std::forward_as_tuple(se...);
  const auto sum = [&](auto k) { return as_view(std::get<2 * decltype(k)::value>(args)); };
  const index_t cols = as_view(out).extent(std::remove_cvref_t<decltype(as_view(out))>::rank - 1);
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (rows::check_column_sum_output(sum(std::integral_constant<std::size_t, I>{}), cols), ...);
  }(std::make_index_sequence<K>{});
  auto r = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return column_partials(true, out, e, std::get<2 * I + 1>(args)...);
  }(std::make_index_sequence<K>{});
  r.info.kernels += [&]<std::size_t... I>(std::index_sequence<I...>) {
    return finish_column_sums(r.partials, sum(std::integral_constant<std::size_t, I>{})...);
  }(std::make_index_sequence<K>{});
  last_eval_slot() = r.info.rows;
  return last_slot<column_sums_info>() = r.info;
}
}  // namespace detail
}  // namespace loom
