// SPDX-License-Identifier: Apache-2.0
#pragma once

// Attention with the user's score_mod and mask_mod (docs/15_attention.md):
// the public API. Its argument types and checks live in
// nn/attention/args.hpp, the host executor's tiled kernels in
// nn/attention/host.hpp, the device kernels' block bodies in
// nn/attention/tile.hpp, their launches and host emulation in
// nn/attention/kernels.hpp, the mask kinds and the dual numbers that derive
// score_mod's derivative in nn/attention/mods.hpp.

#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/nn/attention/args.hpp"
#include "loom/nn/attention/host.hpp"
#include "loom/nn/attention/kernels.hpp"
#include "loom/nn/attention/mods.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
namespace detail::attn {
//! What runs a call: the host executor's tiled kernels, nothing but the
//! checks and the outputs' allocation, the device block bodies on the GPU,
//! or those bodies emulated on the host.
enum class run_on { host_executor, checks_only, gpu, emulated };
constexpr block_exec blocks_on(run_on r) { return r == run_on::gpu ? block_exec::gpu : block_exec::emulated; }

// A mask kind with a table (a block mask): in q's memory space, made for the call's sizes.
template <class Space, class M>
void check_mask(const char* what, const M& mask, const geometry& g) {
  if constexpr (requires { typename M::space; }) {
    static_assert(std::is_same_v<typename M::space, Space>,
                  "loom: a block mask must be in q's memory space: make_block_mask<loom::device> for device tensors");
    mask.check_sizes(what, g.batch, g.heads, g.sq, g.skv);
  }
}

// The forward on Exec, outputs in Space.
template <class Space, run_on Exec, class S, class M, class Q, class K, class V, class... X>
auto run_attention_forward(const S& score, const M& mask, double scale, const Q& q, const K& k, const V& v,
                           const std::tuple<X...>& extra) {
  require_4d<Q>();
  require_4d<K>();
  require_4d<V>();
  using T = std::remove_const_t<typename view_t<Q>::value_type>;
  using A = acc_t<T>;
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
  if constexpr (Exec != run_on::checks_only) check_mask<QS>("attention", mask, g);
  g.scale = scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(g.dim));
  attention_result<T, Space> r{tensor<T, 4, Space>(qv.extents()),
                               tensor<acc_t<T>, 3, Space>(shape<3>{g.batch, g.heads, g.sq})};
  if constexpr (Exec == run_on::checks_only) {
    (void)g;
  } else if constexpr (Exec == run_on::host_executor) {
    forward(g, score, mask, qv, kv, vv, extra, operand_of<T>(detail::as_view(r.o)), lse_operand<A>(detail::as_view(r.lse)));
  } else {
    auto p = make_params<T>(g, score, mask, qv, kv, vv, extra);
    p.o = r.o.data();
    p.lse = r.lse.data();
    run_forward<blocks_on(Exec)>(p);
  }
  return r;
}
}  // namespace detail::attn

