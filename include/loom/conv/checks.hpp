// SPDX-License-Identifier: Apache-2.0
#pragma once

// The checks every convolution entry point runs before it writes anything:
// the compile-time contract of its operands, its options, the shapes that
// convolve (giving the geometry the host loops and cuDNN take), the bias
// and an output given to a *_into form. Each failure is a loom: error
// naming the operand.

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/conv/host.hpp"
#include "loom/conv/options.hpp"
#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"
#if LOOM_HAS_CUDNN
#include "loom/conv/cudnn.hpp"
#endif

namespace loom::detail::conv {
template <class X>
using view_of = decltype(detail::as_view(std::declval<const X&>()));

// The compile-time contract of the host-only entry points (pooling).
template <std::size_t Rank, class X>
constexpr void require_host_operand() {
  using V = view_of<X>;
  static_assert(std::is_same_v<typename V::space, host>,
                "loom: pooling runs on host tensors only (conv1d, conv2d and conv_transpose2d have a cuDNN "
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
// The convolutions' contract: host tensors as require_host_operand, or
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

template <std::size_t N>
std::string axis_pair(const std::array<index_t, N>& v) {
  std::string s = std::to_string(v[0]);
  for (std::size_t a = 1; a != N; ++a) s += ", " + std::to_string(v[a]);
  return s;
}

// Throws value_error (message prefix `at`) for a stride or dilation below 1,
// a negative padding or groups below 1.
template <std::size_t N>
void check_options(const std::string& at, const std::array<index_t, N>& stride, const std::array<index_t, N>& padding,
                   const std::array<index_t, N>& dilation, index_t groups) {
  for (std::size_t a = 0; a < N; ++a) {
    if (stride[a] < 1) throw value_error(at + "stride must be at least 1; got {" + axis_pair(stride) + "}");
    if (dilation[a] < 1) throw value_error(at + "dilation must be at least 1; got {" + axis_pair(dilation) + "}");
    if (padding[a] < 0) throw value_error(at + "padding must not be negative; got {" + axis_pair(padding) + "}");
  }
  if (groups < 1) throw value_error(at + "groups must be at least 1; got " + std::to_string(groups));
}

// Throws shape_error (message prefix `at`, operands described by x_is and
// w_is) unless groups divide x's channels and w's output channels and w
// takes channels / groups channels per group.
inline void check_channels(const std::string& at, const std::string& x_is, const std::string& w_is, index_t channels,
                           index_t out_channels, index_t per_group, index_t groups) {
  if (channels % groups != 0)
    throw shape_error(at + "groups (" + std::to_string(groups) + ") does not divide the " + std::to_string(channels) +
                      " channels of " + x_is);
  if (out_channels % groups != 0)
    throw shape_error(at + "groups (" + std::to_string(groups) + ") does not divide the " +
                      std::to_string(out_channels) + " output channels of " + w_is + " (axis 0)");
  if (per_group * groups != channels)
    throw shape_error(at + w_is + " takes " + std::to_string(per_group) + " channels per group, " +
                      std::to_string(per_group * groups) + " in all (axis 1 x groups " + std::to_string(groups) +
                      "), but " + x_is + " has " + std::to_string(channels));
}

// The geometry of conv(x, w) after checking that it convolves; `op` names
// the call in messages.
inline geometry checked_geometry(const char* op, const shape<4>& xs, const shape<4>& ws, const conv2d_options& o) {
  const std::string at = std::string("loom: ") + op + ": ";
  check_options(at, o.stride, o.padding, o.dilation, o.groups);
  const std::string x_is = "input x " + shape_string(xs), w_is = "weight w " + shape_string(ws);
  check_channels(at, x_is, w_is, xs[1], ws[0], ws[1], o.groups);
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

// The geometry of conv3d(x, w) (NCDHW) after the checks of checked_geometry,
// over three axes.
inline geometry checked_geometry_3d(const char* op, const shape<5>& xs, const shape<5>& ws, const conv3d_options& o) {
  const std::string at = std::string("loom: ") + op + ": ";
  check_options(at, o.stride, o.padding, o.dilation, o.groups);
  const std::string x_is = "input x " + shape_string(xs), w_is = "weight w " + shape_string(ws);
  check_channels(at, x_is, w_is, xs[1], ws[0], ws[1], o.groups);
  if (ws[2] < 1 || ws[3] < 1 || ws[4] < 1)
    throw shape_error(at + w_is + " has an empty kernel (axes 2 to 4 must be at least 1)");
  geometry g;
  g.batch = xs[0];
  g.channels = xs[1];
  g.depth = xs[2];
  g.height = xs[3];
  g.width = xs[4];
  g.out_channels = ws[0];
  g.kernel_d = ws[2];
  g.kernel_h = ws[3];
  g.kernel_w = ws[4];
  g.groups = o.groups;
  g.stride_d = o.stride[0];
  g.stride_h = o.stride[1];
  g.stride_w = o.stride[2];
  g.pad_d = o.padding[0];
  g.pad_h = o.padding[1];
  g.pad_w = o.padding[2];
  g.dilation_d = o.dilation[0];
  g.dilation_h = o.dilation[1];
  g.dilation_w = o.dilation[2];
  std::array<index_t, 3> span{}, padded{}, out{};
  for (std::size_t a = 0; a != 3; ++a) {
    span[a] = (ws[2 + a] - 1) * o.dilation[a] + 1;
    padded[a] = xs[2 + a] + 2 * o.padding[a];
    out[a] = (padded[a] - span[a]) / o.stride[a] + 1;
  }
  if (span[0] > padded[0] || span[1] > padded[1] || span[2] > padded[2])
    throw shape_error(at + "the kernel of " + w_is + " spans " + std::to_string(span[0]) + " x " +
                      std::to_string(span[1]) + " x " + std::to_string(span[2]) + " (dilation {" +
                      axis_pair(o.dilation) + "}), more than " + x_is + " padded to " + std::to_string(padded[0]) +
                      " x " + std::to_string(padded[1]) + " x " + std::to_string(padded[2]) + ": no output position");
  g.out_d = out[0];
  g.out_h = out[1];
  g.out_w = out[2];
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
template <class T, class S, std::size_t R>
const T* checked_bias(const char* op, const view<const T, 1, S>& b, const shape<R>& ws, index_t& stride) {
  if (b.extent(0) != ws[0])
    throw shape_error(std::string("loom: ") + op + ": bias " + shape_string(b.extents()) +
                      " must have one element per " + "output channel of weight w " + shape_string(ws) + " (" +
                      std::to_string(ws[0]) + ")");
  stride = b.stride(0);
  return b.data();
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
}  // namespace loom::detail::conv
