// SPDX-License-Identifier: Apache-2.0
#pragma once

// Planning a matmul assignment: shape and aliasing checks, the fused
// epilogue or the GEMM followed by one elementwise kernel.

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/exec/checks.hpp"
#include "loom/expr/traverse.hpp"
#include "loom/linalg/epilogue.hpp"
#include "loom/linalg/info.hpp"
#include "loom/linalg/node.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail::linalg {
// The output restricted to the matmul's rank (the leading axes it drops have extent 1).
template <std::size_t R, class O, std::size_t RO, class S>
view<O, R, S> drop_leading(const view<O, RO, S>& v) {
  shape<R> e{}, s{};
  for (std::size_t i = 0; i != R; ++i) {
    e[i] = v.extent(RO - R + i);
    s[i] = v.stride(RO - R + i);
  }
  return view<O, R, S>(v.data(), e, s);
}

template <class A, std::size_t R, class S>
bool row_major_matrix(const view<A, R, S>& v) {
  const index_t r = v.extent(R - 2), c = v.extent(R - 1);
  return (c == 1 || v.stride(R - 1) == 1) && (r == 1 || v.stride(R - 2) >= c);
}

// Everything an assignment decided before running.
template <class O, std::size_t RO, class S>
struct matmul_plan {
  matmul_info info;
  view<const O, RO, S> c;     // fused C (null data: none)
  view<const O, RO, S> bias;  // fused row bias (null data: none)
};

// The fused form: when `e` is act(alpha * matmul + beta * c + bias) with a c
// laid out like the output and a row bias that cuBLASLt's epilogue takes,
// fills `p` for one cuBLASLt call and returns true.
template <class T, class O, std::size_t RO, class S, class E>
bool fuse_epilogue(const view<O, RO, S>& out, const E& e, matmul_plan<O, RO, S>& p) {
  epilogue_match<O, RO, S> m;
  m.ext = out.extents();
  bool fused = match_root(e, m);
  view<const O, RO, S> c, bias;
  double beta = 0;
  for (int i = 0; fused && i != m.count; ++i) {
    const auto& v = m.addend[i];
    bool row = out.extent(RO - 1) == 1 || v.stride(RO - 1) == 1;
    for (std::size_t d = 0; d + 1 < RO; ++d) row = row && (v.extent(d) == 1 || v.stride(d) == 0);
    const bool disjoint = !may_overlap(v, out);
    // A row bias needs D row-major: cuBLASLt adds it per row of the column-major D^T, i.e. per column of D.
    if (m.scale[i] == 1 && !bias.data() && row && disjoint && row_major_matrix(out)) {
      bias = v;
      continue;
    }
    bool same_layout = true;
    for (std::size_t d = 0; d != RO; ++d)
      same_layout = same_layout && (out.extent(d) == 1 || v.stride(d) == out.stride(d));
    if (!c.data() && same_layout && (disjoint || same_index_map(v, out))) {
      c = v;
      beta = m.scale[i];
      continue;
    }
    fused = false;
  }
  // cuBLASLt's bias and activation epilogues are documented for the float
  // compute types; a double product keeps only alpha and beta in the call.
  if (std::is_same_v<T, double> && (bias.data() || m.act != matmul_activation::none)) fused = false;
  if (!fused) return false;
  p.info.path = matmul_path::fused;
  p.info.activation = m.act;
  p.info.alpha = m.alpha;
  p.info.bias = bias.data() != nullptr;
  p.info.accumulate = c.data() != nullptr;
  p.info.beta = beta;
  p.info.launches = 1;
  p.c = c;
  p.bias = bias;
  return true;
}

template <class O, std::size_t RO, class S, class E>
matmul_plan<O, RO, S> plan_matmul(const view<O, RO, S>& out, const E& e) {
  using M = std::remove_cvref_t<decltype(find_matmul(e))>;
  using T = typename M::value_type;
  static_assert(matmul_count<E>::value == 1,
                "loom: an expression with more than one matmul; evaluate all but one first: "
                "auto t = loom::materialize(loom::matmul(a, b));");
  static_assert(!matmul_broadcast<E>, "loom: a matmul under broadcast_to(); evaluate it first with loom::materialize");
  static_assert(!std::is_const_v<O>, "loom: cannot assign to a view of const elements");
  static_assert(std::is_same_v<typename E::space, S>,
                "loom: the expression lives in another memory space than the output; copy it with "
                "loom::to_device(x) or loom::to_host(x)");
  static_assert(E::rank <= RO, "loom: the expression has a higher rank than the output it is assigned to");
  static_assert(
      std::is_same_v<O, T> || (std::is_same_v<O, float> && (std::is_same_v<T, half> || std::is_same_v<T, bf16>)),
      "loom: a matmul writes its result straight into the output, so the output's element type must be "
      "the operands' (or float for half/bf16 operands); assign into such a tensor, or evaluate the "
      "product first with loom::materialize(loom::matmul(a, b))");
  const M& mm = find_matmul(e);
  constexpr std::size_t R = M::rank;

  // Shape errors of the product and of the elementwise part.
  check_assignable_shapes(out.extents(), out.strides(), e.extents());
  const shape<R> me = mm.extents();
  for (std::size_t d = 0; d != RO; ++d)
    if ((d + R < RO ? 1 : me[d + R - RO]) != out.extent(d))
      throw shape_error("loom: the matmul's result (shape " + shape_string(me) +
                        ") is broadcast to the output (shape " + shape_string(out.extents()) +
                        "), but it is written into the output directly; evaluate it first with loom::materialize");

  matmul_plan<O, RO, S> p;
  p.info.on_device = std::is_same_v<S, device>;
  if (out.size() == 0) {
    p.info.path = matmul_path::empty;
    return p;
  }
  if (may_overlap(mm.a, out) || may_overlap(mm.b, out))
    throw aliasing_error("loom: the output of a matmul (shape " + shape_string(out.extents()) +
                         ") overlaps one of its operands; evaluate into a new tensor");
  if (mm.a.extent(std::remove_cvref_t<decltype(mm.a)>::rank - 1) == 0) {
    p.info.path = matmul_path::elementwise;
    p.info.launches = 1;
    return p;
  }

  if (fuse_epilogue<typename M::value_type>(out, e, p)) return p;
  // Two kernels: the GEMM overwrites the output before the elementwise pass reads anything.
  auto check = [&](const auto& v) {
    if (may_overlap(v.broadcast_to(out.extents()), out))
      throw aliasing_error("loom: the expression around the matmul reads the output (shape " +
                           shape_string(out.extents()) +
                           "), which the matrix product overwrites first; evaluate into a new tensor");
  };
  for_each_leaf(e, [&](const auto& leaf) { check(leaf.v); });
  p.info.path = matmul_path::gemm_then_elementwise;
  p.info.launches = 2;
  return p;
}

}  // namespace loom::detail::linalg
