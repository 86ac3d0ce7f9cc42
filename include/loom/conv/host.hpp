// SPDX-License-Identifier: Apache-2.0
#pragma once

// The host executor's convolution, by im2col and the host GEMM, over up to
// three spatial axes (depth, height, width: conv3d's NCDHW; conv2d and
// conv1d run with depth 1). The batch is cut into chunks of images whose
// column matrix (patch rows x output positions) fits a fixed budget; per
// chunk one parallel pass writes the columns and one host GEMM (BLAS or
// loom's kernel, linalg/host_gemm.hpp) multiplies them with the weight,
// groups as a batch axis of the GEMM:
//   forward:  y[n, g]  = W[g] (Cout/G x K)  col[n, g] (K x L), bias in the GEMM's epilogue
//   data:     dcol[n, g] = W[g]^T dy[n, g], then col2im gathers dx (each element written once)
//   weight:   dW[g] += dy[g] (Cout/G x nL) col[g]^T (nL x K), the chunks added in order
// with K = C/G * kd * kh * kw and L = od * oh * ow. Every sum runs in a
// fixed order for given shapes, so results are the same run to run.

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

// Extents of one convolution; checked by the caller. Depth is 1 for 2-D
// and 1-D convolutions.
struct geometry {
  index_t batch = 0, channels = 0, height = 0, width = 0;  // x: [N, C, (D,) H, W]
  index_t out_channels = 0, kernel_h = 0, kernel_w = 0;    // w: [Cout, C/G, (kd,) kh, kw]
  index_t groups = 1;
  index_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  index_t out_h = 0, out_w = 0;
  index_t depth = 1, kernel_d = 1, stride_d = 1, pad_d = 0, dilation_d = 1, out_d = 1;

