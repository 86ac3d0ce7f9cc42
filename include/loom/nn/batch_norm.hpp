// SPDX-License-Identifier: Apache-2.0
#pragma once

// Batch normalization over the channel axis (axis 1) of [N, C], [N, C, L] or
// [N, C, H, W] tensors, as PyTorch's batch_norm: training statistics as
// column reductions (loom::mean, loom::var over every axis but 1), running
// statistics with momentum, the inference form, and the gradients of the
// input, the weight and the bias. Written as loom expressions and
// reductions, so the same code runs on the host and the CUDA executor, and
// every sum is deterministic (no atomics).

#include <array>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/exec/assign.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/ops/math.hpp"
#include "loom/reduce/reduce.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
//! batch_norm's constants, with PyTorch's defaults: eps is added to the
//! variance; momentum weighs the batch's statistics in the running ones
//! (running = (1 - momentum) running + momentum batch; the running variance
//! takes the unbiased batch variance).
//! Example: `loom::batch_norm_training(x, gamma, beta, mean, var, {.momentum = 0.01})`
struct batch_norm_options {
  double eps = 1e-5;       //!< added to the variance, above 0
  double momentum = 0.1;   //!< 0 to 1
};

//! batch_norm_training's result: y (x's shape) and the batch statistics the
//! backward reads, [C] each: the mean and 1 / sqrt(biased variance + eps).
template <class T, std::size_t R, class S>
struct batch_norm_result {
  tensor<T, R, S> y;       //!< the normalized, scaled and shifted x
  tensor<T, 1, S> mean;    //!< the batch mean of each channel
  tensor<T, 1, S> invstd;  //!< 1 / sqrt(biased batch variance + eps) of each channel
};

//! batch_norm_backward's result: the gradients of x, the weight and the bias.
template <class T, std::size_t R, class S>
struct batch_norm_gradients {
  tensor<T, R, S> dx;       //!< x's shape
  tensor<T, 1, S> dweight;  //!< [C]: the sum of dy * xhat over every axis but 1
  tensor<T, 1, S> dbias;    //!< [C]: the sum of dy over every axis but 1
};

namespace detail::batch_norm {
template <class X>
using view_of = decltype(detail::as_view(std::declval<const X&>()));

template <class X>
constexpr void require_input() {
  using V = view_of<X>;
  static_assert(V::rank >= 2 && V::rank <= 4,
                "loom: batch_norm takes x of rank 2 ([N, C]), 3 ([N, C, L]) or 4 ([N, C, H, W])");
  static_assert(std::is_floating_point_v<typename V::value_type>,
                "loom: batch_norm takes float or double elements; convert half/bf16 with loom::cast");
}
// x's contract, and that of each [C] vector P beside it.
template <class X, class... P>
constexpr void require_operands() {
  require_input<X>();
  static_assert(((view_of<P>::rank == 1) && ...),
                "loom: batch_norm's weight, bias and statistics are vectors [C] (rank 1)");
  static_assert((std::is_same_v<typename view_of<P>::space, typename view_of<X>::space> && ...),
                "loom: batch_norm's operands must live in one memory space; copy with loom::to_host or "
                "loom::to_device");
  static_assert((std::is_same_v<typename view_of<P>::value_type, typename view_of<X>::value_type> && ...),
                "loom: batch_norm's operands must have one element type; convert one with loom::cast");
}

// The axes a batch statistic reduces: every axis but the channels' (1).
template <std::size_t R>
struct batch_axes;
template <>
struct batch_axes<2> {
  static constexpr int value[1] = {0};
};
template <>
struct batch_axes<3> {
  static constexpr int value[2] = {0, 2};
};
template <>
struct batch_axes<4> {
  static constexpr int value[3] = {0, 2, 3};
};

// A [C] vector seen as [1, C(, 1, 1)], broadcasting over x.
template <std::size_t R, class T, class S>
view<T, R, S> per_channel(const view<T, 1, S>& v) {
  if constexpr (R == 2)
    return v.unsqueeze(0);
  else if constexpr (R == 3)
    return v.unsqueeze(0).unsqueeze(2);
  else
    return v.unsqueeze(0).unsqueeze(2).unsqueeze(3);
}
// A [1, C(, 1, 1)] statistic (contiguous) as a [C] tensor's view.
template <class T, std::size_t R, class S>
auto as_vector(const tensor<T, R, S>& t) {
  return t.view().reshape(shape<1>{t.extent(1)});
}

// Each named vector has one element per channel: `channels`, the extent
// of axis `axis` of the operand described by `of` ("input x [2, 3, 4, 5]").
inline void check_vectors(const char* op, const std::string& of, index_t channels,
                          std::initializer_list<std::pair<const char*, shape<1>>> vectors) {
  for (const auto& [name, s] : vectors)
    if (s[0] != channels)
      throw shape_error(std::string("loom: ") + op + ": " + name + " " + shape_string(s) +
                        " must have one element per " + of + " (" + std::to_string(channels) + ")");
}
template <std::size_t R>
void check_vectors(const char* op, const shape<R>& xs,
                   std::initializer_list<std::pair<const char*, shape<1>>> vectors) {
  check_vectors(op, "channel of input x " + shape_string(xs), xs[1], vectors);
}

// A [C] vector seen as [C, 1, ...] (rank R), broadcasting over a weight's output channels.
template <std::size_t R, class T, class S>
view<T, R, S> per_output_channel(const view<T, 1, S>& v) {
  if constexpr (R == 1)
    return v;
  else
    return per_output_channel<R - 1>(v).unsqueeze(static_cast<int>(R) - 1);
}
// N H W: the values of each channel (the product of every extent but axis 1's).
template <std::size_t R>
index_t values_per_channel(const shape<R>& xs) {
  index_t count = 1;
  for (std::size_t d = 0; d < R; ++d)
    if (d != 1) count *= xs[d];
  return count;
}
inline void check_eps(const char* op, double eps) {
  if (!(eps > 0)) throw value_error(std::string("loom: ") + op + ": eps must be above 0; got " + std::to_string(eps));
}
}  // namespace detail::batch_norm

