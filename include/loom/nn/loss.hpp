// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "loom/core/error.hpp"
#include "loom/exec/assign.hpp"
#include "loom/exec/rows/run.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/ops/compare.hpp"
#include "loom/ops/math.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom {
namespace detail {
// w * x, and 0 when w == 0 whatever x: with no label smoothing a masked
// (-inf) logit makes the smoothing term's x infinite, and 0 * inf is NaN.
struct ce_weighted {
  double w;
  template <class X>
  LOOM_HD X operator()(X x) const {
    return w == 0 ? X(0) : static_cast<X>(w) * x;
  }
  template <int, class X>
  LOOM_HD X derivative(X) const {
    return static_cast<X>(w);
  }
};
// The smoothed target distribution in the logits' compute type C (a where of
// two C++ scalars on a bool condition alone would be float).
template <class C>
struct ce_target {
  C hit, miss;
  template <class B>
  LOOM_HD C operator()(B is_target) const {
    return is_target ? hit : miss;
  }
};
}  // namespace detail

//! How cross_entropy combines the per-row losses.
enum class loss_reduction { mean, sum };

//! Options of cross_entropy, as PyTorch's: rows whose target is
//! `ignore_index` contribute nothing (and are not counted by the mean);
//! `label_smoothing` mixes the one-hot target with the uniform distribution.
struct cross_entropy_options {
  std::int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  loss_reduction reduction = loss_reduction::mean;
};

namespace detail {
// The targets of cross_entropy_rows as a node of the logits' rank RZ: a
// tensor or view of one class index per row ([...] under logits [..., C])
// gets a trailing axis of extent 1. It leaves as a plain leaf: a layer's
// parameter tag promises one layout for every use of that parameter.
template <std::size_t RZ, class T>
auto ce_target_column(const T& target) {
  using N = node_t<T>;
  static_assert(N::rank <= RZ && N::rank + 1 >= RZ,
                "loom: cross_entropy_rows: give one class index per row, targets of the logits' rank or one less: "
                "[N] or [N, 1] under logits [N, C]");
  const N t = as_node(target);
  if constexpr (N::rank + 1 == RZ) {
    static_assert(is_leaf_node<N>,
                  "loom: cross_entropy_rows: targets of shape [N] (one class index per row of logits [N, C]) must "
                  "be a tensor or view; give an expression of targets the shape [N, 1]");
    if constexpr (is_leaf_node<N>)
      return leaf_node<typename N::value_type, RZ, typename N::space>(t.v.unsqueeze(static_cast<int>(N::rank)));
  } else {
    return t;
  }
}

// The targets as a column `t` must have the logits' shape with its last
// extent 1: one class index per row.
template <std::size_t RZ, std::size_t RG>
void check_ce_rows(const shape<RZ>& logits, const shape<RZ>& t, const shape<RG>& given) {
  shape<RZ> column = logits;
  if constexpr (RZ > 0) column[RZ - 1] = 1;
  if (t == column) return;
  std::string rows = "[";
  for (std::size_t d = 0; d + 1 < RZ; ++d) rows += (d ? ", " : "") + std::to_string(logits[d]);
  throw shape_error("loom: cross_entropy_rows: targets of shape " + shape_string(given) +
                    " do not fit logits of shape " + shape_string(logits) +
                    "; give one class index per row, of shape " + rows + "] or " + shape_string(column));
}
}  // namespace detail

//! The per-row cross-entropy of logits [..., C] against integer targets
//! [...] or [..., 1] (one class index per row; [...] only as a tensor or
//! view), as a lazy expression of shape [..., 1]
//! computed in the logits' compute type: double for double logits, float
//! for float, half and bf16. A target outside [0, C) that is not ignore_index gives
//! NaN for its row (a kernel cannot raise). A -inf logit masks its class:
//! the loss stays finite unless that class is the target (inf) or label
//! smoothing puts weight on it (inf), as in PyTorch. Targets of another
//! shape throw shape_error naming the shapes it takes. One kernel when assigned,
//! two reduction passes per row: the row max and the target logit (and the
//! row mean with label smoothing), then the sum of exponentials.
//! Example: `loss = loom::cross_entropy_rows(logits, labels);` (loss [N, 1], labels [N])
template <expression L, expression T>
[[nodiscard]] auto cross_entropy_rows(const L& logits, const T& target, const cross_entropy_options& o = {}) {
  const auto z = detail::as_node(logits);
  constexpr std::size_t rz = decltype(z)::rank;
  const auto t = detail::ce_target_column<rz>(target);
  detail::check_ce_rows(z.extents(), t.extents(), detail::as_node(target).extents());
  const auto col = column_index(z);
  const auto m = stop_gradient(row_max(z));  // lse does not depend on the shift: no gradient through it
  const auto lse = log(row_sum(exp(z - m))) + m;
  const auto picked = row_sum(where(col == t, z, 0.0f));
  const auto hits = row_sum(where(col == t, 1.0f, 0.0f));
  const double eps = o.label_smoothing;
  // Each term only where its weight is not 0: a masked (-inf) logit makes
  // lse - row_mean infinite, a -inf target logit lse - picked.
  const auto loss = map(detail::ce_weighted{1.0 - eps}, lse - picked) + map(detail::ce_weighted{eps}, lse - row_mean(z));
  return where(t == o.ignore_index, 0.0f, where(hits == 0.0f, std::numeric_limits<float>::quiet_NaN(), loss));
}

