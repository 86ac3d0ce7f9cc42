// SPDX-License-Identifier: Apache-2.0
#pragma once

// The row nodes: reductions along the last axis that keep it with extent 1
// (row_sum, row_mean, row_max, row_min), the column coordinate, their
// kernel-side (bound) forms and what the rows executor asks of those types.

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/detail/fast_divmod.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/traverse.hpp"
#include "loom/core/reduction_ops.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
namespace fn {
// The row reductions name operators of core/reduction_ops.hpp, the vocabulary of
// every reduction, over the row's accumulator type A (float, or double for
// double rows: detail::row_acc_t).
//! Sum along the row.
struct row_sum_op {
  template <class A>
  using op = detail::reduce::sum_op<A>;
};
//! Mean along the row (the sum divided by the row length; NaN for an empty row).
struct row_mean_op {
  template <class A>
  using op = detail::reduce::mean_op<A>;
};
//! Maximum (is_max) or minimum along the row; NaN if any element is NaN (as
//! torch.amax and torch.amin). An empty row has no extreme: a shape_error.
template <bool is_max>
struct row_extreme_op {
  template <class A>
  using op = detail::reduce::extreme_op<A, is_max>;
};
//! Maximum along the row.
using row_max_op = row_extreme_op<true>;
//! Minimum along the row.
using row_min_op = row_extreme_op<false>;
}  // namespace fn

namespace detail {
// The accumulation type of a row reduction over values of type T: float for
// everything but double (so half/bf16/int rows accumulate in float).
template <class T>
using row_acc_t = std::conditional_t<std::is_same_v<compute_t<T>, double>, double, float>;

template <std::size_t S, class A>
struct row_ctx {
  A v[S > 0 ? S : 1];
};

template <class Op, class A, std::size_t Slot, class B>
struct bound_row_reduce {
  using compute = A;
  using acc = A;
  using op = typename Op::template op<A>;  // a core/reduction_ops.hpp operator with accumulator A
  static_assert(std::is_same_v<typename op::acc, A>, "loom: a row reduction's operator accumulates in its own type");
  template <int vector_width>
  struct regs {};
  static constexpr std::size_t slots = slots_of<B> + 1;
  static constexpr std::size_t slot = Slot;
  B arg;
  index_t cols;  // length of the reduced rows

  template <class Ctx>
  LOOM_HD A at(const index_t*, const Ctx& ctx) const {
    return static_cast<A>(ctx.v[Slot]);
  }
  template <int vector_width>
  LOOM_HD void row_load(const index_t*, index_t, regs<vector_width>&) const {}
  template <int vector_width, class Ctx>
  LOOM_HD A elem(const regs<vector_width>&, int, const Ctx& ctx) const {
    return static_cast<A>(ctx.v[Slot]);
  }
  //! The same reduction of the same values (the slot number aside).
  template <std::size_t Other, class B2>
  bool same_as(const bound_row_reduce<Op, A, Other, B2>& o) const {
    return cols == o.cols && arg.same_as(o.arg);
  }
};
template <class Op, class A, std::size_t Slot, class B>
struct children_of<bound_row_reduce<Op, A, Slot, B>> {
  using types = type_list<B>;
  template <std::size_t, class M>
  LOOM_HD static auto& get(M& n) {
    return n.arg;
  }
  template <class C>
  using rebind = bound_row_reduce<Op, A, Slot, C>;
  template <class C>
  static bound_row_reduce<Op, A, Slot, C> rebuild(const bound_row_reduce<Op, A, Slot, B>& n, const C& c) {
    return {c, n.cols};
  }
};
template <class Op, class A, std::size_t Slot, class B>
struct is_bound_row_reduce<bound_row_reduce<Op, A, Slot, B>> : std::true_type {};
template <class Op, class A, std::size_t Slot, class B>
struct slot_number<bound_row_reduce<Op, A, Slot, B>> : std::integral_constant<std::size_t, Slot> {};

// The type of the row-reduction node with slot S in bound tree B (which
// holds it): the node slot_node finds.
template <class B, std::size_t S>
using slot_type_t = std::remove_cvref_t<decltype(slot_node<S>(std::declval<const B&>()))>;

// A bound type with every slot number set to 0: two reductions whose erased
// types agree compute the same function of their inputs.
template <class X>
struct zero_slot {
  using type = X;
};
template <class Op, class A, std::size_t Slot, class B>
struct zero_slot<bound_row_reduce<Op, A, Slot, B>> {
  using type = bound_row_reduce<Op, A, 0, B>;
};
template <class X>
using erase_slots_t = typename tree_map<X, zero_slot>::type;

// Whether a bound tree reads double leaves or reduces a row in double (a
// double accumulator: `row_sum(cast<double>(x))` of float x): its row
// results, and a row kernel's reduction scratch, are then double, else float.
namespace cap {
struct double_valued {
  template <class N>
  using fallback = std::false_type;
};
}  // namespace cap
template <class N>
using double_valued = capability<cap::double_valued, N>;
template <std::size_t R>
struct capability<cap::double_valued, bound_leaf<double, R>> : std::true_type {};
template <class Op, std::size_t Slot, class B>
struct capability<cap::double_valued, bound_row_reduce<Op, double, Slot, B>> : std::true_type {};
template <class B>
inline constexpr bool uses_double = tree_any_v<B, double_valued>;
}  // namespace detail