//! Batch normalization in training mode: per channel c, the batch mean m and
//! biased variance v over every axis but 1, y = (x - m) / sqrt(v + eps)
//! weight[c] + bias[c]; then running_mean and running_var (tensors or views
//! [C], updated in place, last) move toward m and the unbiased variance by
//! `momentum`. Returns y and the statistics the backward reads. Passes: one
//! reduction each for the mean and the variance (Welford; deterministic),
//! one elementwise kernel for 1 / sqrt(v + eps), one for y, one per running
//! statistic. Throws shape_error naming the vector whose extent is not C,
//! value_error for one value per channel (N H W = 1), eps <= 0 or a momentum
//! outside [0, 1]; nothing is written then.
//! Example: `auto [y, mean, invstd] = loom::batch_norm_training(x, gamma, beta, running_mean, running_var);`
template <tensor_like X, tensor_like W, tensor_like B, tensor_like RM, tensor_like RV>
[[nodiscard]] auto batch_norm_training(const X& x, const W& weight, const B& bias, RM&& running_mean,
                                       RV&& running_var, const batch_norm_options& o = {}) {
  namespace bn = detail::batch_norm;
  bn::require_operands<X, W, B, RM, RV>();
  using V = bn::view_of<X>;
  using T = typename V::value_type;
  using S = typename V::space;
  constexpr std::size_t R = V::rank;
  const char* op = "batch_norm_training";
  const auto xv = detail::as_view(x);
  const auto wv = detail::as_view(weight);
  const auto bv = detail::as_view(bias);
  const auto rm = detail::as_view(running_mean);
  const auto rv = detail::as_view(running_var);
  bn::check_vectors(op, xv.extents(),
                    {{"weight", wv.extents()}, {"bias", bv.extents()}, {"running_mean", rm.extents()},
                     {"running_var", rv.extents()}});
  bn::check_eps(op, o.eps);
  if (!(o.momentum >= 0 && o.momentum <= 1))
    throw value_error(std::string("loom: ") + op + ": momentum must lie in [0, 1]; got " + std::to_string(o.momentum));
  const index_t count = bn::values_per_channel(xv.extents());
  if (count < 2)
    throw value_error(std::string("loom: ") + op + ": input x " + shape_string(xv.extents()) + " has " +
                      std::to_string(count) + " value(s) per channel; the batch variance needs at least two");

  const auto mean = loom::mean(xv, bn::batch_axes<R>::value, keepdims);
  const auto var = loom::var(xv, bn::batch_axes<R>::value, keepdims, correction{0});
  batch_norm_result<T, R, S> r{empty_like(xv), tensor<T, 1, S>(shape<1>{xv.extent(1)}),
                               tensor<T, 1, S>(shape<1>{xv.extent(1)})};
  const auto m = bn::as_vector(mean), v = bn::as_vector(var);
  assign(r.invstd, rsqrt(v + o.eps));
  assign(r.mean, m);
  assign(r.y, (xv - bn::per_channel<R>(m)) * bn::per_channel<R>(view<const T, 1, S>(r.invstd.view())) *
                  bn::per_channel<R>(wv) +
              bn::per_channel<R>(bv));
  const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
  assign(rm, rm * (1 - o.momentum) + m * o.momentum);
  assign(rv, rv * (1 - o.momentum) + v * (o.momentum * unbias));
  return r;
}

