// SPDX-License-Identifier: Apache-2.0
#pragma once

// Precomputed values on the host. A subtree of a row kernel's tree that
// reads only the rows of its inputs (no row reduction under it) and occurs
// two or more times in the tree, in any passes, is computed once per
// element: before the row's reductions, in a loop of its own over the row
// (at the CPU's width), into a row of the host's per-thread buffer; every
// occurrence then reads that row. A derived backward names the forward's
// values many times (gelu(x + b) + r and gelu'(x + b) of a block appear in
// each gradient and in both reductions of its norm), so this is what keeps
// the host from evaluating their transcendentals once per occurrence.
//
// Which subtrees: maps of two or more operations that change along the row
// (one operation on an input row costs about what reading its value back
// does), with no row reduction, per-row value, saved row value or kept
// value under them, whose type (slots aside) occurs two or more times in
// the tree, and that no other such subtree holds (the outermost). Decided
// from the tree's type; at launch, plan_precomputed finds the occurrences
// that compute the same value of the same data (same_as, same row length):
// the first of them fills the row, all read it. The values are kept in the
// subtree's compute type, so a read gives the bits the computation gives.
// The device computes such subtrees where they occur (row values on the
// device are values.hpp's kept values).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "loom/config.hpp"
#include "loom/core/simd/dispatch.hpp"
#include "loom/exec/rows/per_row.hpp"
#include "loom/exec/rows/values.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/expr/row_value.hpp"
#include "loom/expr/traverse.hpp"

namespace loom::detail::rows {
// The run-time state of a precomputed subtree, set by plan_precomputed
// (off, len, fills) and per row by the host's row loop (row).
struct precomputed_state {
  unsigned char* row = nullptr;  // this row's values in the thread's buffer
  std::uint32_t off = 0;         // byte offset of the values in the buffer
  index_t len = 0;               // columns of the row the subtree is read along
  bool fills = false;            // this occurrence computes the row; the others with its offset read it
};

//! A subtree computed once per element before a row's passes
//! (host_fill_precomputed); every occurrence reads the stored value. R is
//! the rank of the output (its last index is the column).
template <std::size_t R, class B>
struct bound_precomputed : precomputed_state {
  using compute = typename B::compute;
  template <int vector_width>
  struct regs {
    index_t c0;
  };
  static constexpr std::size_t slots = slots_of<B>;
  B in;

  template <class Ctx>
  LOOM_HD LOOM_HOST_INLINE compute at(const index_t* idx, const Ctx&) const {
    return reinterpret_cast<const compute*>(row)[idx[R - 1]];
  }
  template <int vector_width>
  LOOM_HD LOOM_HOST_INLINE void row_load(const index_t*, index_t c0, regs<vector_width>& r) const {
    r.c0 = c0;
  }
  template <int vector_width, class Ctx>
  LOOM_HD LOOM_HOST_INLINE compute elem(const regs<vector_width>& r, int j, const Ctx&) const {
    return reinterpret_cast<const compute*>(row)[r.c0 + j];
  }
  //! The same subtree over the same data.
  template <class B2>
  bool same_as(const bound_precomputed<R, B2>& o) const {
    return in.same_as(o.in);
  }
};
}  // namespace loom::detail::rows

namespace loom::detail {
template <std::size_t R, class B>
struct children_of<rows::bound_precomputed<R, B>> {
  using types = type_list<B>;
  template <std::size_t, class M>
  LOOM_HD static auto& get(M& n) {
    return n.in;
  }
  template <class C>
  using rebind = rows::bound_precomputed<R, C>;
  template <class C>
  static rows::bound_precomputed<R, C> rebuild(const rows::bound_precomputed<R, B>& n, const C& c) {
    return {static_cast<const rows::precomputed_state&>(n), c};
  }
};
}  // namespace loom::detail

