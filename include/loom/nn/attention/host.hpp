// SPDX-License-Identifier: Apache-2.0
#pragma once

// The host executor's attention (docs/15_attention.md). Work is cut into
// tiles of br query rows by bc key rows. The forward runs one task per
// (batch, query head, query block): for each key block that the mask kind
// does not classify as empty it computes the tile's scores (score_mod, the
// mask by selection where the tile is partial) and folds them into a
// running max and sum (online softmax), so no Sq x Skv matrix exists.
// The backward recomputes each tile's probabilities from lse: one pass over
// (batch, query head, query block) for dq and the extra arguments' partial
// sums, one over (batch, key head, key block) for dk and dv (every query head
// of the group, query blocks in order). No atomics: each output element is
// one task's, and every sum runs in a fixed order.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/nn/attention/mods.hpp"
#include "loom/nn/attention/tile.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail::attn {
//! The accumulation type: float for float inputs, double for double.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

constexpr index_t br = 32;  // query rows of a tile
constexpr index_t bc = 64;  // key rows of a tile

struct geometry {
  index_t batch = 0, heads = 0, kv_heads = 0, sq = 0, skv = 0, dim = 0;
  double scale = 1;
  index_t batch_base = 0;  // added to b where score_mod and mask_mod see it (a packed sequence's number)
  index_t group() const { return heads / kv_heads; }
  index_t q_blocks() const { return (sq + br - 1) / br; }
  index_t k_blocks() const { return (skv + bc - 1) / bc; }
};

template <class A, class X>
using extra_values_of =
    extra_values<A, std::remove_const_t<typename decltype(X::values)::value_type>, X::axis, false>;
//! The score_mod's accessors of the extra arguments (each an extra_arg).
template <class A, class... X>
auto accessors(const std::tuple<X...>& ex) {
  return std::apply(
      [](const auto&... x) {
        return tuple<extra_values_of<A, std::remove_cvref_t<decltype(x)>>...>(
            extra_values_of<A, std::remove_cvref_t<decltype(x)>>{x.values.data(), x.values.stride(0)}...);
      },
      ex);
}

// Rows [r0, r0 + n) of head (b, h) of x into dst (n x D, contiguous), or
// transposed (D x ld, columns beyond n zero) when Transposed.
template <bool Transposed, class A, class T>
void load_rows(const view<const T, 4, host>& x, index_t b, index_t h, index_t r0, index_t n, index_t dim, A* dst,
               index_t ld = 0) {
  const T* base = x.data() + b * x.stride(0) + h * x.stride(1);
  for (index_t r = 0; r < n; ++r) {
    const T* row = base + (r0 + r) * x.stride(2);
    for (index_t d = 0; d < dim; ++d) {
      const A v = convert<A>(row[d * x.stride(3)]);
      if constexpr (Transposed)
        dst[d * ld + r] = v;
      else
        dst[r * dim + d] = v;
    }
  }
  if constexpr (Transposed)
    for (index_t d = 0; d < dim; ++d) std::fill(dst + d * ld + n, dst + d * ld + ld, A(0));
}

// out (nq x bc) = a (nq x D) · bt (D x bc).
template <class A>
void tile_product(const A* a, const A* bt, index_t nq, index_t dim, A* out) {
  for (index_t r = 0; r < nq; ++r) {
    A* o = out + r * bc;
    std::fill(o, o + bc, A(0));
    for (index_t d = 0; d < dim; ++d) {
      const A x = a[r * dim + d];
      const A* col = bt + d * bc;
      for (index_t c = 0; c < bc; ++c) o[c] += x * col[c];
    }
  }
}

