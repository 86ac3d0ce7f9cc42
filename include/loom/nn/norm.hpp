// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <type_traits>

#include "loom/exec/assign.hpp"
#include "loom/exec/rows/colsum.hpp"
#include "loom/exec/rows/run.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/ops/compare.hpp"
#include "loom/ops/math.hpp"
#include "loom/tensor/tensor.hpp"

// Normalization layers over the last axis, written as loom expressions. A
// constant row gives exactly the bias (its centred values are exactly 0; eps
// keeps rsqrt finite).
namespace loom {
namespace detail {
// The row mean refined once: m + mean(x - m), m = mean(x). The rounding of
// a float sum leaves m a few ulps off the mean (for a constant row of 0.7
// over 4099 columns, 8 ulps), and centred values x - m then carry that
// error divided by the row's spread (by sqrt(eps) for a constant row). The
// correction is a mean of the small differences x - m, which are exact
// (x and m are close) and sum with little rounding: for a constant row all
// equal, so it is exactly m's error, and the refined mean is exactly the
// row's value. One more reduction pass per row (the corrected two-pass
// algorithm, Chan, Golub and LeVeque).
template <class Z>
auto norm_row_mean(const Z& z) {
  const auto m = row_mean(z);
  return m + row_mean(z - m);
}
}  // namespace detail

//! Mean of each row (shape [..., 1]) as layer_norm computes it: the row mean
//! refined once by the mean of the differences from it (exact for a constant
//! row). Two reduction passes per row when assigned.
template <expression E>
[[nodiscard]] auto layer_norm_mean(const E& x) {
  return detail::norm_row_mean(detail::as_node(x));
}

//! 1 / sqrt(variance + eps) of each row (biased variance, as PyTorch's layer
//! norm, around layer_norm_mean), shape [..., 1]. Three reduction passes per
//! row when assigned.
template <expression E>
[[nodiscard]] auto layer_norm_rstd(const E& x, double eps = 1e-5) {
  const auto z = detail::as_node(x);
  const auto c = z - detail::norm_row_mean(z);
  return rsqrt(row_mean(c * c) + eps);
}

//! Layer normalization: (x - mean) * rstd * weight + bias, over the last axis.
//! One kernel: three reduction passes per row (the mean, its correction, the
//! variance; see layer_norm_mean), one write. A constant row gives exactly
//! the bias.
//! Example: `y = loom::layer_norm(x, gamma, beta, 1e-5);`
template <expression E, operand W, operand B>
[[nodiscard]] auto layer_norm(const E& x, const W& weight, const B& bias, double eps = 1e-5) {
  const auto z = detail::as_node(x);
  const auto c = z - detail::norm_row_mean(z);
  return c * rsqrt(row_mean(c * c) + eps) * weight + bias;
}

//! Gradient of layer_norm with respect to x, recomputing the row statistics
//! from x: rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight.
//! One kernel, four reduction passes per row (the mean of x with the mean of
//! g, the mean's correction, the variance, then the mean of g * xhat).
template <expression E, operand W, expression D>
[[nodiscard]] auto layer_norm_backward_input(const E& x, const W& weight, const D& dy, double eps = 1e-5) {
  const auto z = detail::as_node(x);
  const auto c = z - detail::norm_row_mean(z);
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

//! Residual add and RMS normalization in ONE kernel that writes both the sum
//! h = x + residual and y = rms_norm(h, weight, eps) (the pre-norm block of a
//! transformer). One reduction pass per row, then both outputs.
//! Example: `loom::add_rms_norm(y, h, x, residual, gamma);`
template <tensor_like Y, tensor_like H, operand E, operand R, operand W>
eval_info add_rms_norm(Y&& y, H&& h, const E& x, const R& residual, const W& weight, double eps = 1e-6) {
  const auto sum = detail::as_node(x) + residual;
  return assign_pair(h, sum, y, rms_norm(sum, weight, eps));
}

//! 1 / sqrt(mean(x^2) + eps) of each row, shape [..., 1].
template <expression E>
[[nodiscard]] auto rms_norm_rstd(const E& x, double eps = 1e-6) {
  const auto z = detail::as_node(x);
  return rsqrt(row_mean(z * z) + eps);
}

//! Gradient of rms_norm with respect to x: r * (g - x * r^2 * mean(g * x)),
//! r = rsqrt(mean(x^2) + eps), g = dy * weight. One kernel, one reduction
//! pass per row (both means).
template <expression E, operand W, expression D>
[[nodiscard]] auto rms_norm_backward_input(const E& x, const W& weight, const D& dy, double eps = 1e-6) {
  const auto z = detail::as_node(x);
  const auto r = rsqrt(row_mean(z * z) + eps);
  const auto g = detail::as_node(dy) * weight;
  return r * (g - z * (r * r) * row_mean(g * z));
}
}  // namespace loom

namespace loom {
//! Gradients of layer_norm: input, weight and bias.
template <class T, class S>
struct layer_norm_grads {
  tensor<T, 2, S> dx;
  tensor<T, 1, S> dweight;
  tensor<T, 1, S> dbias;
};

//! Gradients of rms_norm: input and weight.
template <class T, class S>
struct rms_norm_grads {
  tensor<T, 2, S> dx;
  tensor<T, 1, S> dweight;
};

namespace detail {
template <class X, class D>
void check_norm_grad_shapes(const X& x, const D& dy, const char* what) {
  if (x.extents() != dy.extents())
    throw shape_error(std::string("loom: ") + what + ": x has shape " + shape_string(x.extents()) +
                      " but dy has shape " + shape_string(dy.extents()));
}
}  // namespace detail

//! All gradients of layer_norm for x, dy of shape [N, C] (reshape leading
//! axes into N first) and a weight of shape [C]. Deterministic (no atomics;
//! the same input gives the same bits run to run on one device).
//! Two kernels (one launch each, exec/rows/colsum.hpp):
//!  1. a row kernel that recomputes the row statistics from x (4 reduction
//!     passes per row, as layer_norm_backward_input), writes dx, and adds
//!     dy * xhat and dy into per-column accumulators for a fixed block of
//!     consecutive rows per thread block (shared memory on the device; the
//!     partials tensor itself for rows too long for shared memory), then
//!     writes its partial sums to a pool temporary partials [P, 2, C];
//!  2. one small kernel that sums each column's P partials in a fixed order
//!     into dweight and dbias (detail::finish_column_sums).
//! The partials hold float (double for double data); loom::last_column_sums()
//! reports P and where the accumulators lived.
//! Example: `auto g = loom::layer_norm_backward(x, gamma, dy, 1e-5);  // g.dx, g.dweight, g.dbias`
template <tensor_like X, tensor_like W, tensor_like D>
[[nodiscard]] auto layer_norm_backward(const X& x_in, const W& w_in, const D& dy_in, double eps = 1e-5) {
  const auto x = detail::as_view(x_in);
  const auto w = detail::as_view(w_in);
  const auto dy = detail::as_view(dy_in);
  using V = decltype(x);
  using T = typename V::value_type;
  using S = typename V::space;
  static_assert(V::rank == 2 && decltype(w)::rank == 1, "loom: layer_norm_backward takes x, dy [N, C] and weight [C]");
  detail::check_norm_grad_shapes(x, dy, "layer_norm_backward");
  const index_t c = x.extent(1);
  // The same nodes as layer_norm_backward_input, so the extras' reductions
  // are the output's (computed once per row).
  const auto z = detail::as_node(x);
  const auto centred = z - detail::norm_row_mean(z);
  const auto rstd = rsqrt(row_mean(centred * centred) + eps);
  const auto xhat = centred * rstd;
  const auto d = detail::as_node(dy);
  const auto g = d * w;
  layer_norm_grads<T, S> out{tensor<T, 2, S>(x.extents()), tensor<T, 1, S>({c}), tensor<T, 1, S>({c})};
  detail::assign_with_column_sums(out.dx, rstd * (g - row_mean(g) - xhat * row_mean(g * xhat)), out.dweight, d * xhat,
                                  out.dbias, d);
  return out;
}

//! All gradients of rms_norm for x, dy [N, C] and weight [C]. Deterministic.
//! Two kernels, as layer_norm_backward: a row kernel that recomputes
//! r = rsqrt(mean(x^2) + eps) (1 reduction pass per row), writes dx and
//! per-block partial column sums of dy * x * r into partials [P, 1, C], then
//! one row kernel summing the partials into dweight.
//! Example: `auto g = loom::rms_norm_backward(x, gamma, dy, 1e-6);  // g.dx, g.dweight`
template <tensor_like X, tensor_like W, tensor_like D>
[[nodiscard]] auto rms_norm_backward(const X& x_in, const W& w_in, const D& dy_in, double eps = 1e-6) {
  const auto x = detail::as_view(x_in);
  const auto w = detail::as_view(w_in);
  const auto dy = detail::as_view(dy_in);
  using V = decltype(x);
  using T = typename V::value_type;
  using S = typename V::space;
  static_assert(V::rank == 2 && decltype(w)::rank == 1, "loom: rms_norm_backward takes x, dy [N, C] and weight [C]");
  detail::check_norm_grad_shapes(x, dy, "rms_norm_backward");
  const index_t c = x.extent(1);
  const auto z = detail::as_node(x);
  const auto r = rsqrt(row_mean(z * z) + eps);
  const auto d = detail::as_node(dy);
  const auto g = d * w;
  rms_norm_grads<T, S> out{tensor<T, 2, S>(x.extents()), tensor<T, 1, S>({c})};
  detail::assign_with_column_sums(out.dx, r * (g - z * (r * r) * row_mean(g * z)), out.dweight, d * z * r);
  return out;
}
}  // namespace loom
