// SPDX-License-Identifier: Apache-2.0
#pragma once

// The 2-D transposed convolution (NCHW), as PyTorch's conv_transpose2d: the
// data gradient of the convolution with the same weight and options. Its
// own gradients are a convolution (input) and a convolution's weight
// gradient with the operands swapped. On the host executor, and on device
// tensors through the same cuDNN calls as conv2d (nn/conv.hpp).

#include <array>
#include <cstddef>
#include <string>

#include "loom/config.hpp"
#include "loom/conv/host.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/nn/conv.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
//! How a 2-D transposed convolution places its kernel: the options of the
//! convolution it transposes, plus output_padding (0 to stride - 1 per axis),
//! extra rows and columns at the end of the output that pick one of the
//! output extents a strided convolution maps to the same input extent.
//! Example: `loom::conv_transpose2d(x, w, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}})`
struct conv_transpose2d_options {
  std::array<index_t, 2> stride{1, 1};          //!< step of the window, at least 1
  std::array<index_t, 2> padding{0, 0};         //!< rows and columns cut from each side, at least 0
  std::array<index_t, 2> output_padding{0, 0};  //!< added at the end, 0 to stride - 1
  std::array<index_t, 2> dilation{1, 1};        //!< spacing of the kernel taps, at least 1
  index_t groups = 1;                           //!< divides the input and the output channels
};

namespace detail::conv {
inline conv2d_options transposed(const conv_transpose2d_options& o) {
  return {o.stride, o.padding, o.dilation, o.groups, matmul_activation::none};
}

// The output shape of conv_transpose2d of x (shape xs) with w (shape ws),
// after the checks that name x and w as the transposed convolution sees them.
inline shape<4> transposed_output_shape(const char* op, const shape<4>& xs, const shape<4>& ws,
                                        const conv_transpose2d_options& o) {
  const std::string at = std::string("loom: ") + op + ": ";
  check_options(at, o.stride, o.padding, o.dilation, o.groups);
  shape<4> out{xs[0], ws[1] * o.groups, 0, 0};
  for (int a = 0; a < 2; ++a) {
    if (o.output_padding[a] < 0 || o.output_padding[a] >= o.stride[a])
      throw value_error(at + "output_padding must lie in 0 to stride - 1; got {" + axis_pair(o.output_padding) +
                        "} for stride {" + axis_pair(o.stride) + "}");
    const std::size_t d = 2 + static_cast<std::size_t>(a);
    out[d] = (xs[d] - 1) * o.stride[a] - 2 * o.padding[a] + (ws[d] - 1) * o.dilation[a] + 1 + o.output_padding[a];
  }
  const std::string x_is = "input x " + shape_string(xs), w_is = "weight w " + shape_string(ws);
  if (ws[0] != xs[1])
    throw shape_error(at + w_is + " takes " + std::to_string(ws[0]) + " input channels (axis 0), but " + x_is +
                      " has " + std::to_string(xs[1]));
  if (ws[0] % o.groups != 0)
    throw shape_error(at + "groups (" + std::to_string(o.groups) + ") does not divide the " + std::to_string(ws[0]) +
                      " channels of " + x_is);
  if (ws[2] < 1 || ws[3] < 1) throw shape_error(at + w_is + " has an empty kernel (axes 2 and 3 must be at least 1)");
  if (xs[2] < 1 || xs[3] < 1 || out[2] < 1 || out[3] < 1)
    throw shape_error(at + x_is + " with " + w_is + " gives the output extents " + std::to_string(out[2]) + " x " +
                      std::to_string(out[3]) + " (padding {" + axis_pair(o.padding) + "}): no output position");
  return out;
}

// Checks dy of a transposed convolution of an input of shape xs with a
// weight of shape ws against the output's shape.
template <class DY>
void check_transposed_gradient(const char* op, const DY& dy, const shape<4>& xs, const shape<4>& ws,
                               const conv_transpose2d_options& o) {
  require_operand<4, DY>();
  const shape<4> ys = transposed_output_shape(op, xs, ws, o), dys = as_view(dy).extents();
  if (dys != ys)
    throw shape_error(std::string("loom: ") + op + ": the output gradient dy has shape " + shape_string(dys) +
                      "; the transposed convolution's output has shape " + shape_string(ys));
}

// Adds bias[o] (stride bias_stride) to each plane of y (contiguous [N, Cout, H, W]). One parallel pass.
template <class T>
void add_channel_bias(T* y, const shape<4>& ys, const T* bias, index_t bias_stride) {
  const index_t plane = ys[2] * ys[3];
  host_for_each(
      ys[0] * ys[1],
      [&](index_t p) {
        const T b = bias[p % ys[1] * bias_stride];
        for (T* e = y + p * plane; e != y + (p + 1) * plane; ++e) *e += b;
      },
      plane);
}
}  // namespace detail::conv

//! The output shape [N, Cout, oh, ow] of conv_transpose2d of an input of
//! shape `x` ([N, Cin, H, W]) with a weight of shape `w` ([Cin, Cout /
//! groups, kh, kw]): o = (H - 1) stride - 2 padding + dilation (kh - 1) + 1 +
//! output_padding per axis. Throws as conv_transpose2d does. O(1).
//! Example: `auto s = loom::conv_transpose2d_output_shape({8, 16, 7, 7}, {16, 3, 4, 4}, {.stride = {2, 2}});`
inline shape<4> conv_transpose2d_output_shape(const shape<4>& x, const shape<4>& w,
                                              const conv_transpose2d_options& o = {}) {
  return detail::conv::transposed_output_shape("conv_transpose2d", x, w, o);
}