// out[d] += Σ_j coef(j) · row(j)[d] over j in [0, n) whose coefficient is
// not 0 (a masked entry's row is not read: no 0 · NaN), four rows a step so
// that out is loaded and stored once per four; the terms are added in a
// fixed order.
template <class A, class Coef, class Row>
void add_rows(A* out, index_t n, index_t dim, const Coef& coef, const Row& row) {
  A cs[4];
  const A* rs[4];
  int k = 0;
  const auto flush = [&] {
    if (k == 4) {
      for (index_t d = 0; d < dim; ++d)
        out[d] += (cs[0] * rs[0][d] + cs[1] * rs[1][d]) + (cs[2] * rs[2][d] + cs[3] * rs[3][d]);
    } else {
      for (int i = 0; i < k; ++i)
        for (index_t d = 0; d < dim; ++d) out[d] += cs[i] * rs[i][d];
    }
    k = 0;
  };
  for (index_t j = 0; j < n; ++j) {
    const A c = coef(j);
    if (c == A(0)) continue;
    cs[k] = c;
    rs[k++] = row(j);
    if (k == 4) flush();
  }
  flush();
}

// One tile's position and mask treatment.
struct tile {
  index_t b, h, q0, nq, k0, nk;
  tile_kind kind;
};

// Whether (q, kv) of tile t is attended: full tiles take no mask test.
template <class M>
bool attended(const M& mask, const tile& t, index_t q, index_t kv) {
  return t.kind == tile_kind::full || mask(t.b, t.h, q, kv);
}

template <class T, class S, class M, class... X>
void forward(const geometry& g, const S& score, const M& mask, const view<const T, 4, host>& q,
             const view<const T, 4, host>& k, const view<const T, 4, host>& v, const std::tuple<X...>& extra,
             const operand<T>& o, const operand<acc_t<T>>& lse) {
  using A = acc_t<T>;
  constexpr A neg_inf = -std::numeric_limits<A>::infinity();
  const index_t tasks = g.batch * g.heads * g.q_blocks(), dim = g.dim;
  host_for_each(
      tasks,
      [&](index_t task) {
        const index_t b = task / (g.heads * g.q_blocks()), h = task / g.q_blocks() % g.heads;
        const index_t q0 = task % g.q_blocks() * br, nq = std::min(br, g.sq - q0), hk = h / g.group();
        const auto ex = accessors<A>(extra);
        std::vector<A> qt(static_cast<std::size_t>(br * dim)), kt(static_cast<std::size_t>(dim * bc)),
            vt(static_cast<std::size_t>(bc * dim)), st(static_cast<std::size_t>(br * bc)),
            ot(static_cast<std::size_t>(br * dim), A(0)), m(br, neg_inf), l(br, A(0));
        load_rows<false>(q, b, h, q0, nq, dim, qt.data());
        for (index_t k0 = 0; k0 < g.skv; k0 += bc) {
          const index_t nk = std::min(bc, g.skv - k0);
          const tile t{b + g.batch_base, h, q0, nq, k0, nk, mask.classify(b + g.batch_base, h, q0, q0 + nq, k0, k0 + nk)};
          if (t.kind == tile_kind::empty) continue;
          load_rows<true>(k, b, hk, k0, nk, dim, kt.data(), bc);
          load_rows<false>(v, b, hk, k0, nk, dim, vt.data());
          tile_product(qt.data(), kt.data(), nq, dim, st.data());
          for (index_t r = 0; r < nq; ++r) {
            A* s = st.data() + r * bc;
            A mx = neg_inf;
            for (index_t c = 0; c < nk; ++c) {
              const index_t qi = q0 + r, ki = k0 + c;
              s[c] = attended(mask, t, qi, ki)
                         ? static_cast<A>(apply_score(score, static_cast<A>(g.scale * s[c]), t.b, h, qi, ki, ex))
                         : neg_inf;
              mx = s[c] > mx || s[c] != s[c] ? s[c] : mx;  // NaN stays
            }
            const A m_new = mx != mx ? mx : std::max(m[r], mx);  // NaN stays (std::max keeps a NaN m)
            if (m_new == neg_inf) continue;  // every key so far masked
            const A alpha = std::exp(m[r] - m_new);
            A* orow = ot.data() + r * dim;
            l[r] *= alpha;
            for (index_t d = 0; d < dim; ++d) orow[d] *= alpha;
            for (index_t c = 0; c < nk; ++c) s[c] = math::exp(s[c] - m_new);  // in SIMD lanes
            for (index_t c = 0; c < nk; ++c) l[r] += s[c];
            add_rows(orow, nk, dim, [&](index_t c) { return s[c]; }, [&](index_t c) { return vt.data() + c * dim; });
            m[r] = m_new;
          }
        }
        for (index_t r = 0; r < nq; ++r) {
          T* out = o.row(b, h, q0 + r);
          const bool empty = m[r] == neg_inf;
          const A inv = empty ? A(0) : A(1) / l[r];
          for (index_t d = 0; d < dim; ++d) out[d * o.sd] = convert<T>(empty ? A(0) : ot[r * dim + d] * inv);
          *lse.row(b, h, q0 + r) = empty ? neg_inf : m[r] + std::log(l[r]);
        }
      },
      g.sq * g.skv / std::max<index_t>(g.q_blocks(), 1) * dim);
}

