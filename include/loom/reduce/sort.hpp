// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/config.hpp"
#include "loom/detail/fast_divmod.hpp"
#include "loom/exec/assign.hpp"
#include "loom/reduce/api.hpp"
#include "loom/reduce/plan.hpp"
#include "loom/reduce/scan/api.hpp"
#include "loom/tensor/copy.hpp"

#if LOOM_CUDA_COMPILER
#include <cub/device/device_radix_sort.cuh>
#endif

// Sorting and top-k along the last axis, with values and int64 indices.
namespace loom {

//! Sort direction.
enum class sort_order { ascending, descending };

namespace detail::sort {
using reduce::check_reducible;
#if LOOM_CUDA_COMPILER
using reduce::run_cub;
#endif

// NaN sorts as larger than every number (last ascending, first descending),
// as in PyTorch.
template <class C>
bool sort_less(C a, C b) {
  if (b != b) return a == a;
  return a < b;
}

// The device sort (sort_rows) is two stable radix sorts over all rows at
// once, with no per-row work and nothing that waits for the host: the keys
// with their flattened positions, then those positions by row number (the
// second keeps the first's order within a row). The per-element steps below
// are LOOM_HD so that the host tests replay the pipeline with
// std::stable_sort in CUB's place.
//
// Floating keys are sorted as unsigned integers whose order is the order
// the host sort uses: every NaN (of any sign or payload) after +inf, -0.0
// equal to +0.0 (a tie, kept in input order). CUB orders raw float bits
// (with -0.0 and +0.0 equal), which puts negative NaNs first.
template <class T>
using radix_key_t = std::conditional_t<sizeof(T) == 2, std::uint16_t,
                                       std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>;
// What the first radix sort orders: the unsigned form of a floating key,
// an integer (or bool) key as it is.
template <class T>
using sort_key_t = std::conditional_t<is_floating_v<T>, radix_key_t<T>, T>;

// The bits of +inf of a floating type; a larger magnitude is a NaN.
template <class T>
inline constexpr radix_key_t<T> radix_inf_bits =
    sizeof(T) == 8   ? radix_key_t<T>(0x7ff0000000000000ull)
    : sizeof(T) == 4 ? radix_key_t<T>(0x7f800000u)
                     : radix_key_t<T>(std::is_same_v<T, half> ? 0x7c00u : 0x7f80u);

// NaN and zero are told by their bits, not by float comparisons, so that a
// build that flushes subnormals (-ftz=true, --use_fast_math) still orders
// them apart from zero, as the host does.
template <class T>
struct to_radix_key {
  const T* in;
  radix_key_t<T>* out;
  LOOM_HD void operator()(index_t i) const {
    using U = radix_key_t<T>;
    constexpr U sign = U(U(1) << (8 * sizeof(U) - 1));
    const T v = in[i];
    U b;
    if constexpr (sizeof(T) == 2)
      b = bits_of(v);
    else
      std::memcpy(&b, &v, sizeof(U));
    const U mag = U(b & U(~sign));
    if (mag > radix_inf_bits<T>)
      b = U(~sign);  // every NaN: the largest positive pattern, after +inf
    else if (mag == 0)
      b = 0;  // -0 as +0
    out[i] = (b & sign) ? U(~b) : U(b | sign);
  }
};

struct flat_position {
  std::int64_t* pos;
  LOOM_HD void operator()(index_t i) const { pos[i] = i; }
};

// The row (a 32-bit key: the second sort's) of each flattened position.
struct row_of_position {
  const std::int64_t* pos;
  std::uint32_t* row;
  fast_divmod len;
  LOOM_HD void operator()(index_t i) const {
    row[i] = static_cast<std::uint32_t>(len.div(static_cast<std::uint64_t>(pos[i])));
  }
};

// Output i holds the element from flattened position pos[i] (in the same
// row, once both sorts ran): its value and its position in the row.
template <class T>
struct gather_sorted {
  const T* keys;
  const std::int64_t* pos;
  T* values;
  std::int64_t* idx;
  fast_divmod len;
  LOOM_HD void operator()(index_t i) const {
    const auto p = static_cast<std::uint64_t>(pos[i]);
    std::uint64_t row = 0, at = 0;
    len.divmod(p, row, at);
    values[i] = keys[p];
    idx[i] = static_cast<std::int64_t>(at);
  }
};

// Bits of the row numbers 0 .. rows - 1 (the second sort reads no more).
inline int row_key_bits(index_t rows) {
  int b = 1;
  while (b < 32 && (index_t{1} << b) < rows) ++b;
  return b;
}

// Sorts every row (last axis) of a contiguous tensor `keys` into `out`.
#if LOOM_CUDA_COMPILER
//! Sorts n (key, value) pairs on the device by the low `bits` bits of the
//! keys, stably, ascending or descending (cub::DeviceRadixSort; its temp
//! storage from the stream-ordered pool): one launch on `s`. The one way
//! loom's other parts (embedding's backward) sort pairs.
template <bool Descending, class K, class V>
void device_sort_pairs(const K* keys_in, K* keys_out, const V* values_in, V* values_out, index_t n, int bits,
                       stream_ref s) {
  reduce::run_cub(
      [&](void* tmp, std::size_t& bytes) {
        if constexpr (Descending)
          return cub::DeviceRadixSort::SortPairsDescending(tmp, bytes, keys_in, keys_out, values_in, values_out, n, 0,
                                                           bits, s.get());
        else
          return cub::DeviceRadixSort::SortPairs(tmp, bytes, keys_in, keys_out, values_in, values_out, n, 0, bits,
                                                 s.get());
      },
      s);
}
#endif

template <class T, std::size_t R, class S>
void sort_rows(tensor<T, R, S>& keys, values_indices<T, R, S>& out, sort_order order) {
  const index_t total = keys.size();
  if (total == 0) return;
  const index_t len = keys.extent(R - 1);
  const index_t rows = total / len;
  const bool desc = order == sort_order::descending;
  if constexpr (std::is_same_v<S, host>) {
    count_host_launch();
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
    using K = sort_key_t<T>;
    const auto n = static_cast<std::size_t>(total);
    scratch<device> pos_a(n * sizeof(std::int64_t), s), pos_b(n * sizeof(std::int64_t), s),
        sorted_keys(n * sizeof(K), s);
    auto* const p0 = static_cast<std::int64_t*>(pos_a.p);
    auto* const p1 = static_cast<std::int64_t*>(pos_b.p);
    K* const kout = static_cast<K*>(sorted_keys.p);
    device_for_each(total, flat_position{p0}, s);
    scratch<device> radix_keys(is_floating_v<T> ? n * sizeof(K) : 0, s);
    const K* kin = nullptr;
    if constexpr (is_floating_v<T>) {
      K* const u = static_cast<K*>(radix_keys.p);
      device_for_each(total, to_radix_key<T>{keys.data(), u}, s);
      kin = u;
    } else {
      kin = keys.data();
    }
    // 1: every element by key, stable (ties keep their flattened order).
    if (desc)
      device_sort_pairs<true>(kin, kout, static_cast<const std::int64_t*>(p0), p1, total,
                              static_cast<int>(8 * sizeof(K)), s);
    else
      device_sort_pairs<false>(kin, kout, static_cast<const std::int64_t*>(p0), p1, total,
                               static_cast<int>(8 * sizeof(K)), s);
    const std::int64_t* sorted = p1;
    const fast_divmod by_len(static_cast<std::uint64_t>(len));
    if (rows > 1) {
      // 2: the positions by row, stable: each row's keep the order of step 1.
      scratch<device> row_in(n * sizeof(std::uint32_t), s), row_out(n * sizeof(std::uint32_t), s);
      auto* const r0 = static_cast<std::uint32_t*>(row_in.p);
      auto* const r1 = static_cast<std::uint32_t*>(row_out.p);
      device_for_each(total, row_of_position{p1, r0, by_len}, s);
      const int bits = row_key_bits(rows);
      device_sort_pairs<false>(static_cast<const std::uint32_t*>(r0), r1, static_cast<const std::int64_t*>(p1), p0,
                               total, bits, s);
      sorted = p0;
    }
    device_for_each(total, gather_sorted<T>{keys.data(), sorted, out.values.data(), out.indices.data(), by_len}, s);
#endif
  }
}

// The stream a copy in space S runs on: the current one on the device,
// none on the host (which has no GPU to ask).
template <class S>
stream_ref space_stream() {
  if constexpr (std::is_same_v<S, device>)
    return current_stream();
  else
    return stream_ref{};
}

// Checks that run before anything is evaluated or allocated.
template <class S, std::size_t R>
void check_sortable(const shape<R>& ext) {
  if constexpr (std::is_same_v<S, device>) {
    // The second radix sort orders 32-bit row numbers.
    const index_t len = ext[R - 1], rows = len > 0 ? shape_size(ext) / len : 0;
    if (rows > index_t{1} << 32)
      throw value_error("loom: sort() on the device of " + std::to_string(rows) + " rows (shape " +
                        shape_string(ext) + "); it sorts at most 2^32 rows at once");
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
  check_sortable<S>(n.extents());
  // Sorting needs its keys in memory: evaluate the expression once (one
  // launch). A plain tensor or view is copied as it is, so the values come
  // back with their bits (assign reads half and bf16 in float, which would
  // turn a negative NaN into the positive one).
  tensor<T, R, S> keys(n.extents());
  if constexpr (is_leaf_node<node>) {
    if constexpr (std::is_same_v<S, device>) check_devices(n, keys.view());  // as assign checks
    strided_copy(keys.view(), n.v, space_stream<S>());
  } else {
    assign(keys, n);
  }
  values_indices<T, R, S> out{tensor<T, R, S>(n.extents()), tensor<std::int64_t, R, S>(n.extents())};
  sort_rows(keys, out, order);
  return out;
}
}  // namespace detail::sort

//! Sorts each row (the last axis) of any expression, stably: equal values
//! keep their order. Returns the sorted values and, as int64, the position
//! each came from. NaN (of either sign) sorts as the largest value (last
//! ascending, first descending), as in PyTorch; -0.0 and +0.0 are equal (a
//! tie keeps input order). Host and device give the same result.
//! Cost: the expression is evaluated into a temporary (one launch), then
//! host: std::stable_sort per row; device, all rows at once and nothing
//! waiting for the host (capturable into a CUDA graph): a position kernel,
//! one cub::DeviceRadixSort call by key (one pass over memory per 8 bits of
//! key, about), then, for more than one row, a row-number kernel and one
//! cub::DeviceRadixSort call by row (a pass per 8 bits of the row count),
//! and a gather kernel for the values and indices; floating keys add a key
//! kernel (an order-preserving unsigned key per element). Rows: at most 2^32
//! on the device (value_error otherwise).
//! Example: `auto [v, i] = loom::sort(scores, loom::sort_order::descending);`
template <expression E>
[[nodiscard]] auto sort(const E& e, sort_order order = sort_order::ascending) {
  return detail::sort::sort_impl(e, order);
}

//! The k largest (default) or smallest values of each row (last axis),
//! sorted, with their int64 positions; ties keep the earlier position first.
//! 0 <= k <= row length (value_error otherwise, before anything is
//! evaluated). Cost: a full sort (see sort) plus one copy of the first k
//! columns per output when k is less than the row length.
//! Example: `auto top = loom::topk(logits, 5); // top.values, top.indices`
template <expression E>
[[nodiscard]] auto topk(const E& e, index_t k, sort_order order = sort_order::descending) {
  constexpr std::size_t R = detail::node_t<E>::rank;
  static_assert(R > 0, "loom: topk needs an expression of rank 1 or more (it sorts along the last axis)");
  {  // before the sort: nothing evaluated or allocated for a bad k
    const auto in = detail::as_node(e).extents();
    if (k < 0 || k > in[R - 1])
      throw value_error("loom: topk() with k = " + std::to_string(k) + " on rows of length " +
                        std::to_string(in[R - 1]) + " (shape " + shape_string(in) + "); expected 0 <= k <= " +
                        std::to_string(in[R - 1]));
  }
  auto all = detail::sort::sort_impl(e, order);
  using V = decltype(all);
  using T = typename decltype(all.values)::value_type;
  using S = typename decltype(all.values)::space;
  auto ext = all.values.extents();
  if (k == ext[R - 1]) return all;
  const shape<R> st = contiguous_strides(ext);
  ext[R - 1] = k;
  V out{tensor<T, R, S>(ext), tensor<std::int64_t, R, S>(ext)};
  // Copies, not assignments: the values keep their bits (see sort_impl).
  const stream_ref s = detail::sort::space_stream<S>();
  detail::strided_copy(out.values.view(), view<const T, R, S>(all.values.data(), ext, st), s);
  detail::strided_copy(out.indices.view(), view<const std::int64_t, R, S>(all.indices.data(), ext, st), s);
  return out;
}
}  // namespace loom
