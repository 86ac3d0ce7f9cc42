// SPDX-License-Identifier: Apache-2.0
#pragma once

// The public assignment and its one dispatcher: the checks, then the
// elementwise executor or the rows executor (exec/rows.hpp); matmul
// assignments enter through linalg/matmul.hpp's overload of assign.

#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/space.hpp"
#include "loom/exec/checks.hpp"
#include "loom/exec/elementwise.hpp"
#include "loom/exec/eval_info.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/expression.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
namespace detail {
// Executes an assignment whose tree contains row reductions (exec/rows.hpp).
template <class O, std::size_t RO, class S, class N>
eval_info row_assign_impl(const view<O, RO, S>& out, const N& e);

template <class O, std::size_t RO, class S, class E>
eval_info assign_impl(const view<O, RO, S>& out, const E& e_in) {
  static_assert(!std::is_const_v<O>, "loom: cannot assign to a view of const elements");
  using node = node_t<E>;
  static_assert(!std::is_same_v<typename node::space, mixed_space>,
                "loom: an expression mixes host and device tensors; copy one side first with loom::to_device(x) or "
                "loom::to_host(x)");
  static_assert(std::is_void_v<typename node::space> || std::is_same_v<typename node::space, S>,
                "loom: the expression lives in another memory space than the output; copy it with loom::to_device(x) "
                "or loom::to_host(x), or assign into a tensor of the same space");
  static_assert(node::rank <= RO, "loom: the expression has a higher rank than the output it is assigned to");
  require_cuda_compiler_for<S>();
  const node e = as_node(e_in);

  check_assignable(out, e);
  if constexpr (std::is_same_v<S, device>) check_devices(e, out);

  eval_info info;
  info.on_device = std::is_same_v<S, device>;
  const index_t n = out.size();
  if (n == 0) return last_eval_slot() = info;

  if constexpr (node_slots<node>::value > 0)
    info = row_assign_impl(out, e);
  else
    run_elementwise(out, e, n, info);
  return last_eval_slot() = info;
}
}  // namespace detail
}  // namespace loom

namespace loom {
//! Evaluates `e` into `out` (a tensor or view of the same space): ONE launch
//! on the host executor or on the current CUDA stream, reading each input
//! element once and writing each output element once, with no temporary.
//! `e` broadcasts to `out`'s shape (shape_error naming both otherwise). An
//! output that overlaps an input under another index map throws
//! aliasing_error (`x = x * 2` is fine; `x = x.t()` is not). Returns which path
//! ran. Device outputs need nvcc for the translation unit.
//! Example: `loom::assign(y, gelu(x * w + b));` (same as `y = gelu(x * w + b);`)
template <tensor_like Out, operand E>
eval_info assign(Out&& out, const E& e) {
  return detail::assign_impl(detail::as_view(out), e);
}

//! The path the calling thread's last assignment took.
inline eval_info last_eval() { return detail::last_eval_slot(); }

//! Allocates a tensor of the expression's shape, element type and space and
//! evaluates the expression into it (one allocation, one launch).
//! Example: `auto y = loom::materialize(exp(x) + 1);`
template <expression E>
[[nodiscard]] auto materialize(const E& e) {
  using node = detail::node_t<E>;
  static_assert(!std::is_void_v<typename node::space> && !std::is_same_v<typename node::space, detail::mixed_space>,
                "loom: materialize() needs an expression over tensors of one memory space");
  const node n = detail::as_node(e);
  tensor<typename node::value_type, node::rank, typename node::space> t(n.extents());
  assign(t, n);
  return t;
}
}  // namespace loom
