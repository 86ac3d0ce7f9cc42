// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/detail/tuple.hpp"
#include "loom/expr/promote.hpp"
#include "loom/expr/traverse.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
namespace detail {
//! Base of every expression node type.
struct node_tag {};
template <class T>
inline constexpr bool is_node = std::is_base_of_v<node_tag, std::remove_cvref_t<T>>;

//! Space of an expression made of two operands whose spaces are A and B
//! (void: a scalar, which fits either; mixed_space: a compile error later).
struct mixed_space {};
template <class A, class B>
using common_space_t =
    std::conditional_t<std::is_void_v<A>, B,
                       std::conditional_t<std::is_void_v<B> || std::is_same_v<A, B>, A, mixed_space>>;
}  // namespace detail

//! Satisfied by everything that can stand in an expression as a tensor-valued
//! operand: expression nodes, views and tensors (which enter as views).
template <class E>
concept expression = detail::is_node<E> || any_view<E> || detail::is_tensor<std::remove_cvref_t<E>>::value;

//! Satisfied by C++ scalars that may appear in an expression (`x * 2.0f`).
template <class S>
concept scalar = std::is_arithmetic_v<std::remove_cvref_t<S>> || std::is_same_v<std::remove_cvref_t<S>, half> ||
                 std::is_same_v<std::remove_cvref_t<S>, bf16>;

//! An expression or a scalar.
template <class X>
concept operand = expression<X> || scalar<X>;

//! A tensor-valued operand that is a leaf of the tree: a view of memory.
//! `Tag` is void, or marks a layer's parameter (detail::layer_param, given
//! by loom::layer): every leaf with that tag in one layer call is the same
//! argument, which the device's elementwise kernel loads once per vector
//! step (a run-time check confirms the data are the same).
template <class T, std::size_t R, class S, class Tag = void>
struct leaf_node : detail::node_tag {
  using value_type = std::remove_const_t<T>;
  using space = S;
  static constexpr std::size_t rank = R;
  view<const value_type, R, S> v;

  explicit leaf_node(const view<const value_type, R, S>& v_) : v(v_) {}
  shape<R> extents() const { return v.extents(); }
};

//! A C++ scalar inside an expression (broadcasts to any shape).
template <class C>
struct scalar_node : detail::node_tag {
  using value_type = detail::scalar_element_t<C>;
  using space = void;
  static constexpr std::size_t rank = 0;
  C value;

  explicit scalar_node(C v) : value(v) {}
  shape<0> extents() const { return {}; }
};

