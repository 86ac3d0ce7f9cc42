// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <type_traits>

#include "loom/exec/assign.hpp"
#include "loom/exec/rows.hpp"
#include "loom/expr/expression.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/ops/compare.hpp"
#include "loom/ops/math.hpp"
#include "loom/tensor/tensor.hpp"

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
//! r = rsqrt(mean(x^2) + eps), g = dy * weight. One kernel, two passes.
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
//! axes into N first) and a weight of shape [C]. Deterministic (no atomics).
//! Three kernels: the row statistics (mean and rstd, one row kernel writing
//! [N, 2]), dx (one row kernel, two passes), and the column sums dweight =
//! sum_rows(dy * xhat) and dbias = sum_rows(dy) (one row kernel over the
//! transposed views writing both, via assign_pair; it reads columns, so it is
//! strided on the GPU).
//! Statistics are kept in float (double for double data) in a pool temporary.
template <tensor_like X, tensor_like W, tensor_like D>
[[nodiscard]] auto layer_norm_backward(const X& x_in, const W& w_in, const D& dy_in, double eps = 1e-5) {
  const auto x = detail::as_view(x_in);
  const auto w = detail::as_view(w_in);
  const auto dy = detail::as_view(dy_in);
  using V = decltype(x);
  using T = typename V::value_type;
  using S = typename V::space;
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  static_assert(V::rank == 2 && decltype(w)::rank == 1, "loom: layer_norm_backward takes x, dy [N, C] and weight [C]");
  detail::check_norm_grad_shapes(x, dy, "layer_norm_backward");
  const index_t n = x.extent(0), c = x.extent(1);
  tensor<A, 2, S> stats({n, 2});  // column 0: mean, column 1: rstd
  assign(stats, where(column_index(stats) == 0, layer_norm_mean(x), layer_norm_rstd(x, eps)));
  const auto mean = stats.slice(whole, range(0, 1));
  const auto rstd = stats.slice(whole, range(1, 2));
  const auto xhat = (detail::as_node(x) - mean) * rstd;
  const auto g = detail::as_node(dy) * w;
  layer_norm_grads<T, S> out{tensor<T, 2, S>(x.extents()), tensor<T, 1, S>({c}), tensor<T, 1, S>({c})};
  assign(out.dx, rstd * (g - row_mean(g) - xhat * row_mean(g * xhat)));
  // Column sums: rows of the transposed views; mean and rstd become [1, N].
  const auto mean_t = mean.t(), rstd_t = rstd.t();
  assign_pair(out.dweight.view().unsqueeze(1), row_sum(dy.t() * (x.t() - mean_t) * rstd_t),
              out.dbias.view().unsqueeze(1), row_sum(dy.t()));
  return out;
}

//! All gradients of rms_norm for x, dy [N, C] and weight [C]. Three kernels:
//! rstd per row, dx (one row kernel), dweight = sum_rows(dy * x * rstd)
//! (a row kernel over the transposed views). Deterministic.
template <tensor_like X, tensor_like W, tensor_like D>
[[nodiscard]] auto rms_norm_backward(const X& x_in, const W& w_in, const D& dy_in, double eps = 1e-6) {
  const auto x = detail::as_view(x_in);
  const auto w = detail::as_view(w_in);
  const auto dy = detail::as_view(dy_in);
  using V = decltype(x);
  using T = typename V::value_type;
  using S = typename V::space;
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  static_assert(V::rank == 2 && decltype(w)::rank == 1, "loom: rms_norm_backward takes x, dy [N, C] and weight [C]");
  detail::check_norm_grad_shapes(x, dy, "rms_norm_backward");
  const index_t n = x.extent(0), c = x.extent(1);
  tensor<A, 2, S> r({n, 1});
  assign(r, rms_norm_rstd(x, eps));
  const auto z = detail::as_node(x);
  const auto g = detail::as_node(dy) * w;
  rms_norm_grads<T, S> out{tensor<T, 2, S>(x.extents()), tensor<T, 1, S>({c})};
  assign(out.dx, r * (g - z * (r * r) * row_mean(g * z)));
  assign(out.dweight.view().unsqueeze(1), row_sum(dy.t() * x.t() * r.view().t()));
  return out;
}
}  // namespace loom
