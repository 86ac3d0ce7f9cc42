// SPDX-License-Identifier: Apache-2.0
#pragma once

// loom's own GEMM kernel for the host executor, used where no BLAS is linked
// (or LOOM_HOST_GEMM=loom): one block of the output, C (rows x cols) =
// A (rows x depth) B (depth x cols), in the layout of the classic packed GEMM.
// A chunk of `kernel_depth` rows of B is packed into panels `2 * lanes` wide,
// `kernel_rows` rows of A into panels of `micro_rows`, converted to the
// accumulator type as they are packed (any strides, half/bf16 to float), and
// a micro-kernel keeps a micro_rows x 2 vectors tile of C in registers over
// the chunk. The vector width is chosen at run time on x86 (AVX-512, AVX2 with
// FMA, else SSE2), so default compiler flags still get the CPU's width.

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/simd/dispatch.hpp"

namespace loom::detail::linalg {

// A matrix of any element type, element (r, c) at p[r * row_stride + c * col_stride].
template <class T>
struct strided_matrix {
  const T* p = nullptr;
  index_t row_stride = 0;
  index_t col_stride = 0;
};

constexpr index_t micro_rows = 6;      // rows of the register tile
constexpr index_t kernel_depth = 256;  // inner extent of one packed chunk (a panel of B in L1)
constexpr index_t kernel_rows = 96;    // rows of A packed at once (kernel_rows x kernel_depth in L2)
constexpr index_t max_micro_cols = 32; // 2 vectors of 64 bytes of float: the widest register tile

template <class Acc, class T>
[[gnu::always_inline]] inline Acc to_acc(T v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    return static_cast<Acc>(v);
  else
    return static_cast<Acc>(static_cast<float>(v));
}

// C tile (micro_rows x 2 vectors) of the packed panels over `depth`; added to
// C when `accumulate`, else stored.
template <class Acc, int Bytes>
[[gnu::always_inline]] inline void micro_kernel(index_t depth, const Acc* ap, const Acc* bp, Acc* c, index_t ldc,
                                                bool accumulate) {
  typedef Acc vec __attribute__((vector_size(Bytes)));
  constexpr index_t lanes = Bytes / sizeof(Acc);
  vec c0[micro_rows] = {}, c1[micro_rows] = {};
  for (index_t k = 0; k < depth; ++k) {
    vec b0, b1;
    std::memcpy(&b0, bp, Bytes);
    std::memcpy(&b1, bp + lanes, Bytes);
    for (index_t r = 0; r < micro_rows; ++r) {
      c0[r] += ap[r] * b0;
      c1[r] += ap[r] * b1;
    }
    ap += micro_rows;
    bp += 2 * lanes;
  }
  for (index_t r = 0; r < micro_rows; ++r) {
    Acc* row = c + r * ldc;
    if (accumulate) {
      vec o0, o1;
      std::memcpy(&o0, row, Bytes);
      std::memcpy(&o1, row + lanes, Bytes);
      c0[r] += o0;
      c1[r] += o1;
    }
    std::memcpy(row, &c0[r], Bytes);
    std::memcpy(row + lanes, &c1[r], Bytes);
  }
}

// Rows [k0, k0 + depth) of x's columns [0, cols) into panels of `width`
// columns (zero past cols): panel p, row k at out[(p * depth + k) * width].
// B is packed so directly; A as its transpose, in panels of micro_rows rows.
template <class Acc, class T>
[[gnu::always_inline]] inline void pack_panels(const strided_matrix<T>& x, index_t k0, index_t depth, index_t cols,
                                               index_t width, Acc* out) {
  for (index_t j0 = 0; j0 < cols; j0 += width) {
    const index_t w = std::min(width, cols - j0);
    for (index_t k = 0; k < depth; ++k) {
      const T* src = x.p + (k0 + k) * x.row_stride + j0 * x.col_stride;
      Acc* dst = out + k * width;
      if (x.col_stride == 1)
        for (index_t j = 0; j < w; ++j) dst[j] = to_acc<Acc>(src[j]);
      else
        for (index_t j = 0; j < w; ++j) dst[j] = to_acc<Acc>(src[j * x.col_stride]);
      for (index_t j = w; j < width; ++j) dst[j] = Acc(0);
    }
    out += depth * width;
  }
}

//! What one block of the kernel reads and writes: C = A B, C with leading
//! dimension ldc and room for rows rounded up to micro_rows and cols rounded
//! up to max_micro_cols; the packing buffers hold kernel_rows x kernel_depth
//! (a_pack) and kernel_depth x ldc (b_pack) elements.
template <class T, class Acc>
struct kernel_block {
  strided_matrix<T> a, b;
  index_t rows = 0, cols = 0, depth = 0;
  Acc* c = nullptr;
  index_t ldc = 0;
  Acc* a_pack = nullptr;  // kernel_rows x kernel_depth
  Acc* b_pack = nullptr;  // kernel_depth x (cols rounded up to max_micro_cols)
};

template <class T, class Acc, int Bytes>
[[gnu::always_inline]] inline void kernel_block_body(const kernel_block<T, Acc>& g) {
  constexpr index_t width = 2 * static_cast<index_t>(Bytes / sizeof(Acc));
  if (g.depth == 0) {
    for (index_t i = 0; i < g.rows; ++i) std::fill(g.c + i * g.ldc, g.c + i * g.ldc + g.cols, Acc(0));
    return;
  }
  for (index_t k0 = 0; k0 < g.depth; k0 += kernel_depth) {
    const index_t depth = std::min(kernel_depth, g.depth - k0);
    pack_panels(g.b, k0, depth, g.cols, width, g.b_pack);
    for (index_t i0 = 0; i0 < g.rows; i0 += kernel_rows) {
      const index_t rows = std::min(kernel_rows, g.rows - i0);
      const strided_matrix<T> a_transposed{g.a.p + i0 * g.a.row_stride, g.a.col_stride, g.a.row_stride};
      pack_panels(a_transposed, k0, depth, rows, micro_rows, g.a_pack);
      for (index_t j = 0; j < g.cols; j += width)
        for (index_t i = 0; i < rows; i += micro_rows)
          micro_kernel<Acc, Bytes>(depth, g.a_pack + i * depth, g.b_pack + j * depth, g.c + (i0 + i) * g.ldc + j,
                                   g.ldc, k0 > 0);
    }
  }
}

template <class T, class Acc>
void kernel_block_baseline(const kernel_block<T, Acc>& g) {
  kernel_block_body<T, Acc, 16>(g);
}
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define LOOM_DETAIL_GEMM_DISPATCH 1
template <class T, class Acc>
__attribute__((target("avx2,fma"))) void kernel_block_avx2(const kernel_block<T, Acc>& g) {
  kernel_block_body<T, Acc, 32>(g);
}
template <class T, class Acc>
__attribute__((target("avx512f"))) void kernel_block_avx512(const kernel_block<T, Acc>& g) {
  kernel_block_body<T, Acc, 64>(g);
}
#else
#define LOOM_DETAIL_GEMM_DISPATCH 0
#endif

//! C = A B for one block with the widest register tile the CPU has
//! (simd::cpu_isa(), which LOOM_HOST_SIMD caps as it caps the executor's
//! loops).
template <class T, class Acc>
void kernel_block_run(const kernel_block<T, Acc>& g) {
#if LOOM_DETAIL_GEMM_DISPATCH
  const loom::simd::isa i = loom::simd::cpu_isa();
  if (i == loom::simd::isa::avx512) return kernel_block_avx512(g);
  if (i == loom::simd::isa::avx2) return kernel_block_avx2(g);
#endif
  kernel_block_baseline(g);
}

}  // namespace loom::detail::linalg
