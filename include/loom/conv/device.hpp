// SPDX-License-Identifier: Apache-2.0
#pragma once

// conv3d, conv2d and conv1d on device tensors: cuDNN convolves (conv/cudnn.hpp);
// a bias and an activation that cuDNN does not fuse into its call run as
// one loom elementwise kernel after it; the bias gradient is loom's
// deterministic reduction over every axis but the channels'. With
// channels-last data the weight goes to cuDNN channels last too ([Cout,
// kh, kw, C / G], as cuDNN's NHWC engines take it): one loom copy kernel
// of the weight (and of its gradient, back to [Cout, C / G, kh, kw]).

#include <cstddef>

#include "loom/config.hpp"
#include "loom/conv/cudnn.hpp"
#include "loom/conv/host.hpp"
#include "loom/exec/assign.hpp"
#include "loom/ops/activations.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/reduce/reduce.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail::conv {
// Whether the bias and the activation run inside cuDNN's convolution call
// (cudnnConvolutionBiasActivationForward: a bias with ReLU); otherwise one
// loom kernel applies them after the convolution.
constexpr bool cudnn_fuses_epilogue(bool has_bias, matmul_activation act) {
  return has_bias && act == matmul_activation::relu;
}

// A device view that cuDNN can read: v itself, or a contiguous copy held in `store`.
template <class T, std::size_t R>
view<const T, R, device> describable_or_copy(const view<const T, R, device>& v, tensor<T, R, device>& store) {
  bool fine = true;
  for (std::size_t a = 0; a != R; ++a)
    if (v.extent(a) > 1 && v.stride(a) < 1) fine = false;
  if (fine) return v;
  store = loom::contiguous(v);
  return store.view();
}

// The filter layout cuDNN gets for data in the given layout, and w
// (contiguous [Cout, C / G, kh, kw]) in it: w itself, or its channels-last
// copy held in `store`.
inline cudnnTensorFormat_t filter_format(bool channels_last) {
  return channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}
template <class T, std::size_t R>
const T* filter_in(const view<const T, R, device>& w, bool channels_last, tensor<T, R, device>& store) {
  if constexpr (R == 4) {
    if (channels_last) {
      store = loom::contiguous(w.permute({0, 2, 3, 1}));
      return store.data();
    }
  }
  return w.data();
}
// A [C] vector seen as [1, C, 1, 1(, 1)], broadcasting over the channels of rank-R data.
template <std::size_t R, class T>
view<const T, R, device> per_channel(const view<const T, 1, device>& v) {
  if constexpr (R == 5)
    return v.unsqueeze(0).unsqueeze(2).unsqueeze(3).unsqueeze(4);
  else
    return v.unsqueeze(0).unsqueeze(2).unsqueeze(3);
}

// y = act(conv(x, w) + bias) on the current stream; x, y NCHW-ordered views
// (any strides; channels_last: of NHWC memory), w contiguous [Cout, C / G,
// kh, kw], bias null or [Cout].
template <class T, std::size_t R>
void device_forward(const view<const T, R, device>& x, const view<const T, R, device>& w,
                    const view<const T, 1, device>* bias, matmul_activation act, const geometry& g,
                    bool channels_last, const view<T, R, device>& y) {
  tensor<T, R, device> x_store, w_store;
  const view<const T, R, device> xv = describable_or_copy(x, x_store);
  const T* wf = filter_in(w, channels_last, w_store);
  if (cudnn_fuses_epilogue(bias != nullptr, act)) {
    tensor<T, 1, device> bias_store;
    const view<const T, 1, device> b = bias->stride(0) == 1 ? *bias : (bias_store = loom::contiguous(*bias)).view();
    cudnn::forward(xv, wf, filter_format(channels_last), b.data(), g, y);
    return;
  }
  cudnn::forward(xv, wf, filter_format(channels_last), static_cast<const T*>(nullptr), g, y);
  const view<T, R, device>& out = y;
  if (bias) {
    const view<const T, R, device> b = per_channel<R>(*bias);
    if (act == matmul_activation::gelu_tanh)
      assign(out, loom::gelu(out + b, approximate::tanh));
    else
      assign(out, out + b);
  } else if (act == matmul_activation::relu) {
    assign(out, loom::relu(out));
  } else if (act == matmul_activation::gelu_tanh) {
    assign(out, loom::gelu(out, approximate::tanh));
  }
}

// y[n, c, ...] += bias[c] for a contiguous NCHW y: one loom elementwise kernel.
template <class T>
void device_add_channel_bias(const view<T, 4, device>& y, const view<const T, 1, device>& bias) {
  assign(y, y + bias.unsqueeze(0).unsqueeze(2).unsqueeze(3));
}

// dx (NCHW-ordered view of a contiguous tensor) from dy and w (contiguous).
template <class T, std::size_t R>
void device_backward_input(const view<const T, R, device>& dy, const view<const T, R, device>& w, const geometry& g,
                           bool channels_last, const view<T, R, device>& dx) {
  tensor<T, R, device> dy_store, w_store;
  cudnn::backward_data(describable_or_copy(dy, dy_store), filter_in(w, channels_last, w_store),
                       filter_format(channels_last), g, dx);
}

// dw (contiguous [Cout, C / G, kh, kw]) from dy and x.
template <class T, std::size_t R>
void device_backward_weight(const view<const T, R, device>& dy, const view<const T, R, device>& x, const geometry& g,
                            bool channels_last, const view<T, R, device>& dw) {
  tensor<T, R, device> dy_store, x_store;
  const view<const T, R, device> dyv = describable_or_copy(dy, dy_store), xv = describable_or_copy(x, x_store);
  if constexpr (R == 4) {
    if (channels_last) {
      tensor<T, 4, device> dw_last(shape<4>{dw.extent(0), dw.extent(2), dw.extent(3), dw.extent(1)});
      cudnn::backward_filter(dyv, xv, g, CUDNN_TENSOR_NHWC, dw_last.data());
      assign(dw, dw_last.view().permute({0, 3, 1, 2}));
      return;
    }
  }
  cudnn::backward_filter(dyv, xv, g, CUDNN_TENSOR_NCHW, dw.data());
}

// db [C] = the sum of dy over every axis but 1, one loom reduction (no atomics).
template <class T, std::size_t R>
auto device_backward_bias(const view<const T, R, device>& dy) {
  static constexpr int axes5[4] = {0, 2, 3, 4};
  static constexpr int axes4[3] = {0, 2, 3};
  static constexpr int axes3[2] = {0, 2};
  if constexpr (R == 5)
    return loom::sum(dy, axes5);
  else if constexpr (R == 4)
    return loom::sum(dy, axes4);
  else
    return loom::sum(dy, axes3);
}
}  // namespace loom::detail::conv
