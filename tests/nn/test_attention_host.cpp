// SPDX-License-Identifier: Apache-2.0
// Attention on the host executor against a plain reference in double written
// here (the whole score matrix, its softmax, P·V; the backward by the chain
// rule on the materialized matrices), and the backward also against central
// finite differences of the reference. Seeded random odd sizes, Sq != Skv,
// D not a power of two, grouped-query heads; outputs poisoned (the test main
// fills every loom allocation with NaN bytes).
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include <loom/nn/attention.hpp>

#include "loom_test.hpp"

namespace {
using Catch::Matchers::Contains;
using loom::index_t;
using vec = std::vector<double>;
constexpr double inf = std::numeric_limits<double>::infinity();

struct dims {
  index_t b, hq, hkv, sq, skv, d;
};
// The reference's view of a score_mod and a mask: f(s, b, h, q, kv) -> modified score,
// df its derivative in s; allowed(b, h, q, kv).
struct mods {
  std::function<double(double, index_t, index_t, index_t, index_t)> f = [](double s, auto...) { return s; };
  std::function<double(double, index_t, index_t, index_t, index_t)> df = [](double, auto...) { return 1.0; };
  std::function<bool(index_t, index_t, index_t, index_t)> allowed = [](auto...) { return true; };
};
index_t qi(const dims& n, index_t b, index_t h, index_t r) { return ((b * n.hq + h) * n.sq + r) * n.d; }
index_t ki(const dims& n, index_t b, index_t h, index_t r) { return ((b * n.hkv + h) * n.skv + r) * n.d; }

struct ref_out {
  vec o, lse, dq, dk, dv;
};
ref_out reference(const dims& n, const mods& m, const vec& q, const vec& k, const vec& v, const vec* dout) {
  ref_out r{vec(q.size(), 0.0), vec(static_cast<std::size_t>(n.b * n.hq * n.sq)), vec(q.size(), 0.0),
            vec(k.size(), 0.0), vec(v.size(), 0.0)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(n.d));
  for (index_t b = 0; b < n.b; ++b)
    for (index_t h = 0; h < n.hq; ++h)
      for (index_t i = 0; i < n.sq; ++i) {
        const index_t hk = h / (n.hq / n.hkv);
        vec raw(static_cast<std::size_t>(n.skv)), s(raw.size()), p(raw.size());
        double mx = -inf;
        for (index_t j = 0; j < n.skv; ++j) {
          double dot = 0;
          for (index_t d = 0; d < n.d; ++d) dot += q[qi(n, b, h, i) + d] * k[ki(n, b, hk, j) + d];
          raw[j] = scale * dot;
          s[j] = m.allowed(b, h, i, j) ? m.f(raw[j], b, h, i, j) : -inf;
          mx = std::max(mx, s[j]);
        }
        const std::size_t row = static_cast<std::size_t>((b * n.hq + h) * n.sq + i);
        if (mx == -inf) {
          r.lse[row] = -inf;
          continue;
        }
        double l = 0;
        for (index_t j = 0; j < n.skv; ++j) l += std::exp(s[j] - mx);
        r.lse[row] = mx + std::log(l);
        for (index_t j = 0; j < n.skv; ++j) {
          p[j] = std::exp(s[j] - mx) / l;
          for (index_t d = 0; d < n.d; ++d) r.o[qi(n, b, h, i) + d] += p[j] * v[ki(n, b, hk, j) + d];
        }
        if (!dout) continue;
        double dsum = 0;
        for (index_t d = 0; d < n.d; ++d) dsum += (*dout)[qi(n, b, h, i) + d] * r.o[qi(n, b, h, i) + d];
        for (index_t j = 0; j < n.skv; ++j) {
          if (p[j] == 0) continue;
          double dp = 0;
          for (index_t d = 0; d < n.d; ++d) {
            dp += (*dout)[qi(n, b, h, i) + d] * v[ki(n, b, hk, j) + d];
            r.dv[ki(n, b, hk, j) + d] += p[j] * (*dout)[qi(n, b, h, i) + d];
          }
          const double ds = p[j] * (dp - dsum) * m.df(raw[j], b, h, i, j) * scale;
          for (index_t d = 0; d < n.d; ++d) {
            r.dq[qi(n, b, h, i) + d] += ds * k[ki(n, b, hk, j) + d];
            r.dk[ki(n, b, hk, j) + d] += ds * q[qi(n, b, h, i) + d];
          }
        }
      }
  return r;
}

template <class T>
loom::host_tensor<T, 4> make(const loom::shape<4>& s, const vec& data) {
  loom::host_tensor<T, 4> t(s);
  for (std::size_t i = 0; i < data.size(); ++i) t.data()[i] = static_cast<T>(data[i]);
  return t;
}
vec random_vec(std::size_t n, std::mt19937_64& g) {
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  vec x(n);
  for (auto& e : x) e = u(g);
  return x;
}
struct inputs {
  vec q, k, v, dout;
};
inputs random_inputs(const dims& n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  const auto qs = static_cast<std::size_t>(n.b * n.hq * n.sq * n.d), ks = static_cast<std::size_t>(n.b * n.hkv * n.skv * n.d);
  return {random_vec(qs, g), random_vec(ks, g), random_vec(ks, g), random_vec(qs, g)};
}

// The inputs as tensors of T: q and dout [B, Hq, Sq, D], k and v [B, Hkv, Skv, D].
template <class T>
struct tensors {
  loom::host_tensor<T, 4> q, k, v, dout;
  tensors(const dims& n, const inputs& in)
      : q(make<T>({n.b, n.hq, n.sq, n.d}, in.q)), k(make<T>({n.b, n.hkv, n.skv, n.d}, in.k)),
        v(make<T>({n.b, n.hkv, n.skv, n.d}, in.v)), dout(make<T>({n.b, n.hq, n.sq, n.d}, in.dout)) {}
};
// Seeded random inputs of sizes n and their tensors of T.
template <class T>
struct random_case {
  inputs in;
  tensors<T> t;
  random_case(const dims& n, std::uint64_t seed) : in(random_inputs(n, seed)), t(n, in) {}
};

template <class T, class Got>
void check_close(const Got& got, const vec& want, double tol, const char* what) {
  INFO(what);
  REQUIRE(static_cast<std::size_t>(got.size()) == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double x = static_cast<double>(got.data()[i]);
    if (std::isinf(want[i])) {
      INFO("element " << i);
      REQUIRE(x == want[i]);
      continue;
    }
    INFO("element " << i << ": " << x << " vs " << want[i]);
    REQUIRE(std::abs(x - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

// Forward and backward of attention `attn` (with extra arguments ex) against the reference.
template <class T, class Attn, class... X>
void check_case(const Attn& attn, const dims& n, const mods& m, std::uint64_t seed, const X&... ex) {
  INFO("B " << n.b << " Hq " << n.hq << " Hkv " << n.hkv << " Sq " << n.sq << " Skv " << n.skv << " D " << n.d);
  const random_case<T> c(n, seed);
  const auto &q = c.t.q, &k = c.t.k, &v = c.t.v, &dout = c.t.dout;
  const ref_out want = reference(n, m, c.in.q, c.in.k, c.in.v, &c.in.dout);
  const double tol = std::is_same_v<T, float> ? 2e-4 : 1e-10;
  auto [o, lse] = attn(q, k, v, loom::args(ex...));
  check_close<T>(o, want.o, tol, "o");
  check_close<T>(lse, want.lse, tol, "lse");
  auto gr = loom::grad(attn)(q, k, v, o, lse, dout, loom::args(ex...));
  check_close<T>(gr.dq, want.dq, tol * 5, "dq");
  check_close<T>(gr.dk, want.dk, tol * 5, "dk");
  check_close<T>(gr.dv, want.dv, tol * 5, "dv");
}

const dims sizes[] = {{1, 1, 1, 1, 1, 1}, {2, 4, 2, 37, 71, 19}, {1, 6, 3, 129, 65, 24}, {1, 2, 1, 70, 33, 5}};

constexpr auto alibi = loom::score_mod([](auto s, auto, auto h, auto q, auto kv, auto slope) {
  return s - slope[h] * static_cast<float>(q > kv ? q - kv : kv - q);
});
constexpr auto softcap = loom::score_mod([](auto s, auto...) { return 2.5f * loom::math::tanh(s / 2.5f); });
}  // namespace

TEMPLATE_TEST_CASE("attention matches a double reference with no mask and causal masks", "[nn][attention]", float,
                   double) {
  std::uint64_t seed = loom_test::seed_for("attention plain");
  for (const dims& n : sizes) {
    check_case<TestType>(loom::attention(loom::no_mask), n, mods{}, ++seed);
    mods c;
    c.allowed = [](index_t, index_t, index_t q, index_t kv) { return kv <= q; };
    check_case<TestType>(loom::attention(loom::causal), n, c, ++seed);
    // The same causal mask as a user mask_mod (every tile evaluated per element).
    check_case<TestType>(
        loom::attention(loom::mask_mod([](auto, auto, auto q, auto kv) { return kv <= q; })), n, c, ++seed);
  }
}

TEMPLATE_TEST_CASE("attention applies a sliding window and a document mask", "[nn][attention]", float, double) {
  std::uint64_t seed = loom_test::seed_for("attention windows");
  // Windows of 95 and 96 keys make the tiles of 32 query rows by 64 keys
  // below the diagonal full (95) or partial (94) at their edge.
  for (const index_t w : {1, 5, 40, 94, 95, 96}) {
    mods m;
    m.allowed = [w](index_t, index_t, index_t q, index_t kv) { return kv <= q && q - kv < w; };
    for (const dims& n : sizes) check_case<TestType>(loom::attention(loom::sliding_window(w)), n, m, ++seed);
    check_case<TestType>(loom::attention(loom::sliding_window(w)), dims{1, 2, 1, 230, 200, 3}, m, ++seed);
  }
  // Documents of 13 tokens: a key is attended within its query's document.
  const auto doc = [](index_t i) { return i / 13; };
  mods m;
  m.allowed = [doc](index_t, index_t, index_t q, index_t kv) { return doc(q) == doc(kv); };
  for (const dims& n : sizes)
    check_case<TestType>(loom::attention(loom::mask_mod([doc](auto, auto, auto q, auto kv) { return doc(q) == doc(kv); })),
                         n, m, ++seed);
}

TEMPLATE_TEST_CASE("attention applies ALiBi and soft-capping score_mods", "[nn][attention]", float, double) {
  std::uint64_t seed = loom_test::seed_for("attention score mods");
  for (const dims& n : sizes) {
    loom::host_tensor<float, 1> slopes({n.hq});
    vec sl(static_cast<std::size_t>(n.hq));
    for (index_t h = 0; h < n.hq; ++h) slopes.data()[h] = static_cast<float>(sl[h] = std::exp2(-1.0 - h));
    mods a;
    a.f = [sl](double s, index_t, index_t h, index_t q, index_t kv) {
      return s - static_cast<double>(static_cast<float>(sl[h])) * static_cast<double>(q > kv ? q - kv : kv - q);
    };
    a.allowed = [](index_t, index_t, index_t q, index_t kv) { return kv <= q; };
    check_case<TestType>(loom::attention(alibi, loom::causal), n, a, ++seed, slopes);
    mods c;
    c.f = [](double s, auto...) { return 2.5 * std::tanh(s / 2.5); };
    c.df = [](double s, auto...) { return 1 - std::tanh(s / 2.5) * std::tanh(s / 2.5); };
    check_case<TestType>(loom::attention(softcap, loom::no_mask), n, c, ++seed);
  }
}

TEST_CASE("attention gives fully masked rows o = 0, lse = -inf and zero gradients", "[nn][attention]") {
  // Query rows 0..4 attend nothing; the others attend keys kv <= q - 5.
  const dims n{1, 2, 1, 23, 9, 7};
  mods m;
  m.allowed = [](index_t, index_t, index_t q, index_t kv) { return kv + 5 <= q; };
  const auto attn = loom::attention(loom::mask_mod([](auto, auto, auto q, auto kv) { return kv + 5 <= q; }));
  check_case<double>(attn, n, m, 7);
  const random_case<double> c(n, 11);
  const auto &q = c.t.q, &k = c.t.k, &v = c.t.v, &dout = c.t.dout;
  auto [o, lse] = attn(q, k, v);
  auto gr = loom::grad(attn)(q, k, v, o, lse, dout);
  for (index_t h = 0; h < n.hq; ++h)
    for (index_t r = 0; r < 5; ++r) {
      CHECK(lse.data()[h * n.sq + r] == -inf);
      for (index_t d = 0; d < n.d; ++d) {
        CHECK(o.data()[(h * n.sq + r) * n.d + d] == 0.0);
        CHECK(gr.dq.data()[(h * n.sq + r) * n.d + d] == 0.0);
      }
    }
  // A key no query attends (every query masked) gets zero dk and dv: no key at all here.
  const dims none{1, 1, 1, 4, 3, 2};
  mods all_masked;
  all_masked.allowed = [](auto...) { return false; };
  check_case<double>(loom::attention(loom::mask_mod([](auto...) { return false; })), none, all_masked, 3);
}

TEST_CASE("attention propagates NaN from attended scores only", "[nn][attention]") {
  const dims n{1, 1, 1, 9, 70, 4};
  const random_case<float> c(n, 13);
  const auto &q = c.t.q, &k = c.t.k, &v = c.t.v, &dout = c.t.dout;
  // NaN at every masked entry (kv > q) and at the one attended entry of row 0.
  const auto attn = loom::attention(loom::score_mod([](auto s, auto, auto, auto q, auto kv) {
                                      return kv > q || (q == 0 && kv == 0) ? s * std::numeric_limits<float>::quiet_NaN() : s;
                                    }),
                                    loom::causal);
  auto [o, lse] = attn(q, k, v);
  auto gr = loom::grad(attn)(q, k, v, o, lse, dout);
  CHECK(std::isnan(lse.data()[0]));
  for (index_t d = 0; d < n.d; ++d) CHECK(std::isnan(o.data()[d]));
  for (index_t i = n.d; i < o.size(); ++i) CHECK(std::isfinite(o.data()[i]));
  for (index_t r = 1; r < n.sq; ++r) CHECK(std::isfinite(lse.data()[r]));
  for (index_t i = n.d; i < gr.dq.size(); ++i) CHECK(std::isfinite(gr.dq.data()[i]));
  for (index_t i = 9 * n.d; i < gr.dk.size(); ++i) CHECK((gr.dk.data()[i] == 0.0f && gr.dv.data()[i] == 0.0f));
}

TEST_CASE("attention reads no v, k or dout row of a masked entry", "[nn][attention]") {
  // Keys 3.. are attended by no query of rows 0..2 and hold NaN in v; query
  // row 0 attends nothing and holds NaN in dout.
  const dims n{1, 1, 1, 3, 8, 5};
  inputs in = random_inputs(n, 19);
  for (std::size_t i = 3 * 5; i < in.v.size(); ++i) in.v[i] = std::numeric_limits<double>::quiet_NaN();
  for (std::size_t i = 0; i < 5; ++i) in.dout[i] = std::numeric_limits<double>::quiet_NaN();
  const tensors<double> t(n, in);
  const auto attn = loom::attention(loom::mask_mod([](auto, auto, auto q, auto kv) { return q > 0 && kv < q; }));
  auto [o, lse] = attn(t.q, t.k, t.v);
  auto gr = loom::grad(attn)(t.q, t.k, t.v, o, lse, t.dout);
  for (index_t i = 0; i < o.size(); ++i) CHECK(std::isfinite(o.data()[i]));
  for (index_t i = 0; i < gr.dq.size(); ++i) CHECK(std::isfinite(gr.dq.data()[i]));
  for (index_t i = 0; i < gr.dk.size(); ++i) CHECK((std::isfinite(gr.dk.data()[i]) && std::isfinite(gr.dv.data()[i])));
}

TEST_CASE("attention's gradients match central finite differences", "[nn][attention]") {
  const dims n{1, 2, 1, 5, 7, 3};
  inputs in = random_inputs(n, 5);
  loom::host_tensor<double, 1> slopes({n.hq});
  slopes.data()[0] = 0.5;
  slopes.data()[1] = 0.25;
  const auto attn = loom::attention(loom::score_mod([](auto s, auto, auto h, auto q, auto kv, auto slope) {
                                      return 3.0 * loom::math::tanh(s / 3.0) - slope[h] * static_cast<double>(q - kv);
                                    }),
                                    loom::causal);
  // The loss: sum(o ∘ dout).
  const auto loss = [&](const inputs& x, double s0) {
    loom::host_tensor<double, 1> sl({n.hq});
    sl.data()[0] = s0;
    sl.data()[1] = slopes.data()[1];
    const tensors<double> t(n, x);
    auto [o, lse] = attn(t.q, t.k, t.v, loom::args(sl));
    double s = 0;
    for (std::size_t i = 0; i < x.dout.size(); ++i) s += o.data()[i] * x.dout[i];
    return s;
  };
  const tensors<double> t(n, in);
  const auto &q = t.q, &k = t.k, &v = t.v, &dout = t.dout;
  auto [o, lse] = attn(q, k, v, loom::args(slopes));
  auto gr = loom::grad(attn)(q, k, v, o, lse, dout, loom::args(slopes));
  const double h = 1e-6;
  const auto fd = [&](vec inputs::*member, const auto& got, const char* what) {
    INFO(what);
    for (std::size_t i = 0; i < (in.*member).size(); ++i) {
      inputs up = in, down = in;
      (up.*member)[i] += h;
      (down.*member)[i] -= h;
      const double want = (loss(up, 0.5) - loss(down, 0.5)) / (2 * h);
      INFO("element " << i);
      CHECK(std::abs(got.data()[i] - want) <= 1e-6 * (1 + std::abs(want)));
    }
  };
  fd(&inputs::q, gr.dq, "dq");
  fd(&inputs::k, gr.dk, "dk");
  fd(&inputs::v, gr.dv, "dv");
  const double want_slope = (loss(in, 0.5 + h) - loss(in, 0.5 - h)) / (2 * h);
  CHECK(std::abs(std::get<0>(gr.dargs).data()[0] - want_slope) <= 1e-6 * (1 + std::abs(want_slope)));
}

// x [B, H, S, D] stored as [B, S, H, D] (the layout of a projection's output).
template <class T>
loom::host_tensor<T, 4> as_bshd(const loom::host_tensor<T, 4>& x) {
  loom::host_tensor<T, 4> y({x.extent(0), x.extent(2), x.extent(1), x.extent(3)});
  for (index_t b = 0; b < x.extent(0); ++b)
    for (index_t h = 0; h < x.extent(1); ++h)
      for (index_t i = 0; i < x.extent(2); ++i)
        for (index_t d = 0; d < x.extent(3); ++d) y(b, i, h, d) = x(b, h, i, d);
  return y;
}

TEST_CASE("attention reads strided views as it reads contiguous tensors", "[nn][attention]") {
  const dims n{2, 4, 2, 37, 70, 6};
  const random_case<float> c(n, 17);
  const auto &q = c.t.q, &k = c.t.k, &v = c.t.v, &dout = c.t.dout;
  const auto qs = as_bshd(q), ks = as_bshd(k), vs = as_bshd(v), dos = as_bshd(dout);
  const auto attn = loom::attention(loom::sliding_window(50));
  auto [o, lse] = attn(q, k, v);
  auto [o2, lse2] = attn(qs.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2));
  auto gr = loom::grad(attn)(q, k, v, o, lse, dout);
  auto gr2 = loom::grad(attn)(qs.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2), o2, lse2, dos.transpose(1, 2));
  const auto same = [](const auto& a, const auto& b) {
    REQUIRE(a.size() == b.size());
    for (index_t i = 0; i < a.size(); ++i) REQUIRE(loom_test::same_bits(a.data()[i], b.data()[i]));
  };
  same(o, o2);
  same(lse, lse2);
  same(gr.dq, gr2.dq);
  same(gr.dk, gr2.dk);
  same(gr.dv, gr2.dv);
}

TEST_CASE("attention throws loom errors for bad shapes", "[nn][attention]") {
  const auto attn = loom::attention(loom::causal);
  loom::host_tensor<float, 4> q({1, 3, 4, 8}), k({1, 2, 5, 8}), v({1, 2, 5, 8}), k6({1, 1, 5, 6}), v6({1, 1, 5, 6});
  CHECK_THROWS_WITH(attn(q, k, v), Contains("loom: attention") && Contains("must divide the query heads"));
  loom::host_tensor<float, 4> q2({1, 2, 4, 8});
  CHECK_THROWS_WITH(attn(q2, k6, v6), Contains("same head size D"));
  CHECK_THROWS_WITH(attn(q2, k, v6), Contains("k and v must have one shape"));
  loom::host_tensor<float, 4> q3({2, 2, 4, 8});
  CHECK_THROWS_AS(attn(q3, k, v), loom::shape_error);
  loom::host_tensor<float, 1> slopes({3});
  CHECK_THROWS_WITH(loom::attention(alibi, loom::no_mask)(q2, k, v, loom::args(slopes)),
                    Contains("indexed by h must have Hq = 2"));
  auto [o, lse] = attn(q2, k, v);
  loom::host_tensor<float, 3> bad_lse({1, 2, 5});
  CHECK_THROWS_WITH(loom::grad(attn)(q2, k, v, o, bad_lse, o), Contains("lse must have shape"));
}