namespace detail {
template <class X>
inline constexpr bool is_scalar_node = false;
template <class C>
inline constexpr bool is_scalar_node<scalar_node<C>> = true;
template <class X>
inline constexpr bool is_leaf_node = false;
template <class T, std::size_t R, class S, class Tag>
inline constexpr bool is_leaf_node<leaf_node<T, R, S, Tag>> = true;

//! The position of the loom::layer argument that node N stands for, or
//! no_argument: nn/layer.hpp specializes it for the leaves of a layer's
//! parameters, grad/derive.hpp for the inputs loom::grad marks.
inline constexpr std::size_t no_argument = ~std::size_t{0};
template <class N>
struct layer_argument_index : std::integral_constant<std::size_t, no_argument> {};
//! True for a node that stands for an argument of a loom::layer.
template <class N>
struct is_layer_argument : std::bool_constant<layer_argument_index<N>::value != no_argument> {};

template <class T, std::size_t R, class S, class Tag>
struct children_of<leaf_node<T, R, S, Tag>> : no_children<leaf_node<T, R, S, Tag>> {};
template <class C>
struct children_of<scalar_node<C>> : no_children<scalar_node<C>> {};

//! Turns an operand into a node: views and tensors become leaves, scalars scalar nodes.
template <class X>
auto as_node(const X& x) {
  if constexpr (is_node<X>) {
    return x;
  } else if constexpr (scalar<X>) {
    return scalar_node<X>(x);
  } else {
    auto v = as_view(x);
    using V = decltype(v);
    return leaf_node<typename V::value_type, V::rank, typename V::space>(v);
  }
}
template <class X>
using node_t = decltype(as_node(std::declval<const X&>()));

// Promotion over the children of a map: tensors first, then scalars.
template <class Promoted, class... Ch>
struct promote_children;
template <class Promoted>
struct promote_children<Promoted> {
  using type = Promoted;
};
template <class Promoted, class C, class... Rest>
struct promote_children<Promoted, C, Rest...> {
  using next =
      std::conditional_t<is_scalar_node<C>, Promoted,
                         std::conditional_t<std::is_void_v<Promoted>, typename C::value_type,
                                            promote_t<std::conditional_t<std::is_void_v<Promoted>, bool, Promoted>,
                                                      typename C::value_type>>>;
  using type = typename promote_children<next, Rest...>::type;
};
template <class Promoted, class... Ch>
struct apply_scalars;
template <class Promoted>
struct apply_scalars<Promoted> {
  using type = Promoted;
};
template <class Promoted, class C, class... Rest>
struct apply_scalars<Promoted, C, Rest...> {
  using next = std::conditional_t<is_scalar_node<C>, apply_scalar_t<Promoted, typename C::value_type>, Promoted>;
  using type = typename apply_scalars<next, Rest...>::type;
};

// F::result_type when the functor fixes its result type (cast_to), else D.
template <class F, class D, class = void>
struct result_type_or {
  using type = D;
};
template <class F, class D>
struct result_type_or<F, D, std::void_t<typename F::result_type>> {
  using type = typename F::result_type;
};
template <class F, class = void>
inline constexpr bool floating_op = false;
template <class F>
inline constexpr bool floating_op<F, std::void_t<decltype(F::floating)>> = F::floating;

template <class, class T>
using repeat_t = T;

// The types of a map node: promoted (the promoted input type), cin (what the
// functor receives), value_type (the element type of the result).
template <class F, class... Ch>
struct map_types {
  using tensors = typename promote_children<void, Ch...>::type;
  static_assert(!std::is_void_v<tensors>, "loom: an expression needs at least one tensor operand");
  using promoted0 = typename apply_scalars<tensors, Ch...>::type;
  using promoted = std::conditional_t<floating_op<F> && !is_floating_v<promoted0>, float, promoted0>;
  using cin = compute_t<promoted>;
  using result = std::remove_cvref_t<decltype(std::declval<const F&>()(std::declval<repeat_t<Ch, cin>>()...))>;
  using value_type =
      typename result_type_or<F, std::conditional_t<std::is_same_v<result, cin>, promoted, result>>::type;
  static_assert(element<value_type>,
                "loom: a function used in loom::map must return one of loom's element types "
                "(bool, int8_t, uint8_t, int32_t, int64_t, half, bf16, float, double, e4m3, e5m2, e8m0)");
};

template <class... S>
struct common_space_of {
  using type = void;
};
template <class A, class... Rest>
struct common_space_of<A, Rest...> {
  using type = common_space_t<A, typename common_space_of<Rest...>::type>;
};

template <class... Ch>
inline constexpr std::size_t max_rank_of = std::max({std::size_t{0}, Ch::rank...});

// The lowest and (as no_argument - 1 - it) the highest layer argument
// position in a tree, by tree_min_v.
template <class N>
struct argument_low : layer_argument_index<N> {};
template <class N>
struct argument_high_complement
    : std::integral_constant<std::size_t, layer_argument_index<N>::value == no_argument
                                              ? no_argument
                                              : no_argument - 1 - layer_argument_index<N>::value> {};

//! What an operand is to the user, for error messages: "argument 1 of the
//! layer, counting from 0" for a layer's argument, "computed from argument
//! 1 ..." for a subtree whose only argument that is; empty where loom does
//! not know.
template <class N>
std::string operand_label() {
  if constexpr (is_node<N>) {
    constexpr std::size_t low = tree_min_v<N, argument_low>;
    constexpr std::size_t high = no_argument - 1 - tree_min_v<N, argument_high_complement>;
    if constexpr (low != no_argument && low == high) {
      const std::string which = "argument " + std::to_string(low) + " of the layer, counting from 0";
      return is_layer_argument<N>::value ? which : "computed from " + which;
    }
  }
  return {};
}

// `a` and `b` do not broadcast at axis o (b's axis d); `a_is` and `b_is` say
// what they are (or are empty).
template <std::size_t R, std::size_t RB>
LOOM_COLD void throw_incompatible_shapes(const shape<R>& a, const shape<RB>& b, std::size_t o, std::size_t d,
                                         const std::string& a_is = {}, const std::string& b_is = {}) {
  std::string which;
  if (!a_is.empty()) which += "; " + shape_string(a) + " is " + a_is;
  if (!b_is.empty()) which += "; " + shape_string(b) + " is " + b_is;
  throw shape_error("loom: cannot broadcast shapes " + shape_string(a) + " and " + shape_string(b) + " (axis " +
                    std::to_string(o) + ": " + std::to_string(a[o]) + " vs " + std::to_string(b[d]) + ")" + which);
}

//! NumPy broadcasting of `b` into the running shape `acc` (right-aligned).
//! False when they do not broadcast: `acc` is left as it was, and `o` and
//! `d` are the axes (of acc and of b) that differ.
template <std::size_t R, std::size_t RB>
bool broadcast_step(shape<R>& acc, const shape<RB>& b, bool& first, std::size_t& o, std::size_t& d) {
  static_assert(RB <= R);
  if (first) {
    acc.fill(1);
    first = false;
  }
  const shape<R> before = acc;
  for (d = 0; d != RB; ++d) {
    o = R - RB + d;
    if (acc[o] == b[d] || b[d] == 1) continue;
    if (acc[o] == 1) {
      acc[o] = b[d];
      continue;
    }
    acc = before;
    return false;
  }
  return true;
}

//! broadcast_step that throws shape_error naming both shapes.
template <std::size_t R, std::size_t RB>
void broadcast_into(shape<R>& acc, const shape<RB>& b, bool& first) {
  std::size_t o = 0, d = 0;
  if (!broadcast_step(acc, b, first, o, d)) throw_incompatible_shapes(acc, b, o, d);
}
}  // namespace detail