namespace detail::attn {
template <class Q, class M>
constexpr void require_host_for_packed() {
  static_assert(std::is_same_v<typename view_t<Q>::space, host>,
                "loom: packed sequences (loom::varlen) run on the host executor; copy q, k and v with loom::to_host");
  static_assert(!requires { typename M::space; },
                "loom: a block mask is made for a batch of one length; packed sequences (loom::varlen) take a mask_mod");
}

// The forward of packed sequences on the host executor: one pass of the
// tiled kernels per sequence, over its rows of q, k, v and the outputs.
template <class Attn, class Q, class K, class V, class... X>
auto run_packed_forward(const Attn& a, const Q& q, const K& k, const V& v, const packed_sequences& seqs,
                        const std::tuple<X...>& extra) {
  require_host_for_packed<Q, std::remove_cvref_t<decltype(a.mask)>>();
  auto r = run_attention_forward<host, run_on::checks_only>(a.score, a.mask, a.scale, q, k, v, extra);
  using T = std::remove_const_t<typename view_t<Q>::value_type>;
  using A = acc_t<T>;
  const view<const T, 4, host> qv(detail::as_view(q)), kv(detail::as_view(k)), vv(detail::as_view(v));
  geometry g = check_qkv("attention", qv, kv, vv);
  const index_t n = check_packed("attention", seqs, g);
  g.scale = a.scale != 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(g.dim));
  for (index_t i = 0; i < n; ++i) {
    const index_t q0 = seqs.q(i), nq = seqs.q(i + 1) - q0, k0 = seqs.kv(i), nk = seqs.kv(i + 1) - k0;
    if (nq == 0) continue;
    const auto o = r.o.slice(whole, whole, range(q0, q0 + nq));
    const auto lse = r.lse.slice(whole, whole, range(q0, q0 + nq));
    if (nk == 0) {  // no key: every row fully masked
      fill(o, T(0.0f));
      fill(lse, -std::numeric_limits<A>::infinity());
      continue;
    }
    geometry gi = g;
    gi.sq = nq, gi.skv = nk, gi.batch_base = i;
    const auto rows = range(q0, q0 + nq), keys = range(k0, k0 + nk);
    forward(gi, a.score, a.mask, qv.slice(whole, whole, rows), kv.slice(whole, whole, keys),
            vv.slice(whole, whole, keys),
            std::apply([&](const auto&... x) { return std::make_tuple(slice_extra(x, q0, nq, k0, nk)...); }, extra),
            operand_of<T>(o), lse_operand<A>(lse));
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
    constexpr auto exec = std::is_same_v<QS, host> ? detail::attn::run_on::host_executor : detail::attn::run_on::gpu;
    return detail::attn::run_attention_forward<QS, exec>(score, mask, scale, q, k, v, extra.values);
  }
  //! Packed sequences of different lengths (loom::varlen), host tensors:
  //! q [1, Hq, total_q, D], k and v [1, Hkv, total_kv, D].
  template <tensor_like Q, tensor_like K, tensor_like V, class... X>
  [[nodiscard]] auto operator()(const Q& q, const K& k, const V& v, const packed_sequences& seqs,
                                const attention_args<X...>& extra = {}) const {
    return detail::attn::run_packed_forward(*this, q, k, v, seqs, extra.values);
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
template <class Space, run_on Exec, class S, class M, class Q, class K, class V, class O, class L, class DO,
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
  if constexpr (Exec != run_on::checks_only) check_mask<QS>("attention backward", a.mask, g);
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
  if constexpr (Exec == run_on::checks_only) {
    (void)dx;
  } else if constexpr (Exec == run_on::host_executor) {
    backward(g, a.score, a.mask, qv, kv, vv, ov, lv, dov, extra, operand_of<T>(detail::as_view(r.dq)), operand_of<T>(detail::as_view(r.dk)),
             operand_of<T>(detail::as_view(r.dv)), dx);
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
    run_backward<blocks_on(Exec), nx>(p, axes, extents, dx);
  }
  return r;
}
}  // namespace detail::attn

