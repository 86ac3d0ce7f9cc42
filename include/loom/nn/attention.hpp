// SPDX-License-Identifier: Apache-2.0
#pragma once

// Attention with the user's score_mod and mask_mod (docs/15_attention.md):
// the public API. The host executor's tiled kernels live in
// nn/attention/host.hpp, the mask kinds and the dual numbers that derive
// score_mod's derivative in nn/attention/mods.hpp.

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
#include "loom/nn/attention/mods.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
namespace detail::attn {
template <class T, class X>
using extra_grad_t = tensor<acc_t<T>, 1, host>;
}  // namespace detail::attn

//! What `attention(...)(q, k, v)` returns: o [B, Hq, Sq, D] in q's type and
//! the log-sum-exp of each row's scores, lse [B, Hq, Sq] in float (double
//! for double inputs), natural log; -inf for a fully masked row.
template <class T>
struct attention_result {
  tensor<T, 4, host> o;
  tensor<detail::attn::acc_t<T>, 3, host> lse;
};

//! What `loom::grad(attn)(q, k, v, o, lse, dout[, args])` returns. dargs
//! holds the gradient of each extra argument (a tensor of its shape, in the
//! accumulation type), in order.
template <class T, class... X>
struct attention_gradients {
  tensor<T, 4, host> dq, dk, dv;
  std::tuple<detail::attn::extra_grad_t<T, X>...> dargs;
};

//! The extra arguments of a score_mod, in order: rank-1 host tensors or
//! views of Hq values, indexed by the query head (`slope[h]`).
template <class... X>
struct attention_args {
  std::tuple<X...> values;
};
//! Example: `auto [o, lse] = attn(q, k, v, loom::args(slopes));`
template <class... X>
[[nodiscard]] auto args(const X&... x) {
  return attention_args<decltype(detail::as_view(x))...>{{detail::as_view(x)...}};
}

namespace detail::attn {
template <class X>
using view_t = decltype(detail::as_view(std::declval<const X&>()));

template <class X>
constexpr void require_host_4d() {
  using V = view_t<X>;
  static_assert(std::is_same_v<typename V::space, host>,
                "loom: attention on device tensors is not built yet (issue 58: the sm_80 and sm_90 kernels); copy "
                "q, k and v with loom::to_host and run it on the host executor");
  static_assert(V::rank == 4, "loom: attention takes q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D] (rank 4)");
  static_assert(std::is_same_v<std::remove_const_t<typename V::value_type>, float> ||
                    std::is_same_v<std::remove_const_t<typename V::value_type>, double>,
                "loom: attention takes float or double elements; convert half/bf16 with loom::cast");
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

template <class V>
void check_extra(const char* what, const V& x, index_t heads) {
  static_assert(std::is_same_v<typename V::space, host> && V::rank == 1,
                "loom: attention's extra arguments are rank-1 host tensors indexed by the query head h");
  if (x.extent(0) != heads)
    throw_shapes(what, "an extra argument indexed by h must have Hq = " + std::to_string(heads) +
                           " values; got " + shape_string(x.extents()));
}
}  // namespace detail::attn

//! Attention with score_mod S and mask kind M (loom::no_mask, loom::causal,
//! loom::sliding_window(w), or loom::mask_mod(lambda)). Called as
//! `attn(q, k, v[, loom::args(extra...)])`; see docs/15_attention.md.
template <class S, class M>
struct attention_fn {
  S score;
  M mask;
  double scale = 0;  //!< multiplies q kᵀ; 0 means 1 / sqrt(D)

  //! The same attention with scores scaled by s instead of 1 / sqrt(D).
  [[nodiscard]] constexpr attention_fn scaled(double s) const { return {score, mask, s}; }

  template <tensor_like Q, tensor_like K, tensor_like V, class... X>
  [[nodiscard]] auto operator()(const Q& q, const K& k, const V& v, const attention_args<X...>& extra = {}) const {
    detail::attn::require_host_4d<Q>();
    detail::attn::require_host_4d<K>();
    detail::attn::require_host_4d<V>();
    using T = std::remove_const_t<typename detail::attn::view_t<Q>::value_type>;
    static_assert(std::is_same_v<T, std::remove_const_t<typename detail::attn::view_t<K>::value_type>> &&
                      std::is_same_v<T, std::remove_const_t<typename detail::attn::view_t<V>::value_type>>,
                  "loom: attention's q, k and v must have one element type; convert with loom::cast");
    const view<const T, 4, host> qv(detail::as_view(q)), kv(detail::as_view(k)), vv(detail::as_view(v));
    detail::attn::geometry g = detail::attn::check_qkv("attention", qv, kv, vv);
    std::apply([&](const auto&... x) { (detail::attn::check_extra("attention", x, g.heads), ...); }, extra.values);
    g.scale = scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(g.dim));
    attention_result<T> r{tensor<T, 4, host>(qv.extents()),
                          tensor<detail::attn::acc_t<T>, 3, host>(shape<3>{g.batch, g.heads, g.sq})};
    detail::attn::forward(g, score, mask, qv, kv, vv, extra.values, r.o.data(), r.lse.data());
    return r;
  }
};