//! A reduction along the last axis of `e` that keeps that axis with extent 1,
//! so it broadcasts back along the row: `x - row_max(x)`. Usable anywhere in
//! an elementwise expression, nested, depending on other row reductions. An
//! assignment whose tree holds row reductions is ONE kernel: each row is
//! reduced (in dependency order) and then written by one group of threads.
template <class Op, class E>
struct row_reduce_node : detail::node_tag {
  using value_type = std::conditional_t<std::is_same_v<Op, fn::row_mean_op> && !is_floating_v<typename E::value_type>,
                                        float, typename E::value_type>;
  using space = typename E::space;
  static constexpr std::size_t rank = E::rank > 0 ? E::rank : 1;
  E e;

  explicit row_reduce_node(const E& e_) : e(e_) {}
  shape<rank> extents() const {
    shape<rank> s{};
    s.fill(1);
    const auto in = e.extents();
    for (std::size_t d = 0; d != E::rank; ++d) s[rank - E::rank + d] = in[d];
    s[rank - 1] = 1;
    return s;
  }

  //! Binds the argument over the output's leading axes and its own row length.
  template <std::size_t Base, class O, std::size_t RO, class S>
  auto bind_node(const view<O, RO, S>& out, detail::bind_info& info) const {
    const auto target = row_target(out.extents());
    detail::bind_info inner;
    info.contiguous = false;
    info.linear = false;
    if (target == out.extents()) {
      // Reading the output's own memory is fine under the same index map: a
      // row is reduced completely before any of it is written.
      return finish<Base>(detail::binder::bind<Base>(e, out, inner), target);
    }
    detail::for_each_leaf(e, [&](const auto& leaf) {
      if (may_overlap(leaf.v, out))
        throw aliasing_error("loom: a row reduction over rows of length " + std::to_string(target[RO - 1]) +
                             " reads memory that the output (shape " + shape_string(out.extents()) +
                             ") overwrites; evaluate into a new tensor (loom::materialize) first");
    });
    return finish<Base>(detail::binder::bind<Base>(e, detail::read_only_target<RO, S>{target}, inner), target);
  }
  template <std::size_t Base, std::size_t RO, class S>
  auto bind_node(const detail::read_only_target<RO, S>& out, detail::bind_info& info) const {
    const auto target = row_target(out.extents());
    detail::bind_info inner;
    info.contiguous = false;
    info.linear = false;
    return finish<Base>(detail::binder::bind<Base>(e, detail::read_only_target<RO, S>{target}, inner), target);
  }

