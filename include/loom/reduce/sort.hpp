// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/config.hpp"
#include "loom/exec/assign.hpp"
#include "loom/reduce/scan.hpp"

#if LOOM_CUDA_COMPILER
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cub/device/device_segmented_sort.cuh>
#endif

// Sorting and top-k along the last axis, with values and int64 indices.
namespace loom {

//! Sort direction.
enum class sort_order { ascending, descending };

namespace detail {
// NaN sorts as larger than every number (last ascending, first descending),
// as in PyTorch.
template <class C>
bool sort_less(C a, C b) {
  if (b != b) return a == a;
  return a < b;
}

#if LOOM_CUDA_COMPILER
struct row_start {
  index_t len;
  LOOM_HD index_t operator()(index_t r) const { return r * len; }
};
struct position_in_row {
  std::int64_t* idx;
  index_t len;
  LOOM_HD void operator()(index_t i) const { idx[i] = i % len; }
};

// Floating keys are sorted as unsigned integers whose order is the order
// the host sort uses: every NaN (of any sign or payload) after +inf, -0.0
// equal to +0.0 (a tie, kept in input order). CUB orders raw float bits,
// which puts negative NaNs first and -0.0 before +0.0, and its small-segment
// merge sort compares with <, for which a NaN breaks the ordering.
template <class T>
using radix_key_t = std::conditional_t<sizeof(T) == 2, std::uint16_t,
                                       std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>;

template <class T>
struct to_radix_key {
  const T* in;
  radix_key_t<T>* out;
  LOOM_HD void operator()(index_t i) const {
    using U = radix_key_t<T>;
    constexpr U sign = U(U(1) << (8 * sizeof(U) - 1));
    const T v = in[i];
    const auto c = static_cast<compute_t<T>>(v);
    U b;
    if (c != c)
      b = U(~sign);  // the largest positive pattern: after +inf
    else if (c == 0)
      b = 0;
    else if constexpr (sizeof(T) == 2)
      b = bits_of(v);
    else
      memcpy(&b, &v, sizeof(U));
    out[i] = (b & sign) ? U(~b) : U(b | sign);
  }
};

template <class T>
struct gather_sorted {
  const T* keys;
  const std::int64_t* idx;
  T* out;
  index_t len;
  LOOM_HD void operator()(index_t i) const { out[i] = keys[i - i % len + static_cast<index_t>(idx[i])]; }
};
#endif

// Sorts every row (last axis) of a contiguous tensor `keys` into `out`.
template <class T, std::size_t R, class S>
void sort_rows(tensor<T, R, S>& keys, values_indices<T, R, S>& out, sort_order order) {
  const index_t total = keys.size();
  if (total == 0) return;
  const index_t len = keys.extent(R - 1);
  const index_t rows = total / len;
  const bool desc = order == sort_order::descending;
  if constexpr (std::is_same_v<S, host>) {
    host_launch_counter().fetch_add(1, std::memory_order_relaxed);
    const T* k = keys.data();
    T* v = out.values.data();
    std::int64_t* ix = out.indices.data();
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static) if (total > 32768)
#endif
    for (index_t r = 0; r < rows; ++r) {
      const T* row = k + r * len;
      std::int64_t* ri = ix + r * len;
      std::iota(ri, ri + len, std::int64_t{0});
      std::stable_sort(ri, ri + len, [&](std::int64_t a, std::int64_t b) {
        const auto ka = static_cast<compute_t<T>>(row[a]), kb = static_cast<compute_t<T>>(row[b]);
        return desc ? sort_less(kb, ka) : sort_less(ka, kb);
      });
      for (index_t j = 0; j < len; ++j) v[r * len + j] = row[ri[j]];
    }
  } else {
#if LOOM_CUDA_COMPILER
    const stream_ref s = current_stream();
    tensor<std::int64_t, R, device> pos(keys.extents());
    device_for_each(total, position_in_row{pos.data(), len}, s);
    auto starts = thrust::make_transform_iterator(thrust::counting_iterator<index_t>(0), row_start{len});
    const std::int64_t* vin = pos.data();
    std::int64_t* vout = out.indices.data();
    if constexpr (is_floating_v<T>) {
      using U = radix_key_t<T>;
      const auto bytes_of_keys = static_cast<std::size_t>(total) * sizeof(U);
      scratch<device> ukeys(bytes_of_keys, s), sorted(bytes_of_keys, s);
      U* const kin = static_cast<U*>(ukeys.p);
      U* const kout = static_cast<U*>(sorted.p);
      device_for_each(total, to_radix_key<T>{keys.data(), kin}, s);
      run_cub(
          [&](void* tmp, std::size_t& bytes) {
            if (desc)
              return cub::DeviceSegmentedSort::StableSortPairsDescending(tmp, bytes, kin, kout, vin, vout, total,
                                                                         rows, starts, starts + 1, s.get());
            return cub::DeviceSegmentedSort::StableSortPairs(tmp, bytes, kin, kout, vin, vout, total, rows, starts,
                                                             starts + 1, s.get());
          },
          s);
      device_for_each(total, gather_sorted<T>{keys.data(), vout, out.values.data(), len}, s);
      return;
    }
    const T* kin = keys.data();
    T* kout = out.values.data();
    run_cub(
        [&](void* tmp, std::size_t& bytes) {
          if (desc)
            return cub::DeviceSegmentedSort::StableSortPairsDescending(tmp, bytes, kin, kout, vin, vout, total, rows,
                                                                       starts, starts + 1, s.get());
          return cub::DeviceSegmentedSort::StableSortPairs(tmp, bytes, kin, kout, vin, vout, total, rows, starts,
                                                           starts + 1, s.get());
        },
        s);
#endif
  }
}

template <class E>
auto sort_impl(const E& e, sort_order order) {
  using node = node_t<E>;
  check_reducible<node>();
  constexpr std::size_t R = node::rank;
  static_assert(R > 0, "loom: sort needs an expression of rank 1 or more (it sorts along the last axis)");
  using S = typename node::space;
  using T = typename node::value_type;
  require_cuda_compiler_for<S>();
  const node n = as_node(e);
  // Sorting needs its keys in memory: evaluate the expression once (one launch).
  tensor<T, R, S> keys(n.extents());
  assign(keys, n);
  values_indices<T, R, S> out{tensor<T, R, S>(n.extents()), tensor<std::int64_t, R, S>(n.extents())};
  sort_rows(keys, out, order);
  return out;
}
}  // namespace detail

