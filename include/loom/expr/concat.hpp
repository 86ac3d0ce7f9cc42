// SPDX-License-Identifier: Apache-2.0
#pragma once

// Joining expressions: concat along an existing axis and stack along a new
// one, as expression nodes, so `y = concat(a * 2, b, 1)` is one kernel.
// Each operand is bound over its own shape and evaluated at the
// coordinates of the output element that falls in its part.

#include <cstddef>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/detail/tuple.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/coords.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/traverse.hpp"

namespace loom::detail {
// The most operands one concat or stack takes.
inline constexpr std::size_t max_join_operands = 64;

// Kernel-side concat (Stack false: operand k holds own coordinates
// [off[k], off[k + 1]) along `axis`) or stack (Stack true: operand k is
// coordinate k of the new axis, which its coordinates lack).
template <class C, std::size_t R, std::size_t RO, bool Stack, class... B>
struct bound_join : coord_reader<bound_join<C, R, RO, Stack, B...>, C, R, RO> {
  tuple<B...> ch;
  index_t off[sizeof...(B) + 1];
  int axis;

  LOOM_HD C value(index_t* c) const { return value_from<0>(c); }
  template <std::size_t K>
  LOOM_HD C value_from(index_t* c) const {
    if constexpr (K + 1 < sizeof...(B)) {
      if (c[axis] >= off[K + 1]) return value_from<K + 1>(c);
    }
    if constexpr (Stack) {
      index_t s[R > 1 ? R - 1 : 1];
      for (std::size_t d = 0, o = 0; d != R; ++d)
        if (static_cast<int>(d) != axis) s[o++] = c[d];
      return static_cast<C>(detail::get<K>(ch).at(s));
    } else {
      c[axis] -= off[K];
      return static_cast<C>(detail::get<K>(ch).at(c));
    }
  }
  //! The same operands joined the same way.
  bool same_as(const bound_join& o) const {
    return this->map.same_as(o.map) && std::memcmp(off, o.off, sizeof(off)) == 0 &&
           axis == o.axis && same_children(o, std::index_sequence_for<B...>{});
  }

 private:
  template <std::size_t... I>
  bool same_children(const bound_join& o, std::index_sequence<I...>) const {
    return (true && ... && detail::get<I>(ch).same_as(detail::get<I>(o.ch)));
  }
};
// Its operands are read through coordinates of their own: to the walks of
// a bound tree it is one leaf that reads no memory of theirs.
template <class C, std::size_t R, std::size_t RO, bool Stack, class... B>
struct children_of<bound_join<C, R, RO, Stack, B...>> : no_children<bound_join<C, R, RO, Stack, B...>> {};
}  // namespace loom::detail

namespace loom {
//! Operands joined along an axis: concatenated (Stack false; every operand
//! has rank R) or stacked along a new axis (Stack true; every operand has
//! rank R - 1 and the same shape). Built by loom::concat and loom::stack.
template <std::size_t R, bool Stack, class... Ch>
struct join_node : detail::node_tag {
  static_assert(sizeof...(Ch) >= 1 && sizeof...(Ch) <= detail::max_join_operands,
                "loom: concat and stack take 1 to 64 operands");
  static_assert(((detail::node_slots<Ch>::value == 0) && ...),
                "loom: concat and stack cannot join expressions with row reductions (row_sum, row_max, ...); "
                "materialize them first");
  using value_type = typename detail::promote_children<void, Ch...>::type;
  using space = typename detail::common_space_of<typename Ch::space...>::type;
  static constexpr std::size_t rank = R;
  detail::tuple<Ch...> children;
  shape<R> ext{};
  index_t off[sizeof...(Ch) + 1]{};
  int axis = 0;

  join_node(int axis_, const Ch&... ch) : children(ch...) {
    const std::size_t a = detail::normalize_axis<R>(axis_);
    axis = static_cast<int>(a);
    set_shape(std::index_sequence_for<Ch...>{});
  }
  shape<R> extents() const { return ext; }

  template <std::size_t Base, class Out>
  auto bind_node(const Out& out, detail::bind_info&) const {
    return bind_impl<Out>(out, std::index_sequence_for<Ch...>{});
  }

