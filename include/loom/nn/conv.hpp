// SPDX-License-Identifier: Apache-2.0
#pragma once

// 2-D and 1-D convolution, NCHW (NCL) or channels-last NHWC (2-D), with
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
#include "loom/conv/host.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"
#if LOOM_HAS_CUDNN
#include "loom/conv/device.hpp"
#endif

namespace loom {
//! The memory layout of a 2-D convolution's input and output and their
//! gradients: nchw [N, C, H, W], or nhwc [N, H, W, C] (channels last).
enum class conv_layout { nchw, nhwc };

//! How a 2-D convolution slides its kernel: per axis (height, width) the
//! stride, the zero padding on both sides, and the dilation; and the number
//! of groups (channels split into `groups` independent convolutions;
//! depthwise: groups equal to the input channels).
//! Example: `loom::conv2d(x, w, b, {.padding = {1, 1}, .activation = loom::matmul_activation::relu})`
struct conv2d_options {
  std::array<index_t, 2> stride{1, 1};    //!< step of the window, at least 1
  std::array<index_t, 2> padding{0, 0};   //!< zeros added on each side, at least 0
  std::array<index_t, 2> dilation{1, 1};  //!< spacing of the kernel taps, at least 1
  index_t groups = 1;                     //!< divides the input and the output channels
  //! applied to each output element after the bias, in the GEMM's epilogue
  //! (forward only: the gradients take dy of the convolution's own output)
  matmul_activation activation = matmul_activation::none;
  //! the memory layout of x, y and their gradients (the weight is
  //! [Cout, C / groups, kh, kw] in both)
  conv_layout layout = conv_layout::nchw;
};

//! The 1-D form of conv2d_options: a convolution over the last axis.
//! Example: `loom::conv1d(x, w, {.stride = 2, .padding = 1})`
struct conv1d_options {
  index_t stride = 1;                                      //!< step of the window, at least 1
  index_t padding = 0;                                     //!< zeros added on each side, at least 0
  index_t dilation = 1;                                    //!< spacing of the kernel taps, at least 1
  index_t groups = 1;                                      //!< divides the input and the output channels
  matmul_activation activation = matmul_activation::none;  //!< as conv2d_options::activation
};

namespace detail::conv {
template <class X>
using view_of = decltype(detail::as_view(std::declval<const X&>()));

// The compile-time contract of the host-only convolution and pooling entry points.
template <std::size_t Rank, class X>
constexpr void require_host_operand() {
  using V = view_of<X>;
  static_assert(std::is_same_v<typename V::space, host>,
                "loom: pooling and conv_transpose2d run on host tensors only (conv2d and conv1d have a cuDNN "
                "path); copy the operands with loom::to_host and run them on the host executor");
  static_assert(V::rank == Rank,
                "loom: convolution and pooling take NCHW tensors (rank 4; rank 3 for conv1d's NCL, "
                "rank 1 for a bias)");
  static_assert(std::is_same_v<typename V::value_type, float> || std::is_same_v<typename V::value_type, double>,
                "loom: convolution and pooling take float or double elements; convert half/bf16 with loom::cast");
}
template <class X, class Y>
constexpr void require_same_type() {
  static_assert(std::is_same_v<typename view_of<X>::value_type, typename view_of<Y>::value_type>,
                "loom: convolution operands must have the same element type; convert one with loom::cast");
  static_assert(std::is_same_v<typename view_of<X>::space, typename view_of<Y>::space>,
                "loom: convolution operands must live in one memory space; copy with loom::to_host or "
                "loom::to_device");
}
// conv2d's and conv1d's contract: host tensors as require_host_operand, or
// device tensors of float, double, half or bf16 where loom was built with cuDNN.
template <std::size_t Rank, class X>
constexpr void require_operand() {
  using V = view_of<X>;
  if constexpr (std::is_same_v<typename V::space, device>) {
#if LOOM_HAS_CUDNN
    static_assert(V::rank == Rank,
                  "loom: convolution takes NCHW tensors (rank 4; rank 3 for conv1d's NCL, rank 1 for a bias)");
    static_assert(cudnn::convolvable_v<std::remove_const_t<typename V::value_type>>,
                  "loom: convolution on device tensors takes float, double, half or bf16 elements");
    // The bias, the activation and the bias gradient run as loom kernels.
    require_cuda_compiler_for<typename V::space>();
#else
    static_assert(!std::is_same_v<typename V::space, device>,
                  "loom: conv2d and conv1d on device tensors need cuDNN 9, which this build did not find "
                  "(LOOM_HAS_CUDNN; CMake: LOOM_CUDNN, CUDNN_ROOT); copy the operands with loom::to_host and run "
                  "them on the host executor");
#endif
  } else {
    require_host_operand<Rank, X>();
  }
}

inline std::string axis_pair(const std::array<index_t, 2>& v) {
  return std::to_string(v[0]) + ", " + std::to_string(v[1]);
}

// Throws value_error (message prefix `at`) for a stride or dilation below 1,
// a negative padding or groups below 1.
inline void check_options(const std::string& at, const std::array<index_t, 2>& stride,
                          const std::array<index_t, 2>& padding, const std::array<index_t, 2>& dilation,
                          index_t groups) {
  for (int a = 0; a < 2; ++a) {
    if (stride[a] < 1) throw value_error(at + "stride must be at least 1; got {" + axis_pair(stride) + "}");
    if (dilation[a] < 1) throw value_error(at + "dilation must be at least 1; got {" + axis_pair(dilation) + "}");
    if (padding[a] < 0) throw value_error(at + "padding must not be negative; got {" + axis_pair(padding) + "}");
  }
  if (groups < 1) throw value_error(at + "groups must be at least 1; got " + std::to_string(groups));
}

// The geometry of conv(x, w) after checking that it convolves; `op` names
// the call in messages.
inline geometry checked_geometry(const char* op, const shape<4>& xs, const shape<4>& ws, const conv2d_options& o) {
  const std::string at = std::string("loom: ") + op + ": ";
  check_options(at, o.stride, o.padding, o.dilation, o.groups);
  const std::string x_is = "input x " + shape_string(xs), w_is = "weight w " + shape_string(ws);
  if (xs[1] % o.groups != 0)
    throw shape_error(at + "groups (" + std::to_string(o.groups) + ") does not divide the " + std::to_string(xs[1]) +
                      " channels of " + x_is);
  if (ws[0] % o.groups != 0)
    throw shape_error(at + "groups (" + std::to_string(o.groups) + ") does not divide the " + std::to_string(ws[0]) +
                      " output channels of " + w_is + " (axis 0)");
  if (ws[1] * o.groups != xs[1])
    throw shape_error(at + w_is + " takes " + std::to_string(ws[1]) + " channels per group, " +
                      std::to_string(ws[1] * o.groups) + " in all (axis 1 x groups " + std::to_string(o.groups) +
                      "), but " + x_is + " has " + std::to_string(xs[1]));
  if (ws[2] < 1 || ws[3] < 1) throw shape_error(at + w_is + " has an empty kernel (axes 2 and 3 must be at least 1)");
  geometry g;
  g.batch = xs[0];
  g.channels = xs[1];
  g.height = xs[2];
  g.width = xs[3];
  g.out_channels = ws[0];
  g.kernel_h = ws[2];
  g.kernel_w = ws[3];
  g.groups = o.groups;
  g.stride_h = o.stride[0];
  g.stride_w = o.stride[1];
  g.pad_h = o.padding[0];
  g.pad_w = o.padding[1];
  g.dilation_h = o.dilation[0];
  g.dilation_w = o.dilation[1];
  const index_t span_h = (g.kernel_h - 1) * g.dilation_h + 1, span_w = (g.kernel_w - 1) * g.dilation_w + 1;
  const index_t padded_h = g.height + 2 * g.pad_h, padded_w = g.width + 2 * g.pad_w;
  if (span_h > padded_h || span_w > padded_w)
    throw shape_error(at + "the kernel of " + w_is + " spans " + std::to_string(span_h) + " x " +
                      std::to_string(span_w) + " (dilation {" + axis_pair(o.dilation) + "}), more than " + x_is +
                      " padded to " + std::to_string(padded_h) + " x " + std::to_string(padded_w) +
                      ": no output position");
  g.out_h = (padded_h - span_h) / g.stride_h + 1;
  g.out_w = (padded_w - span_w) / g.stride_w + 1;
  return g;
}

inline shape<4> output_shape(const geometry& g) { return {g.batch, g.out_channels, g.out_h, g.out_w}; }

// Checks a gradient of the output against the shape the forward gives.
inline void check_output_gradient(const char* op, const shape<4>& dys, const geometry& g) {
  if (dys != output_shape(g))
    throw shape_error(std::string("loom: ") + op + ": the output gradient dy has shape " + shape_string(dys) +
                      "; the convolution's output has shape " + shape_string(output_shape(g)));
}

// v itself when it is contiguous, else a contiguous copy held in `store`.
template <class T, std::size_t R, class S>
view<const T, R, S> contiguous_or_copy(const view<const T, R, S>& v, tensor<T, R, S>& store) {
  if (v.is_contiguous()) return v;
  store = contiguous(v);
  return store.view();
}

// The bias pointer and stride after checking its extent against w's output channels.
template <class T, class S>
const T* checked_bias(const char* op, const view<const T, 1, S>& b, const shape<4>& ws, index_t& stride) {
  if (b.extent(0) != ws[0])
    throw shape_error(std::string("loom: ") + op + ": bias " + shape_string(b.extents()) +
                      " must have one element per " + "output channel of weight w " + shape_string(ws) + " (" +
                      std::to_string(ws[0]) + ")");
  stride = b.stride(0);
  return b.data();
}

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

// Checks an output given to a *_into form: contiguous, of the expected
// shape, overlapping no input.
template <class T, std::size_t R, class S, class... In>
void check_output(const char* op, const char* name, const view<T, R, S>& out, const shape<R>& expected,
                  const In&... inputs) {
  const std::string at = std::string("loom: ") + op + ": ";
  if (out.extents() != expected)
    throw shape_error(at + "output " + name + " has shape " + shape_string(out.extents()) + "; the result has shape " +
                      shape_string(expected));
  if (!out.is_contiguous())
    throw value_error(at + "output " + name + " " + shape_string(out.extents()) + " must be contiguous (strides " +
                      shape_string(out.strides()) + ")");
  if ((may_overlap(out, inputs) || ...))
    throw aliasing_error(at + "output " + name + " overlaps an input; write into a separate tensor");
}

// The entry points of conv2d (R == 4) and conv1d (R == 3), on views.
template <class T, std::size_t R, class S, class Options>
void run_forward(const char* op, const view<const T, R, S>& x, const view<const T, R, S>& w,
                 const view<const T, 1, S>* bias, const Options& o, const view<T, R, S>& y) {
  const geometry g = checked_geometry(op, data_shape_2d<T>(x.extents(), o), as_2d<T>(w.extents()), as_2d(o));
  index_t bias_stride = 0;
  const T* b = bias ? checked_bias(op, *bias, as_2d<T>(w.extents()), bias_stride) : nullptr;
  if (bias)
    check_output(op, "y", y, data_from_2d<R>(output_shape(g), o), x, w, *bias);
  else
    check_output(op, "y", y, data_from_2d<R>(output_shape(g), o), x, w);
  tensor<T, R, S> w_store;
  if constexpr (std::is_same_v<S, host>) {
    forward(data_2d(x, o), as_2d(contiguous_or_copy(w, w_store)), b, bias_stride, as_2d(o).activation, g,
            channels_last(o), y.data());
  } else {
#if LOOM_HAS_CUDNN
    device_forward(data_2d(x, o), as_2d(contiguous_or_copy(w, w_store)), bias, as_2d(o).activation, g,
                   data_2d(y, o));
#endif
  }
}
template <class T, std::size_t R, class S, class Options>
void run_backward_input(const char* op, const view<const T, R, S>& dy, const view<const T, R, S>& w,
                        const Options& o, const view<T, R, S>& dx) {
  const geometry g = checked_geometry(op, data_shape_2d<T>(dx.extents(), o), as_2d<T>(w.extents()), as_2d(o));
  check_output_gradient(op, data_shape_2d<T>(dy.extents(), o), g);
  check_output(op, "dx", dx, dx.extents(), dy, w);
  tensor<T, R, S> w_store;
  if constexpr (std::is_same_v<S, host>) {
    tensor<T, 4, S> dy_store;
    backward_input(contiguous_or_copy(data_2d(dy, o), dy_store), as_2d(contiguous_or_copy(w, w_store)), g,
                   channels_last(o), dx.data());
  } else {
#if LOOM_HAS_CUDNN
    device_backward_input(data_2d(dy, o), as_2d(contiguous_or_copy(w, w_store)), g, data_2d(dx, o));
#endif
  }
}
template <class T, std::size_t R, class S, class Options>
void run_backward_weight(const char* op, const view<const T, R, S>& dy, const view<const T, R, S>& x,
                         const Options& o, const view<T, R, S>& dw) {
  const geometry g = checked_geometry(op, data_shape_2d<T>(x.extents(), o), as_2d<T>(dw.extents()), as_2d(o));
  check_output_gradient(op, data_shape_2d<T>(dy.extents(), o), g);
  check_output(op, "dw", dw, dw.extents(), dy, x);
  if constexpr (std::is_same_v<S, host>) {
    backward_weight(data_2d(dy, o), data_2d(x, o), g, dw.data());
  } else {
#if LOOM_HAS_CUDNN
    device_backward_weight(data_2d(dy, o), data_2d(x, o), g, dw.data());
#endif
  }
}
template <class T, std::size_t R, class S, class Options>
tensor<T, R, S> new_output(const char* op, const shape<R>& xs, const shape<R>& ws, const Options& o) {
  return tensor<T, R, S>(
      data_from_2d<R>(output_shape(checked_geometry(op, data_shape_2d<T>(xs, o), as_2d<T>(ws), as_2d(o))), o));
}
// The typed entry points shared by conv2d (R == 4) and conv1d (R == 3):
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
  checked_geometry(op, data_shape_2d<T>(input_shape, o), as_2d<T>(as_view(w).extents()), as_2d(o));
  tensor<T, R, typename view_of<DY>::space> dx(input_shape);
  backward_input_into<R>(op, dx.view(), dy, w, o);
  return dx;
}
template <std::size_t R, class DY, class X, class Options>
auto backward_weight_new(const char* op, const DY& dy, const X& x, const shape<R>& weight_shape, const Options& o) {
  require_operand<R, DY>();
  using T = typename view_of<DY>::value_type;
  checked_geometry(op, data_shape_2d<T>(as_view(x).extents(), o), as_2d<T>(weight_shape), as_2d(o));
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

//! The gradient of conv2d's (and conv1d's) bias: db [Cout], each element the
//! sum of its channel of dy over the batch and the positions in a fixed
//! order, in the element type (no atomics): one parallel pass over the channels.
//! Example: `auto db = loom::conv2d_backward_bias(dy);`
template <tensor_like DY>
[[nodiscard]] auto conv2d_backward_bias(const DY& dy) {
  using V = detail::conv::view_of<DY>;
  static_assert(V::rank == 4 || V::rank == 3, "loom: conv2d_backward_bias takes dy of rank 4 (NCHW) or 3 (NCL)");
  detail::conv::require_operand<V::rank, DY>();
  using T = std::remove_const_t<typename V::value_type>;
  const view<const T, V::rank, typename V::space> v(detail::as_view(dy));
  if constexpr (std::is_same_v<typename V::space, host>) {
    tensor<T, 1, host> db(shape<1>{v.extent(1)});
    detail::conv::backward_bias(detail::conv::as_2d(v), db.data());
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
}  // namespace loom
