// SPDX-License-Identifier: Apache-2.0
#pragma once

// Per-row values on the host. A subtree of a row kernel's tree that does not
// change along the row but computes on row reductions (rsqrt(row_mean(x * x)
// + eps), log(row_sum(e)), 1 / row_sum(e)) has one value per row: the host
// executor computes it once per row, before the pass that uses it, and the
// pass reads that value in every column. Its columns then need no square
// root, division or logarithm, so the compiler can run them in SIMD lanes.
//
// Which subtrees: maps that hold a row reduction (or a saved one, read from
// a tensor of one value per row: expr/row_value.hpp, or a later copy of a
// shared one: expr/shared_rows.hpp) and read nothing along the row outside
// their reductions (only reductions and scalars), the outermost
// such map of each pass; every occurrence of a type is wrapped alike, so
// equal subtrees keep equal types and identical reductions are still found.
// The value is the one the subtree computes in every column (the same
// operations on the same values), so the results are bit for bit those of
// evaluating it per element. The device computes such subtrees per element
// (in registers, next to its loads).

#include <cstddef>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/exec/rows/values.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/expr/traverse.hpp"

namespace loom::detail::rows {
//! A subtree with one value per row (B: maps, scalars and row reductions,
//! which read nothing along the row), computed once per row by
//! fill_row_values; every column reads `value`.
template <class B>
struct bound_row_value {
  using compute = typename B::compute;
  template <int vector_width>
  struct regs {};
  static constexpr std::size_t slots = slots_of<B>;
  B in;
  compute value{};

  template <class Ctx>
  LOOM_HD compute at(const index_t*, const Ctx&) const {
    return value;
  }
  template <int vector_width>
  LOOM_HD void row_load(const index_t*, index_t, regs<vector_width>&) const {}
  template <int vector_width, class Ctx>
  LOOM_HD compute elem(const regs<vector_width>&, int, const Ctx&) const {
    return value;
  }
  //! The same subtree over the same data.
  template <class B2>
  bool same_as(const bound_row_value<B2>& o) const {
    return in.same_as(o.in);
  }
};
}  // namespace loom::detail::rows

namespace loom::detail {
template <class B>
struct children_of<rows::bound_row_value<B>> {
  using types = type_list<B>;
  template <std::size_t, class M>
  LOOM_HD static auto& get(M& n) {
    return n.in;
  }
  template <class C>
  using rebind = rows::bound_row_value<C>;
  template <class C>
  static rows::bound_row_value<C> rebuild(const rows::bound_row_value<B>&, const C& c) {
    return {c};
  }
};
}  // namespace loom::detail

namespace loom::detail::rows {
template <class N>
struct is_bound_row_value : std::false_type {};
template <class B>
struct is_bound_row_value<bound_row_value<B>> : std::true_type {};

// Whether map N has one value per row and computes on a row reduction (or
// on a saved one, a bound_row_value_leaf, or on a copy of a shared one, a
// bound_slot_ref).
template <class N>
constexpr bool per_row_candidate() {
  return is_bound_map_node<N>::value && !varies_along_row<N>::value &&
         (tree_any_v<N, is_bound_row_reduce> || tree_any_v<N, is_bound_row_value_leaf> ||
          tree_any_v<N, is_bound_slot_ref>);
}

// Rebuilds a bound row tree with its per-row maps wrapped in
// bound_row_value: the outermost of each pass. The context says where a
// node is: outside any wrapped map of its pass, inside one, or the root
// (never wrapped); a row reduction's argument is its own pass.
struct row_value_wrapper {
  enum where : int { outside, inside, root };
  template <class N, int At>
  static constexpr bool wraps = At == outside && per_row_candidate<N>();
  template <class N, int At>
  static constexpr auto inner(std::integral_constant<int, At>) {
    if constexpr (is_bound_row_reduce<N>::value || (At == root))
      return std::integral_constant<int, outside>{};
    else if constexpr (wraps<N, At>)
      return std::integral_constant<int, inside>{};
    else
      return std::integral_constant<int, At>{};
  }
  template <class N, class M, int At>
  static auto finish(const N&, const M& m, std::integral_constant<int, At>) {
    if constexpr (wraps<N, At>)
      return bound_row_value<M>{m};
    else
      return m;
  }
};

//! Bound row tree `b` with its per-row values wrapped (the host executor's
//! form). The root stays what it is (a two-output assignment's root holds
//! the outputs' trees; a root with one value per row computes it once anyway).
template <class B>
auto wrap_row_values(const B& b) {
  return rewrite_down<row_value_wrapper>(b, std::integral_constant<int, row_value_wrapper::root>{});
}

//! The number of per-row values (occurrences) in bound tree B.
template <class B>
inline constexpr int per_row_value_count = static_cast<int>(tree_sum_v<B, is_bound_row_value>);

//! Computes the per-row values of pass `pass` (a slot, or -1 for the output
//! pass) of the row whose leading coordinates are `lead`, from the slots in
//! ctx (every slot the pass reads is computed before it).
template <std::size_t R, class B, class Ctx>
void fill_row_values(B& b, int pass, const index_t* lead, const Ctx& ctx) {
  if constexpr (tree_any_v<B, is_bound_row_value>) {
    index_t idx[R];
    for (std::size_t d = 0; d + 1 < R; ++d) idx[d] = lead[d];
    idx[R - 1] = 0;
    visit_down_if<is_bound_row_value>(b, -1, [&](auto& n, int at) -> int {
      using N = std::remove_cvref_t<decltype(n)>;
      if constexpr (is_bound_row_value<N>::value) {
        if (at == pass) n.value = n.in.at(idx, ctx);
      }
      if constexpr (is_bound_row_reduce<N>::value)
        return static_cast<int>(N::slot);
      else
        return at;
    });
  } else {
    (void)b, (void)pass, (void)lead, (void)ctx;
  }
}
}  // namespace loom::detail::rows
