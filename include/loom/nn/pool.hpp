// SPDX-License-Identifier: Apache-2.0
#pragma once

// 2-D pooling, NCHW: max pooling with the indices its backward reads,
// average pooling and adaptive average pooling, each with its backward as a
// function. On the host executor (conv/pool_host.hpp) only: a device tensor
// is a compile-time error that says so.

#include <array>
#include <cstdint>
#include <string>

#include "loom/config.hpp"
#include "loom/conv/pool_host.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/nn/conv.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
//! The windows of max_pool2d and avg_pool2d, per axis (height, width): the
//! kernel (at least 1), the stride (0: the kernel), the padding (0 to
//! kernel / 2; padded positions never win a maximum and count in an average
//! only with count_include_pad) and the dilation (max pooling only). With
//! ceil_mode the output extent rounds up, as in PyTorch (a last window
//! that would start in the right padding is dropped).
//! Example: `loom::max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})`
struct pool2d_options {
  std::array<index_t, 2> kernel{1, 1};    //!< window extent
  std::array<index_t, 2> stride{0, 0};    //!< step of the window; 0 takes the kernel
  std::array<index_t, 2> padding{0, 0};   //!< implicit padding on each side
  std::array<index_t, 2> dilation{1, 1};  //!< spacing of the taps (max pooling)
  bool ceil_mode = false;                 //!< round the output extent up
  bool count_include_pad = true;          //!< average pooling divides by the padded window
};

//! max_pool2d's result: the maxima and, for each, its flat position
//! iy * W + ix in its input plane (-1 for a window wholly in the padding).
template <class T>
struct max_pool2d_result {
  tensor<T, 4, host> values;              //!< [N, C, oh, ow]
  tensor<std::int64_t, 4, host> indices;  //!< [N, C, oh, ow]
};

namespace detail::pool {
// The window axes of pooling x (shape xs) after checking the options.
inline std::array<axis, 2> checked_axes(const char* op, const shape<4>& xs, const pool2d_options& o, bool dilation_ok) {
  const std::string at = std::string("loom: ") + op + ": ";
  std::array<axis, 2> a;
  for (int d = 0; d < 2; ++d) {
    axis& ax = a[static_cast<std::size_t>(d)];
    ax.in = xs[2 + static_cast<std::size_t>(d)];
    ax.kernel = o.kernel[d];
    ax.stride = o.stride[d] == 0 ? o.kernel[d] : o.stride[d];
    ax.pad = o.padding[d];
    ax.dilation = o.dilation[d];
    if (ax.kernel < 1) throw value_error(at + "kernel must be at least 1; got {" + conv::axis_pair(o.kernel) + "}");
    if (ax.stride < 1)
      throw value_error(at + "stride must be at least 1 (0: the kernel); got {" + conv::axis_pair(o.stride) + "}");
    if (ax.dilation < 1 || (!dilation_ok && ax.dilation != 1))
      throw value_error(at + (dilation_ok ? "dilation must be at least 1" : "takes no dilation (it must be 1)") +
                        "; got {" + conv::axis_pair(o.dilation) + "}");
    if (ax.pad < 0 || 2 * ax.pad > ax.kernel)
      throw value_error(at + "padding must lie in 0 to kernel / 2; got {" + conv::axis_pair(o.padding) +
                        "} for kernel {" + conv::axis_pair(o.kernel) + "}");
    const index_t span = (ax.kernel - 1) * ax.dilation + 1;
    const index_t room = ax.in + 2 * ax.pad - span;
    ax.out = room < 0 ? 0 : (room + (o.ceil_mode ? ax.stride - 1 : 0)) / ax.stride + 1;
    if (o.ceil_mode && ax.out > 0 && (ax.out - 1) * ax.stride >= ax.in + ax.pad) --ax.out;
    if (ax.out < 1)
      throw shape_error(at + "the window spans " + std::to_string(span) + " along axis " + std::to_string(2 + d) +
                        ", more than input x " + shape_string(xs) + " padded to " + std::to_string(ax.in + 2 * ax.pad) +
                        ": no output position");
  }
  return a;
}

inline void check_gradient(const char* op, const shape<4>& dys, const shape<4>& expected) {
  if (dys != expected)
    throw shape_error(std::string("loom: ") + op + ": the output gradient dy has shape " + shape_string(dys) +
                      "; the pooling's output has shape " + shape_string(expected));
}

inline auto average_cells(const std::array<axis, 2>& a, bool count_include_pad) {
  const auto cell = [a, count_include_pad](index_t oy, index_t ox) {
    avg_cell c{average_window(a[0], oy), average_window(a[1], ox), 1};
    c.divisor = count_include_pad ? c.y.padded * c.x.padded : (c.y.end - c.y.begin) * (c.x.end - c.x.begin);
    c.divisor = std::max<index_t>(c.divisor, 1);
    return c;
  };
  return avg_pass<decltype(cell)>{a[0].out, a[1].out, cell};
}
inline auto adaptive_cells(const shape<4>& xs, const std::array<index_t, 2>& out) {
  const auto cell = [h = xs[2], w = xs[3], out](index_t oy, index_t ox) {
    avg_cell c{adaptive_window(h, out[0], oy), adaptive_window(w, out[1], ox), 1};
    c.divisor = std::max<index_t>((c.y.end - c.y.begin) * (c.x.end - c.x.begin), 1);
    return c;
  };
  return avg_pass<decltype(cell)>{out[0], out[1], cell};
}
inline void check_adaptive(const char* op, const shape<4>& xs, const std::array<index_t, 2>& out) {
  if (out[0] < 1 || out[1] < 1)
    throw value_error(std::string("loom: ") + op + ": output_size must be at least 1 x 1; got {" +
                      conv::axis_pair(out) + "}");
  if (xs[2] < 1 || xs[3] < 1)
    throw shape_error(std::string("loom: ") + op + ": input x " + shape_string(xs) + " has an empty plane");
}
}  // namespace detail::pool