//! Sorts each row (the last axis) of any expression, stably: equal values
//! keep their order. Returns the sorted values and, as int64, the position
//! each came from. NaN (of either sign) sorts as the largest value (last
//! ascending, first descending), as in PyTorch; -0.0 and +0.0 are equal (a
//! tie keeps input order). Host and device give the same result.
//! Cost: the expression is evaluated into a temporary (one launch), then
//! host: std::stable_sort per row; device: an index kernel and one
//! cub::DeviceSegmentedSort call (radix/merge sort, O(n) passes over memory);
//! floating keys add a key kernel (an order-preserving unsigned key per
//! element) and a gather kernel for the sorted values.
//! Example: `auto [v, i] = loom::sort(scores, loom::sort_order::descending);`
template <expression E>
[[nodiscard]] auto sort(const E& e, sort_order order = sort_order::ascending) {
  return detail::sort_impl(e, order);
}

//! The k largest (default) or smallest values of each row (last axis),
//! sorted, with their int64 positions; ties keep the earlier position first.
//! k must be at most the row length (value_error otherwise). Cost: a full
//! sort (see sort) plus one copy of the first k columns per output.
//! Example: `auto top = loom::topk(logits, 5); // top.values, top.indices`
template <expression E>
[[nodiscard]] auto topk(const E& e, index_t k, sort_order order = sort_order::descending) {
  auto all = detail::sort_impl(e, order);
  using V = decltype(all);
  using T = typename decltype(all.values)::value_type;
  using S = typename decltype(all.values)::space;
  constexpr std::size_t R = decltype(all.values)::rank;
  auto ext = all.values.extents();
  if (k < 0 || k > ext[R - 1])
    throw value_error("loom: topk() with k = " + std::to_string(k) + " on rows of length " +
                      std::to_string(ext[R - 1]) + " (shape " + shape_string(ext) + "); expected 0 <= k <= " +
                      std::to_string(ext[R - 1]));
  if (k == ext[R - 1]) return all;
  const shape<R> st = contiguous_strides(ext);
  ext[R - 1] = k;
  V out{tensor<T, R, S>(ext), tensor<std::int64_t, R, S>(ext)};
  assign(out.values, view<const T, R, S>(all.values.data(), ext, st));
  assign(out.indices, view<const std::int64_t, R, S>(all.indices.data(), ext, st));
  return out;
}
}  // namespace loom
