// SPDX-License-Identifier: Apache-2.0
#pragma once

// Attention with the user's score_mod and mask_mod (docs/15_attention.md):
// the public API. The host executor's tiled kernels live in
// nn/attention/host.hpp, the device kernels' block bodies in
// nn/attention/tile.hpp, their launches and host emulation in
// nn/attention/kernels.hpp, the mask kinds and the dual numbers that derive
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
#include "loom/nn/attention/kernels.hpp"
#include "loom/nn/attention/mods.hpp"
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
}  // namespace detail::attn

namespace detail::attn {
// The forward on q's executor (Exec: the host's tiled kernels, or the
// device block bodies on the GPU or emulated), outputs in Space.
template <class Space, int Exec, class S, class M, class Q, class K, class V, class... X>
auto run_attention_forward(const S& score, const M& mask, double scale, const Q& q, const K& k, const V& v,
                           const std::tuple<X...>& extra) {
  require_4d<Q>();
  require_4d<K>();
  require_4d<V>();
  using T = std::remove_const_t<typename view_t<Q>::value_type>;
  static_assert(std::is_same_v<T, std::remove_const_t<typename view_t<K>::value_type>> &&
                    std::is_same_v<T, std::remove_const_t<typename view_t<V>::value_type>>,
                "loom: attention's q, k and v must have one element type; convert with loom::cast");
  static_assert(std::is_same_v<typename view_t<Q>::space, typename view_t<K>::space> &&
                    std::is_same_v<typename view_t<Q>::space, typename view_t<V>::space>,
                "loom: attention's q, k and v must be in one memory space; copy with loom::to_device or loom::to_host");
  using QS = typename view_t<Q>::space;
  const view<const T, 4, QS> qv(detail::as_view(q)), kv(detail::as_view(k)), vv(detail::as_view(v));
  geometry g = check_qkv("attention", qv, kv, vv);
  std::apply([&](const auto&... x) { (check_extra<QS>("attention", x, g), ...); }, extra);
  g.scale = scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(g.dim));
  attention_result<T, Space> r{tensor<T, 4, Space>(qv.extents()),
                               tensor<acc_t<T>, 3, Space>(shape<3>{g.batch, g.heads, g.sq})};
  if constexpr (Exec < 0) {
    forward(g, score, mask, qv, kv, vv, extra, r.o.data(), r.lse.data());
  } else {
    auto p = make_params<T>(g, score, mask, qv, kv, vv, extra);
    p.o = r.o.data();
    p.lse = r.lse.data();
    run_forward<static_cast<block_exec>(Exec)>(p);
  }
  return r;
}
}  // namespace detail::attn

//! Attention with score_mod S and mask kind M (loom::no_mask, loom::causal,
//! loom::sliding_window(w), or loom::mask_mod(lambda)). Called as
//! `attn(q, k, v[, loom::args(extra...)])`; see docs/15_attention.md. On
//! host tensors the host executor's tiled kernels run; on device tensors
//! one fused kernel on the current stream.
template <class S, class M>
struct attention_fn {
  S score;
  M mask;
  double scale = 0;  //!< multiplies q kᵀ; 0 means 1 / sqrt(D)

  //! The same attention with scores scaled by s instead of 1 / sqrt(D).
  [[nodiscard]] constexpr attention_fn scaled(double s) const { return {score, mask, s}; }

