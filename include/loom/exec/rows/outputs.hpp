// SPDX-License-Identifier: Apache-2.0
#pragma once

// The sink of a row kernel with several row outputs and column sums
// (loom::grad's shared kernel, layer_norm_backward's): each output written
// element by element, as the sum of its row or as its value at column 0
// (an output [..., 1]), which of them told at launch, so one compiled
// kernel serves all.

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/simd/dispatch.hpp"
#include "loom/detail/tuple.hpp"
#include "loom/exec/rows/plan.hpp"
#include "loom/expr/bound.hpp"

namespace loom::detail::rows {
//! How a row output of an outputs_sink is written.
enum class row_write : int {
  each,  //!< every element, at the rows' shape
  sum,   //!< the sum of each row, at column 0 of an output [..., 1]
  first, //!< the value at column 0 of each row, into an output [..., 1] (a value constant along the rows)
};

// The size of the smallest of the types O (0 for none).
template <class... O>
constexpr std::size_t smallest_size() {
  std::size_t m = 0;
  ((m = (m == 0 || sizeof(O) < m) ? sizeof(O) : m), ...);
  return m;
}

// Row outputs 0..M-1 (children 0..M-1 of the bound root, a map that returns
// its first child) and K extras (children M..M+K-1) added into per-block
// column partials `acc[k * cols + c]` (colsum.hpp's kernel; none in
// row_kernel). A and Lanes: the accumulation type and the partial sums each
// thread keeps of a row written as a sum (1 on the device, where the group
// reduction adds the threads' partials; host_lanes on the host, the order
// of host_reduce_slot, so both forms of a row sum are one order). Sums:
// whether an output may be written as row sums or first values (the code
// that adds and stores them is compiled only then). A kernel copies the
// sink for each row (its partial sums start at 0) and calls end_row after
// the row's output pass. Every value of a column is computed before any is
// stored, so an output may be an input under the same index map. Its
// per-element functions are inlined into the host's dispatched loops
// (LOOM_HOST_INLINE), so they run at the CPU's width.
template <class A, int Lanes, bool Sums, std::size_t K, std::size_t R, class... O>
struct outputs_sink {
  static constexpr std::size_t M = sizeof...(O);
  static constexpr std::size_t extras = K;
  static constexpr std::size_t smallest = smallest_size<O...>();
  static constexpr bool sums_rows = Sums && M > 0;
  using acc = A;

  tuple<row_out<O, R>...> outs;
  row_write write[M > 0 ? M : 1] = {};
  A part[sums_rows ? M : 1][sums_rows ? Lanes : 1] = {};

  //! Whether the host may compute host_lanes columns at once (vec): every
  //! output written element by element has last stride 1.
  bool host_vector_ok() const {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return ((write[I] != row_write::each || detail::get<I>(outs).st[R - 1] == 1) && ... && true);
    }(std::make_index_sequence<M>{});
  }

