// SPDX-License-Identifier: Apache-2.0
#pragma once

// 3-D, 2-D and 1-D convolution, NCDHW, NCHW (NCL) or channels-last NHWC (2-D), with
// stride, padding, dilation and groups (depthwise included), an optional
// bias, and the three gradients (data, weight, bias) as functions. On the
// host executor: im2col and the host GEMM (conv/host.hpp); on device tensors
// (where CMake found cuDNN 9: LOOM_HAS_CUDNN, and the file is compiled by
// nvcc): cuDNN (conv/device.hpp).

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/conv/checks.hpp"
#include "loom/conv/host.hpp"
#include "loom/conv/options.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"
#if LOOM_HAS_CUDNN
#include "loom/conv/device.hpp"
#endif

namespace loom {
namespace detail::conv {
template <class T, std::size_t R>
shape<4> as_2d(const shape<R>& s) {
  if constexpr (R == 3)
    return {s[0], s[1], 1, s[2]};
  else
    return s;
}
inline const conv2d_options& as_2d(const conv2d_options& o) { return o; }
inline conv2d_options as_2d(const conv1d_options& o) {
  return {{1, o.stride}, {0, o.padding}, {1, o.dilation}, o.groups, o.activation};
}
template <class T, std::size_t R, class S>
view<T, 4, S> as_2d(const view<T, R, S>& v) {
  if constexpr (R == 3)
    return v.unsqueeze(2);
  else
    return v;
}
template <std::size_t R>
shape<R> from_2d(const shape<4>& s) {
  if constexpr (R == 3)
    return {s[0], s[1], s[3]};
  else
    return s;
}

// x, y and their gradients as the NCHW views and shapes the host loops
// take: conv1d's NCL with height 1, conv2d's NHWC (layout nhwc) permuted.
inline bool channels_last(const conv2d_options& o) { return o.layout == conv_layout::nhwc; }
inline bool channels_last(const conv1d_options&) { return false; }
inline bool channels_last(const conv3d_options&) { return false; }
template <class T, std::size_t R, class S, class Options>
view<T, 4, S> data_2d(const view<T, R, S>& v, const Options& o) {
  const view<T, 4, S> v4 = as_2d(v);
  return channels_last(o) ? v4.permute({0, 3, 1, 2}) : v4;
}
template <class T, std::size_t R, class Options>
shape<4> data_shape_2d(const shape<R>& s, const Options& o) {
  const shape<4> s4 = as_2d<T>(s);
  return channels_last(o) ? shape<4>{s4[0], s4[3], s4[1], s4[2]} : s4;
}
template <std::size_t R, class Options>
shape<R> data_from_2d(const shape<4>& s, const Options& o) {
  return from_2d<R>(channels_last(o) ? shape<4>{s[0], s[2], s[3], s[1]} : s);
}

// What differs between conv3d (R == 5, NCDHW) and conv2d / conv1d (R == 4,
// 3): the geometry after the checks, the result's shape, the check of dy,
// the shape a message names for the weight, and x and dy as the 5-D NCDHW
// views the host loops take (depth 1 for conv2d and conv1d).
template <class T, std::size_t R, class Options>
geometry geometry_of(const char* op, const shape<R>& xs, const shape<R>& ws, const Options& o) {
  if constexpr (R == 5)
    return checked_geometry_3d(op, xs, ws, o);
  else
    return checked_geometry(op, data_shape_2d<T>(xs, o), as_2d<T>(ws), as_2d(o));
}
template <std::size_t R, class Options>
shape<R> result_shape(const geometry& g, const Options& o) {
  if constexpr (R == 5)
    return {g.batch, g.out_channels, g.out_d, g.out_h, g.out_w};
  else
    return data_from_2d<R>(output_shape(g), o);
}
template <class T, std::size_t R, class Options>
void check_dy(const char* op, const shape<R>& dys, const geometry& g, const Options& o) {
  if constexpr (R == 5) {
    if (dys != result_shape<5>(g, o))
      throw shape_error(std::string("loom: ") + op + ": the output gradient dy has shape " + shape_string(dys) +
                        "; the convolution's output has shape " + shape_string(result_shape<5>(g, o)));
  } else {
    check_output_gradient(op, data_shape_2d<T>(dys, o), g);
  }
}
template <class T, std::size_t R>
auto message_shape(const shape<R>& s) {
  if constexpr (R == 5)
    return s;
  else
    return as_2d<T>(s);
}
template <class T, std::size_t R, class S, class Options>
view<T, 5, S> data_5d(const view<T, R, S>& v, const Options& o) {
  if constexpr (R == 5)
    return v;
  else
    return data_2d(v, o).unsqueeze(2);
}

// The entry points of conv3d (R == 5), conv2d (R == 4) and conv1d (R == 3),
// on views. Device tensors (conv2d, conv1d) go to cuDNN.
template <class T, std::size_t R, class S, class Options>
void run_forward(const char* op, const view<const T, R, S>& x, const view<const T, R, S>& w,
                 const view<const T, 1, S>* bias, const Options& o, const view<T, R, S>& y) {
  const geometry g = geometry_of<T>(op, x.extents(), w.extents(), o);
  index_t bias_stride = 0;
  const T* b = bias ? checked_bias(op, *bias, message_shape<T>(w.extents()), bias_stride) : nullptr;
  if (bias)
    check_output(op, "y", y, result_shape<R>(g, o), x, w, *bias);
  else
    check_output(op, "y", y, result_shape<R>(g, o), x, w);
  tensor<T, R, S> w_store;
  const view<const T, R, S> wc = contiguous_or_copy(w, w_store);
  if constexpr (std::is_same_v<S, host>) {
    forward(data_5d(x, o), wc.data(), b, bias_stride, o.activation, g, channels_last(o), y.data());
  } else {
#if LOOM_HAS_CUDNN
    if constexpr (R == 5)
      device_forward(x, wc, bias, o.activation, g, false, y);
    else
      device_forward(data_2d(x, o), as_2d(wc), bias, o.activation, g, channels_last(o), data_2d(y, o));
#endif
  }
}
template <class T, std::size_t R, class S, class Options>
void run_backward_input(const char* op, const view<const T, R, S>& dy, const view<const T, R, S>& w,
                        const Options& o, const view<T, R, S>& dx) {
  const geometry g = geometry_of<T>(op, dx.extents(), w.extents(), o);
  check_dy<T>(op, dy.extents(), g, o);
  check_output(op, "dx", dx, dx.extents(), dy, w);
  tensor<T, R, S> w_store;
  const view<const T, R, S> wc = contiguous_or_copy(w, w_store);
  if constexpr (std::is_same_v<S, host>) {
    if (data_gradient_as_convolution(g)) {
      backward_input_by_convolution(data_5d(dy, o), wc.data(), g, channels_last(o), dx.data());
      return;
    }
    // Otherwise one GEMM and col2im per chunk, dy in NC(D)HW order, contiguous.
    if constexpr (R == 5) {
      tensor<T, 5, S> dy_store;
      backward_input(contiguous_or_copy(dy, dy_store).data(), wc.data(), g, false, dx.data());
    } else {
      tensor<T, 4, S> dy_store;
      backward_input(contiguous_or_copy(data_2d(dy, o), dy_store).data(), wc.data(), g, channels_last(o), dx.data());
    }
  } else {
#if LOOM_HAS_CUDNN
    if constexpr (R == 5)
      device_backward_input(dy, wc, g, false, dx);
    else
      device_backward_input(data_2d(dy, o), as_2d(wc), g, channels_last(o), data_2d(dx, o));
#endif
  }
}
template <class T, std::size_t R, class S, class Options>
void run_backward_weight(const char* op, const view<const T, R, S>& dy, const view<const T, R, S>& x,
                         const Options& o, const view<T, R, S>& dw) {
  const geometry g = geometry_of<T>(op, x.extents(), dw.extents(), o);
  check_dy<T>(op, dy.extents(), g, o);
  check_output(op, "dw", dw, dw.extents(), dy, x);
  if constexpr (std::is_same_v<S, host>) {
    backward_weight(data_5d(dy, o), data_5d(x, o), g, dw.data());
  } else {
#if LOOM_HAS_CUDNN
    if constexpr (R == 5)
      device_backward_weight(dy, x, g, false, dw);
    else
      device_backward_weight(data_2d(dy, o), data_2d(x, o), g, channels_last(o), as_2d(dw));
#endif
  }
}
template <class T, std::size_t R, class S, class Options>
tensor<T, R, S> new_output(const char* op, const shape<R>& xs, const shape<R>& ws, const Options& o) {
  return tensor<T, R, S>(result_shape<R>(geometry_of<T>(op, xs, ws, o), o));
}
// The typed entry points shared by conv3d (R == 5), conv2d (R == 4) and conv1d (R == 3):
// operands as const views, outputs as views (the *_into forms) or new tensors.
template <std::size_t R, class X>
using const_view_of = view<const typename view_of<X>::value_type, R, typename view_of<X>::space>;
template <std::size_t R, class X>
using out_view_of = view<typename view_of<X>::value_type, R, typename view_of<X>::space>;

// The forward with no bias or one bias vector (Bias: zero or one operand).
template <std::size_t R, class X, class W, class Options, class... Bias>
void forward_into(const char* op, const out_view_of<R, X>& y, const X& x, const W& w, const Options& o,
                  const Bias&... bias) {
  static_assert(sizeof...(Bias) <= 1, "loom: a convolution takes at most one bias");
  require_operand<R, X>();
  require_operand<R, W>();
  require_same_type<X, W>();
  (require_operand<1, Bias>(), ...);
  (require_same_type<X, Bias>(), ...);
  if constexpr (sizeof...(Bias) == 0) {
    run_forward(op, const_view_of<R, X>(as_view(x)), const_view_of<R, X>(as_view(w)),
                static_cast<const const_view_of<1, X>*>(nullptr), o, y);
  } else {
    const const_view_of<1, X> b(as_view(bias)...);
    run_forward(op, const_view_of<R, X>(as_view(x)), const_view_of<R, X>(as_view(w)), &b, o, y);
  }
}
// forward_into a new host tensor, returned.
template <std::size_t R, class X, class W, class Options, class... Bias>
auto forward_new(const char* op, const X& x, const W& w, const Options& o, const Bias&... bias) {
  require_operand<R, X>();
  auto y = new_output<typename view_of<X>::value_type, R, typename view_of<X>::space>(op, as_view(x).extents(),
                                                                                      as_view(w).extents(), o);
  forward_into<R>(op, y.view(), x, w, o, bias...);
  return y;
}
template <std::size_t R, class DY, class W, class Options>
void backward_input_into(const char* op, const out_view_of<R, DY>& dx, const DY& dy, const W& w, const Options& o) {
  require_operand<R, DY>();
  require_operand<R, W>();
  require_same_type<DY, W>();
  run_backward_input(op, const_view_of<R, DY>(as_view(dy)), const_view_of<R, DY>(as_view(w)), o, dx);
}
template <std::size_t R, class DY, class X, class Options>
void backward_weight_into(const char* op, const out_view_of<R, DY>& dw, const DY& dy, const X& x, const Options& o) {
  require_operand<R, DY>();
  require_operand<R, X>();
  require_same_type<DY, X>();
  run_backward_weight(op, const_view_of<R, DY>(as_view(dy)), const_view_of<R, DY>(as_view(x)), o, dw);
}
// The gradients into new host tensors of the input's (weight's) shape,
// after the geometry's checks.
template <std::size_t R, class DY, class W, class Options>
auto backward_input_new(const char* op, const DY& dy, const W& w, const shape<R>& input_shape, const Options& o) {
  require_operand<R, DY>();
  using T = typename view_of<DY>::value_type;
  geometry_of<T>(op, input_shape, as_view(w).extents(), o);
  tensor<T, R, typename view_of<DY>::space> dx(input_shape);
  backward_input_into<R>(op, dx.view(), dy, w, o);
  return dx;
}
template <std::size_t R, class DY, class X, class Options>
auto backward_weight_new(const char* op, const DY& dy, const X& x, const shape<R>& weight_shape, const Options& o) {
  require_operand<R, DY>();
  using T = typename view_of<DY>::value_type;
  geometry_of<T>(op, as_view(x).extents(), weight_shape, o);
  tensor<T, R, typename view_of<DY>::space> dw(weight_shape);
  backward_weight_into<R>(op, dw.view(), dy, x, o);
  return dw;
}
}  // namespace detail::conv

//! The output shape [N, Cout, oh, ow] of conv2d of an input of shape `x`
//! ([N, C, H, W]) with a weight of shape `w` ([Cout, C / groups, kh, kw]):
//! o = (H + 2 padding - dilation (kh - 1) - 1) / stride + 1 per axis (x and
//! the result [N, H, W, C] with layout nhwc). Throws shape_error when they do
//! not convolve, value_error for bad options. O(1).
//! Example: `auto s = loom::conv2d_output_shape({8, 3, 32, 32}, {16, 3, 3, 3}, {.padding = {1, 1}});`
inline shape<4> conv2d_output_shape(const shape<4>& x, const shape<4>& w, const conv2d_options& o = {}) {
  namespace c = detail::conv;
  return c::data_from_2d<4>(c::output_shape(c::checked_geometry("conv2d", c::data_shape_2d<float>(x, o), w, o)), o);
}

//! The 2-D convolution (cross-correlation, as in PyTorch) of x [N, C, H, W]
//! with w [Cout, C / groups, kh, kw], written into y [N, Cout, oh, ow]
//! (contiguous host memory that overlaps neither; x [N, H, W, C] and y
//! [N, oh, ow, Cout] with layout nhwc). x may have any strides; a
//! non-contiguous w is copied first. Host: per chunk of images (columns of at
//! most 2^21 elements) one im2col pass and one host GEMM (BLAS or loom's
//! kernel). Throws shape_error (naming x, w or y) when they do not convolve,
//! groups do not divide the channels or y has another shape; value_error for
//! a stride or dilation below 1, a negative padding or a non-contiguous y;
//! aliasing_error when y overlaps an input; nothing is written then. Device
//! tensors (float, double, half, bf16; needs cuDNN and nvcc): one cuDNN call
//! on the current stream (bias with ReLU fused into it), else one more loom
//! elementwise kernel for the bias and activation; cudnn_error on a failed
//! cuDNN call.
//! Example: `loom::conv2d_into(y, x, w, {.stride = {2, 2}, .padding = {1, 1}});`
template <tensor_like Y, tensor_like X, tensor_like W>
void conv2d_into(Y&& y, const X& x, const W& w, const conv2d_options& o = {}) {
  detail::conv::forward_into<4>("conv2d", detail::as_view(y), x, w, o);
}
//! conv2d_into with a bias [Cout] added to each output channel in the GEMM's
//! epilogue (no extra pass). Throws shape_error for a bias of another extent.
//! Example: `loom::conv2d_into(y, x, w, b, {.padding = {1, 1}});`
template <tensor_like Y, tensor_like X, tensor_like W, tensor_like B>
void conv2d_into(Y&& y, const X& x, const W& w, const B& bias, const conv2d_options& o = {}) {
  detail::conv::forward_into<4>("conv2d", detail::as_view(y), x, w, o, bias);
}
//! conv2d_into a new host tensor, returned.
//! Example: `auto y = loom::conv2d(x, w, {.stride = {2, 2}, .padding = {1, 1}});`
template <tensor_like X, tensor_like W>
[[nodiscard]] auto conv2d(const X& x, const W& w, const conv2d_options& o = {}) {
  return detail::conv::forward_new<4>("conv2d", x, w, o);
}
//! conv2d with a bias [Cout], into a new host tensor.
//! Example: `auto y = loom::conv2d(x, w, b, {.padding = {1, 1}});`
template <tensor_like X, tensor_like W, tensor_like B>
[[nodiscard]] auto conv2d(const X& x, const W& w, const B& bias, const conv2d_options& o = {}) {
  return detail::conv::forward_new<4>("conv2d", x, w, o, bias);
}

//! The gradient of conv2d's input, written into dx [N, C, H, W] (whose shape
//! is the input's), from the output's gradient dy [N, Cout, oh, ow] and the
//! weight w. Host: per chunk one host GEMM (w^T dy) and one col2im pass that
//! gathers each element of dx in a fixed order (deterministic). Throws
//! shape_error when dy is not the shape conv2d gives for dx's shape and w,
//! and as conv2d_into otherwise.
//! Example: `loom::conv2d_backward_input_into(dx, dy, w, opts);`
template <tensor_like DX, tensor_like DY, tensor_like W>
void conv2d_backward_input_into(DX&& dx, const DY& dy, const W& w, const conv2d_options& o = {}) {
  detail::conv::backward_input_into<4>("conv2d_backward_input", detail::as_view(dx), dy, w, o);
}
//! conv2d_backward_input_into a new host tensor of shape `input_shape`.
//! Example: `auto dx = loom::conv2d_backward_input(dy, w, x.extents(), opts);`
template <tensor_like DY, tensor_like W>
[[nodiscard]] auto conv2d_backward_input(const DY& dy, const W& w, const shape<4>& input_shape,
                                         const conv2d_options& o = {}) {
  return detail::conv::backward_input_new("conv2d_backward_input", dy, w, input_shape, o);
}

//! The gradient of conv2d's weight, written into dw [Cout, C / groups, kh,
//! kw] (whose shape is the weight's), from dy [N, Cout, oh, ow] and the input
//! x. Host: per chunk one im2col pass, one copy of dy's chunk and one host
//! GEMM (dy col^T) that adds to the chunks before, in order (deterministic).
//! Throws as conv2d_backward_input_into does.
//! Example: `loom::conv2d_backward_weight_into(dw, dy, x, opts);`
template <tensor_like DW, tensor_like DY, tensor_like X>
void conv2d_backward_weight_into(DW&& dw, const DY& dy, const X& x, const conv2d_options& o = {}) {
  detail::conv::backward_weight_into<4>("conv2d_backward_weight", detail::as_view(dw), dy, x, o);
}
//! conv2d_backward_weight_into a new host tensor of shape `weight_shape`.
//! Example: `auto dw = loom::conv2d_backward_weight(dy, x, w.extents(), opts);`
template <tensor_like DY, tensor_like X>
[[nodiscard]] auto conv2d_backward_weight(const DY& dy, const X& x, const shape<4>& weight_shape,
                                          const conv2d_options& o = {}) {
  return detail::conv::backward_weight_new("conv2d_backward_weight", dy, x, weight_shape, o);
}

//! The gradient of conv2d's (and conv1d's and conv3d's) bias: db [Cout], each element the
//! sum of its channel of dy over the batch and the positions in a fixed
//! order, in the element type (no atomics): one parallel pass over the channels.
//! Example: `auto db = loom::conv2d_backward_bias(dy);`
template <tensor_like DY>
[[nodiscard]] auto conv2d_backward_bias(const DY& dy) {
  using V = detail::conv::view_of<DY>;
  static_assert(V::rank >= 3 && V::rank <= 5,
                "loom: conv2d_backward_bias takes dy of rank 4 (NCHW), 3 (NCL) or 5 (conv3d's NCDHW)");
  detail::conv::require_operand<V::rank, DY>();
  using T = std::remove_const_t<typename V::value_type>;
  const view<const T, V::rank, typename V::space> v(detail::as_view(dy));
  if constexpr (std::is_same_v<typename V::space, host>) {
    tensor<T, 1, host> db(shape<1>{v.extent(1)});
    detail::conv::backward_bias(detail::conv::data_5d(v, conv1d_options{}), db.data());
    return db;
  } else {
#if LOOM_HAS_CUDNN
    return detail::conv::device_backward_bias(v);
#endif
  }
}

//! The 1-D convolution of x [N, C, L] with w [Cout, C / groups, k], into a
//! new host tensor [N, Cout, ol]: conv2d with height 1 (same costs and errors).
//! Example: `auto y = loom::conv1d(x, w, {.padding = 1, .groups = 4});`
template <tensor_like X, tensor_like W>
[[nodiscard]] auto conv1d(const X& x, const W& w, const conv1d_options& o = {}) {
  return detail::conv::forward_new<3>("conv1d", x, w, o);
}
//! conv1d with a bias [Cout].
//! Example: `auto y = loom::conv1d(x, w, b, {.padding = 1});`
template <tensor_like X, tensor_like W, tensor_like B>
[[nodiscard]] auto conv1d(const X& x, const W& w, const B& bias, const conv1d_options& o = {}) {
  return detail::conv::forward_new<3>("conv1d", x, w, o, bias);
}
//! The gradient of conv1d's input: dx [N, C, L] (`input_shape`) from dy and w.
//! Example: `auto dx = loom::conv1d_backward_input(dy, w, x.extents(), opts);`
template <tensor_like DY, tensor_like W>
[[nodiscard]] auto conv1d_backward_input(const DY& dy, const W& w, const shape<3>& input_shape,
                                         const conv1d_options& o = {}) {
  return detail::conv::backward_input_new("conv1d_backward_input", dy, w, input_shape, o);
}
//! The gradient of conv1d's weight: dw [Cout, C / groups, k] (`weight_shape`) from dy and x.
//! Example: `auto dw = loom::conv1d_backward_weight(dy, x, w.extents(), opts);`
template <tensor_like DY, tensor_like X>
[[nodiscard]] auto conv1d_backward_weight(const DY& dy, const X& x, const shape<3>& weight_shape,
                                          const conv1d_options& o = {}) {
  return detail::conv::backward_weight_new("conv1d_backward_weight", dy, x, weight_shape, o);
}
//! The output shape [N, Cout, od, oh, ow] of conv3d of an input of shape `x`
//! ([N, C, D, H, W]) with a weight of shape `w` ([Cout, C / groups, kd, kh,
//! kw]); throws as conv2d_output_shape. O(1).
//! Example: `auto s = loom::conv3d_output_shape({2, 3, 8, 16, 16}, {8, 3, 3, 3, 3}, {.padding = {1, 1, 1}});`
inline shape<5> conv3d_output_shape(const shape<5>& x, const shape<5>& w, const conv3d_options& o = {}) {
  return detail::conv::result_shape<5>(detail::conv::checked_geometry_3d("conv3d", x, w, o), o);
}
//! The 3-D convolution (cross-correlation) of x [N, C, D, H, W] with w
//! [Cout, C / groups, kd, kh, kw], written into y [N, Cout, od, oh, ow]:
//! conv2d_into over three axes (same passes per chunk of images: im2col over
//! the kd kh kw taps and one host GEMM; same errors). Device tensors: cuDNN
//! with N-d descriptors, as conv2d_into.
//! Example: `loom::conv3d_into(y, x, w, {.stride = {1, 2, 2}});`
template <tensor_like Y, tensor_like X, tensor_like W>
void conv3d_into(Y&& y, const X& x, const W& w, const conv3d_options& o = {}) {
  detail::conv::forward_into<5>("conv3d", detail::as_view(y), x, w, o);
}
//! conv3d_into with a bias [Cout] in the GEMM's epilogue.
//! Example: `loom::conv3d_into(y, x, w, b, {.padding = {1, 1, 1}});`
template <tensor_like Y, tensor_like X, tensor_like W, tensor_like B>
void conv3d_into(Y&& y, const X& x, const W& w, const B& bias, const conv3d_options& o = {}) {
  detail::conv::forward_into<5>("conv3d", detail::as_view(y), x, w, o, bias);
}
//! conv3d_into a new host tensor, returned.
//! Example: `auto y = loom::conv3d(x, w, {.padding = {1, 1, 1}, .groups = 2});`
template <tensor_like X, tensor_like W>
[[nodiscard]] auto conv3d(const X& x, const W& w, const conv3d_options& o = {}) {
  return detail::conv::forward_new<5>("conv3d", x, w, o);
}
//! conv3d with a bias [Cout], into a new host tensor.
//! Example: `auto y = loom::conv3d(x, w, b, {.padding = {1, 1, 1}});`
template <tensor_like X, tensor_like W, tensor_like B>
[[nodiscard]] auto conv3d(const X& x, const W& w, const B& bias, const conv3d_options& o = {}) {
  return detail::conv::forward_new<5>("conv3d", x, w, o, bias);
}
//! The gradient of conv3d's input: dx [N, C, D, H, W] (`input_shape`) from
//! dy and w; per chunk one host GEMM and one col2im pass (deterministic).
//! Example: `auto dx = loom::conv3d_backward_input(dy, w, x.extents(), opts);`
template <tensor_like DY, tensor_like W>
[[nodiscard]] auto conv3d_backward_input(const DY& dy, const W& w, const shape<5>& input_shape,
                                         const conv3d_options& o = {}) {
  return detail::conv::backward_input_new("conv3d_backward_input", dy, w, input_shape, o);
}
//! The gradient of conv3d's weight: dw [Cout, C / groups, kd, kh, kw]
//! (`weight_shape`) from dy and x; the chunks added in order (deterministic).
//! The bias's gradient is conv2d_backward_bias(dy).
//! Example: `auto dw = loom::conv3d_backward_weight(dy, x, w.extents(), opts);`
template <tensor_like DY, tensor_like X>
[[nodiscard]] auto conv3d_backward_weight(const DY& dy, const X& x, const shape<5>& weight_shape,
                                          const conv3d_options& o = {}) {
  return detail::conv::backward_weight_new("conv3d_backward_weight", dy, x, weight_shape, o);
}
}  // namespace loom