 private:
  static constexpr std::size_t child_rank = Stack ? R - 1 : R;
  template <std::size_t... I>
  void set_shape(std::index_sequence<I...>) {
    const shape<child_rank> first = detail::get<0>(children).extents();
    const shape<child_rank> all[] = {detail::get<I>(children).extents()...};
    const auto a = static_cast<std::size_t>(axis);
    index_t along = 0;
    for (std::size_t k = 0; k != sizeof...(Ch); ++k) {
      for (std::size_t d = 0; d != child_rank; ++d)
        if ((Stack || d != a) && all[k][d] != first[d])
          throw shape_error(std::string("loom: ") + (Stack ? "stack" : "concat") + " along axis " +
                            std::to_string(a) + ": shapes " + shape_string(first) + " and " + shape_string(all[k]) +
                            " differ on axis " + std::to_string(d));
      off[k] = along;
      along += Stack ? 1 : all[k][a];
    }
    off[sizeof...(Ch)] = along;
    for (std::size_t d = 0, o = 0; d != R; ++d) ext[d] = d == a ? along : first[Stack ? o++ : d];
    if constexpr (!Stack) ext[a] = along;
  }
  // Operand I bound over its own shape.
  template <std::size_t I, class S>
  auto bind_child() const {
    detail::bind_info inner;
    const auto& c = detail::get<I>(children);
    return detail::binder::bind<0>(c, detail::read_only_target<child_rank, S>{c.extents()}, inner);
  }
  template <class Out, std::size_t... I>
  auto bind_impl(const Out& out, std::index_sequence<I...>) const {
    constexpr std::size_t RO = detail::out_rank_v<Out>;
    static_assert(R <= RO, "loom: concat or stack has a higher rank than the output");
    using S = typename Out::space;
    detail::check_not_overwritten(*this, out, Stack ? "stack" : "concat");
    using C = compute_t<value_type>;
    using children_t = detail::tuple<decltype(bind_child<I, S>())...>;
    using result = detail::bound_join<C, R, RO, Stack, decltype(bind_child<I, S>())...>;
    result b{{detail::own_coords<R, RO>::make(ext, out.extents())}, children_t(bind_child<I, S>()...), {}, axis};
    std::memcpy(b.off, off, sizeof(off));
    return b;
  }
};

namespace detail {
template <std::size_t R, bool Stack, class... Ch>
struct children_of<join_node<R, Stack, Ch...>> {
  using types = type_list<Ch...>;
  template <std::size_t I, class M>
  LOOM_HD static auto& get(M& n) {
    return detail::get<I>(n.children);
  }
  template <class... C>
  using rebind = join_node<R, Stack, C...>;
  template <class... C>
  static auto rebuild(const join_node<R, Stack, Ch...>& n, const C&... c) {
    return join_node<R, Stack, C...>(n.axis, c...);
  }
};

template <bool Stack, class Tuple, std::size_t... I>
auto make_join(int axis, const Tuple& t, std::index_sequence<I...>) {
  using first = node_t<std::remove_cvref_t<std::tuple_element_t<0, Tuple>>>;
  constexpr std::size_t R = Stack ? first::rank + 1 : first::rank;
  static_assert(((node_t<std::remove_cvref_t<std::tuple_element_t<I, Tuple>>>::rank == first::rank) && ...),
                "loom: concat and stack need operands of one rank");
  static_assert(Stack || R >= 1, "loom: concat needs operands of rank 1 or more");
  static_assert(R <= max_rank, "loom: stack would exceed the largest rank");
  using node = join_node<R, Stack, node_t<std::remove_cvref_t<std::tuple_element_t<I, Tuple>>>...>;
  static_assert(!std::is_same_v<typename node::space, mixed_space>,
                "loom: concat or stack mixes host and device tensors; copy one side first with loom::to_device(x) "
                "or loom::to_host(x)");
  return node(axis, as_node(std::get<I>(t))...);
}

// The operands and the axis of concat(x..., axis) or concat(x...) (axis 0).
template <bool Stack, class... A>
auto join_args(const A&... args) {
  const auto t = std::forward_as_tuple(args...);
  using last = std::remove_cvref_t<std::tuple_element_t<sizeof...(A) - 1, std::tuple<A...>>>;
  if constexpr (std::is_integral_v<last>) {
    static_assert(sizeof...(A) >= 2, "loom: concat and stack need at least one operand before the axis");
    return make_join<Stack>(static_cast<int>(std::get<sizeof...(A) - 1>(t)), t,
                            std::make_index_sequence<sizeof...(A) - 1>{});
  } else {
    return make_join<Stack>(0, t, std::make_index_sequence<sizeof...(A)>{});
  }
}
}  // namespace detail

//! Concatenates expressions of one rank along an existing axis (the last
//! argument; 0 when it is left out; negative counts from the end), as
//! torch.cat: their extents must agree on every other axis (shape_error
//! naming both shapes and the axis otherwise). Lazily: `y = concat(a * 2,
//! b, 1)` is one kernel, each output element read from its operand;
//! operands are promoted together as in a map. Example: `y = loom::concat(q, k, v, -1);`
template <class... A>
  requires(sizeof...(A) >= 1)
[[nodiscard]] auto concat(const A&... args) {
  return detail::join_args<false>(args...);
}

//! Stacks expressions of one shape along a new axis (the last argument, in
//! [-(rank + 1), rank]; 0 when left out), as torch.stack: shape_error naming
//! both shapes otherwise. Lazily, one kernel with the assignment.
//! Example: `y = loom::stack(re, im, -1);`
template <class... A>
  requires(sizeof...(A) >= 1)
[[nodiscard]] auto stack(const A&... args) {
  return detail::join_args<true>(args...);
}
}  // namespace loom
