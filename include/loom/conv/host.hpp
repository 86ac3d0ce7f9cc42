// SPDX-License-Identifier: Apache-2.0
#pragma once

// The host executor's 2-D convolution (NCHW), by im2col and the host GEMM.
// The batch is cut into chunks of images whose column matrix (patch rows x
// output positions) fits a fixed budget; per chunk one parallel pass writes
// the columns and one host GEMM (BLAS or loom's kernel, linalg/host_gemm.hpp)
// multiplies them with the weight, groups as a batch axis of the GEMM:
//   forward:  y[n, g]  = W[g] (Cout/G x K)  col[n, g] (K x L), bias in the GEMM's epilogue
//   data:     dcol[n, g] = W[g]^T dy[n, g], then col2im gathers dx (each element written once)
//   weight:   dW[g] += dy[g] (Cout/G x nL) col[g]^T (nL x K), the chunks added in order
// with K = C/G * kh * kw and L = oh * ow. Every sum runs in a fixed order for
// given shapes, so results are the same run to run.

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/linalg/host_gemm.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail::conv {
// Column matrices of one chunk hold at most this many elements (8 MiB of
// float): a chunk's columns stay near the last-level cache while the GEMM
// reads them, and a 3x3 convolution of 64 channels at 56 x 56 is one image a chunk.
constexpr index_t column_budget = index_t{1} << 21;

// Extents of one convolution; checked by the caller.
struct geometry {
  index_t batch = 0, channels = 0, height = 0, width = 0;  // x: [N, C, H, W]
  index_t out_channels = 0, kernel_h = 0, kernel_w = 0;    // w: [Cout, C/G, kh, kw]
  index_t groups = 1;
  index_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  index_t out_h = 0, out_w = 0;

  index_t patch() const { return channels / groups * kernel_h * kernel_w; }  // K
  index_t positions() const { return out_h * out_w; }                        // L
  index_t rows() const { return channels * kernel_h * kernel_w; }            // G * K
  index_t out_per_group() const { return out_channels / groups; }
  // Images per chunk: the column matrix of a chunk stays within column_budget.
  index_t chunk() const {
    const index_t per_image = std::max<index_t>(rows() * positions(), 1);
    return std::clamp<index_t>(column_budget / per_image, 1, std::max<index_t>(batch, 1));
  }
};

// The output positions [lo, hi) along one axis whose input position
// o * stride + offset lies in [0, in), for a kernel tap at `offset`
// (tap * dilation - pad).
struct tap_range {
  index_t lo = 0, hi = 0;
};
inline tap_range valid_outputs(index_t offset, index_t stride, index_t in, index_t out) {
  const index_t lo = offset >= 0 ? 0 : (stride - 1 - offset) / stride;
  const index_t last = in - 1 - offset;  // o * stride <= last
  const index_t hi = last < 0 ? 0 : std::min(out, last / stride + 1);
  return {std::min(lo, out), std::max(std::min(lo, out), hi)};
}

// col[(n - n0) * image_stride + r * row_stride + l] for images [n0, n0 + count),
// patch rows r = (c, ki, kj) and output positions l = (oy, ox): x at the
// position row r reads for l, 0 in the padding. One parallel pass.
template <class T>
void im2col(const view<const T, 4, host>& x, const geometry& g, index_t n0, index_t count, T* col, index_t image_stride,
            index_t row_stride) {
  const index_t khw = g.kernel_h * g.kernel_w;
  host_for_each(
      count * g.rows(),
      [&](index_t i) {
        const index_t n = n0 + i / g.rows(), r = i % g.rows();
        const index_t c = r / khw, ki = r % khw / g.kernel_w, kj = r % g.kernel_w;
        const index_t off_y = ki * g.dilation_h - g.pad_h, off_x = kj * g.dilation_w - g.pad_w;
        const tap_range ys = valid_outputs(off_y, g.stride_h, g.height, g.out_h);
        const tap_range xs = valid_outputs(off_x, g.stride_w, g.width, g.out_w);
        const T* plane = x.data() + n * x.stride(0) + c * x.stride(1);
        T* out = col + (i / g.rows()) * image_stride + r * row_stride;
        std::fill(out, out + ys.lo * g.out_w, T(0));
        for (index_t oy = ys.lo; oy < ys.hi; ++oy) {
          T* row = out + oy * g.out_w;
          const T* src = plane + (oy * g.stride_h + off_y) * x.stride(2);
          std::fill(row, row + xs.lo, T(0));
          for (index_t ox = xs.lo; ox < xs.hi; ++ox) row[ox] = src[(ox * g.stride_w + off_x) * x.stride(3)];
          std::fill(row + xs.hi, row + g.out_w, T(0));
        }
        std::fill(out + ys.hi * g.out_w, out + g.positions(), T(0));
      },
      g.positions());
}

// dx[n0 + i] (contiguous [N, C, H, W], or [N, H, W, C] with channels_last)
// = the sum, over the column entries that im2col would fill from each
// element, of dcol ([count, rows, L], contiguous). Each plane (image,
// channel) is one thread's: zeroed, then the rows added in the order
// (ki, kj), so every element sums its terms in that order. One parallel pass.
template <class T>
void col2im(const T* dcol, const geometry& g, index_t n0, index_t count, bool channels_last, T* dx) {
  const index_t khw = g.kernel_h * g.kernel_w, positions = g.positions(), plane = g.height * g.width;
  // Where element (c, iy, ix) of an image lies: c channel_stride + (iy W + ix) element_stride.
  const index_t channel_stride = channels_last ? 1 : plane, element_stride = channels_last ? g.channels : 1;
  host_for_each(
      count * g.channels,
      [&](index_t p) {
        const index_t i = p / g.channels, c = p % g.channels;
        const T* rows = dcol + (i * g.rows() + c * khw) * positions;
        T* out = dx + (n0 + i) * g.channels * plane + c * channel_stride;
        for (index_t e = 0; e < plane; ++e) out[e * element_stride] = T(0);
        for (index_t ki = 0; ki < g.kernel_h; ++ki)
          for (index_t kj = 0; kj < g.kernel_w; ++kj) {
            const index_t off_y = ki * g.dilation_h - g.pad_h, off_x = kj * g.dilation_w - g.pad_w;
            const tap_range ys = valid_outputs(off_y, g.stride_h, g.height, g.out_h);
            const tap_range xs = valid_outputs(off_x, g.stride_w, g.width, g.out_w);
            const T* row = rows + (ki * g.kernel_w + kj) * positions;
            for (index_t oy = ys.lo; oy < ys.hi; ++oy) {
              T* dst = out + (oy * g.stride_h + off_y) * g.width * element_stride;
              const T* src = row + oy * g.out_w;
              for (index_t ox = xs.lo; ox < xs.hi; ++ox) dst[(ox * g.stride_w + off_x) * element_stride] += src[ox];
            }
          }
      },
      plane * khw);
}

// y (contiguous [N, Cout, oh, ow], or [N, oh, ow, Cout] with channels_last)
// = act(conv(x, w) + bias); w contiguous, bias null or a [Cout] vector of
// stride bias_stride. Channels last, the GEMM is transposed: y[n, g]
// (L x Cout/G, rows Cout apart) = col[n, g]^T W[g]^T, both read in place.
template <class T>
void forward(const view<const T, 4, host>& x, const view<const T, 4, host>& w, const T* bias, index_t bias_stride,
             matmul_activation act, const geometry& g, bool channels_last, T* y) {
  const index_t G = g.groups, K = g.patch(), L = g.positions(), M = g.out_per_group(), chunk = g.chunk();
  const index_t C = g.out_channels;
  tensor<T, 1, host> col(shape<1>{chunk * g.rows() * L});
  for (index_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const index_t count = std::min(chunk, g.batch - n0);
    im2col(x, g, n0, count, col.data(), g.rows() * L, L);
    gemm_epilogue<T, 4> ep;
    ep.act = act;
    if (!channels_last) {
      const view<const T, 4, host> a(w.data(), shape<4>{count, G, M, K}, shape<4>{0, M * K, K, 1});
      const view<const T, 4, host> b(col.data(), shape<4>{count, G, K, L});
      const view<T, 4, host> d(y + n0 * C * L, shape<4>{count, G, M, L});
      if (bias) ep.bias = view<const T, 4, host>(bias, d.extents(), shape<4>{0, M * bias_stride, bias_stride, 0});
      host_gemm<T, T, 4>(a, b, d, ep);
    } else {
      const view<const T, 4, host> a(col.data(), shape<4>{count, G, L, K}, shape<4>{g.rows() * L, K * L, 1, L});
      const view<const T, 4, host> b(w.data(), shape<4>{count, G, K, M}, shape<4>{0, M * K, 1, K});
      const view<T, 4, host> d(y + n0 * C * L, shape<4>{count, G, L, M}, shape<4>{L * C, M, C, 1});
      if (bias) ep.bias = view<const T, 4, host>(bias, d.extents(), shape<4>{0, M * bias_stride, 0, bias_stride});
      host_gemm<T, T, 4>(a, b, d, ep);
    }
  }
}

// dx (contiguous [N, C, H, W], or [N, H, W, C] with channels_last) from dy
// (4-D NCHW, its last two axes mergeable) and w (contiguous).
template <class T>
void backward_input(const view<const T, 4, host>& dy, const view<const T, 4, host>& w, const geometry& g,
                    bool channels_last, T* dx) {
  const index_t G = g.groups, K = g.patch(), L = g.positions(), M = g.out_per_group(), chunk = g.chunk();
  tensor<T, 1, host> dcol(shape<1>{chunk * g.rows() * L});
  for (index_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const index_t count = std::min(chunk, g.batch - n0);
    const view<const T, 4, host> a(w.data(), shape<4>{count, G, K, M}, shape<4>{0, M * K, 1, K});
    const view<const T, 4, host> b(dy.data() + n0 * dy.stride(0), shape<4>{count, G, M, L},
                                   shape<4>{dy.stride(0), M * dy.stride(1), dy.stride(1), dy.stride(3)});
    const view<T, 4, host> d(dcol.data(), shape<4>{count, G, K, L});
    host_gemm<T, T, 4>(a, b, d, {});
    col2im(dcol.data(), g, n0, count, channels_last, dx);
  }
}

// dw (contiguous [Cout, C/G, kh, kw]) from dy (4-D, any strides) and x.
// A chunk of one image reads dy in place when its positions merge into one
// axis; otherwise the chunk's dy is copied to [Cout, count * L] first.
template <class T>
void backward_weight(const view<const T, 4, host>& dy, const view<const T, 4, host>& x, const geometry& g, T* dw) {
  const index_t G = g.groups, K = g.patch(), L = g.positions(), M = g.out_per_group(), chunk = g.chunk();
  const bool dy_in_place = chunk == 1 && (g.out_h == 1 || dy.stride(2) == g.out_w * dy.stride(3));
  tensor<T, 1, host> col(shape<1>{chunk * g.rows() * L});
  tensor<T, 1, host> grad(shape<1>{dy_in_place ? 0 : chunk * g.out_channels * L});
  const view<T, 3, host> d(dw, shape<3>{G, M, K});
  for (index_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const index_t count = std::min(chunk, g.batch - n0), columns = count * L;
    im2col(x, g, n0, count, col.data(), L, columns);
    // dy of the chunk as [Cout, count * L]: image i at columns [i L, (i + 1) L).
    if (!dy_in_place)
      host_for_each(
          g.out_channels * count,
          [&](index_t p) {
            const index_t o = p / count, i = p % count;
            const T* src = dy.data() + (n0 + i) * dy.stride(0) + o * dy.stride(1);
            T* out = grad.data() + o * columns + i * L;
            for (index_t oy = 0; oy < g.out_h; ++oy)
              for (index_t ox = 0; ox < g.out_w; ++ox)
                out[oy * g.out_w + ox] = src[oy * dy.stride(2) + ox * dy.stride(3)];
          },
          L);
    const view<const T, 3, host> a =
        dy_in_place ? view<const T, 3, host>(dy.data() + n0 * dy.stride(0), shape<3>{G, M, L},
                                             shape<3>{M * dy.stride(1), dy.stride(1), dy.stride(3)})
                    : view<const T, 3, host>(grad.data(), shape<3>{G, M, columns});
    const view<const T, 3, host> b(col.data(), shape<3>{G, columns, K}, shape<3>{K * columns, 1, columns});
    gemm_epilogue<T, 3> ep;
    if (n0 > 0) {
      ep.beta = 1;
      ep.c = view<const T, 3, host>(d);
    }
    host_gemm<T, T, 3>(a, b, d, ep);
  }
  if (g.batch == 0) std::fill(dw, dw + d.size(), T(0));
}

// db[o] = the sum of dy[:, o, :, :], in the order (n, oy, ox), in T. One parallel pass.
template <class T>
void backward_bias(const view<const T, 4, host>& dy, T* db) {
  host_for_each(
      dy.extent(1),
      [&](index_t o) {
        T sum = 0;
        for (index_t n = 0; n < dy.extent(0); ++n) {
          const T* plane = dy.data() + n * dy.stride(0) + o * dy.stride(1);
          for (index_t oy = 0; oy < dy.extent(2); ++oy)
            for (index_t ox = 0; ox < dy.extent(3); ++ox) sum += plane[oy * dy.stride(2) + ox * dy.stride(3)];
        }
        db[o] = sum;
      },
      dy.extent(0) * dy.extent(2) * dy.extent(3));
}
}  // namespace loom::detail::conv