//! The 2-D transposed convolution of x [N, Cin, H, W] with w [Cin, Cout /
//! groups, kh, kw] (PyTorch's layout), plus bias [Cout] when given, as a new
//! host tensor [N, Cout, oh, ow]: conv2d_backward_input with the same weight
//! and options (per chunk one host GEMM and one col2im pass), then one pass
//! for the bias. Throws shape_error when x's channels are not w's axis 0,
//! groups do not divide them or no output position remains; value_error for
//! bad options (output_padding must lie in 0 to stride - 1). Device tensors:
//! cuDNN's data gradient (as conv2d_backward_input), then one loom kernel
//! for the bias.
//! Example: `auto y = loom::conv_transpose2d(x, w, b, {.stride = {2, 2}});`
template <tensor_like X, tensor_like W>
[[nodiscard]] auto conv_transpose2d(const X& x, const W& w, const conv_transpose2d_options& o = {}) {
  detail::conv::require_operand<4, X>();
  using T = typename detail::conv::view_of<X>::value_type;
  tensor<T, 4, typename detail::conv::view_of<X>::space> y(detail::conv::transposed_output_shape("conv_transpose2d", detail::as_view(x).extents(),
                                                             detail::as_view(w).extents(), o));
  detail::conv::backward_input_into<4>("conv_transpose2d", y.view(), x, w, detail::conv::transposed(o));
  return y;
}
//! conv_transpose2d plus bias [Cout] on each output channel (one more pass).
//! Example: `auto y = loom::conv_transpose2d(x, w, b, {.stride = {2, 2}});`
template <tensor_like X, tensor_like W, tensor_like B>
[[nodiscard]] auto conv_transpose2d(const X& x, const W& w, const B& bias, const conv_transpose2d_options& o = {}) {
  detail::conv::require_operand<1, B>();
  detail::conv::require_same_type<X, B>();
  using T = typename detail::conv::view_of<X>::value_type;
  using S = typename detail::conv::view_of<X>::space;
  const view<const T, 1, S> b(detail::as_view(bias));
  const shape<4> ys = detail::conv::transposed_output_shape("conv_transpose2d", detail::as_view(x).extents(),
                                                            detail::as_view(w).extents(), o);
  if (b.extent(0) != ys[1])
    throw shape_error("loom: conv_transpose2d: bias " + shape_string(b.extents()) +
                      " must have one element per output channel (" + std::to_string(ys[1]) + ")");
  auto y = conv_transpose2d(x, w, o);
  if constexpr (std::is_same_v<S, host>) {
    detail::conv::add_channel_bias(y.data(), ys, b.data(), b.stride(0));
  } else {
#if LOOM_HAS_CUDNN
    detail::conv::device_add_channel_bias(y.view(), b);
#endif
  }
  return y;
}

//! The gradient of conv_transpose2d's input: dx [N, Cin, H, W]
//! (`input_shape`) = conv2d(dy, w) with the same options. Throws shape_error
//! when dy is not conv_transpose2d's output shape for `input_shape` and w.
//! Example: `auto dx = loom::conv_transpose2d_backward_input(dy, w, x.extents(), opts);`
template <tensor_like DY, tensor_like W>
[[nodiscard]] auto conv_transpose2d_backward_input(const DY& dy, const W& w, const shape<4>& input_shape,
                                                   const conv_transpose2d_options& o = {}) {
  const char* op = "conv_transpose2d_backward_input";
  detail::conv::check_transposed_gradient(op, dy, input_shape, detail::as_view(w).extents(), o);
  tensor<typename detail::conv::view_of<DY>::value_type, 4, typename detail::conv::view_of<DY>::space> dx(input_shape);
  detail::conv::forward_into<4>(op, dx.view(), dy, w, detail::conv::transposed(o));
  return dx;
}

//! The gradient of conv_transpose2d's weight: dw [Cin, Cout / groups, kh, kw]
//! (`weight_shape`) = conv2d_backward_weight with x as the gradient and dy as
//! the input. Throws as conv_transpose2d_backward_input does. The bias's
//! gradient is conv2d_backward_bias(dy).
//! Example: `auto dw = loom::conv_transpose2d_backward_weight(dy, x, w.extents(), opts);`
template <tensor_like DY, tensor_like X>
[[nodiscard]] auto conv_transpose2d_backward_weight(const DY& dy, const X& x, const shape<4>& weight_shape,
                                                    const conv_transpose2d_options& o = {}) {
  const char* op = "conv_transpose2d_backward_weight";
  detail::conv::check_transposed_gradient(op, dy, detail::as_view(x).extents(), weight_shape, o);
  tensor<typename detail::conv::view_of<DY>::value_type, 4, typename detail::conv::view_of<DY>::space> dw(weight_shape);
  detail::conv::backward_weight_into<4>(op, dw.view(), x, dy, detail::conv::transposed(o));
  return dw;
}
}  // namespace loom