namespace detail {
// 1 in type C for each target that is not ignore_index, else 0: counting
// in the logits' compute type keeps a double mean's count exact past 2^24 rows.
template <class C, class T>
auto ce_counted(const T& targets, std::int64_t ignore_index) {
  return map(ce_target<C>{C(0), C(1)}, targets == ignore_index);
}

template <class X>
void check_ce_shapes(const X& logits, const auto& target) {
  if (target.extent(0) != logits.extent(0))
    throw shape_error("loom: cross_entropy: logits of shape " + shape_string(logits.extents()) + " and targets of shape " +
                      shape_string(target.extents()) + " have different numbers of rows");
}
}  // namespace detail

//! Cross-entropy loss per row: logits [N, C], targets [N] (int64 class
//! indices) -> a tensor [N] in the same space, of the logits' compute type
//! (double for double logits, float otherwise). One kernel.
//! Example: `auto l = loom::cross_entropy_per_row(logits, labels);`
template <tensor_like L, tensor_like T>
[[nodiscard]] auto cross_entropy_per_row(const L& logits, const T& target, const cross_entropy_options& o = {}) {
  const auto lv = detail::as_view(logits);
  const auto tv = detail::as_view(target);
  static_assert(decltype(lv)::rank == 2 && decltype(tv)::rank == 1,
                "loom: cross_entropy takes logits [N, C] and targets [N]");
  static_assert(std::is_same_v<typename decltype(tv)::value_type, std::int64_t>,
                "loom: cross_entropy targets are int64 class indices");
  detail::check_ce_shapes(lv, tv);
  using R = compute_t<typename decltype(lv)::value_type>;
  tensor<R, 1, typename decltype(lv)::space> out({lv.extent(0)});
  assign(out.view().unsqueeze(1), cross_entropy_rows(lv, tv.unsqueeze(1), o));
  return out;
}

//! Cross-entropy loss reduced over the rows (mean over non-ignored rows, or
//! sum): a 0-d tensor in the logits' space, of their compute type (double
//! for double logits, float otherwise; the rows are accumulated in it). Two
//! kernels: the per-row losses into a pool temporary, then one row reduction
//! over them. The mean of zero counted rows is NaN, as in PyTorch.
//! Example: `float loss = loom::to_host(loom::cross_entropy(logits, labels))();`
template <tensor_like L, tensor_like T>
[[nodiscard]] auto cross_entropy(const L& logits, const T& target, const cross_entropy_options& o = {}) {
  const auto per_row = cross_entropy_per_row(logits, target, o);
  using R = typename decltype(per_row)::value_type;
  const auto tv = detail::as_view(target);
  const index_t n = tv.extent(0);
  tensor<R, 0, typename decltype(tv)::space> out(shape<0>{});
  const auto losses = per_row.view().reshape(shape<2>{1, n});
  const auto t_row = tv.unsqueeze(0);  // any view of the targets, strided too
  const auto dst = out.view().reshape(shape<2>{1, 1});
  if (o.reduction == loss_reduction::sum)
    assign(dst, row_sum(losses));
  else
    assign(dst, row_sum(losses) / row_sum(detail::ce_counted<R>(t_row, o.ignore_index)));
  return out;
}

namespace detail {
// The rows a reduced cross-entropy divides by: [1, 1] in the targets'
// space, the count of counted rows for the mean, 1 for the sum (one launch).
template <class C, class TV>
auto ce_count(const TV& tv, const cross_entropy_options& o) {
  tensor<C, 2, typename TV::space> count({1, 1});
  const auto t_row = tv.unsqueeze(0);  // any view of the targets, strided too
  if (o.reduction == loss_reduction::mean)
    assign(count, row_sum(ce_counted<C>(t_row, o.ignore_index)));
  else
    assign(count, C(1));
  return count;
}

// The gradient of the reduced loss with respect to logits z [N, C] whose
// softmax is p, against targets tv [N]: (p - smoothed one-hot) * grad /
// count, zero rows for ignored targets, NaN rows for targets outside
// [0, C) (as their losses: a kernel cannot raise).
template <class C, class Z, class P, class TV, class Count>
auto ce_gradient(const Z& z, const P& p, const TV& tv, const Count& count, double grad,
                 const cross_entropy_options& o) {
  const index_t c = z.extents()[1];
  const auto t = as_node(tv.unsqueeze(1));
  const double s = o.label_smoothing;
  const auto target_dist = map(ce_target<C>{static_cast<C>(1.0 - s + s / static_cast<double>(c)),
                                            static_cast<C>(s / static_cast<double>(c))},
                               column_index(z) == t);
  const auto bad = (t < std::int64_t{0}) || (t >= static_cast<std::int64_t>(c));
  return where(t == o.ignore_index, 0.0f,
               where(bad, std::numeric_limits<float>::quiet_NaN(), (p - target_dist) * grad / count));
}
}  // namespace detail

