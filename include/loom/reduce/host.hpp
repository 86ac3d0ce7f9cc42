// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/reduce/plan.hpp"

// The host executor of reductions: a whole tensor in fixed chunks of
// host_chunk elements, each reduced pairwise, then the chunk results
// pairwise; along axes, each output's range pairwise (outputs in parallel).
// The chunking does not depend on the thread count, so the result does not
// either.
namespace loom::detail::reduce {

//! Elements per chunk of a host reduction: fixed, so the result does not
//! depend on the number of threads.
inline constexpr index_t host_chunk = 8192;

//! Pairwise (cascade) reduction of get(lo) .. get(hi - 1): runs of 8 left to
//! right, then a balanced tree. The rounding error grows with log(n), not n.
template <class Op, class Get>
typename Op::acc pairwise(const Op& op, const Get& get, index_t lo, index_t hi) {
  if (hi - lo <= 8) {
    typename Op::acc a = op.identity();
    for (index_t i = lo; i < hi; ++i) a = op(a, get(i));
    return a;
  }
  const index_t mid = lo + (hi - lo) / 2;
  return op(pairwise(op, get, lo, mid), pairwise(op, get, mid, hi));
}

//! One host "launch": reduces get(0) .. get(n - 1) in fixed chunks (in
//! parallel with OpenMP), then the chunk results pairwise.
template <class Op, class Get>
typename Op::acc host_reduce_all(const Op& op, const Get& get, index_t n) {
  using acc = typename Op::acc;
  const index_t chunks = (n + host_chunk - 1) / host_chunk;
  // Not std::vector: vector<bool> packs bits, and threads write neighbours.
  const std::unique_ptr<acc[]> part(new acc[static_cast<std::size_t>(chunks)]);
  count_host_launch();
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static) if (chunks > 1)
#endif
  for (index_t c = 0; c < chunks; ++c)
    part[c] = pairwise(op, get, c * host_chunk, std::min(n, (c + 1) * host_chunk));
  return pairwise(op, [&](index_t i) { return part[i]; }, 0, chunks);
}

//! Reduces the `outputs` ranges of `k` elements of the bound expression `b`
//! (in the order of `m`, `linear` when that order is b's linear index) into
//! out[0 .. outputs - 1]: one host "launch".
template <class Op, class B, std::size_t R>
void host_reduce(const Op& op, const B& b, const axis_map<R>& m, bool linear, index_t outputs, index_t k,
                 typename Op::result* out) {
  auto run = [&](auto linear_tag) {
    constexpr bool is_linear = decltype(linear_tag)::value;
    if (outputs == 1) {
      const auto get = [&](index_t j) { return op.lift(read_at<is_linear>(b, m, j), j); };
      out[0] = op.finalize(host_reduce_all(op, get, k), k);
      return;
    }
    count_host_launch();
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static) if (outputs * k > 32768)
#endif
    for (index_t q = 0; q < outputs; ++q) {
      const auto get = [&](index_t j) { return op.lift(read_at<is_linear>(b, m, q * k + j), j); };
      out[q] = op.finalize(pairwise(op, get, 0, k), k);
    }
  };
  if (linear)
    run(std::true_type{});
  else
    run(std::false_type{});
}
}  // namespace loom::detail::reduce
