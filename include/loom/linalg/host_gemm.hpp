// SPDX-License-Identifier: Apache-2.0
#pragma once

// The host executor's matrix product, with the semantics of the cuBLASLt
// path (batch broadcasting, any strides, float accumulation for
// half/bf16/float and double for double, the same epilogue). The output is
// cut into blocks computed in parallel (OpenMP); each block is computed into
// a buffer of the accumulator type by the BLAS (cblas_sgemm/cblas_dgemm,
// single-threaded, operands passed in place where their layout allows, else
// packed and converted to float) or by loom's own kernel (host_kernel.hpp),
// then the epilogue writes it to the output while it is in cache.

#include <algorithm>
#include <climits>
#include <cstdint>
#include <new>
#include <optional>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/space.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/host_blas.hpp"
#include "loom/linalg/host_kernel.hpp"
#include "loom/ops/activations.hpp"
#include "loom/tensor/view.hpp"

#if LOOM_HAS_OPENMP
#include <omp.h>
#endif

namespace loom {
//! The activation a matrix product's epilogue applies (after alpha, beta C and bias).
enum class matmul_activation : std::uint8_t {
  none,      //!< no activation
  relu,      //!< max(x, 0)
  gelu_tanh  //!< GELU, tanh approximation (cuBLASLt's GELU epilogue)
};
}  // namespace loom

namespace loom::detail {

//! What a fused product adds after the GEMM: D = act(alpha A B + beta C + bias),
//! C and bias already broadcast to D's shape (a null data() means absent).
template <class O, std::size_t R>
struct gemm_epilogue {
  double alpha = 1;
  double beta = 0;
  view<const O, R, host> c;
  view<const O, R, host> bias;
  matmul_activation act = matmul_activation::none;
};

namespace linalg {
// Output blocks are at most block_rows x block_cols: the BLAS's calls run near
// the speed of one whole-matrix call there, and the block's accumulator
// (2 MiB of float) stays in L2/L3 for the epilogue. They are halved (down to
// min_block) until there are blocks_per_thread per thread, which the threads
// take as they finish: a thread that the OS takes a core from holds up no
// more than a block.
constexpr index_t block_rows = 512;
constexpr index_t block_cols = 1024;
constexpr index_t min_block = 64;
constexpr int blocks_per_thread = 4;

struct output_tiling {
  index_t rows = 0, cols = 0, tiles_m = 0, tiles_n = 0;
};
inline output_tiling tile_output(index_t batch, index_t m, index_t n, int threads) {
  output_tiling t;
  t.rows = std::min(block_rows, m);
  t.cols = std::min(block_cols, n);
  const auto count = [&] { return batch * ((m + t.rows - 1) / t.rows) * ((n + t.cols - 1) / t.cols); };
  const index_t wanted = threads > 1 ? index_t{threads} * blocks_per_thread : 1;
  while (count() < wanted && (t.rows > min_block || t.cols > min_block)) {
    if (t.cols >= t.rows && t.cols > min_block)
      t.cols = (t.cols + 1) / 2;
    else if (t.rows > min_block)
      t.rows = (t.rows + 1) / 2;
    else
      t.cols = (t.cols + 1) / 2;
  }
  t.tiles_m = (m + t.rows - 1) / t.rows;
  t.tiles_n = (n + t.cols - 1) / t.cols;
  return t;
}

// A 64-byte aligned buffer that grows on demand (one per thread and role).
template <class Acc>
class scratch_buffer {
 public:
  scratch_buffer() = default;
  scratch_buffer(const scratch_buffer&) = delete;
  scratch_buffer& operator=(const scratch_buffer&) = delete;
  ~scratch_buffer() { release(); }
  Acc* get(index_t n) {
    if (n > size_) {
      release();
      p_ = static_cast<Acc*>(::operator new(static_cast<std::size_t>(n) * sizeof(Acc), std::align_val_t{64}));
      size_ = n;
    }
    return p_;
  }

