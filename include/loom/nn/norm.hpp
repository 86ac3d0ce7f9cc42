// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "loom/exec/rows.hpp"
#include "loom/expr/expression.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/ops/math.hpp"

// Normalization layers over the last axis, written as loom expressions. A
// constant row gives a finite output (its centred values are 0; eps keeps
// rsqrt finite).
namespace loom {
//! Mean of each row (shape [..., 1]): `row_mean(x)`.
template <expression E>
[[nodiscard]] auto layer_norm_mean(const E& x) {
  return row_mean(detail::as_node(x));
}

//! 1 / sqrt(variance + eps) of each row (biased variance, as PyTorch's layer
//! norm), shape [..., 1].
template <expression E>
[[nodiscard]] auto layer_norm_rstd(const E& x, double eps = 1e-5) {
  const auto z = detail::as_node(x);
  const auto c = z - row_mean(z);
  return rsqrt(row_mean(c * c) + eps);
}

//! Layer normalization: (x - mean) * rstd * weight + bias, over the last axis.
//! One kernel: two reduction passes per row (mean, variance), one write.
//! Example: `y = loom::layer_norm(x, gamma, beta, 1e-5);`
template <expression E, operand W, operand B>
[[nodiscard]] auto layer_norm(const E& x, const W& weight, const B& bias, double eps = 1e-5) {
  const auto z = detail::as_node(x);
  const auto c = z - row_mean(z);
  return c * rsqrt(row_mean(c * c) + eps) * weight + bias;
}

//! Gradient of layer_norm with respect to x, recomputing the row statistics
//! from x: rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight.
//! One kernel, four reduction passes per row (mean and variance of x, then
//! the two means of g).
template <expression E, operand W, expression D>
[[nodiscard]] auto layer_norm_backward_input(const E& x, const W& weight, const D& dy, double eps = 1e-5) {
  const auto z = detail::as_node(x);
  const auto c = z - row_mean(z);
  const auto rstd = rsqrt(row_mean(c * c) + eps);
  const auto xhat = c * rstd;
  const auto g = detail::as_node(dy) * weight;
  return rstd * (g - row_mean(g) - xhat * row_mean(g * xhat));
}

//! RMS normalization: x * rsqrt(mean(x^2) + eps) * weight. One kernel, one
//! reduction pass per row.
//! Example: `y = loom::rms_norm(x, gamma, 1e-6);`
template <expression E, operand W>
[[nodiscard]] auto rms_norm(const E& x, const W& weight, double eps = 1e-6) {
  const auto z = detail::as_node(x);
  return z * rsqrt(row_mean(z * z) + eps) * weight;
}

//! 1 / sqrt(mean(x^2) + eps) of each row, shape [..., 1].
template <expression E>
[[nodiscard]] auto rms_norm_rstd(const E& x, double eps = 1e-6) {
  const auto z = detail::as_node(x);
  return rsqrt(row_mean(z * z) + eps);
}

//! Gradient of rms_norm with respect to x: r * (g - x * r^2 * mean(g * x)),
//! r = rsqrt(mean(x^2) + eps), g = dy * weight. One kernel, two passes.
template <expression E, operand W, expression D>
[[nodiscard]] auto rms_norm_backward_input(const E& x, const W& weight, const D& dy, double eps = 1e-6) {
  const auto z = detail::as_node(x);
  const auto r = rsqrt(row_mean(z * z) + eps);
  const auto g = detail::as_node(dy) * weight;
  return r * (g - z * (r * r) * row_mean(g * z));
}
}  // namespace loom