namespace loom::detail::rows {
// Nodes that depend on a row's results or hold state of their own pass.
template <class N>
struct depends_on_row_results
    : std::bool_constant<is_bound_row_reduce<N>::value || is_bound_slot_ref<N>::value ||
                         is_bound_row_value_leaf<N>::value || is_bound_row_value<N>::value ||
                         is_bound_kept<N>::value || is_bound_precomputed<N>::value> {};

// Whether subtree N may be precomputed in tree Root, not counting whether
// another one holds it.
template <class Root, class N>
constexpr bool precompute_shape() {
  if constexpr (!is_bound_map_node<N>::value || row_varying_maps<N>::value < 2 ||
                tree_any_v<N, depends_on_row_results>)
    return false;
  else
    return tree_sum_v<Root, erased_as<erase_slots_t<N>>::template test> >= 2;
}

// Whether Root has a subtree that may be precomputed and holds a subtree of
// type E (slots aside) without being one.
template <class Root, class E>
struct held_by_precomputed {
  template <class M>
  struct test : std::bool_constant<!std::is_same_v<erase_slots_t<M>, E> &&
                                   (tree_sum_v<M, erased_as<E>::template test> > 0) && precompute_shape<Root, M>()> {};
};

template <class Root, class N>
constexpr bool precompute_candidate() {
  if constexpr (!precompute_shape<Root, N>())
    return false;
  else
    return !tree_any_v<Root, held_by_precomputed<Root, erase_slots_t<N>>::template test>;
}

// Rebuilds a bound tree with its candidates wrapped in bound_precomputed,
// every occurrence alike: rewrite_down<precomputer<Root, R>>(b, std::true_type{}).
template <class Root, std::size_t R>
struct precomputer {
  template <class N, class C>
  static constexpr C inner(C c) {
    return c;
  }
  template <class N, class M, class C>
  static auto finish(const N&, const M& m, C) {
    if constexpr (precompute_candidate<Root, N>())
      return bound_precomputed<R, M>{{}, m};
    else
      return m;
  }
};

//! Bound row tree `b` with its repeated input-only subtrees wrapped in
//! bound_precomputed (the host executor's form), or `b` itself when it has
//! more than MaxLeaves leaf occurrences. R is the rank of the output.
template <std::size_t R, std::size_t MaxLeaves, class B>
auto precompute_values(const B& b) {
  if constexpr (tree_sum_v<B, is_bound_leaf> > MaxLeaves)
    return b;
  else
    return rewrite_down<precomputer<B, R>>(b, std::true_type{});
}

// The most leaf occurrences of a tree whose repeated subtrees are found
// (the compile-time work grows with the square of the tree's size): the
// shared kernel of a derived backward (loom::grad) of rms_norm over an
// activation has about 50, of layer_norm about 100.
inline constexpr std::size_t host_max_precomputed_tree_leaves = 128;

//! Plans the precomputed subtrees of `b` over rows of `cols` columns: the
//! first occurrence of each value fills a row of the buffer, the later
//! occurrences of the same subtree over the same data and row length read
//! it. Returns the buffer's bytes per row (each row 64-byte aligned).
template <class B>
std::size_t plan_precomputed(B& b, index_t cols) {
  std::size_t at = 0;
  if constexpr (tree_any_v<B, is_bound_precomputed>) {
    struct first {
      precomputed_state* node;
      const void* type;
    };
    std::vector<first> seen;
    visit_down_if<is_bound_precomputed>(b, cols, [&](auto& n, index_t len) -> index_t {
      using N = std::remove_cvref_t<decltype(n)>;
      if constexpr (is_bound_row_reduce<N>::value) {
        return n.cols;
      } else {
        if constexpr (is_bound_precomputed<N>::value) {
          using key = erase_slots_t<N>;
          n.len = len;
          n.fills = true;
          for (const first& f : seen) {
            if (f.type != &kept_type_key<key>::id || f.node->len != len) continue;
            visit_if<is_bound_precomputed>(b, [&](auto& m) {
              using M = std::remove_cvref_t<decltype(m)>;
              if constexpr (std::is_same_v<erase_slots_t<M>, key>)
                if (static_cast<precomputed_state*>(&m) == f.node && n.fills && n.same_as(m)) {
                  n.fills = false;
                  n.off = m.off;
                }
            });
            if (!n.fills) break;
          }
          if (n.fills) {
            n.off = static_cast<std::uint32_t>(at);
            at += (static_cast<std::size_t>(len) * sizeof(typename N::compute) + 63) / 64 * 64;
            seen.push_back({&n, &kept_type_key<key>::id});
          }
        }
        return len;
      }
    });
  } else {
    (void)b;
    (void)cols;
  }
  return at;
}

// Fills the row of one precomputed subtree for the row `lead`: dense rows
// host_lanes columns at a time by pointer, in a loop the compiler
// vectorizes, the other columns one at a time.
template <std::size_t R, class N, class Ctx>
LOOM_HOST_INLINE inline void host_fill_one(const N& n, const index_t* lead, const Ctx& ctx, bool dense) {
  using T = typename N::compute;
  constexpr int lanes = 32;
  T* const out = reinterpret_cast<T*>(n.row);
  const auto in = n.in;
  index_t c = 0;
  if (dense) {
    for (; c + lanes <= n.len; c += lanes) {
      typename decltype(n.in)::template regs<lanes> r;
      in.template row_load<lanes>(lead, c, r);
      T v[lanes];
      for (int l = 0; l < lanes; ++l) v[l] = in.template elem<lanes>(r, l, ctx);
      for (int l = 0; l < lanes; ++l) out[c + l] = v[l];
    }
  }
  index_t idx[R];
  for (std::size_t d = 0; d + 1 < R; ++d) idx[d] = lead[d];
  for (; c < n.len; ++c) {
    idx[R - 1] = c;
    out[c] = in.at(idx, ctx);
  }
}

//! Points the precomputed subtrees of `bc` at their rows in `buffer` and
//! fills the rows of the row `lead` (each in the CPU's widest copy:
//! core/simd/dispatch.hpp), before the row's passes.
template <std::size_t R, class B, class Ctx, class Call>
void host_fill_precomputed(B& bc, unsigned char* buffer, const index_t* lead, const Ctx& ctx, bool dense,
                           const Call& call) {
  if constexpr (tree_any_v<B, is_bound_precomputed>) {
    visit_if<is_bound_precomputed>(bc, [&](auto& n) {
      n.row = buffer + n.off;
      if (n.fills) call([&] { host_fill_one<R>(n, lead, ctx, dense); });
    });
  } else {
    (void)bc, (void)buffer, (void)lead, (void)ctx, (void)dense, (void)call;
  }
}
}  // namespace loom::detail::rows
