// SPDX-License-Identifier: Apache-2.0
#pragma once

// Reverse-mode differentiation of an expression tree at compile time. The
// layer is called with its inputs wrapped in input_node<I> (a leaf that
// remembers the argument's position); the adjoint of input I is then built
// by walking the tree from the root with the output gradient: each node
// hands its children their adjoints through the op's derivative rule (beside
// the op: `grad<I>(y, a)` or `derivative<I>(x...)` in the functor, row_grad
// for the row reductions), and a subtree that uses input I several times
// gets the sum of the adjoints. Adjoints are expressions at the layer
// output's shape; forward values a rule needs are the forward subtrees
// themselves, recomputed in the gradient's kernel. Every row reduction, of
// the forward tree and of an adjoint, is marked shared (expr/shared_rows.hpp)
// with its place in the derivation, so the row kernel reduces it once
// however many rules copy it.

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "loom/core/dtype.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/indexing.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/expr/shared_rows.hpp"
#include "loom/expr/traverse.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/ops/compare.hpp"

namespace loom {
//! Argument I of a layer being differentiated: node N (a leaf, usually)
//! marked with its position. Exists only while loom::grad derives.
template <std::size_t I, class N>
struct input_node : detail::node_tag {
  using value_type = typename N::value_type;
  using space = typename N::space;
  static constexpr std::size_t rank = N::rank;
  N n;

