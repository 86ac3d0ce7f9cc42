// SPDX-License-Identifier: Apache-2.0
// Attention on the host executor against a plain reference in double written
// here (the whole score matrix, its softmax, P·V; the backward by the chain
// rule on the materialized matrices), and the backward also against central
// finite differences of the reference. Seeded random odd sizes, Sq != Skv,
// D not a power of two, grouped-query heads; outputs poisoned (the test main
// fills every loom allocation with NaN bytes).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include <loom/nn/attention.hpp>
#include <loom/nn/attention/block_mask.hpp>

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
  for (std::size_t i = 0; i < data.size(); ++i) t.data()[i] = loom::detail::convert<T>(data[i]);
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
// x rounded to T (the values loom reads), in double.
template <class T>
inputs rounded(inputs x) {
  for (vec* v : {&x.q, &x.k, &x.v, &x.dout})
    for (double& e : *v) e = loom::detail::convert<double>(loom::detail::convert<T>(e));
  return x;
}
// Seeded random inputs of sizes n (rounded to T) and their tensors of T.
template <class T>
struct random_case {
  inputs in;
  tensors<T> t;
  random_case(const dims& n, std::uint64_t seed) : in(rounded<T>(random_inputs(n, seed))), t(n, in) {}
};

template <class T, class Got>
void check_close(const Got& got, const vec& want, double tol, const char* what) {
  INFO(what);
  REQUIRE(static_cast<std::size_t>(got.size()) == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double x = loom::detail::convert<double>(got.data()[i]);
    if (std::isinf(want[i])) {
      INFO("element " << i);
      REQUIRE(x == want[i]);
      continue;
    }
    INFO("element " << i << ": " << x << " vs " << want[i]);
    REQUIRE(std::abs(x - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

// Which code runs: the host executor's kernels, or the device kernels'
// block bodies emulated on the host.
enum class path { host, emulated };
using on_host = std::integral_constant<path, path::host>;
using emulated = std::integral_constant<path, path::emulated>;
template <path P, class Attn, class Q, class X>
auto forward(const Attn& attn, const Q& q, const Q& k, const Q& v, const X& ex) {
  if constexpr (P == path::host)
    return attn(q, k, v, ex);
  else
    return loom::detail::attn::device_emulation(attn, q, k, v, ex);
}
template <path P, class Attn, class Q, class O, class L, class X>
auto backward(const Attn& attn, const Q& q, const Q& k, const Q& v, const O& o, const L& lse, const Q& dout,
              const X& ex) {
  if constexpr (P == path::host)
    return loom::grad(attn)(q, k, v, o, lse, dout, ex);
  else
    return loom::detail::attn::device_emulation_backward(attn, q, k, v, o, lse, dout, ex);
}
// Tolerance of o and lse relative to 1 + |value| for inputs of T: the
// output's rounding for half and bf16.
template <class T>
constexpr double tolerance = std::is_same_v<T, double> ? 1e-10
                             : std::is_same_v<T, float> ? 2e-4
                             : std::is_same_v<T, loom::half> ? 2e-3 : 1.6e-2;

// Forward and backward of attention `attn` (with extra arguments ex) on path P against the reference.
template <class T, class Attn, path P = path::host, class... X>
void check_case(const Attn& attn, const dims& n, const mods& m, std::uint64_t seed, const X&... ex) {
  INFO("B " << n.b << " Hq " << n.hq << " Hkv " << n.hkv << " Sq " << n.sq << " Skv " << n.skv << " D " << n.d
            << (P == path::host ? " (host)" : " (device code, emulated)"));
  const random_case<T> c(n, seed);
  const auto &q = c.t.q, &k = c.t.k, &v = c.t.v, &dout = c.t.dout;
  const ref_out want = reference(n, m, c.in.q, c.in.k, c.in.v, &c.in.dout);
  const double tol = tolerance<T>;
  auto [o, lse] = forward<P>(attn, q, k, v, loom::args(ex...));
  check_close<T>(o, want.o, tol, "o");
  check_close<T>(lse, want.lse, std::min(tol, 2e-4), "lse");
  auto gr = backward<P>(attn, q, k, v, o, lse, dout, loom::args(ex...));
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

TEMPLATE_TEST_CASE("attention propagates NaN from attended scores only", "[nn][attention]", on_host, emulated) {
  constexpr path P = TestType::value;
  const dims n{1, 1, 1, 9, 70, 4};
  const random_case<float> c(n, 13);
  const auto &q = c.t.q, &k = c.t.k, &v = c.t.v, &dout = c.t.dout;
  // NaN at every masked entry (kv > q) and at the one attended entry of row 0.
  const auto attn = loom::attention(loom::score_mod([](auto s, auto, auto, auto q, auto kv) {
                                      return kv > q || (q == 0 && kv == 0) ? s * std::numeric_limits<float>::quiet_NaN() : s;
                                    }),
                                    loom::causal);
  auto [o, lse] = forward<P>(attn, q, k, v, loom::args());
  auto gr = backward<P>(attn, q, k, v, o, lse, dout, loom::args());
  CHECK(std::isnan(lse.data()[0]));
  CHECK(std::isnan(gr.dq.data()[0]));
  for (index_t d = 0; d < n.d; ++d) CHECK(std::isnan(o.data()[d]));
  for (index_t i = n.d; i < o.size(); ++i) CHECK(std::isfinite(o.data()[i]));
  for (index_t r = 1; r < n.sq; ++r) CHECK(std::isfinite(lse.data()[r]));
  for (index_t i = n.d; i < gr.dq.size(); ++i) CHECK(std::isfinite(gr.dq.data()[i]));
  for (index_t i = 9 * n.d; i < gr.dk.size(); ++i) CHECK((gr.dk.data()[i] == 0.0f && gr.dv.data()[i] == 0.0f));
}

TEMPLATE_TEST_CASE("attention reads no v, k or dout row of a masked entry", "[nn][attention]", on_host, emulated) {
  constexpr path P = TestType::value;
  // Keys 3.. are attended by no query of rows 0..2 and hold NaN in v; query
  // row 0 attends nothing and holds NaN in dout.
  const dims n{1, 1, 1, 3, 8, 5};
  inputs in = random_inputs(n, 19);
  for (std::size_t i = 3 * 5; i < in.v.size(); ++i) in.v[i] = std::numeric_limits<double>::quiet_NaN();
  for (std::size_t i = 0; i < 5; ++i) in.dout[i] = std::numeric_limits<double>::quiet_NaN();
  const tensors<double> t(n, in);
  const auto attn = loom::attention(loom::mask_mod([](auto, auto, auto q, auto kv) { return q > 0 && kv < q; }));
  auto [o, lse] = forward<P>(attn, t.q, t.k, t.v, loom::args());
  auto gr = backward<P>(attn, t.q, t.k, t.v, o, lse, t.dout, loom::args());
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

// The same bits in two runs' outputs and gradients.
template <class A, class B>
void same_bits(const A& a, const B& b) {
  REQUIRE(a.size() == b.size());
  for (index_t i = 0; i < a.size(); ++i) REQUIRE(loom_test::same_bits(a.data()[i], b.data()[i]));
}
template <class O, class L, class G>
void same_results(const O& o, const L& lse, const G& gr, const O& o2, const L& lse2, const G& gr2) {
  same_bits(o, o2);
  same_bits(lse, lse2);
  same_bits(gr.dq, gr2.dq);
  same_bits(gr.dk, gr2.dk);
  same_bits(gr.dv, gr2.dv);
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
  same_results(o, lse, gr, o2, lse2, gr2);
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

namespace {
// Sizes for the device kernels' tiles (64 query rows, 32 keys; head sizes up
// to 64 and up to 128): edges of both, Sq != Skv, grouped-query heads.
const dims kernel_sizes[] = {{1, 1, 1, 1, 1, 1},     {1, 2, 1, 129, 127, 80}, {2, 4, 2, 17, 65, 32},
                             {1, 1, 1, 127, 129, 128}, {1, 3, 3, 64, 1, 64},    {1, 2, 2, 65, 33, 7}};

// Two of four mask kinds (no mask; causal; a soft-capped sliding window; a
// document mask whose rows 0..4 attend nothing), chosen by `first`, on path P.
template <class T, path P>
void check_masks(const dims& n, int first, std::uint64_t& seed) {
  for (int i = first; i < first + 2; ++i) {
    mods m;
    switch (i % 4) {
      case 0:
        check_case<T, decltype(loom::attention(loom::no_mask)), P>(loom::attention(loom::no_mask), n, m, ++seed);
        break;
      case 1:
        m.allowed = [](index_t, index_t, index_t q, index_t kv) { return kv <= q; };
        check_case<T, decltype(loom::attention(loom::causal)), P>(loom::attention(loom::causal), n, m, ++seed);
        break;
      case 2: {
        m.allowed = [](index_t, index_t, index_t q, index_t kv) { return kv <= q && q - kv < 40; };
        m.f = [](double s, auto...) { return 2.5 * std::tanh(s / 2.5); };
        m.df = [](double s, auto...) { return 1 - std::tanh(s / 2.5) * std::tanh(s / 2.5); };
        const auto window = loom::attention(softcap, loom::sliding_window(40));
        check_case<T, decltype(window), P>(window, n, m, ++seed);
        break;
      }
      default: {
        m.allowed = [](index_t, index_t, index_t q, index_t kv) { return q >= 5 && (q - 5) / 13 == kv / 13; };
        const auto doc =
            loom::attention(loom::mask_mod([](auto, auto, auto q, auto kv) { return q >= 5 && (q - 5) / 13 == kv / 13; }));
        check_case<T, decltype(doc), P>(doc, n, m, ++seed);
      }
    }
  }
}
}  // namespace

TEMPLATE_TEST_CASE("attention's device kernels, emulated on the host, match a double reference", "[nn][attention]",
                   float, loom::bf16) {
  std::uint64_t seed = loom_test::seed_for("attention emulated");
  // float: every size, each with two mask kinds in turn; bf16: three sizes.
  int first = 0;
  for (const dims& n : kernel_sizes) {
    if (std::is_same_v<TestType, float> || first % 2 == 0) check_masks<TestType, path::emulated>(n, first, seed);
    ++first;
  }
}

TEMPLATE_TEST_CASE("attention takes half and bf16 inputs on the host executor", "[nn][attention]", loom::half,
                   loom::bf16) {
  std::uint64_t seed = loom_test::seed_for("attention low precision");
  check_masks<TestType, path::host>(dims{1, 2, 1, 37, 71, 19}, 0, seed);
  check_masks<TestType, path::host>(dims{2, 2, 2, 70, 33, 64}, 2, seed);
}

TEST_CASE("attention's device kernels, emulated, run ALiBi with grouped heads and fully masked rows",
          "[nn][attention]") {
  std::uint64_t seed = loom_test::seed_for("attention emulated alibi");
  for (const dims& n : {dims{2, 4, 2, 37, 71, 19}, dims{1, 6, 3, 129, 65, 24}}) {
    loom::host_tensor<float, 1> slopes({n.hq});
    vec sl(static_cast<std::size_t>(n.hq));
    for (index_t h = 0; h < n.hq; ++h) slopes.data()[h] = static_cast<float>(sl[h] = std::exp2(-1.0 - h));
    mods a;
    a.f = [sl](double s, index_t, index_t h, index_t q, index_t kv) {
      return s - sl[h] * static_cast<double>(q > kv ? q - kv : kv - q);
    };
    a.allowed = [](index_t, index_t, index_t q, index_t kv) { return kv <= q; };
    check_case<float, decltype(loom::attention(alibi, loom::causal)), path::emulated>(
        loom::attention(alibi, loom::causal), n, a, ++seed, slopes);
  }
  mods none;
  none.allowed = [](auto...) { return false; };
  const auto masked = loom::attention(loom::mask_mod([](auto...) { return false; }));
  check_case<double, decltype(masked), path::emulated>(masked, dims{1, 1, 1, 4, 3, 2}, none, ++seed);
}

TEMPLATE_TEST_CASE("attention differentiates extra arguments read at h, q and kv", "[nn][attention]",
                   on_host, emulated) {
  constexpr path P = TestType::value;
  const dims n{2, 2, 1, 6, 9, 3};
  const inputs in = random_inputs(n, 23);
  const tensors<double> t(n, in);
  // f = s + qb[q] · kb[kv] - slope[h] · (q - kv) under a causal mask.
  const auto attn = loom::attention(loom::score_mod([](auto s, auto, auto h, auto q, auto kv, auto slope, auto qb,
                                                       auto kb) {
                                      return s + qb[q] * kb[kv] - slope[h] * static_cast<double>(q - kv);
                                    }),
                                    loom::causal);
  vec slope{0.5, 0.25}, qb(static_cast<std::size_t>(n.sq)), kb(static_cast<std::size_t>(n.skv));
  for (std::size_t i = 0; i < qb.size(); ++i) qb[i] = 0.3 * static_cast<double>(i) - 0.7;
  for (std::size_t i = 0; i < kb.size(); ++i) kb[i] = 0.9 - 0.2 * static_cast<double>(i);
  const auto ref_loss = [&](const vec& sl, const vec& qv, const vec& kv) {
    mods m;
    m.f = [&](double s, index_t, index_t h, index_t q, index_t k) {
      return s + qv[q] * kv[k] - sl[h] * static_cast<double>(q - k);
    };
    m.allowed = [](index_t, index_t, index_t q, index_t k) { return k <= q; };
    const ref_out r = reference(n, m, in.q, in.k, in.v, nullptr);
    double l = 0;
    for (std::size_t i = 0; i < r.o.size(); ++i) l += r.o[i] * in.dout[i];
    return l;
  };
  const auto tensor_of = [](const vec& x) {
    loom::host_tensor<double, 1> y({static_cast<index_t>(x.size())});
    for (std::size_t i = 0; i < x.size(); ++i) y.data()[i] = x[i];
    return y;
  };
  const auto st = tensor_of(slope), qt = tensor_of(qb), kt = tensor_of(kb);
  const auto ex = loom::args(st, loom::by_query(qt), loom::by_key(kt));
  auto [o, lse] = forward<P>(attn, t.q, t.k, t.v, ex);
  auto gr = backward<P>(attn, t.q, t.k, t.v, o, lse, t.dout, ex);
  const auto fd = [&](int which, const auto& got) {
    vec* xs[] = {&slope, &qb, &kb};
    const vec base = *xs[which];
    for (std::size_t i = 0; i < base.size(); ++i) {
      vec up = base, down = base;
      up[i] += 1e-6;
      down[i] -= 1e-6;
      const auto loss = [&](const vec& x) {
        return ref_loss(which == 0 ? x : slope, which == 1 ? x : qb, which == 2 ? x : kb);
      };
      const double want = (loss(up) - loss(down)) / 2e-6;
      INFO("argument " << which << " element " << i << ": " << got.data()[i] << " vs " << want);
      CHECK(std::abs(got.data()[i] - want) <= 1e-6 * (1 + std::abs(want)));
    }
  };
  fd(0, std::get<0>(gr.dargs));
  fd(1, std::get<1>(gr.dargs));
  fd(2, std::get<2>(gr.dargs));
  loom::host_tensor<double, 1> short_q({n.sq - 1});
  CHECK_THROWS_WITH(attn(t.q, t.k, t.v, loom::args(st, loom::by_query(short_q), loom::by_key(kt))),
                    Contains("indexed by q (loom::by_query) must have Sq = 6"));
}

TEST_CASE("attention's mask kinds classify tiles that are full or empty correctly", "[nn][attention]") {
  // Every tile of 1..70 query rows by 1..70 keys at offsets 0..40, brute force.
  const auto check = [](const auto& mask, const char* what) {
    INFO(what);
    for (index_t q0 = 0; q0 < 40; q0 += 3)
      for (index_t k0 = 0; k0 < 40; k0 += 5)
        for (index_t nq = 1; nq <= 70; nq += 23)
          for (index_t nk = 1; nk <= 70; nk += 17) {
            const loom::tile_kind kind = mask.classify(0, 0, q0, q0 + nq, k0, k0 + nk);
            index_t attended = 0;
            for (index_t q = q0; q < q0 + nq; ++q)
              for (index_t kv = k0; kv < k0 + nk; ++kv) attended += mask(0, 0, q, kv) ? 1 : 0;
            INFO("rows [" << q0 << ", " << q0 + nq << ") keys [" << k0 << ", " << k0 + nk << ")");
            if (kind == loom::tile_kind::full) CHECK(attended == nq * nk);
            if (kind == loom::tile_kind::empty) CHECK(attended == 0);
            if (kind == loom::tile_kind::partial) CHECK((attended > 0 && attended < nq * nk));
          }
  };
  check(loom::causal, "causal");
  for (const index_t w : {1, 7, 32, 64}) check(loom::sliding_window(w), "sliding window");
}

TEST_CASE("attention's device kernels take head sizes up to 128", "[nn][attention]") {
  loom::host_tensor<float, 4> q({1, 1, 3, 129}), k({1, 1, 3, 129});
  CHECK_THROWS_WITH(loom::detail::attn::device_emulation(loom::attention(loom::causal), q, k, k),
                    Contains("loom: attention on the device") && Contains("D <= 128"));
}

TEST_CASE("attention runs packed sequences of different lengths", "[nn][attention]") {
  // Five sequences; the second has no query rows, the fourth no keys (its
  // rows attend nothing). Sequence b attends keys kv <= q + b, and adds the
  // key bias kb[kv] (read at kv of the sequence, packed as the keys are).
  const std::vector<index_t> lq{5, 0, 40, 3, 33}, lk{7, 3, 36, 0, 70};
  const index_t hq = 4, hkv = 2, d = 6, n = 5;
  loom::host_tensor<index_t, 1> cu_q({n + 1}), cu_k({n + 1});
  cu_q.data()[0] = cu_k.data()[0] = 0;
  for (index_t i = 0; i < n; ++i) {
    cu_q.data()[i + 1] = cu_q.data()[i] + lq[i];
    cu_k.data()[i + 1] = cu_k.data()[i] + lk[i];
  }
  const index_t tq = cu_q.data()[n], tk = cu_k.data()[n];
  const dims all{1, hq, hkv, tq, tk, d};
  const random_case<double> c(all, 29);
  vec kb(static_cast<std::size_t>(tk));
  for (std::size_t i = 0; i < kb.size(); ++i) kb[i] = 0.05 * static_cast<double>(i % 11) - 0.2;
  loom::host_tensor<double, 1> kbt({tk});
  for (index_t i = 0; i < tk; ++i) kbt.data()[i] = kb[static_cast<std::size_t>(i)];
  const auto attn = loom::attention(loom::score_mod([](auto s, auto, auto, auto, auto kv, auto bias) { return s + bias[kv]; }),
                                    loom::mask_mod([](auto b, auto, auto q, auto kv) { return kv <= q + b; }));
  const auto seqs = loom::varlen(cu_q, cu_k);
  const auto ex = loom::args(loom::by_key(kbt));
  auto [o, lse] = attn(c.t.q, c.t.k, c.t.v, seqs, ex);
  auto gr = loom::grad(attn)(c.t.q, c.t.k, c.t.v, o, lse, c.t.dout, seqs, ex);
  // The reference, sequence by sequence (rows copied out of the packed inputs).
  const auto rows_of = [&](const vec& x, index_t heads, index_t total, index_t r0, index_t nr) {
    vec y(static_cast<std::size_t>(heads * nr * d));
    for (index_t h = 0; h < heads; ++h)
      for (index_t r = 0; r < nr; ++r)
        for (index_t e = 0; e < d; ++e) y[static_cast<std::size_t>((h * nr + r) * d + e)] = x[static_cast<std::size_t>((h * total + r0 + r) * d + e)];
    return y;
  };
  const auto seq_loss = [&](const vec& bias, index_t i, ref_out* out) {
    const index_t q0 = cu_q.data()[i], k0 = cu_k.data()[i];
    const dims sd{1, hq, hkv, lq[static_cast<std::size_t>(i)], lk[static_cast<std::size_t>(i)], d};
    mods m;
    m.allowed = [i](index_t, index_t, index_t q, index_t kv) { return kv <= q + i; };
    m.f = [&bias, k0](double s, index_t, index_t, index_t, index_t kv) { return s + bias[static_cast<std::size_t>(k0 + kv)]; };
    const vec dout = rows_of(c.in.dout, hq, tq, q0, sd.sq);
    const ref_out r = reference(sd, m, rows_of(c.in.q, hq, tq, q0, sd.sq), rows_of(c.in.k, hkv, tk, k0, sd.skv),
                                rows_of(c.in.v, hkv, tk, k0, sd.skv), &dout);
    double l = 0;
    for (std::size_t e = 0; e < r.o.size(); ++e) l += r.o[e] * dout[e];
    if (out) *out = r;
    return l;
  };
  vec want_o(static_cast<std::size_t>(hq * tq * d)), want_lse(static_cast<std::size_t>(hq * tq)),
      want_dq(want_o.size()), want_dk(static_cast<std::size_t>(hkv * tk * d)), want_dv(want_dk.size());
  const auto put = [&](vec& dst, const vec& src, index_t heads, index_t total, index_t r0, index_t nr, index_t width) {
    for (index_t h = 0; h < heads; ++h)
      for (index_t r = 0; r < nr; ++r)
        for (index_t e = 0; e < width; ++e)
          dst[static_cast<std::size_t>((h * total + r0 + r) * width + e)] = src[static_cast<std::size_t>((h * nr + r) * width + e)];
  };
  for (index_t i = 0; i < n; ++i) {
    ref_out r;
    seq_loss(kb, i, &r);
    const index_t q0 = cu_q.data()[i], k0 = cu_k.data()[i], nq = lq[static_cast<std::size_t>(i)], nk = lk[static_cast<std::size_t>(i)];
    put(want_o, r.o, hq, tq, q0, nq, d);
    put(want_lse, r.lse, hq, tq, q0, nq, 1);
    put(want_dq, r.dq, hq, tq, q0, nq, d);
    put(want_dk, r.dk, hkv, tk, k0, nk, d);
    put(want_dv, r.dv, hkv, tk, k0, nk, d);
  }
  check_close<double>(o, want_o, 1e-10, "o");
  check_close<double>(lse, want_lse, 1e-10, "lse");
  check_close<double>(gr.dq, want_dq, 1e-9, "dq");
  check_close<double>(gr.dk, want_dk, 1e-9, "dk");
  check_close<double>(gr.dv, want_dv, 1e-9, "dv");
  // The key bias's gradient against central differences of the reference.
  for (index_t j = 0; j < tk; j += 7) {
    index_t i = 0;
    while (cu_k.data()[i + 1] <= j) ++i;
    vec up = kb, down = kb;
    up[static_cast<std::size_t>(j)] += 1e-6;
    down[static_cast<std::size_t>(j)] -= 1e-6;
    const double want = (seq_loss(up, i, nullptr) - seq_loss(down, i, nullptr)) / 2e-6;
    INFO("key " << j << " of sequence " << i);
    CHECK(std::abs(std::get<0>(gr.dargs).data()[j] - want) <= 1e-6 * (1 + std::abs(want)));
  }
  loom::host_tensor<index_t, 1> bad({n + 1});
  for (index_t i = 0; i <= n; ++i) bad.data()[i] = cu_q.data()[i];
  bad.data()[2] = bad.data()[3] + 1;
  CHECK_THROWS_WITH(attn(c.t.q, c.t.k, c.t.v, loom::varlen(bad, cu_k), ex), Contains("without decreasing"));
}

TEMPLATE_TEST_CASE("attention with a block mask gives the bits of its mask_mod and skips empty tiles",
                   "[nn][attention]", on_host, emulated) {
  constexpr path P = TestType::value;
  // Documents of 37 rows, queries causal within theirs: many empty and full tiles.
  // The predicate counts its calls.
  std::atomic<long> calls{0};
  const auto doc = loom::mask_mod([&calls](auto, auto h, auto q, auto kv) {
    calls.fetch_add(1, std::memory_order_relaxed);
    return (q + h) / 37 == (kv + h) / 37 && kv <= q;
  });
  const dims n{2, 2, 1, 150, 150, 8};
  const random_case<float> c(n, 31);
  const auto bm = loom::make_block_mask(doc, n.b, n.hq, n.sq, n.skv);
  // The table against the predicate, cell by cell (brute force).
  for (index_t b = 0; b < n.b; ++b)
    for (index_t h = 0; h < n.hq; ++h)
      for (index_t q0 = 0; q0 < n.sq; q0 += 16)
        for (index_t k0 = 0; k0 < n.skv; k0 += 16) {
          const index_t q1 = std::min(q0 + 32, n.sq), k1 = std::min(k0 + 16, n.skv);
          index_t on = 0;
          for (index_t q = q0; q < q1; ++q)
            for (index_t kv = k0; kv < k1; ++kv) on += doc(b, h, q, kv) ? 1 : 0;
          const loom::tile_kind kind = bm.kind.classify(b, h, q0, q1, k0, k1);
          INFO("b " << b << " h " << h << " rows [" << q0 << ", " << q1 << ") keys [" << k0 << ", " << k1 << ")");
          CHECK((kind == loom::tile_kind::empty) == (on == 0));
          CHECK((kind == loom::tile_kind::full) == (on == (q1 - q0) * (k1 - k0)));
        }
  const auto plain = loom::attention(softcap, doc);
  const auto blocked = loom::attention(softcap, bm);
  calls = 0;
  auto [o, lse] = forward<P>(plain, c.t.q, c.t.k, c.t.v, loom::args());
  const long plain_calls = calls.exchange(0);
  auto [o2, lse2] = forward<P>(blocked, c.t.q, c.t.k, c.t.v, loom::args());
  const long blocked_calls = calls.load();
  // Every element of every tile without the table; with it the partial
  // tiles' (about half here: tiles of 32 or 64 rows straddle documents of 37).
  CHECK(plain_calls >= n.b * n.hq * n.sq * n.skv);
  CHECK(blocked_calls > 0);
  CHECK(blocked_calls * 3 < plain_calls * 2);
  auto gr = backward<P>(plain, c.t.q, c.t.k, c.t.v, o, lse, c.t.dout, loom::args());
  auto gr2 = backward<P>(blocked, c.t.q, c.t.k, c.t.v, o2, lse2, c.t.dout, loom::args());
  same_results(o, lse, gr, o2, lse2, gr2);
  const random_case<float> other(dims{2, 2, 1, 149, 150, 8}, 32);
  CHECK_THROWS_WITH(blocked(other.t.q, other.t.k, other.t.v), Contains("the block mask was made for batch 2"));
}

TEMPLATE_TEST_CASE("attention treats -inf from a score_mod as a masked entry", "[nn][attention]", on_host, emulated) {
  constexpr path P = TestType::value;
  // The score_mod makes the causal mask and empties row 2; the mask_mod says the same.
  const auto by_score = loom::attention(loom::score_mod([](auto s, auto, auto, auto q, auto kv) {
                                          return kv > q || q == 2 ? decltype(s){-std::numeric_limits<float>::infinity()} : s;
                                        }),
                                        loom::no_mask);
  const auto by_mask = loom::attention(loom::mask_mod([](auto, auto, auto q, auto kv) { return kv <= q && q != 2; }));
  const dims n{1, 2, 1, 70, 67, 9};
  const random_case<float> c(n, 43);
  auto [o, lse] = forward<P>(by_score, c.t.q, c.t.k, c.t.v, loom::args());
  auto [o2, lse2] = forward<P>(by_mask, c.t.q, c.t.k, c.t.v, loom::args());
  auto gr = backward<P>(by_score, c.t.q, c.t.k, c.t.v, o, lse, c.t.dout, loom::args());
  auto gr2 = backward<P>(by_mask, c.t.q, c.t.k, c.t.v, o2, lse2, c.t.dout, loom::args());
  CHECK(lse.data()[2] == -std::numeric_limits<float>::infinity());
  same_results(o, lse, gr, o2, lse2, gr2);
}
