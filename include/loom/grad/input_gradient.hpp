// SPDX-License-Identifier: Apache-2.0
#pragma once

// The gradient of one input of a layer (loom::input_gradient): its adjoint
// at the layer output's shape and the reduction to the input's shape, chosen
// from the shapes when assigned (docs/08_gradients.md). grad/grad.hpp puts
// several of them in shared kernels.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/exec/assign.hpp"
#include "loom/exec/eval_info.hpp"
#include "loom/exec/rows/colsum.hpp"
#include "loom/exec/rows/run.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/grad/derive.hpp"
#include "loom/nn/embedding.hpp"
#include "loom/reduce/api.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
//! How an input's gradient is reduced from the layer output's shape to the
//! input's shape.
enum class gradient_kind : std::uint8_t {
  zero,         //!< the output does not depend on the input: the gradient is 0
  same_shape,   //!< the input has the output's shape: a row expression, no reduction
  row_sums,     //!< the input is [..., 1] (one value per row): summed along each row
  column_sums,  //!< the input is [C] (broadcast over the rows): summed over the rows
  whole_sum,    //!< the input is a scalar (every extent 1): summed over everything
  axis_sums,    //!< the input, of rank 2 or more and lower than the output's, is broadcast along other axes
                //!< (a position embedding [T, C] under [B, T, C]): summed over the axes it is broadcast along
  scatter,      //!< the input is the source of an embedding, index_select or gather: summed through its indices
};

namespace detail::autodiff {
// input_gradient's errors, out of line: compiled once per pair of ranks.
template <std::size_t RI, std::size_t RO>
[[noreturn]] LOOM_NOINLINE void throw_rows_broadcast(const shape<RI>& in, const shape<RO>& out) {
  throw shape_error("loom: grad: an input of shape " + shape_string(in) + " has the rank of the layer's output " +
                    shape_string(out) + " and is broadcast over its rows; pass it without the leading 1s (a view of "
                    "shape [" + std::to_string(RI > 0 ? in[RI - 1] : 1) +
                    "], or rank 0 for one value): its gradient is then a column or whole sum");
}
template <std::size_t RI, std::size_t RO>
[[noreturn]] LOOM_NOINLINE void throw_unsummed_broadcast(const shape<RI>& in, const shape<RO>& out) {
  throw shape_error("loom: grad: an input of shape " + shape_string(in) + " is broadcast to the layer's output shape " +
                    shape_string(out) +
                    " along axes that one pass cannot sum; an input of the output's rank has its shape or [..., 1] "
                    "(per row), and one of lower rank is summed over the leading axes it is broadcast along ([C], "
                    "[T, C] under [B, T, C], or a scalar)");
}
template <std::size_t RI, std::size_t RO>
[[noreturn]] LOOM_NOINLINE void throw_gradient_output(const shape<RI>& in, const shape<RO>& got) {
  throw shape_error("loom: grad: the gradient of an input of shape " + shape_string(in) +
                    " is assigned to a tensor of shape " + shape_string(got) + "; give it the input's shape");
}
}  // namespace detail::autodiff

//! What the calling thread's last gradient assignment did.
struct grad_info {
  int kernels = 0;             //!< launches in all (a whole sum counts its column sums and their sum)
  int column_sum_groups = 0;   //!< row kernels that also summed columns (up to two sums each)
  eval_info rows;              //!< the last row or elementwise kernel
};

//! The calling thread's last gradient assignment (kernels, column-sum groups).
inline grad_info last_grad() { return detail::last_slot<grad_info>(); }

//! The gradient of one input of a layer, lazily: its adjoint (an expression
//! at the layer output's shape, or none) and the reduction to the input's
//! shape. Assign it to a tensor of the input's shape: `dx = g;`. The
//! reduction is chosen from the shapes when assigned (gradient_kind).
template <class Adj, std::size_t RO, std::size_t RI>
struct input_gradient {
  Adj adjoint;           //!< d loss / d input, broadcast to the output's shape (detail::autodiff::no_grad if 0;
                         //!< detail::autodiff::scatter_adjoint for an indexing node's source)
  shape<RO> out_shape;   //!< the adjoint's shape: the layer output's (its rows' where the layer ends in a row reduction)
  shape<RI> in_shape;    //!< the input's shape

  static constexpr std::size_t out_rank = RO;
  static constexpr std::size_t in_rank = RI;

