// SPDX-License-Identifier: Apache-2.0
#pragma once

// assign_many: several elementwise expressions evaluated into several outputs
// of one shape in ONE launch. At each element every expression is computed
// before any output is stored, so an output may also be an input (of any of
// the expressions) under the same index map: an optimizer's update of a
// parameter and its state (optim/).

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/detail/fast_divmod.hpp"
#include "loom/detail/tuple.hpp"
#include "loom/exec/assign.hpp"
#include "loom/exec/checks.hpp"
#include "loom/exec/elementwise.hpp"
#include "loom/exec/eval_info.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/expression.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail::multi {
// One output of an assign_many launch: its pointer and strides, and the
// bound tree of its expression (bound against it).
template <class O, std::size_t R, class B>
struct part {
  using out_type = O;
  using bound_type = B;
  O* p;
  shape<R> st;
  B b;
};

// Every expression at output element i (linear index; every output dense),
// then every store.
template <bool allow_periodic = true, class... P, std::size_t... K>
LOOM_HD void at_linear(const tuple<P...>& parts, index_t i, std::index_sequence<K...>) {
  const tuple<decltype(get<K>(parts).b.template at_linear<allow_periodic>(i))...> v(
      get<K>(parts).b.template at_linear<allow_periodic>(i)...);
  ((get<K>(parts).p[i] = convert<typename P::out_type>(get<K>(v))), ...);
}

// The coordinates of row-major element i of a shape, from its divisors.
template <std::size_t R>
LOOM_HD void coords_of(const fast_divmod* div, index_t i, index_t* idx) {
  std::uint64_t rest = static_cast<std::uint64_t>(i);
  for (std::size_t d = R; d-- > 0;) {
    std::uint64_t q, r;
    div[d].divmod(rest, q, r);
    idx[d] = static_cast<index_t>(r);
    rest = q;
  }
}

// The same by coordinates, from the output shape's divisors; each output
// stored through its own strides.
template <std::size_t R, class... P, std::size_t... K>
LOOM_HD void at_coords(const tuple<P...>& parts, const fast_divmod* div, index_t i, std::index_sequence<K...>) {
  index_t idx[R > 0 ? R : 1] = {};
  coords_of<R>(div, i, idx);
  const tuple<decltype(get<K>(parts).b.at(idx))...> v(get<K>(parts).b.at(idx)...);
  const auto offset = [&idx](const auto& st) {
    index_t off = 0;
    for (std::size_t d = 0; d != R; ++d) off += idx[d] * st[d];
    return off;
  };
  ((get<K>(parts).p[offset(get<K>(parts).st)] = convert<typename P::out_type>(get<K>(v))), ...);
}

template <std::size_t R>
struct divisors {
  fast_divmod d[R > 0 ? R : 1];
};

#if LOOM_CUDA_COMPILER
template <class L>
__global__ void __launch_bounds__(256) linear_kernel(L parts, index_t n) {
  const index_t step = static_cast<index_t>(gridDim.x) * blockDim.x;
#pragma unroll 1
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    at_linear(parts, i, std::make_index_sequence<L::size>{});
}

template <std::size_t R, class L>
__global__ void __launch_bounds__(256) coords_kernel(L parts, divisors<R> div, index_t n) {
  const index_t step = static_cast<index_t>(gridDim.x) * blockDim.x;
#pragma unroll 1
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    at_coords<R>(parts, div.d, i, std::make_index_sequence<L::size>{});
}
#endif

// A tuple of parts that knows its size (for the kernels' index sequences).
template <class... P>
struct part_list : tuple<P...> {
  static constexpr std::size_t size = sizeof...(P);
  part_list() = default;
  LOOM_HD explicit part_list(const P&... p) : tuple<P...>(p...) {}
};

// Whether any part's expression computes in floating point
// (exec/elementwise.hpp's computes_math): the host's dense loop then takes
// the wide copies (core/simd/dispatch.hpp), else the baseline copy alone.
template <class L>
struct parts_compute_math;
template <class... P>
struct parts_compute_math<part_list<P...>>
    : std::bool_constant<(tree_any_v<typename P::bound_type, computes_math> || ...)> {};