//! Max pooling of x [N, C, H, W]: each window's maximum (NaN propagates) and
//! its position, as PyTorch's max_pool2d(return_indices=True). One parallel
//! pass over the planes. Throws value_error for bad options, shape_error when
//! no window fits. Device tensors: a compile-time error (host executor only).
//! Example: `auto [y, where] = loom::max_pool2d(x, {.kernel = {2, 2}});`
template <tensor_like X>
[[nodiscard]] auto max_pool2d(const X& x, const pool2d_options& o) {
  detail::conv::require_host_operand<4, X>();
  using T = typename detail::conv::view_of<X>::value_type;
  const view<const T, 4, host> v(detail::as_view(x));
  const auto a = detail::pool::checked_axes("max_pool2d", v.extents(), o, true);
  const shape<4> out{v.extent(0), v.extent(1), a[0].out, a[1].out};
  max_pool2d_result<T> r{tensor<T, 4, host>(out), tensor<std::int64_t, 4, host>(out)};
  detail::pool::max_forward(v, a[0], a[1], r.values.data(), r.indices.data());
  return r;
}

//! The gradient of max_pool2d's input: dx (`input_shape`) holds each dy
//! element added at the position its index names, in output order per plane
//! (deterministic). One parallel pass. Throws shape_error when dy and indices
//! differ in shape or from input_shape in N and C, index_error for an index
//! outside the plane.
//! Example: `auto dx = loom::max_pool2d_backward(dy, where, x.extents());`
template <tensor_like DY, tensor_like I>
[[nodiscard]] auto max_pool2d_backward(const DY& dy, const I& indices, const shape<4>& input_shape) {
  detail::conv::require_host_operand<4, DY>();
  using T = typename detail::conv::view_of<DY>::value_type;
  using IV = detail::conv::view_of<I>;
  static_assert(std::is_same_v<typename IV::space, host> && IV::rank == 4 &&
                    std::is_same_v<typename IV::value_type, std::int64_t>,
                "loom: max_pool2d_backward takes the int64 host indices of max_pool2d");
  const view<const T, 4, host> g(detail::as_view(dy));
  const view<const std::int64_t, 4, host> idx(detail::as_view(indices));
  if (g.extents() != idx.extents() || g.extent(0) != input_shape[0] || g.extent(1) != input_shape[1])
    throw shape_error("loom: max_pool2d_backward: dy " + shape_string(g.extents()) + " and indices " +
                      shape_string(idx.extents()) + " must have one shape, with the N and C of the input " +
                      shape_string(input_shape));
  const index_t plane = input_shape[2] * input_shape[3];
  for (index_t i = 0; i < idx.size(); ++i) {
    const std::int64_t at = idx.data()[idx.offset_of(i)];
    if (at < -1 || at >= plane)
      throw index_error("loom: max_pool2d_backward: indices hold " + std::to_string(at) + ", outside the " +
                        std::to_string(plane) + " positions of a plane of the input " + shape_string(input_shape));
  }
  tensor<T, 4, host> dx(input_shape);
  detail::pool::max_backward(g, idx, plane, dx.data());
  return dx;
}