  template <class B, class Ctx>
  LOOM_HD LOOM_HOST_INLINE void one(const B& b, const index_t* idx, const index_t* lead, index_t c, const Ctx& ctx,
                                    A* acc = nullptr, index_t cols = 0) {
    one_at(b, idx, lead, c, ctx, acc, cols, std::make_index_sequence<M>{}, std::make_index_sequence<K>{});
  }
  template <int vector_width, class B, class Ctx>
  LOOM_HD LOOM_HOST_INLINE void vec(const B& b, const index_t* lead, index_t c0, const Ctx& ctx, A* acc = nullptr,
                                    index_t cols = 0) {
    typename B::template regs<vector_width> r;
    b.template row_load<vector_width>(lead, c0, r);
    vec_at<vector_width>(b, r, lead, c0, ctx, acc, cols, std::make_index_sequence<M>{},
                         std::make_index_sequence<K>{});
  }
  //! After a row's output pass: each output written as a sum gets
  //! reduce(its partial sums) at column 0 of the row (stored if `store`:
  //! on the device every thread of the row's group reduces, one stores).
  template <class Reduce>
  LOOM_HD void end_row([[maybe_unused]] const index_t* lead, [[maybe_unused]] bool store,
                       [[maybe_unused]] Reduce&& reduce) {
    if constexpr (sums_rows)
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        (end_one<I>(lead, store, reduce), ...);
      }(std::make_index_sequence<M>{});
  }

 private:
  template <std::size_t I>
  using out_t = std::tuple_element_t<I, std::tuple<O...>>;

  // Whether output I is written as `w` (a row sum or a first value: never
  // without the code for them).
  template <std::size_t I>
  LOOM_HD bool written_as(row_write w) const {
    if constexpr (sums_rows)
      return write[I] == w;
    else
      return false;
  }
  template <std::size_t I>
  LOOM_HD bool summed() const {
    return written_as<I>(row_write::sum);
  }
  template <std::size_t I>
  LOOM_HD bool first_only() const {
    return written_as<I>(row_write::first);
  }
  template <std::size_t I, class Reduce>
  LOOM_HD void end_one(const index_t* lead, bool store, Reduce& reduce) {
    if (!summed<I>()) return;
    const A s = reduce(part[I]);
    auto& o = detail::get<I>(outs);
    if (store) o.p[o.offset(lead, 0)] = convert<out_t<I>>(s);
  }
  template <class B, class Ctx, std::size_t... I, std::size_t... J>
  LOOM_HD LOOM_HOST_INLINE void one_at([[maybe_unused]] const B& b, [[maybe_unused]] const index_t* idx,
                      [[maybe_unused]] const index_t* lead, [[maybe_unused]] index_t c, [[maybe_unused]] const Ctx& ctx,
                      [[maybe_unused]] A* acc, [[maybe_unused]] index_t cols, std::index_sequence<I...>,
                      std::index_sequence<J...>) {
    [[maybe_unused]] const A v[M > 0 ? M : 1] = {convert<A>(detail::get<I>(b.ch).at(idx, ctx))...};
    ((acc[static_cast<index_t>(J) * cols + c] += convert<A>(detail::get<M + J>(b.ch).at(idx, ctx))), ...);
    (put_one<I>(v[I], lead, c), ...);
  }
  template <std::size_t I>
  LOOM_HD LOOM_HOST_INLINE void put_one(A v, const index_t* lead, index_t c) {
    if constexpr (sums_rows)
      if (summed<I>()) {
        part[I][c % Lanes] += v;
        return;
      }
    if (first_only<I>() && c != 0) return;
    auto& o = detail::get<I>(outs);
    o.p[o.offset(lead, c)] = convert<out_t<I>>(v);
  }
  // Vector steps start at multiples of Lanes (host_row's steps of
  // host_lanes columns; Lanes is 1 on the device), so column c0 + j adds
  // into partial j % Lanes.
  template <int vector_width, class B, class Regs, class Ctx, std::size_t... I, std::size_t... J>
  LOOM_HD LOOM_HOST_INLINE void vec_at([[maybe_unused]] const B& b, [[maybe_unused]] const Regs& r,
                                       [[maybe_unused]] const index_t* lead, [[maybe_unused]] index_t c0,
                                       [[maybe_unused]] const Ctx& ctx, [[maybe_unused]] A* acc,
                                       [[maybe_unused]] index_t cols, std::index_sequence<I...>,
                                       std::index_sequence<J...>) {
    tuple<vec_regs<O, vector_width>...> s;
    // The extras' values first, added into the accumulators after the loop:
    // a loop that stores only into locals runs in SIMD lanes on the host.
    [[maybe_unused]] A extra[K > 0 ? K : 1][vector_width];
    LOOM_UNROLL
    for (int j = 0; j < vector_width; ++j) {
      (put_lane<I>(detail::get<I>(s).v[j], j,
                   convert<A>(detail::get<I>(b.ch).template elem<vector_width>(detail::get<I>(r.c), j, ctx))),
       ...);
      ((extra[J][j] =
            convert<A>(detail::get<M + J>(b.ch).template elem<vector_width>(detail::get<M + J>(r.c), j, ctx))),
       ...);
    }
    LOOM_UNROLL
    for (int j = 0; j < vector_width; ++j) ((acc[static_cast<index_t>(J) * cols + c0 + j] += extra[J][j]), ...);
    (store_vec<I, vector_width>(detail::get<I>(s), lead, c0), ...);
  }
  template <std::size_t I, class T>
  LOOM_HD LOOM_HOST_INLINE void put_lane(T& slot, int j, A v) {
    if constexpr (sums_rows)
      if (summed<I>()) {
        part[I][j % Lanes] += v;
        return;
      }
    slot = convert<T>(v);
  }
  template <std::size_t I, int vector_width, class Regs>
  LOOM_HD LOOM_HOST_INLINE void store_vec(const Regs& s, const index_t* lead, index_t c0) const {
    if (summed<I>()) return;
    const auto& o = detail::get<I>(outs);
    if (first_only<I>()) {
      if (c0 == 0) o.p[o.offset(lead, 0)] = s.v[0];
      return;
    }
    vec_store<out_t<I>, vector_width>(o.p + o.offset(lead, c0), s);
  }
};

// Whether a sink writes outputs as row sums: its kernels then copy it for
// each row and call its end_row after the row's output pass.
template <class Sink>
constexpr bool sink_sums_rows() {
  if constexpr (requires { Sink::sums_rows; })
    return Sink::sums_rows;
  else
    return false;
}
}  // namespace loom::detail::rows
