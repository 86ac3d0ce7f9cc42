// SPDX-License-Identifier: Apache-2.0
#pragma once

// The host executor's matrix product: a blocked, multi-threaded reference with
// the same semantics as the cuBLASLt path (batch broadcasting, any strides,
// float accumulation for half/bf16/float and double for double, the same
// epilogue). Correctness and portability are its goals, not speed.

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/space.hpp"
#include "loom/core/launch.hpp"
#include "loom/ops/activations.hpp"
#include "loom/tensor/view.hpp"

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

//! D = epilogue(A B) over batch axes [0, R-2): A [..., M, K], B [..., K, N] and
//! D [..., M, N] have equal extents on the batch axes (broadcast operands have
//! stride 0 there). One host "launch": tiles of D in parallel (OpenMP).
template <class T, class O, std::size_t R>
void host_gemm(const view<const T, R, host>& a, const view<const T, R, host>& b, const view<O, R, host>& d,
               const gemm_epilogue<O, R>& ep) {
  static_assert(R >= 2);
  using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
  constexpr index_t tm = 32, tn = 64, tk = 128;
  const index_t m = d.extent(R - 2), n = d.extent(R - 1), k = a.extent(R - 1);
  index_t batch = 1;
  for (std::size_t i = 0; i + 2 < R; ++i) batch *= d.extent(i);
  const index_t tiles_m = (m + tm - 1) / tm, tiles_n = (n + tn - 1) / tn;
  const index_t total = batch * tiles_m * tiles_n;
  if (total <= 0) return;
  count_host_launch();

  const index_t sam = a.stride(R - 2), sak = a.stride(R - 1);
  const index_t sbk = b.stride(R - 2), sbn = b.stride(R - 1);
  const index_t sdm = d.stride(R - 2), sdn = d.stride(R - 1);
  const auto tile = [&](index_t t) {
    index_t bi = t / (tiles_m * tiles_n);
    const index_t rest = t % (tiles_m * tiles_n);
    const index_t i0 = rest / tiles_n * tm, j0 = rest % tiles_n * tn;
    const index_t mi = std::min(tm, m - i0), nj = std::min(tn, n - j0);
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
    acc_t acc[tm][tn] = {};
    for (index_t k0 = 0; k0 < k; k0 += tk) {
      const index_t k1 = std::min(k, k0 + tk);
      for (index_t i = 0; i < mi; ++i) {
        const T* arow = a.data() + oa + (i0 + i) * sam;
        for (index_t kk = k0; kk < k1; ++kk) {
          const acc_t av = static_cast<acc_t>(arow[kk * sak]);
          const T* brow = b.data() + ob + kk * sbk + j0 * sbn;
          acc_t* out = acc[i];
          if (sbn == 1)
            for (index_t j = 0; j < nj; ++j) out[j] += av * static_cast<acc_t>(brow[j]);
          else
            for (index_t j = 0; j < nj; ++j) out[j] += av * static_cast<acc_t>(brow[j * sbn]);
        }
      }
    }
    for (index_t i = 0; i < mi; ++i)
      for (index_t j = 0; j < nj; ++j) {
        const index_t r = i0 + i, c = j0 + j;
        acc_t v = static_cast<acc_t>(ep.alpha) * acc[i][j];
        if (ep.c.data())
          v += static_cast<acc_t>(ep.beta) *
               static_cast<acc_t>(ep.c.data()[oc + r * ep.c.stride(R - 2) + c * ep.c.stride(R - 1)]);
        if (ep.bias.data())
          v += static_cast<acc_t>(ep.bias.data()[obias + r * ep.bias.stride(R - 2) + c * ep.bias.stride(R - 1)]);
        if (ep.act == matmul_activation::relu) v = fn::relu{}(v);
        if (ep.act == matmul_activation::gelu_tanh) v = fn::gelu{true}(v);
        if constexpr (std::is_same_v<O, half> || std::is_same_v<O, bf16>)
          d.data()[od + r * sdm + c * sdn] = O(static_cast<float>(v));
        else
          d.data()[od + r * sdm + c * sdn] = static_cast<O>(v);
      }
  };
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(dynamic)
  for (index_t t = 0; t < total; ++t) tile(t);
#else
  for (index_t t = 0; t < total; ++t) tile(t);
#endif
}
}  // namespace loom::detail