namespace detail::attn {
// Adds one sequence's gradient of an extra argument read along Axis (its
// rows start at q0, keys at k0) into the whole gradient t.
template <extra_axis Axis, class Tn, class A>
void add_sequence_gradient(Tn& t, const std::vector<A>& part, index_t q0, index_t k0) {
  const index_t base = Axis == extra_axis::query ? q0 : Axis == extra_axis::key ? k0 : 0;
  for (std::size_t i = 0; i < part.size(); ++i) t.data()[base + static_cast<index_t>(i)] += part[i];
}

// The backward of packed sequences on the host executor: one run of the
// backward passes per sequence, in order; each extra argument read at h
// adds the sequences' gradients in that order.
template <class S, class M, class Q, class K, class V, class O, class L, class DO, class... X>
auto run_packed_backward(const attention_fn<S, M>& a, const Q& q, const K& k, const V& v, const O& o, const L& lse,
                         const DO& dout, const packed_sequences& seqs, const std::tuple<X...>& extra) {
  require_host_for_packed<Q, M>();
  auto r = run_attention_backward<host, run_on::checks_only>(a, q, k, v, o, lse, dout, extra);
  using T = std::remove_const_t<typename view_t<Q>::value_type>;
  using A = acc_t<T>;
  const view<const T, 4, host> qv(detail::as_view(q)), kv(detail::as_view(k)), vv(detail::as_view(v)),
      ov(detail::as_view(o)), dov(detail::as_view(dout));
  const view<const A, 3, host> lv(detail::as_view(lse));
  geometry g = check_qkv("attention backward", qv, kv, vv);
  const index_t n = check_packed("attention backward", seqs, g);
  g.scale = a.scale != 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(g.dim));
  // Rows of no sequence with keys (or keys of no sequence with rows) get 0.
  fill(r.dq, T(0.0f));
  fill(r.dk, T(0.0f));
  fill(r.dv, T(0.0f));
  std::apply([](auto&... t) { (fill(t, A(0)), ...); }, r.dargs);
  constexpr std::size_t nx = sizeof...(X);
  std::vector<A> part[nx + 1];
  for (index_t i = 0; i < n; ++i) {
    const index_t q0 = seqs.q(i), nq = seqs.q(i + 1) - q0, k0 = seqs.kv(i), nk = seqs.kv(i + 1) - k0;
    if (nq == 0 || nk == 0) continue;
    geometry gi = g;
    gi.sq = nq, gi.skv = nk, gi.batch_base = i;
    const auto rows = range(q0, q0 + nq), keys = range(k0, k0 + nk);
    const auto ex = std::apply([&](const auto&... x) { return std::make_tuple(slice_extra(x, q0, nq, k0, nk)...); },
                               extra);
    A* dx[nx + 1] = {};
    std::apply([&](const auto&... x) {
      std::size_t j = 0;
      ((part[j].assign(static_cast<std::size_t>(x.values.extent(0)), A(0)), dx[j] = part[j].data(), ++j), ...);
    }, ex);
    backward(gi, a.score, a.mask, qv.slice(whole, whole, rows), kv.slice(whole, whole, keys),
             vv.slice(whole, whole, keys), ov.slice(whole, whole, rows), lv.slice(whole, whole, rows),
             dov.slice(whole, whole, rows), ex, operand_of<T>(r.dq.slice(whole, whole, rows)),
             operand_of<T>(r.dk.slice(whole, whole, keys)), operand_of<T>(r.dv.slice(whole, whole, keys)), dx);
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (add_sequence_gradient<std::tuple_element_t<J, std::tuple<X...>>::axis>(std::get<J>(r.dargs), part[J], q0, k0),
       ...);
    }(std::index_sequence_for<X...>{});
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
  constexpr auto exec = std::is_same_v<QS, host> ? detail::attn::run_on::host_executor : detail::attn::run_on::gpu;
  return detail::attn::run_attention_backward<QS, exec>(a, q, k, v, o, lse, dout, extra.values);
}
//! The gradients of attention a over packed sequences (loom::varlen), host tensors.
template <class S, class M, tensor_like Q, tensor_like K, tensor_like V, tensor_like O, tensor_like L,
          tensor_like DO, class... X>
[[nodiscard]] auto attention_backward(const attention_fn<S, M>& a, const Q& q, const K& k, const V& v, const O& o,
                                      const L& lse, const DO& dout, const packed_sequences& seqs,
                                      const attention_args<X...>& extra = {}) {
  return detail::attn::run_packed_backward(a, q, k, v, o, lse, dout, seqs, extra.values);
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
  return run_attention_forward<host, run_on::emulated>(a.score, a.mask, a.scale, q, k, v,
                                                                             extra.values);
}
//! The backward's device block bodies run on the host (test hook).
template <class S, class M, class Q, class K, class V, class O, class L, class DO, class... X>
auto device_emulation_backward(const attention_fn<S, M>& a, const Q& q, const K& k, const V& v, const O& o,
                               const L& lse, const DO& dout, const attention_args<X...>& extra = {}) {
  return run_attention_backward<host, run_on::emulated>(a, q, k, v, o, lse, dout,
                                                                              extra.values);
}
}  // namespace detail::attn

//! `loom::grad(attn)(q, k, v, o, lse, dout[, loom::args(...)])`: attention_backward.
template <class S, class M>
[[nodiscard]] constexpr auto grad(const attention_fn<S, M>& a) {
  return detail::attn::attention_grad_fn<S, M>{a};
}
}  // namespace loom
