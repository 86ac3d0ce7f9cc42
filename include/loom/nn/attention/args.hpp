// SPDX-License-Identifier: Apache-2.0
#pragma once

// Attention's argument types and checks (docs/15_attention.md): the result
// and gradient types, the extra arguments of a score_mod (read at the query
// head, row or key row), packed variable-length sequences, and the shape
// checks that give loom: errors.

#include <cmath>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/nn/attention/host.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
namespace detail::attn {
template <class X>
using view_t = decltype(detail::as_view(std::declval<const X&>()));
template <class T, class Space, class X>
using extra_grad_t = tensor<acc_t<T>, 1, Space>;
}  // namespace detail::attn

//! What `attention(...)(q, k, v)` returns: o [B, Hq, Sq, D] in q's type and
//! the log-sum-exp of each row's scores, lse [B, Hq, Sq] in float (double
//! for double inputs), natural log; -inf for a fully masked row. In q's
//! memory space.
template <class T, class Space = host>
struct attention_result {
  tensor<T, 4, Space> o;
  tensor<detail::attn::acc_t<T>, 3, Space> lse;
};

//! What `loom::grad(attn)(q, k, v, o, lse, dout[, args])` returns. dargs
//! holds the gradient of each extra argument (a tensor of its shape, in the
//! accumulation type), in order.
template <class T, class Space, class... X>
struct attention_gradients {
  tensor<T, 4, Space> dq, dk, dv;
  std::tuple<detail::attn::extra_grad_t<T, Space, X>...> dargs;
};

//! An extra argument of a score_mod with the index it is read at (see
//! loom::by_query, loom::by_key; a plain tensor is read at the query head).
template <detail::attn::extra_axis Axis, class V>
struct extra_arg {
  static constexpr detail::attn::extra_axis axis = Axis;
  V values;
};
//! An extra argument read at the query row, `x[q]`: Sq values (a bias per
//! query position). Example: `loom::args(loom::by_query(qbias))`.
template <class X>
[[nodiscard]] auto by_query(const X& x) {
  return extra_arg<detail::attn::extra_axis::query, detail::attn::view_t<X>>{detail::as_view(x)};
}
//! An extra argument read at the key row, `x[kv]`: Skv values (a bias per
//! key position). Example: `loom::args(loom::by_key(kbias))`.
template <class X>
[[nodiscard]] auto by_key(const X& x) {
  return extra_arg<detail::attn::extra_axis::key, detail::attn::view_t<X>>{detail::as_view(x)};
}

namespace detail::attn {
template <class X>
struct as_extra_t {
  using type = extra_arg<extra_axis::head, view_t<X>>;
  static type make(const X& x) { return {detail::as_view(x)}; }
};
template <extra_axis Axis, class V>
struct as_extra_t<extra_arg<Axis, V>> {
  using type = extra_arg<Axis, V>;
  static type make(const type& x) { return x; }
};
}  // namespace detail::attn

//! The extra arguments of a score_mod, in order: rank-1 tensors or views,
//! read at the query head (`slope[h]`, Hq values) unless wrapped in
//! loom::by_query (`x[q]`, Sq values) or loom::by_key (`x[kv]`, Skv values).
template <class... X>
struct attention_args {
  std::tuple<X...> values;
};
//! Example: `auto [o, lse] = attn(q, k, v, loom::args(slopes));`
template <class... X>
[[nodiscard]] auto args(const X&... x) {
  return attention_args<typename detail::attn::as_extra_t<X>::type...>{{detail::attn::as_extra_t<X>::make(x)...}};
}

namespace detail::attn {
template <class X>
constexpr void require_4d() {
  using V = view_t<X>;
  using T = std::remove_const_t<typename V::value_type>;
  static_assert(V::rank == 4, "loom: attention takes q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D] (rank 4)");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, half> ||
                    std::is_same_v<T, bf16>,
                "loom: attention takes float, double, half or bf16 elements; convert others with loom::cast");
  constexpr bool on_device = std::is_same_v<typename V::space, device>;
  static_assert(cuda_compiler || !on_device, "loom: attention on device tensors launches kernels; compile this file "
                                             "with nvcc (a .cu file) or copy q, k and v with loom::to_host");
  static_assert(!on_device || !std::is_same_v<T, double>,
                "loom: attention on the device takes float, half or bf16 (accumulating in float); convert double "
                "with loom::cast or run it on the host");
}

[[noreturn]] inline void throw_shapes(const char* what, const std::string& detail_text) {
  throw shape_error(std::string("loom: ") + what + ": " + detail_text);
}