  //! How the adjoint reduces to the input's shape; shape_error if loom does
  //! not sum over that pattern of axes. The kinds an input can have follow
  //! from its rank (so only those are compiled): an input of the adjoint's
  //! rank is same-shape or per-row ([..., 1]); one of lower rank is
  //! broadcast over the leading axes, its gradient a column sum ([C]), a
  //! whole sum (every extent 1, rank 0 too) or, from rank 2 on, a sum over
  //! the axes it is broadcast along (axis_sums: [T, C] under [B, T, C]).
  gradient_kind kind() const {
    if constexpr (std::is_same_v<Adj, detail::autodiff::no_grad>) return gradient_kind::zero;
    if constexpr (detail::autodiff::is_scatter<Adj>) return gradient_kind::scatter;
    const shape<RO> in = lifted();
    bool lead_ones = true, lead_same = true;
    for (std::size_t d = 0; d + 1 < RO; ++d) {
      lead_ones = lead_ones && in[d] == 1;
      lead_same = lead_same && in[d] == out_shape[d];
    }
    const index_t last = RO > 0 ? in[RO - 1] : 1, out_last = RO > 0 ? out_shape[RO - 1] : 1;
    if constexpr (RI == RO) {
      if (in == out_shape) return gradient_kind::same_shape;
      if (lead_same && last == 1) return gradient_kind::row_sums;
      if (lead_ones) detail::autodiff::throw_rows_broadcast(in_shape, out_shape);
    } else {
      if constexpr (RI > 0)
        if (lead_ones && last == out_last) return gradient_kind::column_sums;
      if (lead_ones && last == 1) return gradient_kind::whole_sum;
      if constexpr (RI >= 2) {
        bool broadcast = true;
        for (std::size_t d = 0; d != RO; ++d) broadcast = broadcast && (in[d] == 1 || in[d] == out_shape[d]);
        if (broadcast) return gradient_kind::axis_sums;
      }
    }
    detail::autodiff::throw_unsummed_broadcast(in_shape, out_shape);
  }
  //! The input's shape with leading 1s up to the output's rank.
  shape<RO> lifted() const {
    shape<RO> s{};
    s.fill(1);
    for (std::size_t d = 0; d != RI; ++d) s[RO - RI + d] = in_shape[d];
    return s;
  }
};

