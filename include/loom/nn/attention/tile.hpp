// SPDX-License-Identifier: Apache-2.0
#pragma once

// The device kernels' block bodies (docs/15_attention.md, "On the GPU"),
// written once as LOOM_HD functions over a thread group: the CUDA kernels in
// nn/attention/cuda.hpp run them with one GPU thread per row and a
// __syncthreads() between phases; device_emulation() below runs the same
// functions on the host, thread by thread, phase by phase, so the tests
// check the code the GPU runs.
//
// A forward block owns `rows` query rows of one (batch, head), one thread
// per row; it walks the key tiles of `keys` rows that the mask kind does not
// classify as empty, loads each tile into shared memory (converted to the
// accumulation type), and folds it into its thread's running max, sum and
// output row in registers (online softmax). Full tiles take no mask test.
// The backward: a dq block (one thread per query row, over key tiles), then
// a dk/dv block (one thread per key row, over the query tiles of every query
// head of its group, in order); each output element is one thread's, so no
// atomics and a fixed summation order.

#include <cmath>
#include <cstddef>
#include <limits>
#include <utility>
#include <vector>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/math.hpp"
#include "loom/core/shape.hpp"
#include "loom/detail/tuple.hpp"
#include "loom/nn/attention/mods.hpp"

namespace loom::detail::attn {
//! One [B, H, S, D] operand: its pointer and strides in elements.
template <class T>
struct operand {
  T* p = nullptr;
  index_t sb = 0, sh = 0, ss = 0, sd = 0;
  LOOM_HD T* row(index_t b, index_t h, index_t s) const { return p + b * sb + h * sh + s * ss; }
};
template <class T, class V>
operand<T> operand_of(const V& x) {
  return {x.data(), x.stride(0), x.stride(1), x.stride(2), x.stride(3)};
}

//! The kernels' tile sizes for head sizes up to max_dim: blocks of 64
//! threads, key (or query) tiles of 32 rows in shared memory, each row
//! padded by one element so that 32 threads reading 32 rows hit 32 banks.
template <int MaxDim>
struct tiles {
  static constexpr int max_dim = MaxDim;
  static constexpr int rows = 64;
  static constexpr int keys = 32;
  static constexpr int pad = MaxDim + 1;
};

//! Everything a kernel reads: the shapes, the operands, the outputs, the
//! score_mod and mask, the extra arguments' accessors, and the scratch rows
//! (D = rowsum(dout ∘ o) per query row; the extra arguments' partial sums
//! per query row, and per key row for those read at kv).
template <class T, class A, class S, class M, class Ex>
struct kernel_params {
  index_t batch, heads, kv_heads, sq, skv, dim;
  A scale;
  operand<const T> q, k, v, o_in, dout;
  T *o, *dq, *dk, *dv;
  A *lse, *row_d, *extra_partial, *key_partial;
  const A* lse_in;
  S score;
  M mask;
  Ex extra;
  LOOM_HD index_t group() const { return heads / kv_heads; }
};

//! Which index an extra argument of the score_mod is read at: the query head
//! (`x[h]`, the default), the query row (`loom::by_query(x)`, `x[q]`) or the
//! key row (`loom::by_key(x)`, `x[kv]`).
enum class extra_axis { head, query, key };

//! An extra argument as the score_mod sees it: x[i] in the accumulation type
//! A, or as a dual number with derivative 1 when the backward differentiates
//! with respect to it.
template <class A, class E, extra_axis Axis, bool Dual>
struct extra_values {
  static constexpr extra_axis axis = Axis;
  const E* p;
  index_t stride;
  LOOM_HD auto operator[](index_t i) const {
    const A v = convert<A>(p[i * stride]);
    if constexpr (Dual)
      return dual<A>{v, A(1)};
    else
      return v;
  }
  LOOM_HD extra_values<A, E, Axis, true> as_dual() const { return {p, stride}; }
};

// Calls the score_mod on s (plain or dual) with the extra accessors ex.
template <class S, class X, class Ex, std::size_t... I>
LOOM_HD auto call_score(const S& score, X s, index_t b, index_t h, index_t q, index_t kv, const Ex& ex,
                        std::index_sequence<I...>) {
  return score.f(s, b, h, q, kv, get<I>(ex)...);
}
template <class S, class X, class... E>
LOOM_HD auto apply_score(const S& score, X s, index_t b, index_t h, index_t q, index_t kv, const tuple<E...>& ex) {
  return call_score(score, s, b, h, q, kv, ex, std::index_sequence_for<E...>{});
}
// The accessors ex with the J-th as a dual number.
template <std::size_t J, std::size_t I, class X>
LOOM_HD auto dual_if(const X& x) {
  if constexpr (I == J)
    return x.as_dual();
  else
    return x;
}
template <std::size_t J, class... E, std::size_t... I>
LOOM_HD auto dual_at(const tuple<E...>& ex, std::index_sequence<I...>) {
  return tuple<decltype(dual_if<J, I>(get<I>(ex)))...>(dual_if<J, I>(get<I>(ex))...);
}
template <std::size_t J, class... E>
LOOM_HD auto dual_at(const tuple<E...>& ex) {
  return dual_at<J>(ex, std::index_sequence_for<E...>{});
}
template <std::size_t J, class... E>
constexpr extra_axis axis_at(const tuple<E...>*) {
  constexpr extra_axis axes[] = {E::axis...};
  return axes[J];
}

template <class A>
LOOM_HD A neg_inf() {
  return -std::numeric_limits<A>::infinity();
}

// Σ_d a[d] b[d] over the first dim of MaxDim entries.
template <int MaxDim, class A>
LOOM_HD A dot(const A* a, const A* b, index_t dim) {
  A s = 0;
  LOOM_UNROLL
  for (int d = 0; d < MaxDim; ++d)
    if (d < dim) s += a[d] * b[d];
  return s;
}

// Rows [r0, r0 + n) of head (b, h) of x into dst (tile rows of stride pad,
// zero beyond n and dim), cooperatively: thread t of `threads` loads every
// threads-th element.
template <int MaxDim, int Rows, class A, class T>
LOOM_HD void load_tile(const operand<const T>& x, index_t b, index_t h, index_t r0, index_t n, index_t dim, A* dst,
                       int t, int threads) {
  constexpr int pad = MaxDim + 1;
  for (int i = t; i < Rows * MaxDim; i += threads) {
    const int r = i / MaxDim, d = i % MaxDim;
    dst[r * pad + d] = r < n && d < dim ? convert<A>(x.row(b, h, r0 + r)[d * x.sd]) : A(0);
  }
}
// Row r of head (b, h) of x into dst (one thread's own row).
template <int MaxDim, class A, class T>
LOOM_HD void load_row(const operand<const T>& x, index_t b, index_t h, index_t r, index_t dim, A* dst) {
  const T* src = x.row(b, h, r);
  for (int d = 0; d < MaxDim; ++d) dst[d] = d < dim ? convert<A>(src[d * x.sd]) : A(0);
}

//! A forward thread's query row: running max m, sum l, unnormalized output.
template <class A, int MaxDim>
struct forward_row {
  A m, l;
  A o[MaxDim];
};
//! A dq thread's query row: lse, D, dq, and the extra arguments' sums.
template <class A, int MaxDim, int Extras>
struct dq_row {
  A lse, d;
  A dq[MaxDim];
  A extra[Extras > 0 ? Extras : 1];
};
//! A dk/dv thread's key row: dk (dv lives in shared memory) and the sums of
//! the extra arguments read at kv.
template <class A, int MaxDim, int Extras>
struct dkdv_row {
  A dk[MaxDim];
  A extra[Extras > 0 ? Extras : 1];
};

// Folds key tile [k0, k0 + nk) (ks, vs: rows of stride pad) into query row
// qi's state; qrow is the row's q (stride 1).
template <class Tl, class P, class A>
LOOM_HD void forward_row_tile(const P& p, index_t b, index_t h, index_t qi, tile_kind kind, index_t k0, index_t nk,
                              const A* qrow, const A* ks, const A* vs, forward_row<A, Tl::max_dim>& st) {
  // q · kᵀ for the tile's keys, q[d] read once for all of them (each sum
  // still runs over d in order, as dot does).
  A s[Tl::keys];
  LOOM_UNROLL
  for (int c = 0; c < Tl::keys; ++c) s[c] = 0;
  for (int d = 0; d < Tl::max_dim; ++d) {
    if (d >= p.dim) break;
    const A qd = qrow[d];
    LOOM_UNROLL
    for (int c = 0; c < Tl::keys; ++c) s[c] += qd * ks[c * Tl::pad + d];
  }
  A mx = neg_inf<A>();
  LOOM_UNROLL
  for (int c = 0; c < Tl::keys; ++c) {
    const index_t ki = k0 + c;
    const bool attended = c < nk && (kind == tile_kind::full || p.mask(b, h, qi, ki));
    s[c] = attended ? static_cast<A>(apply_score(p.score, p.scale * s[c], b, h, qi, ki, p.extra)) : neg_inf<A>();
    mx = s[c] > mx || s[c] != s[c] ? s[c] : mx;  // NaN stays
  }
  const A m_new = mx != mx || st.m != st.m ? mx + st.m : (mx > st.m ? mx : st.m);
  if (m_new == neg_inf<A>()) return;  // every key so far masked
  const A alpha = math::exp(st.m - m_new);
  st.l *= alpha;
  LOOM_UNROLL
  for (int d = 0; d < Tl::max_dim; ++d) st.o[d] *= alpha;
  LOOM_UNROLL
  for (int c = 0; c < Tl::keys; ++c) {
    const A pc = math::exp(s[c] - m_new);
    st.l += pc;
    if (pc == A(0)) continue;  // masked: its v row is not read
    const A* vr = vs + c * Tl::pad;
    LOOM_UNROLL
    for (int d = 0; d < Tl::max_dim; ++d) st.o[d] += pc * vr[d];
  }
  st.m = m_new;
}

// For each tile [r0, r0 + n) of Tile rows of [0, extent) that classify(r0,
// n) does not call empty: one phase runs load(t, r0, n) on every thread t,
// then step(r0, n, kind) runs its phases.
template <int Tile, class Classify, class Threads, class Load, class Step>
LOOM_HD void over_tiles(index_t extent, const Classify& classify, const Threads& threads, const Load& load,
                        const Step& step) {
  for (index_t r0 = 0; r0 < extent; r0 += Tile) {
    const index_t n = extent - r0 < Tile ? extent - r0 : Tile;
    const tile_kind kind = classify(r0, n);
    if (kind == tile_kind::empty) continue;
    threads([&](int t, auto&) { load(t, r0, n); });
    step(r0, n, kind);
  }
}
// over_tiles of the key tiles for query rows [q0, q0 + nq) of query head h:
// k and v rows (of h's key head) loaded into ks and vs.
template <class Tl, class P, class A, class Threads, class Step>
LOOM_HD void over_key_tiles(const P& p, index_t b, index_t h, index_t q0, index_t nq, A* ks, A* vs,
                            const Threads& threads, const Step& step) {
  const index_t hk = h / p.group();
  over_tiles<Tl::keys>(
      p.skv, [&](index_t k0, index_t nk) { return p.mask.classify(b, h, q0, q0 + nq, k0, k0 + nk); }, threads,
      [&](int t, index_t k0, index_t nk) {
        load_tile<Tl::max_dim, Tl::keys>(p.k, b, hk, k0, nk, p.dim, ks, t, Tl::rows);
        load_tile<Tl::max_dim, Tl::keys>(p.v, b, hk, k0, nk, p.dim, vs, t, Tl::rows);
      },
      step);
}

//! The forward block of query rows [q0, q0 + rows) of head (b, h); smem
//! holds rows + 2 keys tile rows. `threads(f)` runs f(t, state of t) for
//! every thread t, then waits for all (a barrier).
template <class Tl, class P, class A, class Threads>
LOOM_HD void forward_block(const P& p, index_t b, index_t h, index_t q0, A* smem, const Threads& threads) {
  A* qs = smem;
  A* ks = qs + Tl::rows * Tl::pad;
  A* vs = ks + Tl::keys * Tl::pad;
  const index_t nq = p.sq - q0 < Tl::rows ? p.sq - q0 : Tl::rows;
  threads([&](int t, forward_row<A, Tl::max_dim>& st) {
    st.m = neg_inf<A>();
    st.l = 0;
    for (int d = 0; d < Tl::max_dim; ++d) st.o[d] = 0;
    if (t < nq) load_row<Tl::max_dim>(p.q, b, h, q0 + t, p.dim, qs + t * Tl::pad);
  });
  over_key_tiles<Tl>(p, b, h, q0, nq, ks, vs, threads, [&](index_t k0, index_t nk, tile_kind kind) {
    threads([&](int t, forward_row<A, Tl::max_dim>& st) {
      if (t < nq) forward_row_tile<Tl>(p, b, h, q0 + t, kind, k0, nk, qs + t * Tl::pad, ks, vs, st);
    });
  });
  threads([&](int t, forward_row<A, Tl::max_dim>& st) {
    if (t >= nq) return;
    const index_t row = (b * p.heads + h) * p.sq + q0 + t;
    const bool empty = st.m == neg_inf<A>();
    const A inv = empty ? A(0) : A(1) / st.l;
    for (int d = 0; d < Tl::max_dim; ++d)
      if (d < p.dim) p.o[row * p.dim + d] = convert<std::remove_pointer_t<decltype(p.o)>>(empty ? A(0) : st.o[d] * inv);
    p.lse[row] = empty ? neg_inf<A>() : st.m + math::log(st.l);
  });
}

// The score_mod at (b, h, qi, ki) on the dual number (s, 1): value f, derivative f'.
template <class P, class A>
LOOM_HD auto dual_score(const P& p, A s, index_t b, index_t h, index_t qi, index_t ki) {
  return apply_score(p.score, dual<A>{s, A(1)}, b, h, qi, ki, p.extra);
}

// sums[J] += g · d f / d extra_J at (b, h, qi, ki) for every J read along an
// axis that OnKeys selects (the key axis, or the others), J's accessor a
// dual number.
template <bool OnKeys, class P, class A, std::size_t... J>
LOOM_HD void add_extra_derivatives(const P& p, A s, A g, index_t b, index_t h, index_t qi, index_t ki, A* sums,
                                   std::index_sequence<J...>) {
  (
      [&] {
        if constexpr ((axis_at<J>(static_cast<decltype(p.extra)*>(nullptr)) == extra_axis::key) == OnKeys) {
          const auto f = apply_score(p.score, s, b, h, qi, ki, dual_at<J>(p.extra));
          sums[J] += g * derivative_of<A>(f);
        }
      }(),
      ...);
}

//! The dq block of query rows [q0, q0 + rows) of head (b, h); smem holds
//! 2 rows + 2 keys tile rows. Writes dq, D per row (for the dk/dv block) and
//! each row's partial sums of the extra arguments' gradients.
template <class Tl, int Extras, class P, class A, class Threads>
LOOM_HD void dq_block(const P& p, index_t b, index_t h, index_t q0, A* smem, const Threads& threads) {
  A* qs = smem;
  A* dos = qs + Tl::rows * Tl::pad;
  A* ks = dos + Tl::rows * Tl::pad;
  A* vs = ks + Tl::keys * Tl::pad;
  const index_t nq = p.sq - q0 < Tl::rows ? p.sq - q0 : Tl::rows;
  using state = dq_row<A, Tl::max_dim, Extras>;
  threads([&](int t, state& st) {
    for (int d = 0; d < Tl::max_dim; ++d) st.dq[d] = 0;
    for (int j = 0; j < (Extras > 0 ? Extras : 1); ++j) st.extra[j] = 0;
    if (t >= nq) return;
    const index_t qi = q0 + t, row = (b * p.heads + h) * p.sq + qi;
    load_row<Tl::max_dim>(p.q, b, h, qi, p.dim, qs + t * Tl::pad);
    load_row<Tl::max_dim>(p.dout, b, h, qi, p.dim, dos + t * Tl::pad);
    const auto* orow = p.o_in.row(b, h, qi);
    A dsum = 0;
    for (int d = 0; d < Tl::max_dim; ++d)
      if (d < p.dim) dsum += convert<A>(orow[d * p.o_in.sd]) * dos[t * Tl::pad + d];
    st.d = dsum;
    st.lse = p.lse_in[row];
    p.row_d[row] = dsum;
  });
  over_key_tiles<Tl>(p, b, h, q0, nq, ks, vs, threads, [&](index_t k0, index_t nk, tile_kind kind) {
    threads([&](int t, state& st) {
      if (t >= nq || st.lse == neg_inf<A>()) return;  // a fully masked row (NaN goes on: it propagates)
      const index_t qi = q0 + t;
      const A* qrow = qs + t * Tl::pad;
      const A* dorow = dos + t * Tl::pad;
      for (int c = 0; c < nk; ++c) {
        const index_t ki = k0 + c;
        if (kind != tile_kind::full && !p.mask(b, h, qi, ki)) continue;
        const A s = p.scale * dot<Tl::max_dim>(qrow, ks + c * Tl::pad, p.dim);
        const auto f = dual_score(p, s, b, h, qi, ki);
        const A pv = math::exp(static_cast<A>(value_of(f)) - st.lse);
        if (pv == A(0)) continue;
        const A g = pv * (dot<Tl::max_dim>(dorow, vs + c * Tl::pad, p.dim) - st.d);
        const A ds = g * derivative_of<A>(f);
        const A* kr = ks + c * Tl::pad;
        LOOM_UNROLL
        for (int d = 0; d < Tl::max_dim; ++d) st.dq[d] += ds * kr[d];
        if constexpr (Extras > 0)
          add_extra_derivatives<false>(p, s, g, b, h, qi, ki, st.extra, std::make_index_sequence<Extras>{});
      }
    });
  });
  threads([&](int t, state& st) {
    if (t >= nq) return;
    const index_t row = (b * p.heads + h) * p.sq + q0 + t;
    for (int d = 0; d < Tl::max_dim; ++d)
      if (d < p.dim) p.dq[row * p.dim + d] = convert<std::remove_pointer_t<decltype(p.dq)>>(p.scale * st.dq[d]);
    for (int j = 0; j < Extras; ++j) p.extra_partial[row * Extras + j] = st.extra[j];
  });
}

//! The dk/dv block of key rows [k0, k0 + rows) of key head (b, hk): every
//! query head of the group, query tiles in order. smem holds 3 rows +
//! 2 keys tile rows + 2 keys values (lse and D of the tile's rows).
template <class Tl, int Extras, class P, class A, class Threads>
LOOM_HD void dkdv_block(const P& p, index_t b, index_t hk, index_t k0, A* smem, const Threads& threads) {
  A* ks = smem;
  A* vs = ks + Tl::rows * Tl::pad;
  A* dvs = vs + Tl::rows * Tl::pad;
  A* qs = dvs + Tl::rows * Tl::pad;
  A* dos = qs + Tl::keys * Tl::pad;
  A* lses = dos + Tl::keys * Tl::pad;
  A* ds_ = lses + Tl::keys;
  const index_t nk = p.skv - k0 < Tl::rows ? p.skv - k0 : Tl::rows;
  using state = dkdv_row<A, Tl::max_dim, Extras>;
  threads([&](int t, state& st) {
    for (int d = 0; d < Tl::max_dim; ++d) st.dk[d] = dvs[t * Tl::pad + d] = 0;
    for (int j = 0; j < (Extras > 0 ? Extras : 1); ++j) st.extra[j] = 0;
    if (t >= nk) return;
    load_row<Tl::max_dim>(p.k, b, hk, k0 + t, p.dim, ks + t * Tl::pad);
    load_row<Tl::max_dim>(p.v, b, hk, k0 + t, p.dim, vs + t * Tl::pad);
  });
  for (index_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
    const auto load = [&](int t, index_t q0, index_t nq) {
      load_tile<Tl::max_dim, Tl::keys>(p.q, b, h, q0, nq, p.dim, qs, t, Tl::rows);
      load_tile<Tl::max_dim, Tl::keys>(p.dout, b, h, q0, nq, p.dim, dos, t, Tl::rows);
      if (t < nq) {
        const index_t row = (b * p.heads + h) * p.sq + q0 + t;
        lses[t] = p.lse_in[row];
        ds_[t] = p.row_d[row];
      }
    };
    const auto classify = [&](index_t q0, index_t nq) { return p.mask.classify(b, h, q0, q0 + nq, k0, k0 + nk); };
    over_tiles<Tl::keys>(p.sq, classify, threads, load, [&](index_t q0, index_t nq, tile_kind kind) {
      threads([&](int t, state& st) {
        if (t >= nk) return;
        const index_t ki = k0 + t;
        const A* krow = ks + t * Tl::pad;
        const A* vrow = vs + t * Tl::pad;
        A* dvrow = dvs + t * Tl::pad;
        for (int r = 0; r < nq; ++r) {
          const index_t qi = q0 + r;
          const A lse = lses[r];
          if (lse == neg_inf<A>()) continue;
          if (kind != tile_kind::full && !p.mask(b, h, qi, ki)) continue;
          const A* qrow = qs + r * Tl::pad;
          const A* dorow = dos + r * Tl::pad;
          const A s = p.scale * dot<Tl::max_dim>(qrow, krow, p.dim);
          const auto f = dual_score(p, s, b, h, qi, ki);
          const A pv = math::exp(static_cast<A>(value_of(f)) - lse);
          if (pv == A(0)) continue;  // its q and dout rows are not read
          const A g = pv * (dot<Tl::max_dim>(dorow, vrow, p.dim) - ds_[r]);
          const A ds = g * derivative_of<A>(f);
          if constexpr (Extras > 0)
            add_extra_derivatives<true>(p, s, g, b, h, qi, ki, st.extra, std::make_index_sequence<Extras>{});
          LOOM_UNROLL
          for (int d = 0; d < Tl::max_dim; ++d) {
            dvrow[d] += pv * dorow[d];
            st.dk[d] += ds * qrow[d];
          }
        }
      });
    });
  }
  threads([&](int t, state& st) {
    if (t >= nk) return;
    const index_t row = (b * p.kv_heads + hk) * p.skv + k0 + t;
    using T = std::remove_pointer_t<decltype(p.dk)>;
    for (int d = 0; d < Tl::max_dim; ++d)
      if (d < p.dim) {
        p.dk[row * p.dim + d] = convert<T>(p.scale * st.dk[d]);
        p.dv[row * p.dim + d] = convert<T>(dvs[t * Tl::pad + d]);
      }
    for (int j = 0; j < Extras; ++j) p.key_partial[row * Extras + j] = st.extra[j];
  });
}

//! Element i of the gradient of extra argument j (read along axis): the
//! rows' partial sums in a fixed order: at head i over (batch, query row),
//! at query row i over (batch, head), at key row i over (batch, key head).
template <class P>
LOOM_HD auto extra_gradient(const P& p, extra_axis axis, index_t i, index_t j, index_t extras) {
  decltype(p.scale) s = 0;
  for (index_t b = 0; b < p.batch; ++b) {
    if (axis == extra_axis::head)
      for (index_t r = 0; r < p.sq; ++r) s += p.extra_partial[((b * p.heads + i) * p.sq + r) * extras + j];
    else if (axis == extra_axis::query)
      for (index_t h = 0; h < p.heads; ++h) s += p.extra_partial[((b * p.heads + h) * p.sq + i) * extras + j];
    else
      for (index_t h = 0; h < p.kv_heads; ++h) s += p.key_partial[((b * p.kv_heads + h) * p.skv + i) * extras + j];
  }
  return s;
}

//! Shared memory of each block body, in elements of A.
template <class Tl>
constexpr std::size_t forward_smem = (Tl::rows + 2 * Tl::keys) * Tl::pad;
template <class Tl>
constexpr std::size_t dq_smem = (2 * Tl::rows + 2 * Tl::keys) * Tl::pad;
template <class Tl>
constexpr std::size_t dkdv_smem = (3 * Tl::rows + 2 * Tl::keys) * Tl::pad + 2 * Tl::keys;

//! The host's thread group: runs f for thread 0, 1, ..., rows - 1 in turn
//! (phase by phase, so the end of a call is the barrier).
template <class State>
struct emulated_threads {
  State* states;
  int count;
  template <class F>
  LOOM_HD void operator()(const F& f) const {
#if !LOOM_DEVICE_CODE
    for (int t = 0; t < count; ++t) f(t, states[t]);
#else
    (void)f;
#endif
  }
};
}  // namespace loom::detail::attn