 private:
  void release() {
    if (p_) ::operator delete(p_, std::align_val_t{64});
    p_ = nullptr;
    size_ = 0;
  }
  Acc* p_ = nullptr;
  index_t size_ = 0;
};

template <class Acc>
struct gemm_scratch {
  scratch_buffer<Acc> c, a, b;
  const void* b_source = nullptr;  // the B panel held in `b` (BLAS path), to reuse on the next block
  index_t b_cols = -1;
};

#if LOOM_HAS_BLAS
// A row-major r x c matrix as the BLAS takes it: op(p) with leading dimension ld.
template <class Acc>
struct blas_operand {
  const Acc* p = nullptr;
  int trans = 111;  // CblasNoTrans (112: CblasTrans)
  int ld = 1;
};
// The matrix in place when one axis has unit stride and the other a stride
// that the BLAS takes as the leading dimension.
template <class Acc>
bool blas_in_place(const strided_matrix<Acc>& x, index_t r, index_t c, blas_operand<Acc>& out) {
  index_t ld = 0;
  if ((c == 1 || x.col_stride == 1) && (r == 1 || x.row_stride >= std::max<index_t>(c, 1))) {
    out.trans = 111;
    ld = r == 1 ? std::max<index_t>(c, 1) : x.row_stride;
  } else if ((r == 1 || x.row_stride == 1) && (c == 1 || x.col_stride >= std::max<index_t>(r, 1))) {
    out.trans = 112;
    ld = c == 1 ? std::max<index_t>(r, 1) : x.col_stride;
  } else {
    return false;
  }
  if (ld > INT_MAX) return false;
  out.p = x.p;
  out.ld = static_cast<int>(ld);
  return true;
}
// The matrix as the BLAS takes it: in place, else packed row-major into `buf`
// (converted to the accumulator type).
template <class Acc, class T>
blas_operand<Acc> blas_operand_of(const strided_matrix<T>& x, index_t r, index_t c, scratch_buffer<Acc>& buf) {
  blas_operand<Acc> out;
  if constexpr (std::is_same_v<T, Acc>)
    if (blas_in_place(x, r, c, out)) return out;
  Acc* dst = buf.get(std::max<index_t>(r * c, 1));
  for (index_t i = 0; i < r; ++i)
    for (index_t j = 0; j < c; ++j) dst[i * c + j] = to_acc<Acc>(x.p[i * x.row_stride + j * x.col_stride]);
  out.p = dst;
  out.trans = 111;
  out.ld = static_cast<int>(std::max<index_t>(c, 1));
  return out;
}
// C (rows x cols, ldc) = A B by one single-threaded BLAS call.
template <class T, class Acc>
void blas_block(const strided_matrix<T>& a, const strided_matrix<T>& b, index_t rows, index_t cols, index_t depth,
                Acc* c, index_t ldc, gemm_scratch<Acc>& s) {
  if (depth == 0) {
    for (index_t i = 0; i < rows; ++i) std::fill(c + i * ldc, c + i * ldc + cols, Acc(0));
    return;
  }
  const blas_operand<Acc> oa = blas_operand_of(a, rows, depth, s.a);
  blas_operand<Acc> ob;
  bool in_place = false;
  if constexpr (std::is_same_v<T, Acc>) in_place = blas_in_place(b, depth, cols, ob);
  if (!in_place) {
    if (s.b_source != b.p || s.b_cols != cols) {
      blas_operand_of(b, depth, cols, s.b);
      s.b_source = b.p;
      s.b_cols = cols;
    }
    ob = {s.b.get(1), 111, static_cast<int>(std::max<index_t>(cols, 1))};
  }
  const int m = static_cast<int>(rows), n = static_cast<int>(cols), k = static_cast<int>(depth);
  if constexpr (std::is_same_v<Acc, double>)
    loom_cblas_dgemm(101, oa.trans, ob.trans, m, n, k, 1.0, oa.p, oa.ld, ob.p, ob.ld, 0.0, c, static_cast<int>(ldc));
  else
    loom_cblas_sgemm(101, oa.trans, ob.trans, m, n, k, 1.0f, oa.p, oa.ld, ob.p, ob.ld, 0.0f, c, static_cast<int>(ldc));
}
#endif

// D block = act(alpha acc + beta C + bias), acc (rows x cols, ldc) in the
// accumulator type and overwritten; c and bias point at the block's first
// element (null when absent). Each row in passes of one kind (affine, then
// the activation, then the conversion to D), loops the compiler vectorizes.
template <class Acc, class O, std::size_t R>
void apply_epilogue(Acc* acc, index_t ldc, index_t rows, index_t cols, O* d, index_t sdm, index_t sdn,
                    const gemm_epilogue<O, R>& ep, const O* c, const O* bias) {
  const Acc alpha = static_cast<Acc>(ep.alpha), beta = static_cast<Acc>(ep.beta);
  const index_t scm = ep.c.stride(R - 2), scn = ep.c.stride(R - 1);
  const index_t sbm = ep.bias.stride(R - 2), sbn = ep.bias.stride(R - 1);
  for (index_t i = 0; i < rows; ++i) {
    Acc* v = acc + i * ldc;
    if (alpha != Acc(1))
      for (index_t j = 0; j < cols; ++j) v[j] *= alpha;
    if (c) {
      const O* row = c + i * scm;
      for (index_t j = 0; j < cols; ++j) v[j] += beta * to_acc<Acc>(row[j * scn]);
    }
    if (bias) {
      const O* row = bias + i * sbm;
      for (index_t j = 0; j < cols; ++j) v[j] += to_acc<Acc>(row[j * sbn]);
    }
    if (ep.act == matmul_activation::relu)
      for (index_t j = 0; j < cols; ++j) v[j] = fn::relu{}(v[j]);
    if (ep.act == matmul_activation::gelu_tanh)
      for (index_t j = 0; j < cols; ++j) v[j] = fn::gelu{true}(v[j]);
    O* out = d + i * sdm;
    for (index_t j = 0; j < cols; ++j) {
      if constexpr (std::is_same_v<O, half> || std::is_same_v<O, bf16>)
        out[j * sdn] = O(static_cast<float>(v[j]));
      else
        out[j * sdn] = static_cast<O>(v[j]);
    }
  }
}
}  // namespace linalg

//! D = epilogue(A B) over batch axes [0, R-2): A [..., M, K], B [..., K, N] and
//! D [..., M, N] have equal extents on the batch axes (broadcast operands have
//! stride 0 there). One host "launch": blocks of D in parallel (OpenMP), each
//! computed by the backend current_host_gemm_backend() names, then its
//! epilogue. The inner axis is never split, so a result is the same run to
//! run at a given thread count.
template <class T, class O, std::size_t R>
void host_gemm(const view<const T, R, host>& a, const view<const T, R, host>& b, const view<O, R, host>& d,
               const gemm_epilogue<O, R>& ep) {
  static_assert(R >= 2);
  using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const index_t m = d.extent(R - 2), n = d.extent(R - 1), k = a.extent(R - 1);
  index_t batch = 1;
  for (std::size_t i = 0; i + 2 < R; ++i) batch *= d.extent(i);
  if (batch * m * n <= 0) return;
  const bool use_blas = current_host_gemm_backend() == host_gemm_backend::blas && LOOM_HAS_BLAS && k <= INT_MAX;
  count_host_launch();
#if LOOM_HAS_OPENMP
  const int threads = omp_get_max_threads();
#else
  const int threads = 1;
#endif
  const linalg::output_tiling tiling = linalg::tile_output(batch, m, n, threads);
  const index_t total = batch * tiling.tiles_m * tiling.tiles_n;

  const index_t sam = a.stride(R - 2), sak = a.stride(R - 1);
  const index_t sbk = b.stride(R - 2), sbn = b.stride(R - 1);
  const index_t sdm = d.stride(R - 2), sdn = d.stride(R - 1);
  // Blocks in the order batch, column block, row block: consecutive blocks
  // share B's panel, which a thread that takes both packs once.
  const auto block = [&](index_t t, linalg::gemm_scratch<acc_t>& s) {
    const index_t i0 = t % tiling.tiles_m * tiling.rows;
    index_t rest = t / tiling.tiles_m;
    const index_t j0 = rest % tiling.tiles_n * tiling.cols;
    index_t bi = rest / tiling.tiles_n;
    const index_t rows = std::min(tiling.rows, m - i0), cols = std::min(tiling.cols, n - j0);
    index_t oa = 0, ob = 0, od = 0, oc = 0, obias = 0;
    for (std::size_t dim = R - 2; dim-- > 0;) {
      const index_t ix = bi % d.extent(dim);
      bi /= d.extent(dim);
      oa += ix * a.stride(dim);
      ob += ix * b.stride(dim);
      od += ix * d.stride(dim);
      oc += ix * ep.c.stride(dim);
      obias += ix * ep.bias.stride(dim);
    }
    const linalg::strided_matrix<T> pa{a.data() + oa + i0 * sam, sam, sak};
    const linalg::strided_matrix<T> pb{b.data() + ob + j0 * sbn, sbk, sbn};
    acc_t* acc = nullptr;
    index_t ldc = 0;
    if (use_blas) {
#if LOOM_HAS_BLAS
      ldc = cols;
      acc = s.c.get(rows * ldc);
      linalg::blas_block(pa, pb, rows, cols, k, acc, ldc, s);
#endif
    } else {
      using linalg::max_micro_cols, linalg::micro_rows;
      ldc = (cols + max_micro_cols - 1) / max_micro_cols * max_micro_cols;
      acc = s.c.get((rows + micro_rows - 1) / micro_rows * micro_rows * ldc);
      linalg::kernel_block_run(linalg::kernel_block<T, acc_t>{pa, pb, rows, cols, k, acc, ldc,
                                                              s.a.get(linalg::kernel_rows * linalg::kernel_depth),
                                                              s.b.get(linalg::kernel_depth * ldc)});
    }
    const O* c = ep.c.data() ? ep.c.data() + oc + i0 * ep.c.stride(R - 2) + j0 * ep.c.stride(R - 1) : nullptr;
    const O* bias =
        ep.bias.data() ? ep.bias.data() + obias + i0 * ep.bias.stride(R - 2) + j0 * ep.bias.stride(R - 1) : nullptr;
    linalg::apply_epilogue<acc_t, O, R>(acc, ldc, rows, cols, d.data() + od + i0 * sdm + j0 * sdn, sdm, sdn, ep, c,
                                        bias);
  };
#if LOOM_HAS_OPENMP
  // num_threads: the OpenMP build of OpenBLAS sets OpenMP's thread count with its own.
  std::optional<linalg::blas_single_threaded> single;
  if (use_blas && threads > 1) single.emplace();
#pragma omp parallel num_threads(threads) if (total > 1)
  {
    linalg::gemm_scratch<acc_t> s;
#pragma omp for schedule(dynamic)
    for (index_t t = 0; t < total; ++t) block(t, s);
  }
#else
  linalg::gemm_scratch<acc_t> s;
  for (index_t t = 0; t < total; ++t) block(t, s);
#endif
}
}  // namespace loom::detail