namespace detail::autodiff {
template <class G>
inline constexpr bool has_adjoint = !std::is_same_v<std::remove_cvref_t<decltype(G::adjoint)>, no_grad>;
template <class X>
inline constexpr bool is_input_gradient = false;
template <class Adj, std::size_t RO, std::size_t RI>
inline constexpr bool is_input_gradient<input_gradient<Adj, RO, RI>> = true;

//! A view of `v` with rank R (leading axes of extent 1 added).
template <std::size_t R, class T, std::size_t RI, class S>
view<T, R, S> lift_view(const view<T, RI, S>& v) {
  static_assert(RI <= R);
  shape<R> ext{}, st{};
  ext.fill(1);
  st.fill(0);
  for (std::size_t d = 0; d != RI; ++d) {
    ext[R - RI + d] = v.extent(d);
    st[R - RI + d] = v.stride(d);
  }
  return view<T, R, S>(v.data(), ext, st);
}
//! The last axis of `v` as a rank-1 view (the others have extent 1).
template <class T, std::size_t R, class S>
view<T, 1, S> last_axis_view(const view<T, R, S>& v) {
  if constexpr (R == 0)
    return view<T, 1, S>(v.data(), shape<1>{1}, shape<1>{1});
  else
    return view<T, 1, S>(v.data(), shape<1>{v.extent(R - 1)}, shape<1>{v.stride(R - 1)});
}

template <class G, class Out>
void check_gradient_output(const G& g, const Out& out) {
  if (out.extents() != g.in_shape) throw_gradient_output(g.in_shape, out.extents());
}

// The accumulation type of an adjoint whose values are T.
template <class T>
using sum_acc_t = std::conditional_t<std::is_same_v<compute_t<T>, double>, double, float>;

// Kernel 2 of a column sum or whole sum, from the partial column sums of
// kernel 1 (detail::assign_rows): a column sum is the sums of the partials
// over the blocks (1 kernel); a whole sum is those sums into [C] in the
// accumulation type and then their sum (2 kernels). Both orders are fixed by
// the shapes and the grid, so results are deterministic. Returns the
// kernels launched.
template <class O, std::size_t RI, class S, class A>
int finish_sum(gradient_kind kind, const view<O, RI, S>& out, const tensor<A, 3, S>& partials, index_t k) {
  if (kind == gradient_kind::column_sums) {
    if constexpr (RI > 0) {
      if (partials.extent(2) == 0) return 0;
      rows::run_partial_sums<S>(rows::column_sums_job(partials, k, last_axis_view(out)), 1);
      return 1;
    }
  } else if (kind == gradient_kind::whole_sum) {
    return finish_whole_sum(partials, k, out);
  }
  throw std::logic_error("loom: grad: a column or whole sum was asked for a gradient of another kind");
}

// The second kernel of an axis reduction over `red` of a contiguous
// expression of extents `ext`: 1 where the device splits the sums into
// chunks (reduce/plan.hpp), else 0 (and on the host).
template <class S, std::size_t R>
int reduce_split_kernels([[maybe_unused]] const shape<R>& ext, [[maybe_unused]] const std::array<bool, R>& red) {
  if constexpr (std::is_same_v<S, host>) {
    return 0;
  } else {
#if LOOM_CUDA_COMPILER
    const reduce::reduce_layout<R> lay = reduce::layout_of(ext, red);
    const reduce::axis_plan p = reduce::plan_axis_reduce(ext, red, true, true, lay.outputs, lay.k,
                                                         sm_count(current_stream().device()));
    return p.splits > 1 ? 1 : 0;
#else
    return 0;
#endif
  }
}

// The gradient of an input broadcast along some of the output's axes
// (gradient_kind::axis_sums): the adjoint written in full at the output's
// shape in the accumulation type (one row kernel, or the elementwise kernel
// for an adjoint without row reductions), summed over the broadcast axes by
// the axis reduction (one kernel; two where the device splits long sums),
// then converted into the output (one kernel). Every order is fixed by the
// shapes, so the result is deterministic.
template <class G, class O, std::size_t RI, class S>
void assign_axis_sums(const G& g, const view<O, RI, S>& out, grad_info& gi) {
  constexpr std::size_t RO = G::out_rank;
  using A = sum_acc_t<O>;
  tensor<A, RO, S> full(g.out_shape);
  const view<A, RO, S> fv = full.view();
  if constexpr (node_slots<node_t<decltype(g.adjoint)>>::value == 0) {
    gi.rows = assign(fv, g.adjoint);
    gi.kernels += 1;
  } else {
    auto r = assign_rows<true>("grad", g.out_shape,
                               std::make_tuple(row_output<view<A, RO, S>>{fv, rows::row_write::each}),
                               std::make_tuple(g.adjoint));
    gi.rows = r.info.rows;
    gi.kernels += r.info.kernels;
  }
  const shape<RO> in = g.lifted();
  std::array<bool, RO> red{};
  for (std::size_t d = 0; d != RO; ++d) red[d] = in[d] == 1 && g.out_shape[d] != 1;
  using op_t = reduce::sum_op<A>;
  const auto sums = reduce::reduce_run<op_t, true, false, RO>(as_node(full), red, op_t{}, "grad");
  gi.kernels += 1 + reduce_split_kernels<S>(g.out_shape, red);
  assign(lift_view<RO>(out), sums);
  gi.kernels += 1;
}

// One gradient on its own: the reduction its kind asks for, in one row
// kernel: for an input of the adjoint's rank its row output, written element
// by element (same-shape; an adjoint without row reductions takes the
// elementwise kernel instead) or as row sums (per-row), told at launch; for
// one of lower rank (column or whole sums) its column sums, then
// finish_sum.
template <class G, class O, std::size_t RI, class S>
void assign_one(const G& g, const view<O, RI, S>& out, grad_info& gi) {
  check_gradient_output(g, out);
  constexpr std::size_t RO = G::out_rank;
  const gradient_kind kind = g.kind();
  if (kind == gradient_kind::zero) {
    fill(out, convert<O>(0.0f));
    gi.kernels += 1;
    return;
  }
  if constexpr (is_scatter<std::remove_cvref_t<decltype(g.adjoint)>>) {
    // The adjoint at the indexing node, materialized, then its ordered sums
    // through the indices (nn/embedding.hpp).
    gi.kernels += emb::scatter_gradient(out, g.adjoint.node, g.adjoint.adjoint);
  } else if constexpr (has_adjoint<G>) {
    if constexpr (G::in_rank == RO) {
      using W = rows::row_write;
      const auto o = lift_view<RO>(out);
      if constexpr (node_slots<node_t<decltype(g.adjoint)>>::value == 0) {
        // An adjoint without row reductions: a same-shape gradient takes the
        // elementwise kernel.
        if (kind == gradient_kind::same_shape) {
          gi.rows = assign(o, g.adjoint);
          gi.kernels += 1;
          return;
        }
      }
      auto r = assign_rows<true>(
          "grad", g.out_shape,
          std::make_tuple(row_output<view<O, RO, S>>{o, kind == gradient_kind::same_shape ? W::each : W::sum}),
          std::make_tuple(g.adjoint));
      gi.rows = r.info.rows;
      gi.kernels += r.info.kernels;
    } else {
      if constexpr (G::in_rank >= 2) {
        if (kind == gradient_kind::axis_sums) {
          assign_axis_sums(g, out, gi);
          return;
        }
      }
      auto r = assign_rows<false>("grad", g.out_shape, std::tuple<>{}, std::tuple<>{}, g.adjoint);
      gi.rows = r.info.rows;
      gi.kernels += r.info.kernels + finish_sum(kind, out, r.partials, 0);
      gi.column_sum_groups += 1;
    }
  }
}
}  // namespace detail::autodiff

//! Assigns the gradient of one input (see input_gradient): `dw = g;` runs its
//! reduction (a row kernel; or a row kernel and the kernel that adds partial
//! column sums; or those and the sum of the column sums).
template <tensor_like Out, class Adj, std::size_t RO, std::size_t RI>
eval_info assign(Out&& out, const input_gradient<Adj, RO, RI>& g) {
  grad_info gi;
  detail::autodiff::assign_one(g, detail::as_view(out), gi);
  detail::last_slot<grad_info>() = gi;
  return gi.rows;
}

}  // namespace loom
