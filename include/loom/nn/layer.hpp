// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <utility>

#include "loom/expr/expression.hpp"

namespace loom {
//! A user layer: a function from expressions to an expression, called with
//! tensors. Inside, every use of a parameter is the same node type over the
//! same data, so the row executor computes identical reductions once and the
//! whole layer stays one kernel per assignment.
template <class F>
struct layer_fn {
  F f;
  template <operand... X>
  [[nodiscard]] auto operator()(const X&... x) const {
    return f(detail::as_node(x)...);
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
