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
//! A node kind's answer to a question that walks and executors ask of
//! every node kind (in the manner of MatX's get_capability):
//! `capability<Cap, N>::value`. Each question Cap is a tag type (namespace
//! cap) whose `fallback<N>` answers for node kinds that say nothing; a node
//! kind that answers otherwise specializes capability<Cap, N> next to it.
template <class Cap, class N>
struct capability : Cap::template fallback<N> {};

//! A list of types: the children of a node kind.
template <class... T>
struct type_list {
  static constexpr std::size_t size = sizeof...(T);
};
template <std::size_t I, class T, class... Rest>
struct nth_type : nth_type<I - 1, Rest...> {};
template <class T, class... Rest>
struct nth_type<0, T, Rest...> {
  using type = T;
};
//! The I-th type of type_list List.
template <class List, std::size_t I>
struct list_at;
template <class... T, std::size_t I>
struct list_at<type_list<T...>, I> : nth_type<I, T...> {};
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

// ---------------------------------------------------------------------------
// Walks that thread something through the tree: a context handed down, a
// state handed along (pre- or post-order), a second tree walked alongside.
// Each enters every node kind through children_of unless the walk stops at
// it, so a walk states what it does with a node kind or what stops it;
// nothing is skipped by omission.

//! Whether node kind N can be rebuilt over children of its children's
//! types (children_of<N>::rebuild): what the walks that rebuild a tree need
//! of every node kind with children they enter.
template <class N, class List = child_types_t<N>>
struct rebuildable;
template <class N, class... C>
struct rebuildable<N, type_list<C...>>
    : std::bool_constant<requires(const N& n, const C&... c) { children_of<N>::rebuild(n, c...); }> {};
#define LOOM_REQUIRE_REBUILD(N)                                                                            \
  static_assert(rebuildable<N>::value,                                                                      \
                "loom: a walk that rebuilds trees entered a node kind whose children_of states no rebuild; " \
                "give it `template <class... C> static auto rebuild(const N& n, const C&... c)` (docs/architecture.md, " \
                "'adding a node kind')")

//! Rebuilds tree n top-down with a compile-time context (a value of an
//! empty type, such as std::integral_constant): each node's children are
//! rebuilt with the context `W::inner<N>(ctx)`, then `W::finish(n, m, ctx)`
//! gives the node's image from the original node n and m, n rebuilt over
//! the children's images. A node with no children is its own m.
template <class W, class N, class Ctx>
auto rewrite_down(const N& n, Ctx ctx);
template <class W, class N, class Ctx, std::size_t... I>
auto rewrite_down_impl(const N& n, Ctx ctx, std::index_sequence<I...>) {
  if constexpr (sizeof...(I) == 0) {
    return W::finish(n, n, ctx);
  } else {
    LOOM_REQUIRE_REBUILD(N);
    constexpr auto inner = W::template inner<N>(Ctx{});
    return W::finish(n, children_of<N>::rebuild(n, rewrite_down<W>(child<I>(n), inner)...), ctx);
  }
}
template <class W, class N, class Ctx>
auto rewrite_down(const N& n, Ctx ctx) {
  return rewrite_down_impl<W>(n, ctx, child_indices<N>{});
}

//! A rewritten subtree and the walk's state after it (a type).
template <class Node, class State>
struct threaded {
  using state = State;
  Node node;
};
//! Makes threaded<Node, State>.
template <class State, class Node>
threaded<Node, State> thread_on(const Node& n) {
  return {n};
}