  explicit input_node(const N& n_) : n(n_) {}
  shape<rank> extents() const { return n.extents(); }
};

namespace detail {
template <std::size_t I, class N>
struct children_of<input_node<I, N>> : no_children<input_node<I, N>> {};
template <std::size_t I, class N>
struct layer_argument_index<input_node<I, N>> : std::integral_constant<std::size_t, I> {};

namespace autodiff {
//! No contribution to an adjoint (the structural zero).
struct no_grad {};

template <std::size_t I>
struct is_input {
  template <class N>
  struct test : std::false_type {};
  template <class N>
  struct test<input_node<I, N>> : std::true_type {};
};
template <class N, std::size_t I>
inline constexpr bool uses_input = tree_any_v<N, is_input<I>::template test>;

template <class X>
inline constexpr bool is_any_input = false;
template <std::size_t I, class N>
inline constexpr bool is_any_input<input_node<I, N>> = true;
template <class X>
struct row_op;
template <class Op, class E>
struct row_op<row_reduce_node<Op, E>> {
  using type = Op;
};

// Whether expression N has one value per row: row reductions, scalars, and
// maps and broadcasts of those only (a leaf, or any other node kind, may
// vary along the row). A tree_fold whose state turns false at such a node.
struct row_constancy {
  template <class S, class N>
  struct pre : fold_step<std::conditional_t<elementwise_inner<N>::value, S, std::false_type>,
                         elementwise_inner<N>::value> {};
  template <class S, class Op, class E>
  struct pre<S, row_reduce_node<Op, E>> : fold_step<S, false> {};
  template <class S, class Id, class N>
  struct pre<S, shared_row_node<Id, N>> : fold_step<S, false> {};
  template <class S, class C>
  struct pre<S, scalar_node<C>> : fold_step<S, false> {};
  template <class S, class N>
  using post = fold_keep<S, N>;
};
template <class N>
struct row_constant : tree_fold_t<row_constancy, std::true_type, N> {};
// A factor worth taking out of a row sum: one value per row that a row
// reduction gives (a sum that holds it waits for that reduction's pass).
template <class N>
inline constexpr bool row_factor = row_constant<N>::value && tree_any_v<N, is_row_reduction>;

template <class X, class F>
inline constexpr bool is_map_of = false;
template <class F, class... C>
inline constexpr bool is_map_of<map_node<F, C...>, F> = true;
template <class X, std::size_t I>
using child_t = std::remove_cvref_t<decltype(child<I>(std::declval<const X&>()))>;

// Whether row_sum(x) splits into sums that wait for fewer reductions: x is
// one value per row (no sum at all), or a sum or difference with such a
// term, or a product or quotient with a row_factor.
template <class X>
constexpr bool row_sum_splits() {
  if constexpr (row_constant<X>::value)
    return true;
  else if constexpr (is_map_of<X, fn::add> || is_map_of<X, fn::sub>)
    return row_sum_splits<child_t<X, 0>>() || row_sum_splits<child_t<X, 1>>();
  else if constexpr (is_map_of<X, fn::neg>)
    return row_sum_splits<child_t<X, 0>>();
  else if constexpr (is_map_of<X, fn::mul>)
    return row_factor<child_t<X, 0>> || row_factor<child_t<X, 1>>;
  else if constexpr (is_map_of<X, fn::div>)
    return row_factor<child_t<X, 1>>;
  else
    return false;
}

// The sum along each row of x broadcast to s (the adjoint's shape), split
// by linearity where row_sum_splits: a term with one value per row is that
// value times the row length; a row_factor multiplies or divides the sum
// of the rest. The parts are sums of their own, each at the adjoint's shape.
template <class X, std::size_t R>
auto split_row_sum(const X& x, const shape<R>& s) {
  if constexpr (row_constant<X>::value) {
    return x * static_cast<double>(s[R - 1]);
  } else if constexpr (!row_sum_splits<X>()) {
    return row_sum(broadcast_node<X, R>(x, s));
  } else if constexpr (is_map_of<X, fn::add>) {
    return split_row_sum(child<0>(x), s) + split_row_sum(child<1>(x), s);
  } else if constexpr (is_map_of<X, fn::sub>) {
    return split_row_sum(child<0>(x), s) - split_row_sum(child<1>(x), s);
  } else if constexpr (is_map_of<X, fn::neg>) {
    return -split_row_sum(child<0>(x), s);
  } else if constexpr (is_map_of<X, fn::mul> && row_factor<child_t<X, 1>>) {
    return split_row_sum(child<0>(x), s) * child<1>(x);
  } else if constexpr (is_map_of<X, fn::mul> && row_factor<child_t<X, 0>>) {
    return child<0>(x) * split_row_sum(child<1>(x), s);
  } else {
    static_assert(is_map_of<X, fn::div>, "loom: internal error: a row sum split without a rule");
    return split_row_sum(child<0>(x), s) / child<1>(x);
  }
}

// Names of the shared row reductions of one derivation: row_tag<K, 0> is the
// forward tree's K-th row reduction (post-order); row_tag<K, J> (J >= 1) the
// J-th that the derivative rule of that reduction makes.
template <std::size_t K, std::size_t J>
struct row_tag {};
struct forward_ids {
  template <std::size_t K>
  using id = row_tag<K, 0>;
};
template <std::size_t P>
struct rule_ids {
  template <std::size_t K>
  using id = row_tag<P, K + 1>;
};

// Wraps every row reduction not yet shared in a shared_row_node named
// Ids::id<k>, k counting them in post-order from the state's value
// (rewrite_along; the run-time companion is the derivation's origin).
template <class Ids>
struct row_tagger {
  template <class N, class K>
  static constexpr bool stops = is_shared_row<N>::value || !tree_any_v<N, is_row_reduction>;
  template <class K, class N>
  static auto stop(const N& n, const std::uint64_t&) {
    return thread_on<K>(n);
  }
  template <class K, class N, class M>
  static auto finish(const N&, const M& m, const std::uint64_t& origin) {
    if constexpr (is_row_reduction<N>::value)
      return thread_on<std::integral_constant<std::size_t, K::value + 1>>(
          shared_row_node<typename Ids::template id<K::value>, M>(m, origin));
    else
      return thread_on<K>(m);
  }
};

//! Tree n with every row reduction not yet shared wrapped in a
//! shared_row_node named Ids::id<k> (k counting them in post-order from K),
//! and the count after them.
template <class Ids, std::size_t K, class N>
auto tag_rows(const N& n, const std::uint64_t& origin) {
  return rewrite_along<row_tagger<Ids>, std::integral_constant<std::size_t, K>>(n, origin);
}

//! The adjoint of an input that an indexing node reads: the node (its
//! indices) and the adjoint at the node's shape. Not an expression: it is
//! assigned by a scatter-add (gradient_kind::scatter).
template <class Node, class A>
struct scatter_adjoint {
  Node node;
  A adjoint;
  shape<A::rank> extents() const { return adjoint.extents(); }
};
template <class X>
inline constexpr bool is_scatter = false;
template <class Node, class A>
inline constexpr bool is_scatter<scatter_adjoint<Node, A>> = true;

// The sum of two adjoints, either possibly absent.
template <class A, class B>
auto add(const A& a, const B& b) {
  static_assert(std::is_same_v<A, no_grad> || std::is_same_v<B, no_grad> || (!is_scatter<A> && !is_scatter<B>),
                "loom: grad: an input read by embedding, index_select or gather is used elsewhere in the layer too (or "
                "read by two indexing nodes); loom::grad gives such an input's gradient only where one indexing "
                "node is its only use (docs/08_gradients.md)");
  if constexpr (std::is_same_v<A, no_grad>)
    return b;
  else if constexpr (std::is_same_v<B, no_grad>)
    return a;
  else
    return a + b;
}

template <class X>
auto sum_all(const X& x) {
  return x;
}
template <class X, class... Rest>
auto sum_all(const X& x, const Rest&... rest) {
  return add(x, sum_all(rest...));
}

// d f / d x_J of an elementwise functor at the same operands: the functor's
// own `derivative<J>` as a functor for loom::map. It derives from F, so it
// is empty when F is: the same_as of equal maps over it compares no bytes
// that nothing initialized.
template <class F, int J>
struct partial : F {
  static constexpr bool floating = floating_op<F>;
  template <class... T>
  LOOM_HD LOOM_HOST_INLINE auto operator()(T... x) const {
    return F::template derivative<J>(x...);
  }
};

template <class F, std::size_t J, class Y, class A>
concept has_expression_rule = requires(const Y& y, const A& a) { F::template grad<J>(y, a); };
template <class F, int J, class... T>
concept has_scalar_rule = requires(const F& f, T... x) { f.template derivative<J>(x...); };
template <class F, class = void>
inline constexpr bool piecewise_constant = false;
template <class F>
inline constexpr bool piecewise_constant<F, std::void_t<decltype(F::piecewise_constant)>> = F::piecewise_constant;

//! Fails to compile for a functor F without a derivative rule; the error's
//! context names F.
template <class F>
struct no_derivative_rule {
  static_assert(always_false<F>,
                "loom: grad: this functor (named in the lines above) has no derivative rule; give it a member "
                "`template <int I, class T> LOOM_HD T derivative(T... x) const` returning d f / d x_I "
                "(docs/08_gradients.md, docs/07_adding_an_op.md)");
  using type = no_grad;
};

// The adjoint of child J of map node y, given y's adjoint a.
template <std::size_t J, class F, class... C, class A>
auto map_child_adjoint(const map_node<F, C...>& y, const A& a) {
  using Y = map_node<F, C...>;
  using cin = typename Y::types::cin;
  if constexpr (piecewise_constant<F>) {
    return no_grad{};
  } else if constexpr (has_expression_rule<F, J, Y, A>) {
    return F::template grad<J>(y, a);
  } else if constexpr (has_scalar_rule<F, static_cast<int>(J), repeat_t<C, cin>...>) {
    return [&]<std::size_t... K>(std::index_sequence<K...>) {
      return a * map_node<partial<F, static_cast<int>(J)>, C...>(partial<F, static_cast<int>(J)>{y.f},
                                                                  detail::get<K>(y.children)...);
    }(std::index_sequence_for<C...>{});
  } else {
    return typename no_derivative_rule<F>::type{};
  }
}

template <std::size_t I, class N, class A>
auto adjoint(const N& n, const A& a);

//! The derivative rule of a node kind: `gradient_rule<N>::adjoint<I>(n, a)`
//! is the adjoint of input I under node n, given n's adjoint a (the
//! recursion into n's children goes through autodiff::adjoint). One
//! specialization per differentiable node kind, beside its other rules
//! (docs/architecture.md, 'adding a node kind'); adjoint() dispatches on
//! it, and a node kind without one is a static assertion naming the kinds
//! that have none.
template <class N>
struct gradient_rule;
template <class N>
concept has_gradient_rule = requires { sizeof(gradient_rule<N>); };

template <std::size_t I, class F, class... C, class A, std::size_t... J>
auto map_adjoint(const map_node<F, C...>& y, const A& a, std::index_sequence<J...>) {
  const auto one = [&](auto j) {
    constexpr std::size_t k = decltype(j)::value;
    using Ck = std::remove_cvref_t<decltype(detail::get<k>(y.children))>;
    if constexpr (!uses_input<Ck, I> || !is_floating_v<typename Ck::value_type>)
      return no_grad{};
    else
      return adjoint<I>(detail::get<k>(y.children), map_child_adjoint<k>(y, a));
  };
  no_grad none;
  return [&](const auto&... part) {
    if constexpr (sizeof...(part) == 0)
      return none;
    else
      return sum_all(part...);
  }(one(std::integral_constant<std::size_t, J>{})...);
}

// A forward row reduction y = reduction(e) (shared as row_tag<P, 0>): its
// rule's new reductions are shared as row_tag<P, J>, the same for every
// input differentiated in this derivation.
// The rule's result is constant along the row: it is presented at the
// argument's shape (a broadcast, no work), so that a reduction of it further
// down (the argument of a reduction inside another's) sums every element.
template <std::size_t I, std::size_t P, class M, class A>
auto shared_row_adjoint(const shared_row_node<row_tag<P, 0>, M>& y, const A& a) {
  const auto& e = y.n.e;
  const auto g = tag_rows<rule_ids<P>, 0>(row_grad<typename row_op<M>::type>::of(y, e, a), y.origin).node;
  using G = std::remove_cvref_t<decltype(g)>;
  using E = std::remove_cvref_t<decltype(e)>;
  constexpr std::size_t R = G::rank > E::rank ? G::rank : E::rank;
  shape<R> s{};
  bool first = true;
  broadcast_into(s, g.extents(), first);
  broadcast_into(s, e.extents(), first);
  return adjoint<I>(e, broadcast_node<G, R>(g, s));
}

// An indexing node whose source is input I: its adjoint there is a
// scatter-add of a through the node's indices (nn/embedding.hpp runs it).
template <std::size_t I, class Idx, class Src, std::size_t R, class A>
auto gather_adjoint(const gather_node<Idx, Src, R>& n, const A& a) {
  static_assert(is_input<I>::template test<Src>::value,
                "loom: grad: the source of an embedding, index_select or gather must be a layer input itself (not an "
                "expression such as embedding(ids, w * 2)); write the expression after the lookup "
                "(embedding(ids, w) * 2) or differentiate it in two steps (docs/08_gradients.md)");
  static_assert(A::rank == R,
                "loom: grad: an embedding, index_select or gather is broadcast to the layer's output (a higher rank); "
                "loom::grad differentiates its source only where it has the output's rank");
  return scatter_adjoint<gather_node<Idx, Src, R>, A>{n, a};
}

//! The adjoint of input I in tree n, given n's adjoint a (no_grad if n does
//! not use input I or carries no gradient).
template <std::size_t I, class N, class A>
auto adjoint(const N& n, const A& a) {
  if constexpr (std::is_same_v<A, no_grad> || !uses_input<N, I> || !is_floating_v<typename N::value_type>) {
    return no_grad{};
  } else if constexpr (is_input<I>::template test<N>::value) {
    return a;
  } else if constexpr (has_gradient_rule<N>) {
    return gradient_rule<N>::template adjoint<I>(n, a);
  } else {
    static_assert(always_false<N>,
                  "loom: grad: no derivative rule for this node kind (matmul, the reductions that return tensors "
                  "and the joining nodes (concat, stack) are not differentiated inside a layer; see "
                  "docs/08_gradients.md)");
    return no_grad{};
  }
}

// The rules of the node kinds of expr/: an elementwise map (each child's
// adjoint by the functor's rule, summed where children share an input), a
// shared row reduction (its row_grad), a broadcast (the same adjoint: the
// reduction to the input's shape happens at assignment), an indexing node
// (a scatter-add through its indices).
template <class F, class... C>
struct gradient_rule<map_node<F, C...>> {
  template <std::size_t I, class A>
  static auto adjoint(const map_node<F, C...>& n, const A& a) {
    return map_adjoint<I>(n, a, std::index_sequence_for<C...>{});
  }
};
template <class Tag, class M>
struct gradient_rule<shared_row_node<Tag, M>> {
  template <std::size_t I, class A>
  static auto adjoint(const shared_row_node<Tag, M>& n, const A& a) {
    return shared_row_adjoint<I>(n, a);
  }
};
template <class E, std::size_t R>
struct gradient_rule<broadcast_node<E, R>> {
  template <std::size_t I, class A>
  static auto adjoint(const broadcast_node<E, R>& n, const A& a) {
    return autodiff::adjoint<I>(n.e, a);
  }
};
template <class Idx, class Src, std::size_t R>
struct gradient_rule<gather_node<Idx, Src, R>> {
  template <std::size_t I, class A>
  static auto adjoint(const gather_node<Idx, Src, R>& n, const A& a) {
    return gather_adjoint<I>(n, a);
  }
};

//! Tree n with every input_node replaced by the node it marks.
template <class N>
auto unmark(const N& n) {
  return transform(n, [](const auto& m) {
    if constexpr (is_any_input<std::remove_cvref_t<decltype(m)>>)
      return m.n;
    else
      return m;
  });
}
template <class Node, class A>
auto unmark(const scatter_adjoint<Node, A>& s) {
  const auto node = unmark(s.node);
  const auto a = unmark(s.adjoint);
  return scatter_adjoint<std::remove_cvref_t<decltype(node)>, std::remove_cvref_t<decltype(a)>>{node, a};
}
}  // namespace autodiff

// Declared in expr/row_nodes.hpp for the row reductions' rules. Split on
// the host only: on the device the extra sums of one pass cost registers
// (more than the derived layer_norm's shared kernel has), where a pass over
// a cached row is cheap.
template <class A>
auto adjoint_row_sum(const A& a) {
  if constexpr (A::rank > 0 && std::is_same_v<typename A::space, host> && autodiff::row_sum_splits<A>())
    return autodiff::split_row_sum(a, a.extents());
  else
    return row_sum(a);
}
}  // namespace detail
}  // namespace loom
