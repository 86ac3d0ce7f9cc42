// SPDX-License-Identifier: Apache-2.0
#pragma once

// The one traversal of expression trees. Every node kind, of the user-facing
// tree (map_node, row_reduce_node, ...) and of the kernel-side bound tree
// (bound_map, bound_row_reduce, ...), states its children once by
// specializing children_of; every walk of a tree (binding, slot counts, leaf
// visits, alias and device checks, the matmul search, the row cache) is
// written with the folds, visits and the transform below, so none can skip a
// node kind.

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"

namespace loom::detail {
//! A list of types: the children of a node kind.
template <class... T>
struct type_list {
  static constexpr std::size_t size = sizeof...(T);
};
//! Whether type_list List holds T.
template <class List, class T>
struct list_has;
template <class... L, class T>
struct list_has<type_list<L...>, T> : std::bool_constant<(std::is_same_v<L, T> || ...)> {};
//! List with T appended unless it holds T already.
template <class List, class T>
struct append_unique;
template <class... L, class T>
struct append_unique<type_list<L...>, T> {
  using type = std::conditional_t<list_has<type_list<L...>, T>::value, type_list<L...>, type_list<L..., T>>;
};

//! The index of the first T in type_list L... (its size if none).
template <class T, class... L>
constexpr std::size_t index_in(type_list<L...>) {
  constexpr bool same[] = {std::is_same_v<T, L>..., false};
  std::size_t k = 0;
  while (k < sizeof...(L) && !same[k]) ++k;
  return k;
}

//! What a node kind N says about its children. A specialization provides
//!   using types = type_list<Child...>;                 // in order
//!   template <std::size_t I, class M> static auto& get(M& n);  // M: N or const N
//!   template <class... C> using rebind = ...;          // N with children C...
//!   template <class... C> static auto rebuild(const N& n, const C&... c);
//! A node kind without children (a leaf) derives its specialization from
//! no_children<N>: `struct children_of<N> : no_children<N> {};`.
template <class N, class = void>
struct children_of {
  static_assert(always_false<N>,
                "loom: this expression node kind does not state its children: specialize "
                "loom::detail::children_of<N> next to the node (docs/architecture.md, 'adding a node kind')");
  using types = type_list<>;
};

//! The children_of of a node kind without children (a leaf): no child
//! types, and the node rebuilt over no children is itself.
template <class N>
struct no_children {
  using types = type_list<>;
  template <class...>
  using rebind = N;
};

//! The part of children_of shared by node kinds whose one child is their
//! member `e` (broadcast, row reductions).
template <class E>
struct one_child_e {
  using types = type_list<E>;
  template <std::size_t, class M>
  LOOM_HD static auto& get(M& n) {
    return n.e;
  }
};

//! The children's types of node kind N.
template <class N>
using child_types_t = typename children_of<std::remove_cvref_t<N>>::types;

//! Number of children of node kind N.
template <class N>
inline constexpr std::size_t child_count_v = child_types_t<N>::size;

//! Child I of node n (const or mutable as n is).
template <std::size_t I, class N>
LOOM_HD auto& child(N& n) {
  return children_of<std::remove_cvref_t<N>>::template get<I>(n);
}

// ---------------------------------------------------------------------------
// Type-level folds over every node of a tree (the node itself included).

template <class List, template <class> class Pred>
struct sum_over;
template <class List, template <class> class Pred>
struct any_over;
template <class List, template <class> class Pred>
struct min_over;

//! Sum of Pred<M>::value over every node M of tree N.
template <class N, template <class> class Pred>
inline constexpr std::size_t tree_sum_v = std::size_t{Pred<N>::value} + sum_over<child_types_t<N>, Pred>::value;
//! Whether Pred<M>::value holds for some node M of tree N.
template <class N, template <class> class Pred>
inline constexpr bool tree_any_v = bool{Pred<N>::value} || any_over<child_types_t<N>, Pred>::value;
//! Minimum of Pred<M>::value over every node M of tree N.
template <class N, template <class> class Pred>
inline constexpr std::size_t tree_min_v =
    std::min(std::size_t{Pred<N>::value}, min_over<child_types_t<N>, Pred>::value);

template <class... C, template <class> class Pred>
struct sum_over<type_list<C...>, Pred> {
  static constexpr std::size_t value = (std::size_t{0} + ... + tree_sum_v<C, Pred>);
};
template <class... C, template <class> class Pred>
struct any_over<type_list<C...>, Pred> {
  static constexpr bool value = (false || ... || tree_any_v<C, Pred>);
};
template <class... C, template <class> class Pred>
struct min_over<type_list<C...>, Pred> {
  static constexpr std::size_t value = std::min({~std::size_t{0}, tree_min_v<C, Pred>...});
};

//! The first node type M of tree N (pre-order) with Pred<M>::value, else void.
template <class N, template <class> class Pred, class = void>
struct tree_find;
template <class List, template <class> class Pred>
struct find_over {
  using type = void;
};
template <class C, class... Rest, template <class> class Pred>
struct find_over<type_list<C, Rest...>, Pred> {
  using here = typename tree_find<C, Pred>::type;
  using type = std::conditional_t<!std::is_void_v<here>, here, typename find_over<type_list<Rest...>, Pred>::type>;
};
template <class N, template <class> class Pred, class>
struct tree_find {
  using type = std::conditional_t<bool{Pred<N>::value}, N, typename find_over<child_types_t<N>, Pred>::type>;
};
template <class N, template <class> class Pred>
using tree_find_t = typename tree_find<N, Pred>::type;

//! Tree N with every node rebuilt bottom-up: each node's children become
//! their images first, then F<node with new children>::type is taken.
template <class N, template <class> class F>
struct tree_map;
template <class N, template <class> class F, class List>
struct tree_map_impl;
template <class N, template <class> class F, class... C>
struct tree_map_impl<N, F, type_list<C...>> {
  using rebuilt = typename children_of<N>::template rebind<typename tree_map<C, F>::type...>;
  using type = typename F<rebuilt>::type;
};
template <class N, template <class> class F>
struct tree_map {
  using type = typename tree_map_impl<N, F, child_types_t<N>>::type;
};

// ---------------------------------------------------------------------------
// Walks of values.

// The walks below are one function per node and walk: each folds over its
// node's children itself (no per-child step object), which keeps the
// functions a tree instantiates, and so compile time, down.
template <class N>
using child_indices = std::make_index_sequence<child_count_v<N>>;

template <class N, class F, std::size_t... I>
LOOM_HD void for_each_child_impl(N& n, F& f, std::index_sequence<I...>) {
  (f(child<I>(n)), ...);
}
//! Calls f(c) on each child c of n, in order.
template <class N, class F>
LOOM_HD void for_each_child(N& n, F&& f) {
  for_each_child_impl(n, f, child_indices<N>{});
}

template <class N, class F, std::size_t... I>
LOOM_HD void visit_impl(N& n, F& f, std::index_sequence<I...>) {
  f(n);
  (visit_impl(child<I>(n), f, child_indices<std::remove_reference_t<decltype(child<I>(n))>>{}), ...);
}
//! Calls f(m) on every node m of tree n, pre-order (a node before its children).
template <class N, class F>
LOOM_HD void visit(N& n, F&& f) {
  visit_impl(n, f, child_indices<N>{});
}

template <template <class> class Pred, class N, class F, std::size_t... I>
LOOM_HD void visit_if_impl(N& n, F& f, std::index_sequence<I...>) {
  if constexpr (tree_any_v<std::remove_cv_t<N>, Pred>) {
    if constexpr (Pred<std::remove_cv_t<N>>::value) f(n);
    (visit_if_impl<Pred>(child<I>(n), f, child_indices<std::remove_reference_t<decltype(child<I>(n))>>{}), ...);
  }
}
//! Calls f(m) on every node m of tree n whose kind has Pred<M>::value,
//! pre-order. Enters only the subtrees that hold such a node, and f is
//! instantiated for those kinds only: the walk to use when f acts on some
//! node kinds and ignores the rest.
template <template <class> class Pred, class N, class F>
LOOM_HD void visit_if(N& n, F&& f) {
  visit_if_impl<Pred>(n, f, child_indices<N>{});
}

template <class N, class C, class F, std::size_t... I>
LOOM_HD void visit_down_impl(N& n, const C& ctx, F& f, std::index_sequence<I...>) {
  [[maybe_unused]] const C inner = f(n, ctx);
  (visit_down_impl(child<I>(n), inner, f, child_indices<std::remove_reference_t<decltype(child<I>(n))>>{}), ...);
}
//! Pre-order visit that hands a context down: `f(m, ctx)` is called on every
//! node m with its parent's result (`ctx` at the root) and returns the
//! context of m's children.
template <class N, class C, class F>
LOOM_HD void visit_down(N& n, const C& ctx, F&& f) {
  visit_down_impl(n, ctx, f, child_indices<N>{});
}

template <template <class> class Pred, class N, class C, class F, std::size_t... I>
LOOM_HD void visit_down_if_impl(N& n, const C& ctx, F& f, std::index_sequence<I...>) {
  if constexpr (tree_any_v<std::remove_cv_t<N>, Pred>) {
    [[maybe_unused]] const C inner = f(n, ctx);
    (visit_down_if_impl<Pred>(child<I>(n), inner, f, child_indices<std::remove_reference_t<decltype(child<I>(n))>>{}),
     ...);
  }
}
//! visit_down that enters only the subtrees holding a node whose kind has
//! Pred<M>::value: f sees those nodes and the nodes above them (whose
//! contexts they receive), no others.
template <template <class> class Pred, class N, class C, class F>
LOOM_HD void visit_down_if(N& n, const C& ctx, F&& f) {
  visit_down_if_impl<Pred>(n, ctx, f, child_indices<N>{});
}

template <class N, class F, std::size_t... I>
auto transform_impl(const N& n, const F& f, std::index_sequence<I...>);
//! Rebuilds tree n bottom-up: each node with its children's images, then
//! f(that node), whose result (any node) takes the node's place. Host only.
template <class N, class F>
auto transform(const N& n, const F& f) {
  return transform_impl(n, f, std::make_index_sequence<child_count_v<N>>{});
}
template <class N, class F, std::size_t... I>
auto transform_impl(const N& n, const F& f, std::index_sequence<I...>) {
  if constexpr (sizeof...(I) == 0)
    return f(n);
  else
    return f(children_of<N>::rebuild(n, transform(child<I>(n), f)...));
}

//! The first node of tree n (pre-order) with Pred<node>::value; the tree must
//! hold one.
template <template <class> class Pred, class N>
const auto& find_node(const N& n);
template <template <class> class Pred, std::size_t I, class N>
const auto& find_node_in_children(const N& n) {
  using C = std::remove_cvref_t<decltype(child<I>(n))>;
  if constexpr (tree_any_v<C, Pred>)
    return find_node<Pred>(child<I>(n));
  else
    return find_node_in_children<Pred, I + 1>(n);
}
template <template <class> class Pred, class N>
const auto& find_node(const N& n) {
  static_assert(tree_any_v<N, Pred>, "loom: internal error: find_node on a tree without such a node");
  if constexpr (Pred<N>::value)
    return n;
  else
    return find_node_in_children<Pred, 0>(n);
}
}  // namespace loom::detail