//! Gradient of cross_entropy (reduced as `o.reduction` says) with respect to
//! the logits, for an output gradient `grad` (1 for a plain loss):
//! (softmax(z) - ((1 - s) onehot + s / C)) * grad / count, zero rows for
//! ignored targets, NaN rows for targets outside [0, C) (as their losses).
//! A tensor shaped and typed like the logits. Two kernels
//! for the mean (the count of rows, then the gradient), one for the sum.
template <tensor_like L, tensor_like T>
[[nodiscard]] auto cross_entropy_backward(const L& logits, const T& target, double grad = 1.0,
                                          const cross_entropy_options& o = {}) {
  const auto lv = detail::as_view(logits);
  const auto tv = detail::as_view(target);
  detail::check_ce_shapes(lv, tv);
  using S = typename decltype(lv)::space;
  using C = compute_t<typename decltype(lv)::value_type>;
  const auto count = detail::ce_count<C>(tv, o);
  const auto z = detail::as_node(lv);
  const auto p = exp(z - row_max(z)) / row_sum(exp(z - row_max(z)));
  tensor<typename decltype(lv)::value_type, 2, S> dz(lv.extents());
  assign(dz, detail::ce_gradient<C>(z, p, tv, count, grad, o));
  return dz;
}

//! The fused classifier: cross_entropy and cross_entropy_backward together,
//! without the probabilities ever written. One row kernel reads each row of
//! the logits [N, C] and writes the row's loss and the gradient of the
//! reduced loss (scaled by `grad`) into `dlogits` [N, C], which may be the
//! logits themselves (the gradient overwrites them, as a training step that
//! no longer needs them does). The row's maximum and sum of exponentials
//! are computed once for both. Returns the reduced loss (0-d, the logits'
//! compute type). Three kernels: the count of counted rows (1 for the sum), the
//! row kernel, the reduction of the per-row losses. Ignored rows and targets
//! outside [0, C) as in cross_entropy and cross_entropy_backward; dlogits
//! of another shape throws shape_error, dlogits overlapping the logits
//! other than exactly aliasing_error.
//! Example: `float loss = loom::cross_entropy_with_gradient(logits, labels, logits).item();`
template <tensor_like L, tensor_like T, tensor_like D>
[[nodiscard]] auto cross_entropy_with_gradient(const L& logits, const T& target, D&& dlogits, double grad = 1.0,
                                               const cross_entropy_options& o = {}) {
  const auto lv = detail::as_view(logits);
  const auto tv = detail::as_view(target);
  const auto dv = detail::as_view(dlogits);
  static_assert(decltype(lv)::rank == 2 && decltype(tv)::rank == 1 && decltype(dv)::rank == 2,
                "loom: cross_entropy_with_gradient takes logits [N, C], targets [N] and dlogits [N, C]");
  static_assert(std::is_same_v<typename decltype(tv)::value_type, std::int64_t>,
                "loom: cross_entropy targets are int64 class indices");
  detail::check_ce_shapes(lv, tv);
  if (dv.extents() != lv.extents())
    throw shape_error("loom: cross_entropy_with_gradient: dlogits of shape " + shape_string(dv.extents()) +
                      " for logits of shape " + shape_string(lv.extents()));
  using S = typename decltype(lv)::space;
  using C = compute_t<typename decltype(lv)::value_type>;
  const index_t n = lv.extent(0);
  const auto count = detail::ce_count<C>(tv, o);
  const auto z = detail::as_node(lv);
  // The same row max and sum of exponentials as cross_entropy_rows' (one
  // node type): the row kernel computes them once for the loss and the gradient.
  const auto m = stop_gradient(row_max(z));
  const auto p = exp(z - m) / row_sum(exp(z - m));
  tensor<C, 2, S> losses({n, 1});
  assign_with_row_stat(dv, detail::ce_gradient<C>(z, p, tv, count, grad, o), losses,
                       cross_entropy_rows(lv, tv.unsqueeze(1), o));
  tensor<C, 0, S> out(shape<0>{});
  assign(out.view().reshape(shape<2>{1, 1}), row_sum(losses.view().reshape(shape<2>{1, n})) / count);
  return out;
}
}  // namespace loom