// The backward's view of one tile: P and dS = f'(s) P (dP - D) (both 0 where
// masked or where the row is fully masked), and G = P (dP - D), the
// gradient of the modified score (for the extra arguments).
template <class A>
struct tile_grads {
  std::vector<A> qt, dot, kt, vt, p, ds, gs;
  explicit tile_grads(index_t dim)
      : qt(static_cast<std::size_t>(br * dim)), dot(static_cast<std::size_t>(br * dim)),
        kt(static_cast<std::size_t>(dim * bc)), vt(static_cast<std::size_t>(dim * bc)),
        p(static_cast<std::size_t>(br * bc)), ds(static_cast<std::size_t>(br * bc)),
        gs(static_cast<std::size_t>(br * bc)) {}
};

// Fills tg.p, tg.ds, tg.gs for tile t from the loaded qt, dot, kt, vt
// (kt and vt transposed), each row's lse and D (rows_lse, rows_d: nq values).
template <class A, class S, class M, class Ex>
void tile_backward(const geometry& g, const S& score, const M& mask, const tile& t, const A* rows_lse,
                   const A* rows_d, const Ex& ex, tile_grads<A>& tg) {
  tile_product(tg.qt.data(), tg.kt.data(), t.nq, g.dim, tg.p.data());
  tile_product(tg.dot.data(), tg.vt.data(), t.nq, g.dim, tg.ds.data());  // dP
  for (index_t r = 0; r < t.nq; ++r) {
    A *p = tg.p.data() + r * bc, *ds = tg.ds.data() + r * bc, *gs = tg.gs.data() + r * bc;
    const A lse = rows_lse[r];
    for (index_t c = 0; c < bc; ++c) {
      const index_t qi = t.q0 + r, ki = t.k0 + c;
      if (c >= t.nk || std::isinf(lse) || !attended(mask, t, qi, ki)) {
        p[c] = ds[c] = gs[c] = A(0);
        continue;
      }
      const auto f = apply_score(score, dual<A>{static_cast<A>(g.scale * p[c]), A(1)}, t.b, t.h, qi, ki, ex);
      const A pv = std::exp(static_cast<A>(value_of(f)) - lse);
      const A gv = pv * (ds[c] - rows_d[r]);
      p[c] = pv;
      gs[c] = gv;
      ds[c] = pv == A(0) ? A(0) : gv * derivative_of<A>(f);
    }
  }
}

// The score_mod and the extra arguments' accessors (add_extra_derivatives' view).
template <class S, class Ex>
struct score_with_extras {
  S score;
  Ex extra;
};
// The rows' partial sums of the extra arguments' gradients (extra_gradient's view).
template <class A>
struct extra_partials {
  index_t batch, heads, kv_heads, sq, skv;
  A scale;
  const A *extra_partial, *key_partial;
};

// sums + row(r, c) * nx += G(r, c) · d f / d extra_J over tile t's attended
// entries, for the arguments read at kv (OnKeys) or the others; qk holds
// the tile's q · kᵀ.
template <bool OnKeys, std::size_t Nx, class A, class C, class Row>
void extra_sums(const geometry& g, const C& ctx, const tile& t, const A* qk, const tile_grads<A>& tg, A* sums,
                const Row& row) {
  for (index_t r = 0; r < t.nq; ++r)
    for (index_t c = 0; c < t.nk; ++c) {
      const A gv = tg.gs[r * bc + c];
      if (gv == A(0)) continue;
      add_extra_derivatives<OnKeys>(ctx, static_cast<A>(g.scale * qk[r * bc + c]), gv, t.b, t.h, t.q0 + r, t.k0 + c,
                                    sums + row(r, c) * static_cast<index_t>(Nx), std::make_index_sequence<Nx>{});
    }
}