//! Batch normalization in inference mode: y = (x - running_mean[c]) /
//! sqrt(running_var[c] + eps) weight[c] + bias[c]. One elementwise kernel.
//! Throws shape_error naming the vector whose extent is not C, value_error
//! for eps <= 0.
//! Example: `auto y = loom::batch_norm_inference(x, gamma, beta, running_mean, running_var);`
template <tensor_like X, tensor_like W, tensor_like B, tensor_like RM, tensor_like RV>
[[nodiscard]] auto batch_norm_inference(const X& x, const W& weight, const B& bias, const RM& running_mean,
                                        const RV& running_var, double eps = 1e-5) {
  namespace bn = detail::batch_norm;
  bn::require_operands<X, W, B, RM, RV>();
  constexpr std::size_t R = bn::view_of<X>::rank;
  const char* op = "batch_norm_inference";
  const auto xv = detail::as_view(x);
  const auto rm = detail::as_view(running_mean), rv = detail::as_view(running_var);
  const auto wv = detail::as_view(weight), bv = detail::as_view(bias);
  bn::check_vectors(op, xv.extents(),
                    {{"weight", wv.extents()}, {"bias", bv.extents()}, {"running_mean", rm.extents()},
                     {"running_var", rv.extents()}});
  bn::check_eps(op, eps);
  auto y = empty_like(xv);
  assign(y, (xv - bn::per_channel<R>(rm)) * rsqrt(bn::per_channel<R>(rv) + eps) * bn::per_channel<R>(wv) +
                bn::per_channel<R>(bv));
  return y;
}

//! The gradients of batch_norm_training from dy (x's shape), x, the weight
//! and the saved batch statistics (mean, invstd of batch_norm_result): with
//! xhat = (x - mean) invstd and M = N H W, dbias = sum(dy), dweight =
//! sum(dy xhat), dx = weight invstd (dy - dbias / M - xhat dweight / M).
//! Passes: two column reductions (deterministic) and one elementwise kernel.
//! Throws shape_error when dy's shape is not x's or a vector's extent is not C.
//! Example: `auto [dx, dgamma, dbeta] = loom::batch_norm_backward(dy, x, gamma, r.mean, r.invstd);`
template <tensor_like DY, tensor_like X, tensor_like W, tensor_like M, tensor_like I>
[[nodiscard]] auto batch_norm_backward(const DY& dy, const X& x, const W& weight, const M& saved_mean,
                                       const I& saved_invstd) {
  namespace bn = detail::batch_norm;
  bn::require_operands<X, W, M, I>();
  bn::require_operands<DY, W>();
  static_assert(bn::view_of<DY>::rank == bn::view_of<X>::rank, "loom: batch_norm_backward: dy must have x's rank");
  using V = bn::view_of<X>;
  using T = typename V::value_type;
  using S = typename V::space;
  constexpr std::size_t R = V::rank;
  const char* op = "batch_norm_backward";
  const view<const T, R, S> xv(detail::as_view(x)), gv(detail::as_view(dy));
  const view<const T, 1, S> wv(detail::as_view(weight)), mv(detail::as_view(saved_mean)),
      iv(detail::as_view(saved_invstd));
  if (gv.extents() != xv.extents())
    throw shape_error(std::string("loom: ") + op + ": the output gradient dy has shape " +
                      shape_string(gv.extents()) + "; input x has shape " + shape_string(xv.extents()));
  bn::check_vectors(op, xv.extents(),
                    {{"weight", wv.extents()}, {"saved_mean", mv.extents()}, {"saved_invstd", iv.extents()}});
  const auto xhat = (xv - bn::per_channel<R>(mv)) * bn::per_channel<R>(iv);
  const auto dbias = loom::sum(gv, bn::batch_axes<R>::value, keepdims);
  const auto dweight = loom::sum(gv * xhat, bn::batch_axes<R>::value, keepdims);
  const index_t count = bn::values_per_channel(xv.extents());
  const double inv_count = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
  batch_norm_gradients<T, R, S> g{empty_like(xv), tensor<T, 1, S>(shape<1>{xv.extent(1)}),
                                  tensor<T, 1, S>(shape<1>{xv.extent(1)})};
  assign(g.dx, bn::per_channel<R>(wv) * bn::per_channel<R>(iv) *
                   (gv - dbias.view() * inv_count - xhat * dweight.view() * inv_count));
  assign(g.dweight, bn::as_vector(dweight));
  assign(g.dbias, bn::as_vector(dbias));
  return g;
}