//! The generic n-ary node: applies the stateless (or small, trivially
//! copyable) functor F to the children's values element by element, after
//! promoting them (see promote.hpp). One node type serves every elementwise
//! op; new ops are new functors. Lazy: nothing runs until assignment.
template <class F, class... Ch>
struct map_node : detail::node_tag {
  using types = detail::map_types<F, Ch...>;
  using value_type = typename types::value_type;
  using space = typename detail::common_space_of<typename Ch::space...>::type;
  static constexpr std::size_t rank = detail::max_rank_of<Ch...>;
  F f;
  detail::tuple<Ch...> children;

  map_node(const F& f_, const Ch&... ch) : f(f_), children(ch...) {}

  //! The broadcast shape of the children; throws shape_error naming the shapes.
  shape<rank> extents() const {
    shape<rank> s{};
    bool first = true;
    extents_impl(s, first, std::index_sequence_for<Ch...>{});
    if (first) s.fill(1);
    return s;
  }

 private:
  // Broadcasts the children's shapes together; the error names the child
  // that does not fit and, where the shape so far is one child's alone,
  // that child (operand_label: a layer's argument).
  template <std::size_t... I>
  void extents_impl(shape<rank>& s, bool& first, std::index_sequence<I...>) const {
    std::size_t shaped = 0, from = 0;  // the children of rank > 0 so far, and the first of them
    const auto label = [](std::size_t k) {
      std::string t;
      ((k == I ? (void)(t = detail::operand_label<Ch>()) : (void)0), ...);
      return t;
    };
    const auto add = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
      const auto ext = detail::get<K>(children).extents();
      std::size_t o = 0, d = 0;
      if (!detail::broadcast_step(s, ext, first, o, d))
        detail::throw_incompatible_shapes(s, ext, o, d, shaped == 1 ? label(from) : std::string(), label(K));
      if (ext.size() > 0 && shaped++ == 0) from = K;
    };
    (add(std::integral_constant<std::size_t, I>{}), ...);
  }
};
}  // namespace loom

namespace loom {
//! Presents an expression with a larger, broadcast shape (NumPy rules); a
//! shape annotation only: it adds no work to the kernel.
template <class E, std::size_t R>
struct broadcast_node : detail::node_tag {
  using value_type = typename E::value_type;
  using space = typename E::space;
  static constexpr std::size_t rank = R;
  E e;
  shape<R> ext;

