// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/reduce/plan.hpp"

// The host executor of scans: each row left to right from the identity,
// rows in parallel.
namespace loom::detail::scan {
using reduce::axis_map;
using reduce::read_at;

//! Scans the `rows` rows of `len` elements of the bound expression `b` (in
//! the order of `m`, `linear` when that is b's linear order) into `sink`:
//! one host "launch".
template <class Op, class B, class Sink, std::size_t R>
void host_scan(const Op& op, const B& b, const axis_map<R>& m, const Sink& sink, bool linear, index_t rows,
               index_t len) {
  auto run = [&](auto linear_tag) {
    constexpr bool is_linear = decltype(linear_tag)::value;
    count_host_launch();
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static) if (rows * len > 32768)
#endif
    for (index_t r = 0; r < rows; ++r) {
      typename Op::acc a = op.identity();
      for (index_t k = 0; k < len; ++k) {
        const index_t j = r * len + k;
        a = op(a, op.lift(read_at<is_linear>(b, m, j), k));
        sink(j, a, r * len, r * len + len);
      }
    }
  };
  if (linear)
    run(std::true_type{});
  else
    run(std::false_type{});
}
}  // namespace loom::detail::scan
