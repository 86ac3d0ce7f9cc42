// SPDX-License-Identifier: Apache-2.0
#pragma once

// Matrix products as expression nodes. `matmul(a, b)` is lazy; assignment
// recognizes it: a root of the form act(alpha * matmul(a, b) + beta * c + bias)
// is ONE cuBLASLt call with the rest in the GEMM's epilogue; any other
// expression around one matmul is the GEMM into the output followed by ONE
// fused elementwise kernel that reads it back (two launches, no temporary).
// The host executor runs the same plan with a blocked reference GEMM.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/exec/assign.hpp"
#include "loom/expr/expression.hpp"
#include "loom/linalg/epilogue.hpp"
#include "loom/linalg/gemm.hpp"
#include "loom/linalg/info.hpp"
#include "loom/linalg/node.hpp"
#include "loom/linalg/plan.hpp"
#include "loom/ops/activations.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/tensor/copy.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
namespace detail::linalg {
template <class O, std::size_t RO, class S, class E>
eval_info matmul_assign(const view<O, RO, S>& out, const E& e) {
  require_cuda_compiler_for<S>();
  using M = std::remove_cvref_t<decltype(find_matmul(e))>;
  constexpr std::size_t R = M::rank;
  const matmul_plan<O, RO, S> p = plan_matmul(out, e);
  const M& mm = find_matmul(e);
  const view<O, R, S> d = drop_leading<R>(out);
  eval_info info;
  info.on_device = p.info.on_device;
  switch (p.info.path) {
    case matmul_path::fused:
      run_gemm(mm, d, drop_leading<R>(p.c), drop_leading<R>(p.bias), p.info.alpha, p.info.beta, p.info.activation);
      last_eval_slot() = info;  // no elementwise pass ran
      break;
    case matmul_path::gemm_then_elementwise:
      run_gemm(mm, d, view<const O, R, S>{}, view<const O, R, S>{}, 1.0, 0.0, matmul_activation::none);
      info = assign_impl(out, replace_matmul(e, leaf_node<O, R, S>(view<const O, R, S>(d))));
      break;
    case matmul_path::elementwise: {
      // The product over an empty inner axis is zero: a stride-0 view of one zero.
      const shape<R> zero_strides{};
      if constexpr (std::is_same_v<S, host>) {
        static const O zero = O(0.0f);
        info = assign_impl(
            out, replace_matmul(e, leaf_node<O, R, S>(view<const O, R, S>(&zero, d.extents(), zero_strides))));
      } else {
        const stream_ref s = current_stream();
        const scratch<device> z(sizeof(O), s);
        LOOM_CUDA_CHECK(cudaMemsetAsync(z.p, 0, sizeof(O), s.get()));
        info = assign_impl(out, replace_matmul(e, leaf_node<O, R, S>(view<const O, R, S>(static_cast<const O*>(z.p),
                                                                                         d.extents(), zero_strides))));
      }
      break;
    }
    case matmul_path::empty:
    case matmul_path::none:
      last_eval_slot() = info;
      break;
  }
  last_matmul_slot() = p.info;
  return info;
}
}  // namespace detail::linalg

//! Evaluates an expression containing a matmul into `out` (chosen over the
//! elementwise loom::assign for such expressions; `y = expr` calls it). One
//! GEMM call when the expression is act(alpha * matmul + beta * c + bias),
//! else the GEMM into `out` and one fused elementwise kernel; see loom::matmul.
//! Returns the elementwise pass's eval_info (path `empty` when none ran);
//! loom::last_matmul() tells the matmul path.
//! Example: `loom::assign(y, relu(matmul(x, w) + b));`
template <tensor_like Out, operand E>
  requires contains_matmul<E>
eval_info assign(Out&& out, const E& e) {
  return detail::linalg::matmul_assign(detail::as_view(out), e);
}

//! What `out = e` would run, without running it: the matmul path, the fused
//! epilogue and the number of launches. Throws the errors the assignment would
//! (shapes, aliasing); cuBLASLt layout errors surface when it runs. For
//! expressions without a matmul: path `none`, one launch (zero when empty).
//! Example: `assert(loom::explain(y, gelu(matmul(x, w) + b, approximate::tanh)).launches == 1);`
template <tensor_like Out, operand E>
matmul_info explain(Out&& out, const E& e) {
  const auto v = detail::as_view(out);
  if constexpr (contains_matmul<E>) {
    return detail::linalg::plan_matmul(v, e).info;
  } else {
    matmul_info i;
    i.on_device = std::is_same_v<typename decltype(v)::space, device>;
    i.launches = v.size() ? 1 : 0;
    return i;
  }
}

//! What the calling thread's last assignment containing a matmul did.
//! Example: `y = tanh(matmul(x, w)); assert(loom::last_matmul().path == loom::matmul_path::gemm_then_elementwise);`
inline matmul_info last_matmul() { return detail::last_matmul_slot(); }
}  // namespace loom