template <class W, class State, class N, class X>
auto rewrite_along(const N& n, X& x);
template <class W, std::size_t K, class State, class N, class X, class... Done>
auto rewrite_along_children(const N& n, X& x, const Done&... done) {
  if constexpr (K == child_count_v<N>) {
    LOOM_REQUIRE_REBUILD(N);
    return W::template finish<State>(n, children_of<N>::rebuild(n, done.node...), x);
  } else {
    const auto c = rewrite_along<W, State>(child<K>(n), x);
    return rewrite_along_children<W, K + 1, typename std::remove_cvref_t<decltype(c)>::state>(n, x, done..., c);
  }
}
//! Rebuilds tree n post-order (children left to right, then the node) with
//! a compile-time state threaded along (a type) and a run-time companion x
//! (such as a check shared by the whole walk). At each node `W::stops<N,
//! State>` says whether the walk keeps it whole: then `W::stop<State>(n, x)`
//! gives its threaded image; else the children are rewritten in order and
//! `W::finish<State after them>(n, m, x)` gives it from n and m, n rebuilt
//! over the children's images. Returns threaded<image, final state>.
template <class W, class State, class N, class X>
auto rewrite_along(const N& n, X& x) {
  if constexpr (W::template stops<N, State>)
    return W::template stop<State>(n, x);
  else
    return rewrite_along_children<W, 0, State>(n, x);
}

//! The state after a type-level walk over tree N from state State:
//! `W::pre<State, N>` gives `type` (the state before N's children) and
//! `enter` (whether to walk them); `W::post<State, N>::type` the state after
//! N from the state after its children.
template <class W, class State, class N>
struct tree_fold;
template <class W, class State, class List>
struct tree_fold_list {
  using type = State;
};
template <class W, class State, class C, class... Rest>
struct tree_fold_list<W, State, type_list<C, Rest...>>
    : tree_fold_list<W, typename tree_fold<W, State, C>::type, type_list<Rest...>> {};
template <class W, class State, class N>
struct tree_fold {
  using pre = typename W::template pre<State, N>;
  using inner = typename std::conditional_t<pre::enter, tree_fold_list<W, typename pre::type, child_types_t<N>>,
                                            std::type_identity<typename pre::type>>::type;
  using type = typename W::template post<inner, N>::type;
};
template <class W, class State, class N>
using tree_fold_t = typename tree_fold<W, State, N>::type;

//! A pre step of tree_fold: state S before the children, entering them or not.
template <class S, bool Enter>
struct fold_step {
  using type = S;
  static constexpr bool enter = Enter;
};
//! A post step of tree_fold that keeps the state.
template <class S, class>
struct fold_keep {
  using type = S;
};

//! A node kind the binder does not keep: binding a node tree gives a bound
//! tree of the same shape except that such a node is bound as its one
//! child (a broadcast_node binds as its operand, broadcast to the output).
template <class N>
struct bound_as_child : std::false_type {};

//! tree_fold over an expression tree N and its bound tree B side by side:
//! W::pre<State, N, B> and W::post<State, N, B> as in tree_fold; where the
//! walk enters, N's children pair with B's in order (a bound_as_child node
//! of N pairs its child with B itself, with no step of its own), and their
//! numbers must match.
template <class W, class State, class N, class B>
struct zip_fold;
template <class W, class State, class NL, class BL>
struct zip_fold_list {
  static_assert(NL::size == BL::size,
                "loom: internal error: a walk of an expression tree and its bound tree entered nodes whose numbers "
                "of children differ; the walk must stop at such a node kind");
  using type = State;
};
template <class W, class State, class C, class... Rest, class BC, class... BRest>
struct zip_fold_list<W, State, type_list<C, Rest...>, type_list<BC, BRest...>>
    : zip_fold_list<W, typename zip_fold<W, State, C, BC>::type, type_list<Rest...>, type_list<BRest...>> {};
template <class W, class State, class N, class B, bool = bound_as_child<N>::value>
struct zip_fold_impl {
  using pre = typename W::template pre<State, N, B>;
  using inner = typename std::conditional_t<pre::enter,
                                            zip_fold_list<W, typename pre::type, child_types_t<N>, child_types_t<B>>,
                                            std::type_identity<typename pre::type>>::type;
  using type = typename W::template post<inner, N, B>::type;
};
template <class W, class State, class N, class B>
struct zip_fold_impl<W, State, N, B, true> : zip_fold<W, State, typename list_at<child_types_t<N>, 0>::type, B> {};
template <class W, class State, class N, class B>
struct zip_fold : zip_fold_impl<W, State, N, B> {};
template <class W, class State, class N, class B>
using zip_fold_t = typename zip_fold<W, State, N, B>::type;

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
#undef LOOM_REQUIRE_REBUILD
}  // namespace loom::detail