//! Average pooling of x [N, C, H, W], as PyTorch's avg_pool2d (divisor: the
//! padded window with count_include_pad, else the elements inside x). One
//! parallel pass. Throws as max_pool2d does; dilation must be 1.
//! Example: `auto y = loom::avg_pool2d(x, {.kernel = {2, 2}});`
template <tensor_like X>
[[nodiscard]] auto avg_pool2d(const X& x, const pool2d_options& o) {
  detail::conv::require_host_operand<4, X>();
  using T = typename detail::conv::view_of<X>::value_type;
  const view<const T, 4, host> v(detail::as_view(x));
  const auto a = detail::pool::checked_axes("avg_pool2d", v.extents(), o, false);
  tensor<T, 4, host> y(shape<4>{v.extent(0), v.extent(1), a[0].out, a[1].out});
  detail::pool::avg_forward(v, detail::pool::average_cells(a, o.count_include_pad), y.data());
  return y;
}

//! The gradient of avg_pool2d's input: each dy element divided by its
//! window's divisor and added to the window, in output order per plane. One
//! parallel pass. Throws shape_error when dy is not avg_pool2d's output shape.
//! Example: `auto dx = loom::avg_pool2d_backward(dy, x.extents(), {.kernel = {2, 2}});`
template <tensor_like DY>
[[nodiscard]] auto avg_pool2d_backward(const DY& dy, const shape<4>& input_shape, const pool2d_options& o) {
  detail::conv::require_host_operand<4, DY>();
  using T = typename detail::conv::view_of<DY>::value_type;
  const view<const T, 4, host> g(detail::as_view(dy));
  const auto a = detail::pool::checked_axes("avg_pool2d_backward", input_shape, o, false);
  detail::pool::check_gradient("avg_pool2d_backward", g.extents(),
                               {input_shape[0], input_shape[1], a[0].out, a[1].out});
  tensor<T, 4, host> dx(input_shape);
  detail::pool::avg_backward(g, detail::pool::average_cells(a, o.count_include_pad), input_shape[2], input_shape[3],
                             dx.data());
  return dx;
}

//! Adaptive average pooling of x [N, C, H, W] to [N, C, oh, ow]: output
//! (i, j) averages rows [floor(i H / oh), ceil((i + 1) H / oh)) and the
//! columns alike, as PyTorch. One parallel pass. Throws value_error for an
//! output_size below 1, shape_error for an empty plane.
//! Example: `auto y = loom::adaptive_avg_pool2d(x, {1, 1});`
template <tensor_like X>
[[nodiscard]] auto adaptive_avg_pool2d(const X& x, const std::array<index_t, 2>& output_size) {
  detail::conv::require_host_operand<4, X>();
  using T = typename detail::conv::view_of<X>::value_type;
  const view<const T, 4, host> v(detail::as_view(x));
  detail::pool::check_adaptive("adaptive_avg_pool2d", v.extents(), output_size);
  tensor<T, 4, host> y(shape<4>{v.extent(0), v.extent(1), output_size[0], output_size[1]});
  detail::pool::avg_forward(v, detail::pool::adaptive_cells(v.extents(), output_size), y.data());
  return y;
}

//! The gradient of adaptive_avg_pool2d's input (`input_shape`) from dy
//! [N, C, oh, ow]. One parallel pass. Throws as adaptive_avg_pool2d does, and
//! shape_error when dy's N and C differ from the input's.
//! Example: `auto dx = loom::adaptive_avg_pool2d_backward(dy, x.extents());`
template <tensor_like DY>
[[nodiscard]] auto adaptive_avg_pool2d_backward(const DY& dy, const shape<4>& input_shape) {
  detail::conv::require_host_operand<4, DY>();
  using T = typename detail::conv::view_of<DY>::value_type;
  const view<const T, 4, host> g(detail::as_view(dy));
  const std::array<index_t, 2> out{g.extent(2), g.extent(3)};
  detail::pool::check_adaptive("adaptive_avg_pool2d_backward", input_shape, out);
  detail::pool::check_gradient("adaptive_avg_pool2d_backward", g.extents(),
                               {input_shape[0], input_shape[1], out[0], out[1]});
  tensor<T, 4, host> dx(input_shape);
  detail::pool::avg_backward(g, detail::pool::adaptive_cells(input_shape, out), input_shape[2], input_shape[3],
                             dx.data());
  return dx;
}
}  // namespace loom