  template <tensor_like Q, tensor_like K, tensor_like V, class... X>
  [[nodiscard]] auto operator()(const Q& q, const K& k, const V& v, const attention_args<X...>& extra = {}) const {
    using QS = typename detail::attn::view_t<Q>::space;
    constexpr int exec = std::is_same_v<QS, host> ? -1 : static_cast<int>(detail::attn::block_exec::gpu);
    return detail::attn::run_attention_forward<QS, exec>(score, mask, scale, q, k, v, extra.values);
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

namespace detail::attn {
template <class Space, int Exec, class S, class M, class Q, class K, class V, class O, class L, class DO,
          class... X>
auto run_attention_backward(const attention_fn<S, M>& a, const Q& q, const K& k, const V& v, const O& o,
                            const L& lse, const DO& dout, const std::tuple<X...>& extra) {
  require_4d<Q>();
  require_4d<K>();
  require_4d<V>();
  require_4d<O>();
  require_4d<DO>();
  using T = std::remove_const_t<typename view_t<Q>::value_type>;
  using A = acc_t<T>;
  using QS = typename view_t<Q>::space;
  const view<const T, 4, QS> qv(detail::as_view(q)), kv(detail::as_view(k)), vv(detail::as_view(v)),
      ov(detail::as_view(o)), dov(detail::as_view(dout));
  const view<const A, 3, QS> lv(detail::as_view(lse));
  geometry g = check_qkv("attention backward", qv, kv, vv);
  if (ov.extents() != qv.extents() || dov.extents() != qv.extents())
    throw_shapes("attention backward", "o and dout must have q's shape " + shape_string(qv.extents()) + "; got o " +
                                           shape_string(ov.extents()) + ", dout " + shape_string(dov.extents()));
  if (lv.extents() != shape<3>{g.batch, g.heads, g.sq})
    throw_shapes("attention backward", "lse must have shape [B, Hq, Sq] = " +
                                           shape_string(shape<3>{g.batch, g.heads, g.sq}) + "; got " +
                                           shape_string(lv.extents()));
  std::apply([&](const auto&... x) { (check_extra<QS>("attention backward", x, g), ...); }, extra);
  g.scale = a.scale != 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(g.dim));
  attention_gradients<T, Space, X...> r{
      tensor<T, 4, Space>(qv.extents()), tensor<T, 4, Space>(kv.extents()), tensor<T, 4, Space>(vv.extents()),
      std::apply([&](const auto&... x) { return std::make_tuple(tensor<A, 1, Space>(x.values.extents())...); },
                 extra)};
  constexpr int nx = static_cast<int>(sizeof...(X));
  A* dx[nx + 1] = {};
  index_t extents[nx + 1] = {};
  const extra_axis axes[nx + 1] = {X::axis..., extra_axis::head};
  std::apply([&](auto&... t) {
    std::size_t i = 0;
    ((extents[i] = t.extent(0), dx[i++] = t.data()), ...);
  }, r.dargs);
  if constexpr (Exec < 0) {
    backward(g, a.score, a.mask, qv, kv, vv, ov, lv, dov, extra, r.dq.data(), r.dk.data(), r.dv.data(), dx);
  } else {
    // Scratch: D per query row, the extra arguments' partial sums per query and per key row.
    tensor<A, 1, Space> row_d(shape<1>{g.batch * g.heads * g.sq}),
        partial(shape<1>{nx > 0 ? g.batch * g.heads * g.sq * nx : 0}),
        key_partial(shape<1>{nx > 0 ? g.batch * g.kv_heads * g.skv * nx : 0});
    auto p = make_params<T>(g, a.score, a.mask, qv, kv, vv, extra);
    p.o_in = operand_of<const T>(ov);
    p.dout = operand_of<const T>(dov);
    p.lse_in = lv.data();
    p.dq = r.dq.data(), p.dk = r.dk.data(), p.dv = r.dv.data();
    p.row_d = row_d.data(), p.extra_partial = partial.data(), p.key_partial = key_partial.data();
    run_backward<static_cast<block_exec>(Exec), nx>(p, axes, extents, dx);
  }
  return r;
}
}  // namespace detail::attn

//! The gradients of q, k, v (and of the extra arguments) of attention a, from
//! its forward's o and lse and the output gradient dout:
//! D = rowsum(dout ∘ o), dS = f'(s) · P ∘ (dP − D) with f' score_mod's
//! derivative (derived by evaluating the score_mod on dual numbers). Without
//! atomics: dq over (batch, head, query block), dk and dv over (batch, key
//! head, key block), each sum in a fixed order. On host tensors the host
//! executor's passes; on device tensors two kernels (plus one per extra
//! argument) on the current stream.
template <class S, class M, tensor_like Q, tensor_like K, tensor_like V, tensor_like O, tensor_like L,
          tensor_like DO, class... X>
[[nodiscard]] auto attention_backward(const attention_fn<S, M>& a, const Q& q, const K& k, const V& v, const O& o,
                                      const L& lse, const DO& dout, const attention_args<X...>& extra = {}) {
  using QS = typename detail::attn::view_t<Q>::space;
  constexpr int exec = std::is_same_v<QS, host> ? -1 : static_cast<int>(detail::attn::block_exec::gpu);
  return detail::attn::run_attention_backward<QS, exec>(a, q, k, v, o, lse, dout, extra.values);
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

//! The device kernels' block bodies run on the host (test hook): the
//! forward of attention a on host tensors as the GPU computes it.
template <class S, class M, class Q, class K, class V, class... X>
auto device_emulation(const attention_fn<S, M>& a, const Q& q, const K& k, const V& v,
                      const attention_args<X...>& extra = {}) {
  return run_attention_forward<host, static_cast<int>(block_exec::emulated)>(a.score, a.mask, a.scale, q, k, v,
                                                                             extra.values);
}
//! The backward's device block bodies run on the host (test hook).
template <class S, class M, class Q, class K, class V, class O, class L, class DO, class... X>
auto device_emulation_backward(const attention_fn<S, M>& a, const Q& q, const K& k, const V& v, const O& o,
                               const L& lse, const DO& dout, const attention_args<X...>& extra = {}) {
  return run_attention_backward<host, static_cast<int>(block_exec::emulated)>(a, q, k, v, o, lse, dout,
                                                                              extra.values);
}
}  // namespace detail::attn

//! `loom::grad(attn)(q, k, v, o, lse, dout[, loom::args(...)])`: attention_backward.
template <class S, class M>
[[nodiscard]] constexpr auto grad(const attention_fn<S, M>& a) {
  return detail::attn::attention_grad_fn<S, M>{a};
}
}  // namespace loom
