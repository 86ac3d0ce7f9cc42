// SPDX-License-Identifier: Apache-2.0
#pragma once

// The options of conv1d, conv2d and conv3d: how the kernel slides, the
// groups, the activation after the bias and conv2d's memory layout.

#include <array>

#include "loom/core/shape.hpp"
#include "loom/linalg/host_gemm.hpp"

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

//! The 3-D form of conv2d_options, NCDHW: per axis (depth, height, width)
//! the stride, the zero padding on both sides and the dilation.
//! Example: `loom::conv3d(x, w, {.stride = {1, 2, 2}, .padding = {1, 1, 1}})`
struct conv3d_options {
  std::array<index_t, 3> stride{1, 1, 1};    //!< step of the window, at least 1
  std::array<index_t, 3> padding{0, 0, 0};   //!< zeros added on each side, at least 0
  std::array<index_t, 3> dilation{1, 1, 1};  //!< spacing of the kernel taps, at least 1
  index_t groups = 1;                        //!< divides the input and the output channels
  matmul_activation activation = matmul_activation::none;  //!< as conv2d_options::activation
};
}  // namespace loom
