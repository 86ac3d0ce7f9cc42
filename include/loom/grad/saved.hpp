// SPDX-License-Identifier: Apache-2.0
#pragma once

// loom::saved<K>(e): marks a value of a layer that loom::grad may read from a
// tensor saved by the forward pass instead of recomputing it
// (docs/08_gradients.md, "Saving versus recomputing"), and the tree surgery
// that puts the saved tensors in a derived gradient.

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/row_value.hpp"
#include "loom/expr/shared_rows.hpp"
#include "loom/expr/traverse.hpp"

namespace loom {
namespace fn {
//! The identity that names a value K of a layer (loom::saved<K>).
template <std::size_t K>
struct saved {
  template <class T>
  LOOM_HD T operator()(T x) const {
    return x;
  }
  //! loom::grad: the adjoint passes through unchanged.
  template <std::size_t I, class Y, class A>
  static auto grad(const Y&, const A& a) {
    return a;
  }
};
}  // namespace fn

//! e itself, named K for loom::grad: `loom::grad<...>(layer).with_saved(...)`
//! hands the backward a tensor holding e's values (as the forward computed
//! them), and every copy of e that the derived gradient needs reads that
//! tensor instead of computing e. Mark the row reductions (a row's max, sum,
//! mean or mean square): each costs the backward a pass over the row.
//! `loom::saved_value<K>(layer)(args...)` gives e as an expression, to
//! assign the tensor from. Nothing changes where no tensor is given.
//! Example: `auto e = exp(z - stop_gradient(loom::saved<0>(row_max(z))));`
template <std::size_t K, expression E>
[[nodiscard]] auto saved(const E& e) {
  return map(fn::saved<K>{}, e);
}

namespace detail::autodiff {
template <std::size_t K>
struct is_saved {
  template <class N>
  struct test : std::false_type {};
  template <class E>
  struct test<map_node<fn::saved<K>, E>> : std::true_type {};
};

template <std::size_t K, class N>
struct saved_operand {
  using type = void;
};
template <std::size_t K, class E>
struct saved_operand<K, map_node<fn::saved<K>, E>> {
  using type = E;
};

// tree_fold that appends the operand type of each loom::saved<K> after its
// subtree (post-order), once per type.
template <std::size_t K>
struct saved_collector {
  template <class S, class N>
  using pre = fold_step<S, true>;
  template <class S, class N>
  struct post {
    using E = typename saved_operand<K, N>::type;
    using type = typename std::conditional_t<std::is_void_v<E>, std::type_identity<S>, append_unique<S, E>>::type;
  };
};
//! The operand types of every loom::saved<K> in tree N (one per copy: the
//! forward's row reductions carry their place in the tree), as a type_list.
template <std::size_t K, class N>
using saved_operands_t = tree_fold_t<saved_collector<K>, type_list<>, N>;

//! A saved tensor's leaf and the operand types it stands for.
template <class List, class Leaf>
struct saved_binding {
  Leaf leaf;
};
//! Stands for no saved tensor (loom::skip in with_saved).
struct no_saved {};

template <class B>
struct binding_list {
  using type = type_list<>;
};
template <class List, class Leaf>
struct binding_list<saved_binding<List, Leaf>> {
  using type = List;
};
template <class N, class... B>
inline constexpr bool replaced_here = (list_has<typename binding_list<B>::type, N>::value || ...);
template <class... B>
struct replaced_by {
  template <class N>
  struct test : std::bool_constant<replaced_here<N, B...>> {};
};

template <class N, class B0, class... B>
const auto& first_binding(const B0& b0, const B&... b) {
  if constexpr (list_has<typename binding_list<B0>::type, N>::value)
    return b0;
  else
    return first_binding<N>(b...);
}

template <class N, class L>
void check_saved_shape(const N& n, const L& leaf) {
  if (leaf.extents() != n.extents())
    throw shape_error("loom: grad: a saved tensor has shape " + shape_string(leaf.extents()) +
                      " but the value it stands for (loom::saved) has shape " + shape_string(n.extents()));
}

// Replaces the copies of saved values (rewrite_along; the run-time
// companion is the bindings): a node that a binding stands for becomes its
// tensor's leaf, checked for shape, and the walk does not enter it (a saved
// value inside another is replaced only where the outer one is not); a
// subtree that holds no such node is kept; every other node kind is entered
// through its children_of and rebuilt over its children's images.
template <class... B>
struct saved_replacer {
  template <class N, class State>
  static constexpr bool stops = replaced_here<N, B...> || !tree_any_v<N, replaced_by<B...>::template test>;
  template <class State, class N>
  static auto stop(const N& n, const std::tuple<const B&...>& bindings) {
    if constexpr (replaced_here<N, B...>) {
      const auto& leaf =
          std::apply([](const auto&... b) -> const auto& { return first_binding<N>(b...); }, bindings).leaf;
      check_saved_shape(n, leaf);
      // A saved row reduction is one value per row (the executors may compute
      // what depends on it once per row).
      if constexpr (is_row_reduction<N>::value || is_shared_row<N>::value)
        return thread_on<State>(row_value_node<std::remove_cvref_t<decltype(leaf)>>(leaf));
      else
        return thread_on<State>(leaf);
    } else {
      return thread_on<State>(n);
    }
  }
  template <class State, class N, class M>
  static auto finish(const N&, const M& m, const std::tuple<const B&...>&) {
    return thread_on<State>(m);
  }
};

//! Tree n with every copy of a saved value replaced by its tensor's leaf,
//! outermost first (a saved value inside another is replaced only where the
//! outer one is not).
template <class N, class... B>
auto replace_saved(const N& n, const B&... b) {
  const std::tuple<const B&...> bindings(b...);
  return rewrite_along<saved_replacer<B...>, void>(n, bindings).node;
}
}  // namespace detail::autodiff
}  // namespace loom