 private:
  // The argument's binding shape: the output's leading axes, the argument's row length.
  template <std::size_t RO>
  shape<RO> row_target(const shape<RO>& out_ext) const {
    static_assert(rank <= RO, "loom: a row reduction has a higher rank than the output");
    const auto in = e.extents();
    const index_t cols = E::rank > 0 ? in[E::rank - 1] : 1;
    if (cols == 0 && !Op::template op<detail::row_acc_t<typename E::value_type>>::has_identity)
      throw shape_error("loom: row_max/row_min over empty rows (shape " + shape_string(in) + ")");
    shape<RO> target = out_ext;
    target[RO - 1] = cols;
    return target;
  }
  template <std::size_t Base, class B, std::size_t RO>
  static auto finish(const B& arg, const shape<RO>& target) {
    using A = detail::row_acc_t<typename E::value_type>;
    return detail::bound_row_reduce<Op, A, Base + detail::node_slots<E>::value, B>{arg, target[RO - 1]};
  }
};

namespace detail {
template <class Op, class E>
struct children_of<row_reduce_node<Op, E>> : one_child_e<E> {
  template <class C>
  using rebind = row_reduce_node<Op, C>;
  template <class C>
  static auto rebuild(const row_reduce_node<Op, E>&, const C& c) {
    return row_reduce_node<Op, C>(c);
  }
};
template <class Op, class E>
struct is_row_reduction<row_reduce_node<Op, E>> : std::true_type {};
}  // namespace detail
}  // namespace loom

namespace loom {
namespace detail {
// Kernel-side column index: the coordinate along the last axis.
template <std::size_t R>
struct bound_column_index {
  using compute = std::int64_t;
  template <int vector_width>
  using regs = vec_regs<std::int64_t, vector_width>;
  static constexpr std::size_t slots = 0;
  fast_divmod cols;  // for linear indexing: column = i % cols

  template <bool allow_periodic = false>
  LOOM_HD std::int64_t at_linear(index_t i) const {
    std::uint64_t q, r;
    cols.divmod(static_cast<std::uint64_t>(i), q, r);
    return static_cast<std::int64_t>(r);
  }
  template <class Ctx = no_ctx>
  LOOM_HD std::int64_t at(const index_t* idx, const Ctx& = {}) const {
    return idx[R - 1];
  }
  template <int vector_width, bool allow_periodic = false>
  LOOM_HD void load(index_t i0, regs<vector_width>& r) const {
    for (int j = 0; j < vector_width; ++j) r.v[j] = at_linear(i0 + j);
  }
  template <int vector_width>
  LOOM_HD void row_load(const index_t*, index_t c0, regs<vector_width>& r) const {
    for (int j = 0; j < vector_width; ++j) r.v[j] = c0 + j;
  }
  template <int vector_width, class Ctx = no_ctx>
  LOOM_HD std::int64_t elem(const regs<vector_width>& r, int j, const Ctx& = {}) const {
    return r.v[j];
  }
  bool same_as(const bound_column_index& o) const { return cols.d == o.cols.d; }
};
template <std::size_t R>
struct children_of<bound_column_index<R>> : no_children<bound_column_index<R>> {};
}  // namespace detail

//! The column (last-axis) coordinate of every element of a shape, as int64;
//! reads no memory. With a target per row it selects one element per row:
//! `row_sum(where(column_index(x) == t, x, 0))` is x[r, t[r]].
template <std::size_t R, class S>
struct column_index_node : detail::node_tag {
  using value_type = std::int64_t;
  using space = S;
  static constexpr std::size_t rank = R;
  shape<R> ext;