  broadcast_node(const E& e_, const shape<R>& s) : e(e_), ext(s) {
    static_assert(E::rank <= R, "loom: broadcast_to() cannot lower the rank");
    shape<R> acc{};
    bool first = true;
    detail::broadcast_into(acc, s, first);
    detail::broadcast_into(acc, e.extents(), first);
    if (acc != s) detail::throw_cannot_broadcast(e.extents(), s);
  }
  shape<R> extents() const { return ext; }
};

namespace detail {
template <class F, class... Ch>
struct children_of<map_node<F, Ch...>> {
  using types = type_list<Ch...>;
  template <std::size_t I, class M>
  LOOM_HD static auto& get(M& n) {
    return detail::get<I>(n.children);
  }
  template <class... C>
  using rebind = map_node<F, C...>;
  template <class... C>
  static auto rebuild(const map_node<F, Ch...>& n, const C&... c) {
    return map_node<F, C...>(n.f, c...);
  }
};
template <class E, std::size_t R>
struct children_of<broadcast_node<E, R>> : one_child_e<E> {
  template <class C>
  using rebind = broadcast_node<C, R>;
  template <class C>
  static auto rebuild(const broadcast_node<E, R>& n, const C& c) {
    return broadcast_node<C, R>(c, n.ext);
  }
};
// The binder binds a broadcast as its operand (broadcast to the output).
template <class E, std::size_t R>
struct bound_as_child<broadcast_node<E, R>> : std::true_type {};
//! Whether node kind N computes each element from its children's elements
//! at the same coordinates: a map or a broadcast (the walks that follow
//! values element by element enter these and stop at other kinds).
template <class N>
struct elementwise_inner : std::false_type {};
template <class F, class... C>
struct elementwise_inner<map_node<F, C...>> : std::true_type {};
template <class E, std::size_t R>
struct elementwise_inner<broadcast_node<E, R>> : std::true_type {};

//! Calls g(leaf) for every leaf_node (a view of memory) of a tree, under
//! every node kind, row reductions included.
template <class N>
struct leaf_node_kind : std::bool_constant<is_leaf_node<N>> {};
template <class N, class F>
void for_each_leaf(const N& n, F&& g) {
  visit_if<leaf_node_kind>(n, g);
}
}  // namespace detail

//! Lazily applies `f` to the elements of the operands, broadcast together:
//! the way to write a new fused op. `f` is any callable usable on both
//! executors (`LOOM_HD` operator(), trivially copyable). Operands are promoted
//! as PyTorch does (promote.hpp) and half/bf16 are passed as float.
//! Evaluates in one kernel as part of the assignment that contains it.
//! Example: `y = loom::map(my_fn{}, x, w);`
template <class F, operand... X>
  requires(expression<X> || ...)
[[nodiscard]] auto map(const F& f, const X&... x) {
  using node = map_node<F, detail::node_t<X>...>;
  static_assert(!std::is_same_v<typename node::space, detail::mixed_space>,
                "loom: an expression mixes host and device tensors; copy one side first with loom::to_device(x) or "
                "loom::to_host(x)");
  return node(f, detail::as_node(x)...);
}

//! Broadcasts an expression to `s` (NumPy rules), lazily.
template <expression E, std::size_t R>
[[nodiscard]] auto broadcast_to(const E& e, const shape<R>& s) {
  return broadcast_node<detail::node_t<E>, R>(detail::as_node(e), s);
}

namespace fn {
//! Converts to T (rounding to T's precision), then computes in compute_t<T>.
template <class T>
struct cast_to {
  using result_type = T;
  //! The gradient passes through a cast to a floating type unchanged.
  template <std::size_t, class Y, class A>
  static auto grad(const Y&, const A& a) {
    return a;
  }
  template <class U>
  LOOM_HD compute_t<T> operator()(U x) const {
    return detail::convert<compute_t<T>>(detail::convert<T>(x));
  }
};

//! cond ? a : b, with cond already promoted with a and b (non-zero is true).
//! The gradient goes to the branch taken (0 to the other).
struct where {
  template <std::size_t I, class Y, class A>
  static auto grad(const Y& y, const A& a);
  template <class T>
  LOOM_HD T operator()(T c, T a, T b) const {
    return c != T(0) ? a : b;
  }
};
}  // namespace fn

//! Lazily converts the elements of `e` to T (float to int truncates; to bool
//! is `!= 0`; to half/bf16/fp8 rounds to nearest even; an fp8 overflow gives
//! NaN for e4m3 and infinity for e5m2, as ml_dtypes and PyTorch do).
//! Example: `y = loom::cast<loom::bf16>(x * 2);`
template <class T, expression E>
[[nodiscard]] auto cast(const E& e) {
  static_assert(element<T>, "loom: cast<T> needs one of loom's element types");
  return map(fn::cast_to<T>{}, e);
}

//! Elementwise `cond ? a : b`; a and b are promoted together, cond is any
//! type (non-zero is true). Example: `y = where(x > 0, x, 0.1f * x);`
template <operand C, operand A, operand B>
  requires(expression<C> || expression<A> || expression<B>)
[[nodiscard]] auto where(const C& cond, const A& a, const B& b) {
  // Only a and b decide the result type (PyTorch's rule): a condition of
  // another dtype becomes bool first, so it neither widens nor narrows it.
  if constexpr (scalar<C>) {
    if constexpr (std::is_same_v<C, half> || std::is_same_v<C, bf16>)
      return map(fn::where{}, static_cast<float>(cond) != 0.0f, a, b);
    else
      return map(fn::where{}, cond != C(0), a, b);
  } else if constexpr (std::is_same_v<typename detail::node_t<C>::value_type, bool>) {
    return map(fn::where{}, cond, a, b);
  } else {
    return map(fn::where{}, cast<bool>(cond), a, b);
  }
}

template <std::size_t I, class Y, class A>
auto fn::where::grad(const Y& y, const A& a) {
  static_assert(I == 1 || I == 2, "loom: where's condition has no gradient");
  if constexpr (I == 1)
    return loom::where(detail::get<0>(y.children), a, 0);
  else
    return loom::where(detail::get<0>(y.children), 0, a);
}
}  // namespace loom