// The checks of assign_many on the outputs alone: one shape, no two overlap.
template <class V0, class... V>
void check_outputs(const V0& v0, const V&... vs) {
  const auto check_shape = [&](const auto& v) {
    if (v.extents() != v0.extents())
      throw shape_error("loom: assign_many needs outputs of one shape, got " + shape_string(v0.extents()) + " and " +
                        shape_string(v.extents()));
  };
  (check_shape(vs), ...);
  const auto list = std::forward_as_tuple(v0, vs...);
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    const auto later = [&](auto k) {
      constexpr std::size_t a = decltype(k)::value;
      const auto pair = [&](auto b) {
        if constexpr (decltype(b)::value > a)
          if (may_overlap(std::get<a>(list), std::get<decltype(b)::value>(list)))
            throw aliasing_error("loom: two outputs of assign_many overlap");
      };
      (pair(std::integral_constant<std::size_t, K>{}), ...);
    };
    (later(std::integral_constant<std::size_t, K>{}), ...);
  }(std::index_sequence_for<V0, V...>{});
}

// Every leaf of `e` that overlaps output `v` reads it under v's index map.
template <class N, class V>
void check_reads(const N& e, const V& v) {
  for_each_leaf(e, [&](const auto& leaf) {
    if (!may_overlap(leaf.v, v)) return;
    bool same = false;
    try {
      same = same_index_map(leaf.v.broadcast_to(v.extents()), v);
    } catch (const shape_error&) {
    }
    if (!same)
      throw aliasing_error("loom: an output of assign_many (shape " + shape_string(v.extents()) +
                           ") overlaps an input under a different index map; evaluate into a new tensor first");
  });
}

// An assign_many over one set of outputs, checked and bound: the parts, the
// element count, the path (linear: every output dense, every input dense
// or periodic) and the output shape's divisors.
template <std::size_t R, class L>
struct item {
  L parts;
  index_t n;
  bool linear;
  bool dense;  // every output and every input dense: element i of each at offset i
  divisors<R> div;
};

// Elements [i, end) in steps of `step` of one item, on its path.
template <std::size_t R, class L>
LOOM_HD void run_range(const item<R, L>& it, index_t i, index_t end, index_t step) {
  constexpr auto seq = std::make_index_sequence<L::size>{};
  if (it.linear)
    for (; i < end; i += step) at_linear(it.parts, i, seq);
  else
    for (; i < end; i += step) at_coords<R>(it.parts, it.div.d, i, seq);
}

// The checks of assign_many, then the binding: calls f with the item (not
// for outputs of no elements).
template <class Views, class Nodes, class F, std::size_t... K>
void prepare(const Views& vs, const Nodes& ns, const F& f, std::index_sequence<K...>) {
  using V0 = std::tuple_element_t<0, Views>;
  using S = typename V0::space;
  constexpr std::size_t R = V0::rank;
  static_assert(((std::is_same_v<typename std::tuple_element_t<K, Views>::space, S> &&
                  std::tuple_element_t<K, Views>::rank == R) &&
                 ...),
                "loom: assign_many needs outputs of one rank in one memory space");
  static_assert((!std::is_const_v<typename std::tuple_element_t<K, Views>::element_type> && ...),
                "loom: cannot assign to a view of const elements");
  static_assert(((node_slots<std::tuple_element_t<K, Nodes>>::value == 0) && ...),
                "loom: assign_many takes elementwise expressions; evaluate row reductions with assign_pair or "
                "assign_rows' callers first");
  static_assert(((std::is_void_v<typename std::tuple_element_t<K, Nodes>::space> ||
                  std::is_same_v<typename std::tuple_element_t<K, Nodes>::space, S>) &&
                 ...),
                "loom: an expression lives in another memory space than the outputs; copy it with loom::to_device(x) "
                "or loom::to_host(x)");
  static_assert(((std::tuple_element_t<K, Nodes>::rank <= R) && ...),
                "loom: an expression of assign_many has a higher rank than the outputs");
  require_cuda_compiler_for<S>();
  check_outputs(std::get<K>(vs)...);
  (check_assignable(std::get<K>(vs), std::get<K>(ns)), ...);
  const auto reads = [&](const auto& v) { (check_reads(std::get<K>(ns), v), ...); };
  (reads(std::get<K>(vs)), ...);
  if constexpr (std::is_same_v<S, device>) (check_devices(std::get<K>(ns), std::get<K>(vs)), ...);

  bind_info bi[sizeof...(K)];
  const auto make = [&](auto k) {
    constexpr std::size_t j = decltype(k)::value;
    const auto& v = std::get<j>(vs);
    auto b = binder::bind<0>(std::get<j>(ns), v, bi[j]);
    return part<typename std::remove_cvref_t<decltype(v)>::value_type, R, decltype(b)>{v.data(), v.strides(), b};
  };
  using list_t = part_list<decltype(make(std::integral_constant<std::size_t, K>{}))...>;
  const V0& v0 = std::get<0>(vs);
  if (v0.size() == 0) return;
  const list_t ps(make(std::integral_constant<std::size_t, K>{})...);
  divisors<R> div{};
  for (std::size_t d = 0; d != R; ++d) div.d[d] = fast_divmod(static_cast<std::uint64_t>(v0.extent(d)));
  const bool linear = ((std::get<K>(vs).is_contiguous() && bi[K].linear) && ...);
  f(item<R, list_t>{ps, v0.size(), linear, linear && (bi[K].contiguous && ...), div});
}