  explicit column_index_node(const shape<R>& s) : ext(s) {}
  shape<R> extents() const { return ext; }
  template <std::size_t Base, class Out>
  auto bind_node(const Out& out, detail::bind_info& info) const {
    constexpr std::size_t RO = std::tuple_size_v<std::remove_cvref_t<decltype(out.extents())>>;
    info.contiguous = false;  // its values depend on the coordinates, not on a memory layout
    info.linear = false;
    const index_t cols = out.extents()[RO - 1];
    return detail::bound_column_index<RO>{detail::fast_divmod(static_cast<std::uint64_t>(cols > 0 ? cols : 1))};
  }
};

namespace detail {
template <std::size_t R, class S>
struct children_of<column_index_node<R, S>> : no_children<column_index_node<R, S>> {};
}  // namespace detail

//! Column coordinates shaped like `e` (in e's memory space).
//! Example: `auto causal = column_index(scores) <= row_index;`
template <expression E>
[[nodiscard]] auto column_index(const E& e) {
  using node = detail::node_t<E>;
  static_assert(node::rank >= 1, "loom: column_index needs a rank of 1 or more");
  return column_index_node<node::rank, typename node::space>(detail::as_node(e).extents());
}

#define LOOM_ROW_REDUCTION(name, op)                          \
  template <expression E>                                     \
  [[nodiscard]] auto name(const E& e) {                       \
    using node = detail::node_t<E>;                           \
    return row_reduce_node<fn::op, node>(detail::as_node(e)); \
  }
//! Row reductions: over the last axis, keeping it with extent 1 (so they
//! broadcast back along the row). Accumulate in float (double for double
//! inputs); max/min propagate NaN. Inside an assignment they cost no extra
//! kernel: the whole assignment is one kernel with one pass over each row
//! per level of reductions (those that read no result of one another share
//! a pass; eval_info::row_passes), then the output pass; a row that several
//! passes read is copied into shared memory once first (see
//! eval_info::cached_rows).
//! Example: `y = exp(x - row_max(x)) / row_sum(exp(x - row_max(x)));`
LOOM_ROW_REDUCTION(row_sum, row_sum_op)
LOOM_ROW_REDUCTION(row_mean, row_mean_op)
LOOM_ROW_REDUCTION(row_max, row_max_op)
LOOM_ROW_REDUCTION(row_min, row_min_op)
#undef LOOM_ROW_REDUCTION
}  // namespace loom

namespace loom::detail {
// Derivative rules of the row reductions (loom::grad, docs/08_gradients.md):
// of(y, e, a) is the adjoint of the argument e of y = reduction(e), given the
// adjoint `a` of y, which has the layer output's shape; the result
// broadcasts along the row.
template <class Op>
struct row_grad;
//! The sum along each row of adjoint `a`: row_sum(a), with the terms and
//! factors of `a` that are the same along the row taken out of the sum
//! (grad/derive.hpp).
template <class A>
auto adjoint_row_sum(const A& a);
//! row_sum: every element of the row gets the row's summed adjoint.
template <>
struct row_grad<fn::row_sum_op> {
  template <class Y, class E, class A>
  static auto of(const Y&, const E&, const A& a) {
    return adjoint_row_sum(a);
  }
};
//! row_mean: the summed adjoint over the row length.
template <>
struct row_grad<fn::row_mean_op> {
  template <class Y, class E, class A>
  static auto of(const Y&, const E& e, const A& a) {
    index_t n = 1;
    if constexpr (E::rank > 0) n = e.extents()[E::rank - 1];
    return adjoint_row_sum(a) * (1.0 / static_cast<double>(n));
  }
};
//! row_max / row_min: the summed adjoint goes to the elements equal to the
//! result, shared evenly among ties (as torch.amax / torch.amin). A row
//! holding NaN gives NaN.
template <class Op>
struct row_extreme_grad {
  template <class Y, class E, class A>
  static auto of(const Y& y, const E& e, const A& a) {
    const auto hit = cast<row_acc_t<typename Y::value_type>>(e == y);
    return adjoint_row_sum(a) * hit / row_sum(hit);
  }
};
template <>
struct row_grad<fn::row_max_op> : row_extreme_grad<fn::row_max_op> {};
template <>
struct row_grad<fn::row_min_op> : row_extreme_grad<fn::row_min_op> {};
}  // namespace loom::detail
