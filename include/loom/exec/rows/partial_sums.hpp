// SPDX-License-Identifier: Apache-2.0
#pragma once

// Kernel 2 of the column sums (colsum.hpp): the per-block partial sums
// [P, K, C] of kernel 1 added up per column in a fixed order, the same on
// both executors; and a whole sum, the column sums' sum.

#include <cstddef>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail {
namespace rows {
template <class SumView>
void check_column_sum_output(const SumView& sum, index_t cols) {
  static_assert(SumView::rank == 1, "loom: a column sum is written to a tensor of rank 1");
  static_assert(!std::is_const_v<typename SumView::element_type>, "loom: cannot assign to a view of const elements");
  if (sum.extent(0) != cols)
    throw shape_error("loom: a column sum over rows of length " + std::to_string(cols) + " needs an output of shape [" +
                      std::to_string(cols) + "], got " + shape_string(sum.extents()));
}

// Kernel 2's job: out_k[c] = the sum over p < P of in[p * ld + k * C + c]
// for c < C and k < K (one or two outputs), in a fixed order: Y partial
// sums per column, partial y taking p = y, y + Y, ... in order (Y = 8 with
// 32 columns to a block of 256 threads, 256 for a single column), then a
// pairwise tree over y. Both executors run this order, so kernel 2 gives
// the same bits on both for the same partials.
template <class A, class O0, class O1>
struct partial_sums_job {
  const A* in;
  index_t P, ld, C;
  int Y;
  O0* out0;
  index_t st0;
  O1* out1;
  index_t st1;

  LOOM_HD A part(index_t k, index_t c, int y) const {
    A s = A(0);
    for (index_t p = y; p < P; p += Y) s += in[p * ld + k * C + c];
    return s;
  }
  LOOM_HD void store(index_t k, index_t c, A v) const {
    if (k == 0)
      out0[c * st0] = convert<O0>(v);
    else
      out1[c * st1] = convert<O1>(v);
  }
};
inline constexpr int partial_sums_threads = 256;
inline int partial_sums_y(index_t cols) { return cols == 1 ? partial_sums_threads : 8; }

#if LOOM_CUDA_COMPILER
template <class A, class O0, class O1>
__global__ void __launch_bounds__(partial_sums_threads) partial_sums_kernel(partial_sums_job<A, O0, O1> j) {
  __shared__ A sm[partial_sums_threads];
  const int X = partial_sums_threads / j.Y;
  const int x = static_cast<int>(threadIdx.x) % X, y = static_cast<int>(threadIdx.x) / X;
  const index_t c = static_cast<index_t>(blockIdx.x) * X + x;
  const index_t k = blockIdx.y;
  sm[threadIdx.x] = c < j.C ? j.part(k, c, y) : A(0);
  __syncthreads();
  for (int h = j.Y / 2; h > 0; h /= 2) {
    if (y < h) sm[y * X + x] += sm[(y + h) * X + x];
    __syncthreads();
  }
  if (y == 0 && c < j.C) j.store(k, c, sm[x]);
}
#endif

// Runs a partial_sums_job over K outputs: one launch.
template <class S, class A, class O0, class O1>
void run_partial_sums(const partial_sums_job<A, O0, O1>& j, index_t K) {
  if constexpr (std::is_same_v<S, host>) {
    host_for_each(
        K * j.C,
        [&](index_t i) {
          const index_t k = i / j.C, c = i % j.C;
          A p[partial_sums_threads];
          for (int y = 0; y < j.Y; ++y) p[y] = j.part(k, c, y);
          for (int h = j.Y / 2; h > 0; h /= 2)
            for (int y = 0; y < h; ++y) p[y] += p[y + h];
          j.store(k, c, p[0]);
        },
        j.P);
  } else {
#if LOOM_CUDA_COMPILER
    const int X = partial_sums_threads / j.Y;
    const dim3 grid(static_cast<unsigned>((j.C + X - 1) / X), static_cast<unsigned>(K));
    launch_kernel(partial_sums_kernel<A, O0, O1>, grid, partial_sums_threads, 0, current_stream().get(), j);
#endif
  }
}

// The job of the column sums of extras k0 (into sum0) and k0 + 1 (into sum1,
// if given) of partials [P, K, C].
template <class A, class S, class V0, class V1 = V0>
auto column_sums_job(const tensor<A, 3, S>& partials, index_t k0, const V0& sum0, const V1* sum1 = nullptr) {
  const index_t C = partials.extent(2);
  using O0 = typename V0::value_type;
  using O1 = typename V1::value_type;
  const auto stride_of = [](const auto& v) { return std::remove_cvref_t<decltype(v)>::rank == 0 ? index_t{0} : v.stride(0); };
  return partial_sums_job<A, O0, O1>{partials.data() + k0 * C,
                                     partials.extent(0),
                                     partials.extent(1) * C,
                                     C,
                                     partial_sums_y(C),
                                     sum0.data(),
                                     stride_of(sum0),
                                     sum1 ? sum1->data() : nullptr,
                                     sum1 ? stride_of(*sum1) : 0};
}
}  // namespace rows

// Kernel 2: writes each column sum (a [C] view; one or two) as the sum of
// its partials over the blocks (rows::partial_sums_job's order), the pair
// in one kernel. Returns the kernels run: none when C is 0.
template <class A, class S, class Sum0, class... Sum1>
int finish_column_sums(const tensor<A, 3, S>& partials, const Sum0& sum0, const Sum1&... sum1) {
  static_assert(sizeof...(Sum1) <= 1, "loom: a row kernel sums one or two expressions over its rows");
  static_assert(Sum0::rank == 1 && ((Sum1::rank == 1) && ... && true), "loom: a column sum is written to a tensor of rank 1");
  if (partials.extent(2) == 0) return 0;
  (rows::check_column_sum_output(sum1, partials.extent(2)), ...);
  rows::check_column_sum_output(sum0, partials.extent(2));
  ((may_overlap(sum0, sum1) ? throw aliasing_error("loom: the two column sums' outputs overlap") : void()), ...);
  if constexpr (sizeof...(Sum1) == 0)
    rows::run_partial_sums<S>(rows::column_sums_job(partials, 0, sum0), 1);
  else
    rows::run_partial_sums<S>(rows::column_sums_job(partials, 0, sum0, &sum1...), 2);
  return 1;
}

// Kernels 2 and 3 of a whole sum: the column sums of extra k of partials
// [P, K, C] into an O(C) temporary in the accumulation type, then their sum
// into `out` (one element, any rank). Returns the kernels run.
template <class A, class S, class Out>
int finish_whole_sum(const tensor<A, 3, S>& partials, index_t k, const Out& out) {
  using O = typename Out::value_type;
  const index_t C = partials.extent(2);
  if (C == 0) {
    fill(out, convert<O>(0.0f));
    return 1;
  }
  tensor<A, 1, S> per_column(shape<1>{C});
  rows::run_partial_sums<S>(rows::column_sums_job(partials, k, per_column.view()), 1);
  const rows::partial_sums_job<A, O, O> all{per_column.data(), C, 1, 1, rows::partial_sums_y(1), out.data(), 0, nullptr, 0};
  rows::run_partial_sums<S>(all, 1);
  return 2;
}

}  // namespace loom::detail