//! An attention from a score_mod and a mask kind; scale 1 / sqrt(D).
//! Example: `constexpr auto attn = loom::attention(loom::score_mod(f), loom::causal);`
template <class S, class M>
[[nodiscard]] constexpr auto attention(const score_mod_fn<S>& s, const M& m) {
  return attention_fn<score_mod_fn<S>, M>{s, m, 0};
}
//! Plain attention (identity score_mod) with mask kind m.
template <class M>
[[nodiscard]] constexpr auto attention(const M& m) {
  return attention(no_score_mod, m);
}

//! The gradients of q, k, v (and of the extra arguments) of attention a, from
//! its forward's o and lse and the output gradient dout:
//! D = rowsum(dout ∘ o), dS = f'(s) · P ∘ (dP − D) with f' score_mod's
//! derivative (derived by evaluating the score_mod on dual numbers). Two
//! passes without atomics: dq over (batch, head, query block), dk and dv over
//! (batch, key head, key block), each sum in a fixed order.
template <class S, class M, tensor_like Q, tensor_like K, tensor_like V, tensor_like O, tensor_like L,
          tensor_like DO, class... X>
[[nodiscard]] auto attention_backward(const attention_fn<S, M>& a, const Q& q, const K& k, const V& v, const O& o,
                                      const L& lse, const DO& dout, const attention_args<X...>& extra = {}) {
  detail::attn::require_host_4d<Q>();
  detail::attn::require_host_4d<K>();
  detail::attn::require_host_4d<V>();
  detail::attn::require_host_4d<O>();
  detail::attn::require_host_4d<DO>();
  using T = std::remove_const_t<typename detail::attn::view_t<Q>::value_type>;
  using A = detail::attn::acc_t<T>;
  const view<const T, 4, host> qv(detail::as_view(q)), kv(detail::as_view(k)), vv(detail::as_view(v)),
      ov(detail::as_view(o)), dov(detail::as_view(dout));
  const view<const A, 3, host> lv(detail::as_view(lse));
  detail::attn::geometry g = detail::attn::check_qkv("attention backward", qv, kv, vv);
  if (ov.extents() != qv.extents() || dov.extents() != qv.extents())
    detail::attn::throw_shapes("attention backward",
                               "o and dout must have q's shape " + shape_string(qv.extents()) + "; got o " +
                                   shape_string(ov.extents()) + ", dout " + shape_string(dov.extents()));
  if (lv.extents() != shape<3>{g.batch, g.heads, g.sq})
    detail::attn::throw_shapes("attention backward", "lse must have shape [B, Hq, Sq] = " +
                                                         shape_string(shape<3>{g.batch, g.heads, g.sq}) + "; got " +
                                                         shape_string(lv.extents()));
  std::apply([&](const auto&... x) { (detail::attn::check_extra("attention backward", x, g.heads), ...); },
             extra.values);
  g.scale = a.scale != 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(g.dim));
  attention_gradients<T, X...> r{tensor<T, 4, host>(qv.extents()), tensor<T, 4, host>(kv.extents()),
                                 tensor<T, 4, host>(vv.extents()),
                                 std::apply([&](const auto&... x) {
                                   return std::make_tuple(tensor<A, 1, host>(x.extents())...);
                                 }, extra.values)};
  A* dx[sizeof...(X) + 1] = {};
  std::apply([&](auto&... t) {
    std::size_t i = 0;
    ((dx[i++] = t.data()), ...);
  }, r.dargs);
  detail::attn::backward(g, a.score, a.mask, qv, kv, vv, ov, lv, dov, extra.values, r.dq.data(), r.dk.data(),
                         r.dv.data(), dx);
  return r;
}

namespace detail::attn {
template <class S, class M>
struct attention_grad_fn {
  attention_fn<S, M> a;
  template <class... P>
  [[nodiscard]] auto operator()(const P&... p) const {
    return attention_backward(a, p...);
  }
};
}  // namespace detail::attn

//! `loom::grad(attn)(q, k, v, o, lse, dout[, loom::args(...)])`: attention_backward.
template <class S, class M>
[[nodiscard]] constexpr auto grad(const attention_fn<S, M>& a) {
  return detail::attn::attention_grad_fn<S, M>{a};
}
}  // namespace loom
