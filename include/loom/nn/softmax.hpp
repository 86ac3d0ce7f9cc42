// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "loom/exec/assign.hpp"
#include "loom/exec/rows/run.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/ops/math.hpp"

// Softmax-family layers along the last axis, each an ordinary loom
// expression: assigning one is ONE kernel that reduces each row (two passes:
// max, then sum of exponentials) and writes the output row. A row whose
// entries are all -inf (fully masked) gives NaN, as PyTorch does.
namespace loom {
//! softmax(x)_i = exp(x_i - max x) / sum_j exp(x_j - max x), over the last axis.
//! One kernel, 2 reduction passes per row over x's row cached in shared
//! memory (when it fits; docs/04_layers.md), 1 write.
//! Example: `y = loom::softmax(logits);`
template <expression E>
[[nodiscard]] auto softmax(const E& x) {
  const auto z = detail::as_node(x);
  const auto m = stop_gradient(row_max(z));  // a shift: the gradient does not flow through it
  return exp(z - m) / row_sum(exp(z - m));
}

//! softmax(x / temperature + bias): an additive bias or mask (-inf masks an
//! entry) broadcast to x, fused into the same kernel.
//! Example: `y = loom::softmax(scores, causal_mask, 0.7);`
template <expression E, operand B>
[[nodiscard]] auto softmax(const E& x, const B& bias, double temperature = 1.0) {
  return softmax(detail::as_node(x) / temperature + bias);
}

//! log_softmax(x)_i = x_i - max x - log(sum_j exp(x_j - max x)). One kernel.
template <expression E>
[[nodiscard]] auto log_softmax(const E& x) {
  const auto z = detail::as_node(x);
  const auto m = stop_gradient(row_max(z));
  return z - m - log(row_sum(exp(z - m)));
}

//! log_softmax(x / temperature + bias), one kernel.
template <expression E, operand B>
[[nodiscard]] auto log_softmax(const E& x, const B& bias, double temperature = 1.0) {
  return log_softmax(detail::as_node(x) / temperature + bias);
}

//! Gradient of softmax with respect to its input, given the forward output
//! y and the output gradient dy: y * (dy - sum_j dy_j y_j), divided by the
//! temperature if one was used. One kernel, one reduction pass per row.
template <expression Y, expression D>
[[nodiscard]] auto softmax_backward(const Y& y, const D& dy, double temperature = 1.0) {
  const auto yn = detail::as_node(y);
  const auto dn = detail::as_node(dy);
  return yn * (dn - row_sum(dn * yn)) / temperature;
}

//! Gradient of log_softmax given its output y (log-probabilities) and dy:
//! dy - exp(y) * sum_j dy_j, divided by the temperature. One kernel.
template <expression Y, expression D>
[[nodiscard]] auto log_softmax_backward(const Y& y, const D& dy, double temperature = 1.0) {
  const auto yn = detail::as_node(y);
  const auto dn = detail::as_node(dy);
  return (dn - exp(yn) * row_sum(dn)) / temperature;
}
}  // namespace loom