//! A convolution's weight and bias with the inference-mode batch norm that
//! follows it folded in (fold_batch_norm).
template <class T, std::size_t R, class S>
struct folded_convolution {
  tensor<T, R, S> weight;  //!< the weight's shape: [Cout, C / groups, ...]
  tensor<T, 1, S> bias;    //!< [Cout]
};

//! Folds batch_norm_inference(conv(x, w[, conv_bias]), gamma, beta,
//! running_mean, running_var, eps) into the convolution's weight and bias:
//! with scale = gamma / sqrt(running_var + eps) per output channel (w's axis
//! 0), weight = w scale and bias = (conv_bias - running_mean) scale + beta.
//! conv2d(x, f.weight, f.bias, {.activation = ...}) then runs convolution,
//! batch norm and the activation in one GEMM with its epilogue. Two
//! elementwise kernels; any rank of w from 2 (conv1d: 3, conv2d: 4), host or
//! device. Throws shape_error naming the vector whose extent is not w's
//! output channels, value_error for eps <= 0.
//! Example: `auto f = loom::fold_batch_norm(w, gamma, beta, running_mean, running_var, 1e-5);`
template <tensor_like W, tensor_like G, tensor_like B, tensor_like RM, tensor_like RV, tensor_like... CB>
[[nodiscard]] auto fold_batch_norm(const W& w, const G& gamma, const B& beta, const RM& running_mean,
                                   const RV& running_var, double eps, const CB&... conv_bias) {
  namespace bn = detail::batch_norm;
  static_assert(sizeof...(CB) <= 1, "loom: fold_batch_norm takes at most one convolution bias");
  bn::require_operands<W, G, B, RM, RV, CB...>();
  using V = bn::view_of<W>;
  using T = typename V::value_type;
  using S = typename V::space;
  constexpr std::size_t R = V::rank;
  const char* op = "fold_batch_norm";
  const view<const T, R, S> wv(detail::as_view(w));
  const view<const T, 1, S> g(detail::as_view(gamma)), b(detail::as_view(beta)), m(detail::as_view(running_mean)),
      v(detail::as_view(running_var));
  bn::check_vectors(op, "output channel of weight w " + shape_string(wv.extents()), wv.extent(0),
                    {{"gamma", g.extents()}, {"beta", b.extents()}, {"running_mean", m.extents()},
                     {"running_var", v.extents()}, {"conv_bias", detail::as_view(conv_bias).extents()}...});
  bn::check_eps(op, eps);
  folded_convolution<T, R, S> f{empty_like(wv), tensor<T, 1, S>(g.extents())};
  assign(f.weight, wv * bn::per_output_channel<R>(g) * rsqrt(bn::per_output_channel<R>(v) + eps));
  if constexpr (sizeof...(CB) == 0)
    assign(f.bias, b - m * g * rsqrt(v + eps));
  else {
    const view<const T, 1, S> cb(detail::as_view(conv_bias)...);
    assign(f.bias, b + (cb - m) * g * rsqrt(v + eps));
  }
  return f;
}
}  // namespace loom