template <class QV, class KV, class VV>
geometry check_qkv(const char* what, const QV& q, const KV& k, const VV& v) {
  const auto qs = q.extents(), ks = k.extents(), vs = v.extents();
  const std::string all =
      "q " + shape_string(qs) + ", k " + shape_string(ks) + ", v " + shape_string(vs);
  if (ks != vs) throw_shapes(what, "k and v must have one shape [B, Hkv, Skv, D]; got " + all);
  if (qs[0] != ks[0]) throw_shapes(what, "q and k must have the same batch B; got " + all);
  if (qs[3] != ks[3]) throw_shapes(what, "q and k must have the same head size D; got " + all);
  if (ks[1] <= 0 || qs[1] % ks[1] != 0)
    throw_shapes(what, "the key heads Hkv must divide the query heads Hq (grouped-query attention); got " + all);
  if (qs[3] <= 0) throw_shapes(what, "the head size D must be at least 1; got " + all);
  return geometry{.batch = qs[0], .heads = qs[1], .kv_heads = ks[1], .sq = qs[2], .skv = ks[2], .dim = qs[3]};
}

template <class Space, class X>
void check_extra(const char* what, const X& x, const geometry& g) {
  using V = decltype(x.values);
  static_assert(std::is_same_v<typename V::space, Space> && V::rank == 1,
                "loom: attention's extra arguments are rank-1 tensors in q's memory space");
  const char* names[] = {"h must have Hq", "q (loom::by_query) must have Sq", "kv (loom::by_key) must have Skv"};
  const index_t want[] = {g.heads, g.sq, g.skv};
  const auto axis = static_cast<std::size_t>(X::axis);
  if (x.values.extent(0) != want[axis])
    throw_shapes(what, std::string("an extra argument indexed by ") + names[axis] + " = " +
                           std::to_string(want[axis]) + " values; got " + shape_string(x.values.extents()));
}

// The lse tensor (rank 3) as an operand (its rows of one element).
template <class A, class V>
operand<A> lse_operand(const V& x) {
  return {x.data(), x.stride(0), x.stride(1), x.stride(2), 0};
}
}  // namespace detail::attn

//! Packed sequences of different lengths (a variable-length batch):
//! sequence i holds the query rows [cu_q[i], cu_q[i + 1]) of q
//! [1, Hq, total_q, D] and the key rows [cu_kv[i], cu_kv[i + 1]) of k and v
//! [1, Hkv, total_kv, D]; it attends within itself, and score_mod and
//! mask_mod see b = i and q, kv counted from the sequence's first row.
//! Make it with loom::varlen.
struct packed_sequences {
  view<const index_t, 1, host> q, kv;
};
//! cu_q and cu_kv: rank-1 host tensors of N + 1 offsets (index_t), from 0
//! up to the packed length, never decreasing.
//! Example: `auto [o, lse] = attn(q, k, v, loom::varlen(cu_q, cu_kv));`
template <class CQ, class CK>
[[nodiscard]] packed_sequences varlen(const CQ& cu_q, const CK& cu_kv) {
  using VQ = detail::attn::view_t<CQ>;
  using VK = detail::attn::view_t<CK>;
  static_assert(std::is_same_v<typename VQ::space, host> && std::is_same_v<typename VK::space, host> &&
                    VQ::rank == 1 && VK::rank == 1 &&
                    std::is_same_v<std::remove_const_t<typename VQ::value_type>, index_t> &&
                    std::is_same_v<std::remove_const_t<typename VK::value_type>, index_t>,
                "loom: varlen takes the cumulative sequence offsets as rank-1 host tensors of loom::index_t");
  return {detail::as_view(cu_q), detail::as_view(cu_kv)};
}

namespace detail::attn {
inline void check_offsets(const char* what, const char* name, const view<const index_t, 1, host>& cu, index_t n,
                          index_t total) {
  if (cu.extent(0) != n + 1)
    throw_shapes(what, std::string("varlen's ") + name + " must hold one offset more than there are sequences (" +
                           std::to_string(n + 1) + "); got " + std::to_string(cu.extent(0)));
  for (index_t i = 0; i <= n; ++i) {
    const index_t x = cu(i);
    if ((i == 0 && x != 0) || (i > 0 && x < cu(i - 1)) || (i == n && x != total))
      throw_shapes(what, std::string("varlen's ") + name + " must rise from 0 to the packed length " +
                             std::to_string(total) + " without decreasing; offset " + std::to_string(i) + " is " +
                             std::to_string(x));
  }
}
// Checks packed sequences against g (batch 1, packed lengths sq and skv); returns their number.
inline index_t check_packed(const char* what, const packed_sequences& s, const geometry& g) {
  if (g.batch != 1) throw_shapes(what, "packed sequences take q, k and v with batch 1; got B = " + std::to_string(g.batch));
  if (s.q.extent(0) < 1) throw_shapes(what, "varlen's cu_q must hold at least one offset");
  const index_t n = s.q.extent(0) - 1;
  check_offsets(what, "cu_q", s.q, n, g.sq);
  check_offsets(what, "cu_kv", s.kv, n, g.skv);
  return n;
}
// Extra argument x for the sequence of query rows [q0, q0 + nq) and key rows [k0, k0 + nk).
template <class X>
X slice_extra(const X& x, index_t q0, index_t nq, index_t k0, index_t nk) {
  if constexpr (X::axis == extra_axis::query)
    return X{x.values.slice(range(q0, q0 + nq))};
  else if constexpr (X::axis == extra_axis::key)
    return X{x.values.slice(range(k0, k0 + nk))};
  else
    return x;
}
}  // namespace detail::attn
}  // namespace loom
