// SPDX-License-Identifier: Apache-2.0
#pragma once

// The host executor's 2-D pooling (NCHW): one parallel pass over the planes
// (image, channel), each plane by one thread in a fixed order, so every
// result (sums of the backward passes included) is the same run to run.
// Windows follow PyTorch: window o along an axis starts at o * stride - pad
// and has kernel taps `dilation` apart; taps outside the input are skipped.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "loom/config.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail::pool {
// One window axis: its extents, the window, and the output extent.
struct axis {
  index_t in = 0, out = 0, kernel = 1, stride = 1, pad = 0, dilation = 1;
};

// Average pooling's window [begin, end) along one axis: PyTorch's, with the
// count of the padded window (`padded`) for count_include_pad.
struct avg_window {
  index_t begin = 0, end = 0, padded = 0;
};
inline avg_window average_window(const axis& a, index_t o) {
  index_t begin = o * a.stride - a.pad;
  index_t end = std::min(begin + a.kernel, a.in + a.pad);
  const index_t padded = end - begin;
  begin = std::max<index_t>(begin, 0);
  end = std::min(end, a.in);
  return {begin, end, padded};
}
// Adaptive pooling's window of output o: [floor(o in / out), ceil((o + 1) in / out)).
inline avg_window adaptive_window(index_t in, index_t out, index_t o) {
  const index_t begin = o * in / out, end = ((o + 1) * in + out - 1) / out;
  return {begin, end, end - begin};
}

template <class T>
bool takes_max(T v, T best) {
  return v > best || std::isnan(v);
}

// values/indices (contiguous [N, C, oh, ow]): each window's maximum (NaN
// wins) and its flat position iy * W + ix in the plane (the first of equal
// maxima in row-major order); -infinity and -1 for a window whose taps all
// fall in the padding.
template <class T>
void max_forward(const view<const T, 4, host>& x, const axis& h, const axis& w, T* values, std::int64_t* indices) {
  const index_t channels = x.extent(1), out_plane = h.out * w.out;
  host_for_each(
      x.extent(0) * channels,
      [&](index_t p) {
        const T* plane = x.data() + p / channels * x.stride(0) + p % channels * x.stride(1);
        for (index_t oy = 0; oy < h.out; ++oy)
          for (index_t ox = 0; ox < w.out; ++ox) {
            index_t y0 = oy * h.stride - h.pad, x0 = ox * w.stride - w.pad;
            while (y0 < 0) y0 += h.dilation;
            while (x0 < 0) x0 += w.dilation;
            const index_t y1 = std::min(oy * h.stride - h.pad + (h.kernel - 1) * h.dilation + 1, h.in);
            const index_t x1 = std::min(ox * w.stride - w.pad + (w.kernel - 1) * w.dilation + 1, w.in);
            T best = -std::numeric_limits<T>::infinity();
            index_t at = -1;
            for (index_t iy = y0; iy < y1; iy += h.dilation)
              for (index_t ix = x0; ix < x1; ix += w.dilation) {
                const T v = plane[iy * x.stride(2) + ix * x.stride(3)];
                if (takes_max(v, best)) {
                  best = v;
                  at = iy * w.in + ix;
                }
              }
            values[p * out_plane + oy * w.out + ox] = best;
            indices[p * out_plane + oy * w.out + ox] = at;
          }
      },
      out_plane * h.kernel * w.kernel);
}

// dx (contiguous [N, C, H, W]) = dy added at the saved positions; indices
// already checked to lie in the plane or be -1 (no element: skipped).
template <class T>
void max_backward(const view<const T, 4, host>& dy, const view<const std::int64_t, 4, host>& indices, index_t in_plane,
                  T* dx) {
  const index_t channels = dy.extent(1);
  host_for_each(
      dy.extent(0) * channels,
      [&](index_t p) {
        const index_t n = p / channels, c = p % channels;
        T* out = dx + p * in_plane;
        std::fill(out, out + in_plane, T(0));
        const T* g = dy.data() + n * dy.stride(0) + c * dy.stride(1);
        const std::int64_t* at = indices.data() + n * indices.stride(0) + c * indices.stride(1);
        for (index_t oy = 0; oy < dy.extent(2); ++oy)
          for (index_t ox = 0; ox < dy.extent(3); ++ox) {
            const std::int64_t i = at[oy * indices.stride(2) + ox * indices.stride(3)];
            if (i >= 0) out[i] += g[oy * dy.stride(2) + ox * dy.stride(3)];
          }
      },
      dy.extent(2) * dy.extent(3));
}

// The windows of output (oy, ox) of average or adaptive pooling and its divisor.
struct avg_cell {
  avg_window y, x;
  index_t divisor = 1;
};
template <class Cell>
struct avg_pass {
  index_t out_h = 0, out_w = 0;
  Cell cell;  // cell(oy, ox) -> avg_cell
};

// y (contiguous [N, C, oh, ow]) = the mean of each window.
template <class T, class Cell>
void avg_forward(const view<const T, 4, host>& x, const avg_pass<Cell>& pass, T* y) {
  const index_t channels = x.extent(1), out_plane = pass.out_h * pass.out_w;
  host_for_each(
      x.extent(0) * channels,
      [&](index_t p) {
        const T* plane = x.data() + p / channels * x.stride(0) + p % channels * x.stride(1);
        for (index_t oy = 0; oy < pass.out_h; ++oy)
          for (index_t ox = 0; ox < pass.out_w; ++ox) {
            const avg_cell c = pass.cell(oy, ox);
            T sum = 0;
            for (index_t iy = c.y.begin; iy < c.y.end; ++iy)
              for (index_t ix = c.x.begin; ix < c.x.end; ++ix) sum += plane[iy * x.stride(2) + ix * x.stride(3)];
            y[p * out_plane + oy * pass.out_w + ox] = sum / static_cast<T>(c.divisor);
          }
      },
      out_plane * 4);
}

// dx (contiguous [N, C, H, W]): each window's dy / divisor added to its elements, in output order.
template <class T, class Cell>
void avg_backward(const view<const T, 4, host>& dy, const avg_pass<Cell>& pass, index_t height, index_t width, T* dx) {
  const index_t channels = dy.extent(1), in_plane = height * width;
  host_for_each(
      dy.extent(0) * channels,
      [&](index_t p) {
        const T* g = dy.data() + p / channels * dy.stride(0) + p % channels * dy.stride(1);
        T* out = dx + p * in_plane;
        std::fill(out, out + in_plane, T(0));
        for (index_t oy = 0; oy < pass.out_h; ++oy)
          for (index_t ox = 0; ox < pass.out_w; ++ox) {
            const avg_cell c = pass.cell(oy, ox);
            const T share = g[oy * dy.stride(2) + ox * dy.stride(3)] / static_cast<T>(c.divisor);
            for (index_t iy = c.y.begin; iy < c.y.end; ++iy)
              for (index_t ix = c.x.begin; ix < c.x.end; ++ix) out[iy * width + ix] += share;
          }
      },
      in_plane * 4);
}
}  // namespace loom::detail::pool
