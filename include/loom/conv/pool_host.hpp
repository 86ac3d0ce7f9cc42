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

// The forward passes: f(plane, o, oy, ox) for each output position (oy, ox)
// of each plane p (image, channel) of x, with `plane` x's plane p and o
// the position's flat index in the contiguous output. One parallel pass,
// a plane per thread; `cost` is the work per plane.
template <class T, class F>
void for_each_output(const view<const T, 4, host>& x, index_t out_h, index_t out_w, index_t cost, F f) {
  const index_t channels = x.extent(1), out_plane = out_h * out_w;
  host_for_each(
      x.extent(0) * channels,
      [&](index_t p) {
        const T* plane = x.data() + p / channels * x.stride(0) + p % channels * x.stride(1);
        for (index_t oy = 0; oy < out_h; ++oy)
          for (index_t ox = 0; ox < out_w; ++ox) f(plane, p * out_plane + oy * out_w + ox, oy, ox);
      },
      cost);
}

// The backward passes: plane p of dx (contiguous [N, C, H, W], in_plane
// elements a plane) zeroed, then f(out, p, oy, ox, g) for each output
// position in order, with `out` dx's plane and g dy's element. One parallel
// pass, a plane per thread, so every sum has a fixed order.
template <class T, class F>
void for_each_gradient(const view<const T, 4, host>& dy, index_t in_plane, index_t cost, T* dx, F f) {
  const index_t channels = dy.extent(1);
  host_for_each(
      dy.extent(0) * channels,
      [&](index_t p) {
        const T* g = dy.data() + p / channels * dy.stride(0) + p % channels * dy.stride(1);
        T* out = dx + p * in_plane;
        std::fill(out, out + in_plane, T(0));
        for (index_t oy = 0; oy < dy.extent(2); ++oy)
          for (index_t ox = 0; ox < dy.extent(3); ++ox) f(out, p, oy, ox, g[oy * dy.stride(2) + ox * dy.stride(3)]);
      },
      cost);
}

// values/indices (contiguous [N, C, oh, ow]): each window's maximum (NaN
// wins) and its flat position iy * W + ix in the plane (the first of equal
// maxima in row-major order); -infinity and -1 for a window whose taps all
// fall in the padding.
template <class T>
void max_forward(const view<const T, 4, host>& x, const axis& h, const axis& w, T* values, std::int64_t* indices) {
  for_each_output(x, h.out, w.out, h.out * w.out * h.kernel * w.kernel,
                  [&](const T* plane, index_t o, index_t oy, index_t ox) {
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
                    values[o] = best;
                    indices[o] = at;
                  });
}

// dx (contiguous [N, C, H, W]) = dy added at the saved positions; indices
// already checked to lie in the plane or be -1 (no element: skipped).
template <class T>
void max_backward(const view<const T, 4, host>& dy, const view<const std::int64_t, 4, host>& indices, index_t in_plane,
                  T* dx) {
  const index_t channels = dy.extent(1);
  for_each_gradient(dy, in_plane, dy.extent(2) * dy.extent(3), dx,
                    [&](T* out, index_t p, index_t oy, index_t ox, T g) {
                      const std::int64_t i = indices.data()[p / channels * indices.stride(0) +
                                                            p % channels * indices.stride(1) +
                                                            oy * indices.stride(2) + ox * indices.stride(3)];
                      if (i >= 0) out[i] += g;
                    });
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
  for_each_output(x, pass.out_h, pass.out_w, pass.out_h * pass.out_w * 4,
                  [&](const T* plane, index_t o, index_t oy, index_t ox) {
                    const avg_cell c = pass.cell(oy, ox);
                    T sum = 0;
                    for (index_t iy = c.y.begin; iy < c.y.end; ++iy)
                      for (index_t ix = c.x.begin; ix < c.x.end; ++ix)
                        sum += plane[iy * x.stride(2) + ix * x.stride(3)];
                    y[o] = sum / static_cast<T>(c.divisor);
                  });
}

// dx (contiguous [N, C, H, W]): each window's dy / divisor added to its elements, in output order.
template <class T, class Cell>
void avg_backward(const view<const T, 4, host>& dy, const avg_pass<Cell>& pass, index_t height, index_t width, T* dx) {
  for_each_gradient(dy, height * width, height * width * 4, dx, [&](T* out, index_t, index_t oy, index_t ox, T g) {
    const avg_cell c = pass.cell(oy, ox);
    const T share = g / static_cast<T>(c.divisor);
    for (index_t iy = c.y.begin; iy < c.y.end; ++iy)
      for (index_t ix = c.x.begin; ix < c.x.end; ++ix) out[iy * width + ix] += share;
  });
}
}  // namespace loom::detail::pool