template <class T, class S, class M, class... X>
void backward(const geometry& g, const S& score, const M& mask, const view<const T, 4, host>& q,
              const view<const T, 4, host>& k, const view<const T, 4, host>& v, const view<const T, 4, host>& o,
              const view<const acc_t<T>, 3, host>& lse, const view<const T, 4, host>& dout,
              const std::tuple<X...>& extra, const operand<T>& dq, const operand<T>& dk, const operand<T>& dv,
              acc_t<T>* const* dextra) {
  using A = acc_t<T>;
  constexpr std::size_t nx = sizeof...(X);
  const index_t dim = g.dim, rows = g.batch * g.heads * g.sq;
  // Per query row: lse and D = rowsum(dout ∘ o), contiguous.
  std::vector<A> row_lse(static_cast<std::size_t>(rows)), row_d(static_cast<std::size_t>(rows));
  host_for_each(
      rows,
      [&](index_t i) {
        const index_t b = i / (g.heads * g.sq), h = i / g.sq % g.heads, r = i % g.sq;
        const T* orow = o.data() + b * o.stride(0) + h * o.stride(1) + r * o.stride(2);
        const T* grow = dout.data() + b * dout.stride(0) + h * dout.stride(1) + r * dout.stride(2);
        A s = 0;
        for (index_t d = 0; d < dim; ++d)
          s += convert<A>(orow[d * o.stride(3)]) * convert<A>(grow[d * dout.stride(3)]);
        row_d[static_cast<std::size_t>(i)] = s;
        row_lse[static_cast<std::size_t>(i)] = lse.data()[lse.offset_of(i)];
      },
      dim);
  const index_t work = g.sq * g.skv / std::max<index_t>(g.q_blocks(), 1) * dim;
  // dq (and the partial sums of the extra arguments read at h or q, per query row).
  const score_with_extras<S, decltype(accessors<A>(extra))> ctx{score, accessors<A>(extra)};
  std::vector<A> partial(static_cast<std::size_t>(rows) * nx, A(0)),
      key_partial(static_cast<std::size_t>(g.batch * g.kv_heads * g.skv) * nx, A(0));
  host_for_each(
      g.batch * g.heads * g.q_blocks(),
      [&](index_t task) {
        const index_t b = task / (g.heads * g.q_blocks()), h = task / g.q_blocks() % g.heads;
        const index_t q0 = task % g.q_blocks() * br, nq = std::min(br, g.sq - q0), hk = h / g.group();
        const index_t row0 = (b * g.heads + h) * g.sq + q0;
        const auto ex = accessors<A>(extra);
        tile_grads<A> tg(dim);
        std::vector<A> dqt(static_cast<std::size_t>(br * dim), A(0)), ks(static_cast<std::size_t>(bc * dim)),
            qk(nx ? static_cast<std::size_t>(br * bc) : 0);
        load_rows<false>(q, b, h, q0, nq, dim, tg.qt.data());
        load_rows<false>(dout, b, h, q0, nq, dim, tg.dot.data());
        for (index_t k0 = 0; k0 < g.skv; k0 += bc) {
          const index_t nk = std::min(bc, g.skv - k0);
          const tile t{b + g.batch_base, h, q0, nq, k0, nk, mask.classify(b + g.batch_base, h, q0, q0 + nq, k0, k0 + nk)};
          if (t.kind == tile_kind::empty) continue;
          load_rows<true>(k, b, hk, k0, nk, dim, tg.kt.data(), bc);
          load_rows<true>(v, b, hk, k0, nk, dim, tg.vt.data(), bc);
          load_rows<false>(k, b, hk, k0, nk, dim, ks.data());
          if constexpr (nx > 0) tile_product(tg.qt.data(), tg.kt.data(), nq, dim, qk.data());
          tile_backward(g, score, mask, t, row_lse.data() + row0, row_d.data() + row0, ex, tg);
          for (index_t r = 0; r < nq; ++r)
            add_rows(dqt.data() + r * dim, nk, dim, [&](index_t c) { return tg.ds[r * bc + c]; },
                     [&](index_t c) { return ks.data() + c * dim; });
          if constexpr (nx > 0)
            extra_sums<false, nx>(g, ctx, t, qk.data(), tg, partial.data(),
                                  [&](index_t r, index_t) { return row0 + r; });
        }
        for (index_t r = 0; r < nq; ++r)
          for (index_t d = 0; d < dim; ++d)
            dq.row(b, h, q0 + r)[d * dq.sd] = convert<T>(static_cast<A>(g.scale) * dqt[r * dim + d]);
      },
      work);
  // dk and dv: every query head of the group and every query block, in order.
  host_for_each(
      g.batch * g.kv_heads * g.k_blocks(),
      [&](index_t task) {
        const index_t b = task / (g.kv_heads * g.k_blocks()), hk = task / g.k_blocks() % g.kv_heads;
        const index_t k0 = task % g.k_blocks() * bc, nk = std::min(bc, g.skv - k0);
        tile_grads<A> tg(dim);
        std::vector<A> dkt(static_cast<std::size_t>(bc * dim), A(0)), dvt(static_cast<std::size_t>(bc * dim), A(0)),
            qk(nx ? static_cast<std::size_t>(br * bc) : 0);
        load_rows<true>(k, b, hk, k0, nk, dim, tg.kt.data(), bc);
        load_rows<true>(v, b, hk, k0, nk, dim, tg.vt.data(), bc);
        const auto ex = accessors<A>(extra);
        for (index_t h = hk * g.group(); h < (hk + 1) * g.group(); ++h)
          for (index_t q0 = 0; q0 < g.sq; q0 += br) {
            const index_t nq = std::min(br, g.sq - q0), row0 = (b * g.heads + h) * g.sq + q0;
            const tile t{b + g.batch_base, h, q0, nq, k0, nk, mask.classify(b + g.batch_base, h, q0, q0 + nq, k0, k0 + nk)};
            if (t.kind == tile_kind::empty) continue;
            load_rows<false>(q, b, h, q0, nq, dim, tg.qt.data());
            load_rows<false>(dout, b, h, q0, nq, dim, tg.dot.data());
            tile_backward(g, score, mask, t, row_lse.data() + row0, row_d.data() + row0, ex, tg);
            for (index_t c = 0; c < nk; ++c) {
              add_rows(dvt.data() + c * dim, nq, dim, [&](index_t r) { return tg.p[r * bc + c]; },
                       [&](index_t r) { return tg.dot.data() + r * dim; });
              add_rows(dkt.data() + c * dim, nq, dim, [&](index_t r) { return tg.ds[r * bc + c]; },
                       [&](index_t r) { return tg.qt.data() + r * dim; });
            }
            if constexpr (nx > 0) {
              tile_product(tg.qt.data(), tg.kt.data(), nq, dim, qk.data());
              extra_sums<true, nx>(g, ctx, t, qk.data(), tg, key_partial.data(), [&](index_t, index_t c) {
                return (b * g.kv_heads + hk) * g.skv + k0 + c;
              });
            }
          }
        for (index_t c = 0; c < nk; ++c)
          for (index_t d = 0; d < dim; ++d) {
            dk.row(b, hk, k0 + c)[d * dk.sd] = convert<T>(static_cast<A>(g.scale) * dkt[c * dim + d]);
            dv.row(b, hk, k0 + c)[d * dv.sd] = convert<T>(dvt[c * dim + d]);
          }
      },
      work * g.group());
  // The extra arguments: each element's rows' partial sums in a fixed order.
  const extra_partials<A> parts{g.batch, g.heads, g.kv_heads, g.sq, g.skv, A(1), partial.data(), key_partial.data()};
  std::size_t j = 0;
  std::apply(
      [&](const auto&... x) {
        (
            [&] {
              for (index_t i = 0; i < x.values.extent(0); ++i)
                dextra[j][i] = extra_gradient(parts, std::remove_cvref_t<decltype(x)>::axis, i,
                                              static_cast<index_t>(j), static_cast<index_t>(nx));
              ++j;
            }(),
            ...);
      },
      extra);
}
}  // namespace loom::detail::attn