  index_t taps() const { return kernel_d * kernel_h * kernel_w; }
  index_t patch() const { return channels / groups * taps(); }  // K
  index_t positions() const { return out_d * out_h * out_w; }  // L
  index_t rows() const { return channels * taps(); }           // G * K
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

// One kernel tap (kd, ki, kj): its input offsets per axis and the output
// ranges that read inside x.
struct tap {
  index_t off_z = 0, off_y = 0, off_x = 0;
  tap_range zs, ys, xs;
};
inline tap tap_of(const geometry& g, index_t t) {
  const index_t kd = t / (g.kernel_h * g.kernel_w), ki = t / g.kernel_w % g.kernel_h, kj = t % g.kernel_w;
  tap p;
  p.off_z = kd * g.dilation_d - g.pad_d;
  p.off_y = ki * g.dilation_h - g.pad_h;
  p.off_x = kj * g.dilation_w - g.pad_w;
  p.zs = valid_outputs(p.off_z, g.stride_d, g.depth, g.out_d);
  p.ys = valid_outputs(p.off_y, g.stride_h, g.height, g.out_h);
  p.xs = valid_outputs(p.off_x, g.stride_w, g.width, g.out_w);
  return p;
}

// col[(n - n0) * image_stride + r * row_stride + l] for images [n0, n0 + count),
// patch rows r = (c, kd, ki, kj) and output positions l = (oz, oy, ox): x
// ([N, C, D, H, W], any strides) at the position row r reads for l, 0 in
// the padding. One parallel pass.
template <class T>
void im2col(const view<const T, 5, host>& x, const geometry& g, index_t n0, index_t count, T* col,
            index_t image_stride, index_t row_stride) {
  const index_t taps = g.taps(), plane = g.out_h * g.out_w;
  host_for_each(
      count * g.rows(),
      [&](index_t i) {
        const index_t n = n0 + i / g.rows(), r = i % g.rows();
        const index_t c = r / taps;
        const tap p = tap_of(g, r % taps);
        const T* volume = x.data() + n * x.stride(0) + c * x.stride(1);
        T* out = col + (i / g.rows()) * image_stride + r * row_stride;
        std::fill(out, out + p.zs.lo * plane, T(0));
        for (index_t oz = p.zs.lo; oz < p.zs.hi; ++oz) {
          T* slab = out + oz * plane;
          const T* src_slab = volume + (oz * g.stride_d + p.off_z) * x.stride(2);
          std::fill(slab, slab + p.ys.lo * g.out_w, T(0));
          for (index_t oy = p.ys.lo; oy < p.ys.hi; ++oy) {
            T* row = slab + oy * g.out_w;
            const T* src = src_slab + (oy * g.stride_h + p.off_y) * x.stride(3);
            std::fill(row, row + p.xs.lo, T(0));
            for (index_t ox = p.xs.lo; ox < p.xs.hi; ++ox) row[ox] = src[(ox * g.stride_w + p.off_x) * x.stride(4)];
            std::fill(row + p.xs.hi, row + g.out_w, T(0));
          }
          std::fill(slab + p.ys.hi * g.out_w, slab + plane, T(0));
        }
        std::fill(out + p.zs.hi * plane, out + g.positions(), T(0));
      },
      g.positions());
}

// dx[n0 + i] (contiguous [N, C, D, H, W], or [N, H, W, C] with channels_last,
// depth 1) = the sum, over the column entries that im2col would fill from
// each element, of dcol ([count, rows, L], contiguous). Each volume (image,
// channel) is one thread's: zeroed, then the rows added in the order
// (kd, ki, kj), so every element sums its terms in that order. One parallel pass.
template <class T>
void col2im(const T* dcol, const geometry& g, index_t n0, index_t count, bool channels_last, T* dx) {
  const index_t taps = g.taps(), positions = g.positions(), plane = g.out_h * g.out_w;
  const index_t volume = g.depth * g.height * g.width;
  // Where element (c, iz, iy, ix) of an image lies: c channel_stride + ((iz H + iy) W + ix) element_stride.
  const index_t channel_stride = channels_last ? 1 : volume, element_stride = channels_last ? g.channels : 1;
  host_for_each(
      count * g.channels,
      [&](index_t q) {
        const index_t i = q / g.channels, c = q % g.channels;
        const T* rows = dcol + (i * g.rows() + c * taps) * positions;
        T* out = dx + (n0 + i) * g.channels * volume + c * channel_stride;
        for (index_t e = 0; e < volume; ++e) out[e * element_stride] = T(0);
        for (index_t t = 0; t < taps; ++t) {
          const tap p = tap_of(g, t);
          const T* row = rows + t * positions;
          for (index_t oz = p.zs.lo; oz < p.zs.hi; ++oz)
            for (index_t oy = p.ys.lo; oy < p.ys.hi; ++oy) {
              const index_t iz = oz * g.stride_d + p.off_z, iy = oy * g.stride_h + p.off_y;
              T* dst = out + (iz * g.height + iy) * g.width * element_stride;
              const T* src = row + oz * plane + oy * g.out_w;
              for (index_t ox = p.xs.lo; ox < p.xs.hi; ++ox) dst[(ox * g.stride_w + p.off_x) * element_stride] += src[ox];
            }
        }
      },
      volume * taps);
}

// y (contiguous [N, Cout, od, oh, ow], or [N, oh, ow, Cout] with
// channels_last) = act(conv(x, w) + bias); w contiguous, bias null or a
// [Cout] vector of stride bias_stride. Channels last, the GEMM is
// transposed: y[n, g] (L x Cout/G, rows Cout apart) = col[n, g]^T W[g]^T,
// both read in place.
template <class T>
void forward(const view<const T, 5, host>& x, const T* w, const T* bias, index_t bias_stride, matmul_activation act,
             const geometry& g, bool channels_last, T* y) {
  const index_t G = g.groups, K = g.patch(), L = g.positions(), M = g.out_per_group(), chunk = g.chunk();
  const index_t C = g.out_channels;
  tensor<T, 1, host> col(shape<1>{chunk * g.rows() * L});
  for (index_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const index_t count = std::min(chunk, g.batch - n0);
    im2col(x, g, n0, count, col.data(), g.rows() * L, L);
    gemm_epilogue<T, 4> ep;
    ep.act = act;
    if (!channels_last) {
      const view<const T, 4, host> a(w, shape<4>{count, G, M, K}, shape<4>{0, M * K, K, 1});
      const view<const T, 4, host> b(col.data(), shape<4>{count, G, K, L});
      const view<T, 4, host> d(y + n0 * C * L, shape<4>{count, G, M, L});
      if (bias) ep.bias = view<const T, 4, host>(bias, d.extents(), shape<4>{0, M * bias_stride, bias_stride, 0});
      host_gemm<T, T, 4>(a, b, d, ep);
    } else {
      const view<const T, 4, host> a(col.data(), shape<4>{count, G, L, K}, shape<4>{g.rows() * L, K * L, 1, L});
      const view<const T, 4, host> b(w, shape<4>{count, G, K, M}, shape<4>{0, M * K, 1, K});
      const view<T, 4, host> d(y + n0 * C * L, shape<4>{count, G, L, M}, shape<4>{L * C, M, C, 1});
      if (bias) ep.bias = view<const T, 4, host>(bias, d.extents(), shape<4>{0, M * bias_stride, 0, bias_stride});
      host_gemm<T, T, 4>(a, b, d, ep);
    }
  }
}

// dx (contiguous [N, C, D, H, W], or [N, H, W, C] with channels_last) from
// dy (contiguous [N, Cout, od, oh, ow]) and w (contiguous).
template <class T>
void backward_input(const T* dy, const T* w, const geometry& g, bool channels_last, T* dx) {
  const index_t G = g.groups, K = g.patch(), L = g.positions(), M = g.out_per_group(), chunk = g.chunk();
  tensor<T, 1, host> dcol(shape<1>{chunk * g.rows() * L});
  for (index_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const index_t count = std::min(chunk, g.batch - n0);
    const view<const T, 4, host> a(w, shape<4>{count, G, K, M}, shape<4>{0, M * K, 1, K});
    const view<const T, 4, host> b(dy + n0 * g.out_channels * L, shape<4>{count, G, M, L});
    const view<T, 4, host> d(dcol.data(), shape<4>{count, G, K, L});
    host_gemm<T, T, 4>(a, b, d, {});
    col2im(dcol.data(), g, n0, count, channels_last, dx);
  }
}

// Whether the data gradient runs as a convolution of dy: stride 1 on every
// axis and padding at most the dilated kernel's reach (dilation (k - 1)).
inline bool data_gradient_as_convolution(const geometry& g) {
  return g.stride_d == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_d <= g.dilation_d * (g.kernel_d - 1) &&
         g.pad_h <= g.dilation_h * (g.kernel_h - 1) && g.pad_w <= g.dilation_w * (g.kernel_w - 1);
}

// dx (contiguous [N, C, D, H, W], or [N, H, W, C] with channels_last) as
// the forward convolution of dy ([N, Cout, od, oh, ow], any strides) with w
// (contiguous) flipped along its three kernel axes and with its channel
// axes swapped per group, padding dilation (k - 1) - padding, stride 1
// (where data_gradient_as_convolution holds). Its columns are as many as
// the forward's, where the GEMM-then-col2im path writes C / G kd kh kw rows
// of columns per image and gathers them again: one weight pass, then the
// forward's passes.
template <class T>
void backward_input_by_convolution(const view<const T, 5, host>& dy, const T* w, const geometry& g,
                                   bool channels_last, T* dx) {
  const index_t cin = g.channels / g.groups, cog = g.out_per_group(), taps = g.taps();
  // flipped[(group, c), o, taps - 1 - t] = w[(group, o), c, t].
  tensor<T, 1, host> flipped(shape<1>{g.channels * cog * taps});
  host_for_each(
      g.out_channels * cin,
      [&](index_t q) {
        const index_t o = q / cin, c = q % cin, group = o / cog;
        const T* src = w + q * taps;
        T* dst = flipped.data() + ((group * cin + c) * cog + o % cog) * taps;
        for (index_t t = 0; t < taps; ++t) dst[taps - 1 - t] = src[t];
      },
      taps);
  geometry t = g;
  t.channels = g.out_channels;
  t.out_channels = g.channels;
  t.depth = g.out_d, t.height = g.out_h, t.width = g.out_w;
  t.out_d = g.depth, t.out_h = g.height, t.out_w = g.width;
  t.stride_d = t.stride_h = t.stride_w = 1;
  t.pad_d = g.dilation_d * (g.kernel_d - 1) - g.pad_d;
  t.pad_h = g.dilation_h * (g.kernel_h - 1) - g.pad_h;
  t.pad_w = g.dilation_w * (g.kernel_w - 1) - g.pad_w;
  forward(dy, static_cast<const T*>(flipped.data()), static_cast<const T*>(nullptr), 0, matmul_activation::none, t,
          channels_last, dx);
}

// Whether the output positions of one image of dy ([N, Cout, od, oh, ow])
// lie at one stride, so that they merge into one axis.
template <class T>
bool positions_merge(const view<const T, 5, host>& dy) {
  return (dy.extent(4) == 1 || dy.extent(3) == 1 || dy.stride(3) == dy.extent(4) * dy.stride(4)) &&
         (dy.extent(2) == 1 || dy.extent(3) * dy.extent(4) == 1 ||
          dy.stride(2) == dy.extent(3) * dy.extent(4) * dy.stride(4));
}

// dw (contiguous [Cout, C/G, kd, kh, kw]) from dy (5-D, any strides) and x.
// A chunk of one image reads dy in place when its positions merge into one
// axis; otherwise the chunk's dy is copied to [Cout, count * L] first.
template <class T>
void backward_weight(const view<const T, 5, host>& dy, const view<const T, 5, host>& x, const geometry& g, T* dw) {
  const index_t G = g.groups, K = g.patch(), L = g.positions(), M = g.out_per_group(), chunk = g.chunk();
  const bool dy_in_place = chunk == 1 && positions_merge(dy);
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
          [&](index_t q) {
            const index_t o = q / count, i = q % count;
            const T* src = dy.data() + (n0 + i) * dy.stride(0) + o * dy.stride(1);
            T* out = grad.data() + o * columns + i * L;
            for (index_t oz = 0; oz < g.out_d; ++oz)
              for (index_t oy = 0; oy < g.out_h; ++oy)
                for (index_t ox = 0; ox < g.out_w; ++ox)
                  out[(oz * g.out_h + oy) * g.out_w + ox] = src[oz * dy.stride(2) + oy * dy.stride(3) + ox * dy.stride(4)];
          },
          L);
    const view<const T, 3, host> a =
        dy_in_place ? view<const T, 3, host>(dy.data() + n0 * dy.stride(0), shape<3>{G, M, L},
                                             shape<3>{M * dy.stride(1), dy.stride(1), dy.stride(4)})
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

// db[o] = the sum of dy[:, o, ...], in the order (n, oz, oy, ox), in T. One parallel pass.
template <class T>
void backward_bias(const view<const T, 5, host>& dy, T* db) {
  host_for_each(
      dy.extent(1),
      [&](index_t o) {
        T sum = 0;
        for (index_t n = 0; n < dy.extent(0); ++n) {
          const T* volume = dy.data() + n * dy.stride(0) + o * dy.stride(1);
          for (index_t oz = 0; oz < dy.extent(2); ++oz)
            for (index_t oy = 0; oy < dy.extent(3); ++oy)
              for (index_t ox = 0; ox < dy.extent(4); ++ox)
                sum += volume[oz * dy.stride(2) + oy * dy.stride(3) + ox * dy.stride(4)];
        }
        db[o] = sum;
      },
      dy.extent(0) * dy.extent(2) * dy.extent(3) * dy.extent(4));
}
}  // namespace loom::detail::conv