template <class Views, class Nodes, std::size_t... K>
eval_info run(const Views& vs, const Nodes& ns, std::index_sequence<K...> seq) {
  using S = typename std::tuple_element_t<0, Views>::space;
  eval_info info;
  info.on_device = std::is_same_v<S, device>;
  prepare(
      vs, ns,
      [&info](const auto& it) {
        info.path = it.linear ? eval_path::contiguous : eval_path::general;
        const index_t n = it.n;
        if constexpr (std::is_same_v<S, host>) {
          host_for_each(n, [&](index_t i) { run_range(it, i, i + 1, 1); });
        } else {
#if LOOM_CUDA_COMPILER
          using list_t = std::remove_cvref_t<decltype(it.parts)>;
          constexpr std::size_t R = std::tuple_element_t<0, Views>::rank;
          const stream_ref s = current_stream();
          if (it.linear)
            launch_kernel(linear_kernel<list_t>, grid_for(n, s.device()), 256, 0, s.get(), it.parts, n);
          else
            launch_kernel(coords_kernel<R, list_t>, grid_for(n, s.device()), 256, 0, s.get(), it.parts, it.div, n);
#endif
        }
      },
      seq);
  return last_eval_slot() = info;
}

template <class Args, std::size_t... K>
auto output_views(const Args& args, std::index_sequence<K...>) {
  return std::make_tuple(as_view(std::get<2 * K>(args))...);
}
template <class Args, std::size_t... K>
auto expression_nodes(const Args& args, std::index_sequence<K...>) {
  return std::make_tuple(as_node(std::get<2 * K + 1>(args))...);
}

// assign_many's checks and binding without the launch, for a batch: adds
// the item to `b` (nothing for outputs of no elements).
template <class B, class... Args>
void prepare_many(B& b, Args&&... args) {
  const auto a = std::forward_as_tuple(args...);
  constexpr auto pairs = std::make_index_sequence<sizeof...(Args) / 2>{};
  prepare(output_views(a, pairs), expression_nodes(a, pairs), [&b](const auto& it) { b.add(it); }, pairs);
}
}  // namespace loom::detail::multi

namespace loom {
//! Evaluates several elementwise expressions into several outputs of one
//! shape in ONE launch, given as pairs `out1, e1, out2, e2, ...`: at each
//! element every expression is computed before any output is stored, so an
//! output may also be an input of any of the expressions under the same
//! index map (an optimizer's update of a parameter and its moments). Each
//! expression broadcasts to the outputs' shape; outputs of other shapes
//! throw shape_error, overlapping outputs or an input read under another
//! index map aliasing_error. Row reductions are not taken (a static
//! assertion says so). Returns the path: contiguous when every output is
//! dense and every input dense or periodic, else general (coordinates);
//! one element per thread on the device.
//! Example: `loom::assign_many(w, w - lr * m1, m, m1)` with `m1 = 0.9f * m + g`.
template <class... Args>
  requires(sizeof...(Args) >= 2 && sizeof...(Args) % 2 == 0)
eval_info assign_many(Args&&... args) {
  const auto a = std::forward_as_tuple(args...);
  constexpr auto pairs = std::make_index_sequence<sizeof...(Args) / 2>{};
  return detail::multi::run(detail::multi::output_views(a, pairs), detail::multi::expression_nodes(a, pairs), pairs);
}
}  // namespace loom
