// SPDX-License-Identifier: Apache-2.0
#pragma once

// A tensor of one value per row ([..., 1]) read where a row reduction's
// result was: loom::grad puts one in place of each copy of a saved row
// reduction (grad/saved.hpp). It reads as its leaf does (the value repeated
// along the row, stride 0), but its bound form is a kind of its own, so the
// host's rows executor knows at compile time that it does not change along
// the row: a subtree computing on it (rsqrt(saved + eps)) is a per-row value,
// computed once per row as it is over the reduction (exec/rows/per_row.hpp).

#include <cstddef>
#include <type_traits>

#include "loom/core/shape.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/expr/traverse.hpp"

namespace loom {
namespace detail {
//! The bound form of row_value_node: a leaf (every walk of a bound tree sees
//! a bound_leaf) whose last stride is 0.
template <class T, std::size_t R>
struct bound_row_value_leaf : bound_leaf<T, R> {};
template <class T, std::size_t R>
struct children_of<bound_row_value_leaf<T, R>> : no_children<bound_row_value_leaf<T, R>> {};
template <class T, std::size_t R>
struct capability<cap::leaf_bits, bound_row_value_leaf<T, R>> : std::integral_constant<std::size_t, 8 * sizeof(T)> {};
template <class T, std::size_t R>
struct is_bound_leaf<bound_row_value_leaf<T, R>> : std::true_type {};
template <std::size_t R>
struct capability<cap::double_valued, bound_row_value_leaf<double, R>> : std::true_type {};
template <class T, std::size_t R>
bound_row_value_leaf<T, R> as_row_value(const bound_leaf<T, R>& b) {
  return {b};
}
template <class N>
struct is_bound_row_value_leaf : std::false_type {};
template <class T, std::size_t R>
struct is_bound_row_value_leaf<bound_row_value_leaf<T, R>> : std::true_type {};
}  // namespace detail

//! Leaf L (extents [..., 1]) read as one value per row of the output.
template <class L>
struct row_value_node : detail::node_tag {
  using value_type = typename L::value_type;
  using space = typename L::space;
  static constexpr std::size_t rank = L::rank;
  L e;

  explicit row_value_node(const L& leaf) : e(leaf) {}
  shape<rank> extents() const { return e.extents(); }
  template <std::size_t Base, class Out>
  auto bind_node(const Out& out, detail::bind_info& info) const {
    return detail::as_row_value(detail::binder::template bind<Base>(e, out, info));
  }
};

namespace detail {
template <class L>
struct children_of<row_value_node<L>> : one_child_e<L> {
  template <class C>
  using rebind = row_value_node<C>;
  template <class C>
  static auto rebuild(const row_value_node<L>&, const C& c) {
    return row_value_node<C>(c);
  }
};
}  // namespace detail
}  // namespace loom
