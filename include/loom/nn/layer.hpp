// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <utility>

#include "loom/expr/expression.hpp"

namespace loom {
namespace detail {
//! The tag of parameter I of the layer whose body is F: the leaves of one
//! layer call's arguments carry it (leaf_node's Tag), so every use of a
//! parameter in the body is, by its type, the same argument.
template <class F, std::size_t I>
struct layer_param {};

//! A leaf of a layer's parameter I is the layer's argument I.
template <class T, std::size_t R, class S, class F, std::size_t I>
struct layer_argument_index<leaf_node<T, R, S, layer_param<F, I>>> : std::integral_constant<std::size_t, I> {};

// A tensor argument becomes a leaf tagged as parameter Tag; a leaf that
// already carries a tag (a parameter of an enclosing layer, passed on)
// keeps it, and other expressions enter as they are.
template <class Tag, class N>
auto tag_param(const N& n) {
  if constexpr (is_leaf_node<N>) {
    if constexpr (std::is_same_v<N, leaf_node<typename N::value_type, N::rank, typename N::space>>)
      return leaf_node<typename N::value_type, N::rank, typename N::space, Tag>(n.v);
    else
      return n;
  } else {
    return n;
  }
}
}  // namespace detail

//! A user layer: a function from expressions to an expression, called with
//! tensors. Inside, every use of a parameter is the same node type over the
//! same data, so the row executor computes identical reductions once, the
//! device's elementwise kernel loads each tensor argument once per vector
//! step however often the body uses it, and the whole layer stays one
//! kernel per assignment.
template <class F>
struct layer_fn {
  F f;
  template <operand... X>
  [[nodiscard]] auto operator()(const X&... x) const {
    return call(std::index_sequence_for<X...>{}, x...);
  }

 private:
  template <std::size_t... I, class... X>
  auto call(std::index_sequence<I...>, const X&... x) const {
    return f(detail::tag_param<detail::layer_param<F, I>>(detail::as_node(x))...);
  }
};

//! Wraps a generic lambda as a fused layer.
//! Example:
//!   constexpr auto my_softmax = loom::layer([](auto x) {
//!     auto e = exp(x - row_max(x));
//!     return e / row_sum(e);
//!   });
//!   y = my_softmax(logits);  // one kernel
template <class F>
constexpr layer_fn<F> layer(F f) {
  return {f};
}
}  // namespace loom
