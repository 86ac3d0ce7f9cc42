// SPDX-License-Identifier: Apache-2.0
#pragma once

// The rows executor on the host: one row at a time (rows in parallel), the
// reductions in the device's passes (levels.hpp), each in the order the
// device's warps use.

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/config.hpp"
#include "loom/core/simd/dispatch.hpp"
#include "loom/exec/elementwise.hpp"
#include "loom/exec/rows/outputs.hpp"
#include "loom/exec/rows/per_row.hpp"
#include "loom/exec/rows/plan.hpp"
#include "loom/exec/rows/precomputed.hpp"
#include "loom/expr/row_nodes.hpp"

namespace loom::detail::rows {
// Columns per step of the host's row loops: the 32 interleaved partial
// results of a reduction (the order the device's warps use), and the
// columns the output pass computes before storing them.
inline constexpr int host_lanes = 32;

// Whether the host's loops may read rows host_lanes columns at a time by
// pointer (row_load, elem): every leaf read along rows of host_lanes columns
// or more is dense along the row or one value per row (last stride 1 or 0).
// Alignment does not matter on the host. Taken from the tree as bound, so
// the row cache never changes it.
template <class B>
bool host_rows_dense(const B& b, index_t cols) {
  bool ok = true;
  visit_row_leaves(b, cols, [&](const auto& leaf, int, index_t len, int) {
    const index_t last = leaf.st[leaf.st.size() - 1];
    if (len >= host_lanes && last != 0 && last != 1) ok = false;
  });
  return ok;
}

// One reduction on the host: 32 interleaved partial results (the order the
// device's warps use), then combined pairwise, so long rows keep float
// accuracy. Dense rows are read 32 columns at a time by pointer, in a loop
// over the partial results that the compiler can vectorize; the other
// columns one at a time. Each partial result takes its columns in ascending
// order either way.
template <class B, class Ctx, std::size_t R, class Reduction>
LOOM_HOST_INLINE inline void host_reduce_slot(const Reduction& red, const index_t* lead, Ctx& ctx, bool dense) {
  using A = typename Reduction::acc;
  const typename Reduction::op op{};
  constexpr int lanes = host_lanes;
  A part[lanes];
  for (int l = 0; l < lanes; ++l) part[l] = op.identity();
  // Local copies of the argument's tree (its kept values' modes constant
  // where they agree: with_kept_modes) and of the row's values: what the
  // loop stores (kept values) cannot alias them, so the compiler keeps them
  // in registers and can vectorize the loop.
  const Ctx x = ctx;
  with_kept_modes(red.arg, [&](const auto& arg) LOOM_HOST_INLINE {
    index_t c = 0;
    if (dense) {
      const index_t full = red.cols / lanes * lanes;
      for (; c < full; c += lanes) {
        typename decltype(red.arg)::template regs<lanes> r;
        arg.template row_load<lanes>(lead, c, r);
        for (int l = 0; l < lanes; ++l) part[l] = op(part[l], op.lift(arg.template elem<lanes>(r, l, x), c + l));
      }
    }
    index_t idx[R];
    for (std::size_t d = 0; d + 1 < R; ++d) idx[d] = lead[d];
    for (; c < red.cols; ++c) {
      idx[R - 1] = c;
      part[c % lanes] = op(part[c % lanes], op.lift(arg.at(idx, x), c));
    }
  });
  for (int w = lanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) part[l] = op(part[l], part[l + w]);
  ctx.v[Reduction::slot] =
      static_cast<typename std::remove_cvref_t<decltype(ctx.v[0])>>(op.finalize(part[0], red.cols));
}

// Runs f(), a row loop of tree B, in a function of its own per instruction
// set (core/simd/dispatch.hpp's simd::call): the wide copies for trees that
// compute math (exec/elementwise.hpp's computes_math), the baseline copy
// alone for the others, memory-bound. Unoptimized builds call f directly
// (no vectorizer runs there: the copies would only add compile time).
template <class B, class F>
LOOM_HOST_INLINE inline void host_rows_call(const F& f) {
#if defined(__OPTIMIZE__)
  simd::call<tree_any_v<B, computes_math>>(loom::simd::host_isa(), f);
#else
  f();
#endif
}

// Host executor: the reductions of slots S..., one pass of the plan
// (levels.hpp), with the per-row values of their passes first
// (per_row.hpp). The host reads dense rows in place, from its own caches:
// it runs the reductions of a pass one after the other, each in its own
// loop over the row and its own function (host_reduce_slot in simd::call,
// a function per instruction set that is never inlined: host_rows_call), which the
// compiler vectorizes at the CPU's width (one loop for several
// reductions, or the loops inlined into one function, ran the derived
// layer-norm backward 6-20% slower; docs/performance.md).
template <class B, class Ctx, std::size_t R, std::size_t... S>
void host_reduce_pass(B& b, const index_t* lead, Ctx& ctx, bool dense, std::index_sequence<S...>) {
  (fill_row_values<R>(b, static_cast<int>(S), lead, ctx), ...);
  (host_rows_call<B>([&] { host_reduce_slot<B, Ctx, R>(slot_node<S>(b), lead, ctx, dense); }), ...);
}

// Host executor: the reductions of level L: the first of each type in one
// pass, then each copy candidate: the result of its identical earlier
// reduction when reused, else a pass of its own.
template <class B, class Ctx, std::size_t R, int L>
void host_reduce_level(B& b, const index_t* lead, Ctx& ctx, std::uint64_t reuse, bool dense) {
  host_reduce_pass<B, Ctx, R>(b, lead, ctx, dense, level_firsts_t<B, L>{});
  [&]<std::size_t... S>(std::index_sequence<S...>) {
    ((((reuse >> S) & 1) ? void(ctx.v[S] = ctx.v[first_same_slot<B, S>()])
                         : host_reduce_pass<B, Ctx, R>(b, lead, ctx, dense, std::index_sequence<S>{})),
     ...);
  }(level_copies_t<B, L>{});
}

template <class B, class Ctx, std::size_t R, int... L>
void host_reduce_all([[maybe_unused]] B& b, [[maybe_unused]] const index_t* lead, [[maybe_unused]] Ctx& ctx,
                     [[maybe_unused]] std::uint64_t reuse, [[maybe_unused]] bool dense,
                     std::integer_sequence<int, L...>) {
  (host_reduce_level<B, Ctx, R, L>(b, lead, ctx, reuse, dense), ...);
}

// Host executor: copies the planned rows of `lead` into `cache`.
template <std::size_t Leaves, std::size_t R>
void host_fill_cache(const row_cache_plan<Leaves, R>& plan, const index_t* lead, unsigned char* cache) {
  for (int j = 0; j < plan.rows; ++j) {
    index_t off = 0;
    for (std::size_t d = 0; d + 1 < R; ++d) off += lead[d] * plan.lead_bytes[j][d];
    std::memcpy(cache + plan.to[j], plan.src[j] + off, static_cast<std::size_t>(plan.bytes[j]));
  }
}

// Host executor, one row: copies the planned rows of `lead` into this
// thread's buffer and rebases `bc` onto them (and its kept values), fills
// the rows of its precomputed values (precomputed.hpp), then computes the
// reductions into ctx, level by level, and the per-row values of each pass
// before it (per_row.hpp), the output pass's last.
template <class B, class Ctx, std::size_t Leaves, std::size_t R>
void host_row_reductions(B& bc, const row_cache_plan<Leaves, R>& plan, const index_t* lead, Ctx& ctx,
                         std::uint64_t reuse, bool dense) {
  if (plan.on) {
    thread_local std::vector<std::max_align_t> cache;
    cache.resize((plan.group_bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
    auto* bytes = reinterpret_cast<unsigned char*>(cache.data());
    host_fill_cache(plan, lead, bytes);
    rebase_leaves(bc, plan, lead, bytes);
  }
  if constexpr (tree_any_v<B, is_bound_precomputed>) {
    std::size_t need = 0;
    visit_if<is_bound_precomputed>(bc, [&](const auto& n) {
      using N = std::remove_cvref_t<decltype(n)>;
      need = std::max(need, n.off + static_cast<std::size_t>(n.len) * sizeof(typename N::compute));
    });
    thread_local std::vector<std::max_align_t> values;
    values.resize((need + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
    host_fill_precomputed<R>(bc, reinterpret_cast<unsigned char*>(values.data()), lead, ctx, dense,
                             [](const auto& f) { host_rows_call<B>(f); });
  }
  host_reduce_all<B, Ctx, R>(bc, lead, ctx, reuse, dense, std::make_integer_sequence<int, slot_levels<B>::count>{});
  fill_row_values<R>(bc, -1, lead, ctx);
}

// Host executor, one whole row: its reductions, then the output pass, bc
// being the tree rebased onto the cached rows: vec(bc, lead, c0, ctx) for
// host_lanes columns at a time when `dense` and vec is not nullptr, then
// one(bc, idx, lead, c, ctx) for each remaining column c.
template <class A, class B, std::size_t Leaves, std::size_t R, class One, class Vec = std::nullptr_t>
void host_row(const B& b, const row_cache_plan<Leaves, R>& plan, const row_layout<R>& lay, index_t row,
              std::uint64_t reuse, bool dense, One&& one, Vec&& vec = nullptr) {
  index_t lead[R > 1 ? R - 1 : 1];
  lay.lead_of(row, lead);
  B bc = b;
  row_ctx<slots_of<B>, A> ctx{};
  host_row_reductions(bc, plan, lead, ctx, reuse, dense);
  // The output pass in the CPU's widest copy (core/simd/dispatch.hpp), over
  // a local copy of the tree (as in host_reduce_slot: the stores cannot
  // alias its state).
  host_rows_call<B>([&] {
    const auto x = ctx;
    with_kept_modes(bc, [&](const B& t) LOOM_HOST_INLINE {
      index_t c = 0;
      if constexpr (!std::is_null_pointer_v<std::remove_cvref_t<Vec>>) {
        if (dense)
          for (; c + host_lanes <= lay.cols; c += host_lanes) vec(t, lead, c, x);
      }
      index_t idx[R];
      for (std::size_t d = 0; d + 1 < R; ++d) idx[d] = lead[d];
      for (; c < lay.cols; ++c) {
        idx[R - 1] = c;
        one(t, idx, lead, c, x);
      }
    });
  });
}

// Host executor, after row `row`'s output pass (host_row): a sink that
// writes rows as sums (outputs.hpp) combines its host_lanes partial sums
// pairwise, as host_reduce_slot does, and stores them.
template <class Sink, std::size_t R>
void host_row_end(Sink& sk, const row_layout<R>& lay, index_t row) {
  if constexpr (sink_sums_rows<Sink>()) {
    using A = typename Sink::acc;
    index_t lead[R > 1 ? R - 1 : 1];
    lay.lead_of(row, lead);
    sk.end_row(lead, true, [](const A* part) {
      A p[host_lanes];
      for (int l = 0; l < host_lanes; ++l) p[l] = part[l];
      for (int w = host_lanes / 2; w > 0; w /= 2)
        for (int l = 0; l < w; ++l) p[l] = p[l] + p[l + w];
      return p[0];
    });
  }
}

}  // namespace loom::detail::rows
