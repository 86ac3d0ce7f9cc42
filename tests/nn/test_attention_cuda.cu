// SPDX-License-Identifier: Apache-2.0
// Attention's device kernels on the GPU against the same block bodies
// emulated on the host (tests/nn/test_attention_host.cpp checks those, and
// the host executor, against a double reference) and against the host
// executor; the backward twice, for the same bits. Seeded random odd sizes
// across the kernels' tile edges; outputs poisoned (the test main fills
// every loom allocation with NaN bytes).
#include <cmath>
#include <cstdint>
#include <random>

#include <loom/loom.hpp>

#include "loom_test.hpp"

namespace {
using loom::index_t;

template <class T>
loom::host_tensor<T, 4> random_tensor(const loom::shape<4>& s, std::mt19937_64& g) {
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  loom::host_tensor<T, 4> t(s);
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = loom::detail::convert<T>(u(g));
  return t;
}

// Every element of the device tensor `got` within tol (relative to 1 + |want|) of the host tensor `want`.
template <class D, class H>
void check_near(const D& got, const H& want, double tol, const char* what) {
  INFO(what);
  const auto h = loom::to_host(got);
  REQUIRE(h.size() == want.size());
  for (index_t i = 0; i < want.size(); ++i) {
    const double x = loom::detail::convert<double>(h.data()[i]), w = loom::detail::convert<double>(want.data()[i]);
    INFO("element " << i << ": " << x << " vs " << w);
    if (std::isinf(w)) {
      REQUIRE(x == w);
      continue;
    }
    REQUIRE(std::abs(x - w) <= tol * (1 + std::abs(w)));
  }
}
template <class D>
void check_same_bits(const D& a, const D& b) {
  const auto x = loom::to_host(a), y = loom::to_host(b);
  for (index_t i = 0; i < x.size(); ++i) REQUIRE(loom_test::same_bits(x.data()[i], y.data()[i]));
}

struct dims {
  index_t b, hq, hkv, sq, skv, d;
};

// attn on the GPU against its emulation and the host executor, forward and backward.
template <class T, class Attn, class... X>
void check_device(const Attn& attn, const dims& n, std::uint64_t seed, const X&... ex) {
  INFO("B " << n.b << " Hq " << n.hq << " Hkv " << n.hkv << " Sq " << n.sq << " Skv " << n.skv << " D " << n.d);
  std::mt19937_64 g(seed);
  const auto q = random_tensor<T>({n.b, n.hq, n.sq, n.d}, g), k = random_tensor<T>({n.b, n.hkv, n.skv, n.d}, g),
             v = random_tensor<T>({n.b, n.hkv, n.skv, n.d}, g), dout = random_tensor<T>({n.b, n.hq, n.sq, n.d}, g);
  const auto qd = loom::to_device(q), kd = loom::to_device(k), vd = loom::to_device(v), dod = loom::to_device(dout);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 8e-3;
  auto [o, lse] = attn(qd, kd, vd, loom::args(loom::to_device(ex)...));
  auto em = loom::detail::attn::device_emulation(attn, q, k, v, loom::args(ex...));
  auto ho = attn(q, k, v, loom::args(ex...));
  check_near(o, em.o, tol, "o vs emulation");
  check_near(lse, em.lse, 1e-5, "lse vs emulation");
  check_near(o, ho.o, tol * 20, "o vs host executor");
  const auto dargs = loom::args(loom::to_device(ex)...);
  auto gr = loom::grad(attn)(qd, kd, vd, o, lse, dod, dargs);
  auto gr2 = loom::grad(attn)(qd, kd, vd, o, lse, dod, dargs);
  auto eg = loom::detail::attn::device_emulation_backward(attn, q, k, v, em.o, em.lse, dout, loom::args(ex...));
  check_near(gr.dq, eg.dq, tol * 5, "dq vs emulation");
  check_near(gr.dk, eg.dk, tol * 5, "dk vs emulation");
  check_near(gr.dv, eg.dv, tol * 5, "dv vs emulation");
  check_same_bits(gr.dq, gr2.dq);
  check_same_bits(gr.dk, gr2.dk);
  check_same_bits(gr.dv, gr2.dv);
  if constexpr (sizeof...(X) > 0) {
    check_near(std::get<0>(gr.dargs), std::get<0>(eg.dargs), 1e-4, "dargs vs emulation");
    check_same_bits(std::get<0>(gr.dargs), std::get<0>(gr2.dargs));
  }
}

const dims sizes[] = {{1, 1, 1, 1, 1, 1}, {1, 2, 1, 129, 127, 80}, {2, 4, 2, 17, 65, 32}, {1, 1, 1, 127, 129, 128},
                      {1, 3, 3, 64, 1, 64}};
// A score_mod or mask_mod that runs on the GPU is a functor with a LOOM_HD
// call operator (a template: the backward calls it on dual numbers): nvcc
// lets no kernel's template arguments name a host lambda's closure type,
// and a __host__ __device__ lambda cannot be generic.
struct alibi_fn {
  template <class S, class I, class X>
  LOOM_HD auto operator()(S s, I, I h, I q, I kv, X slope) const {
    return s - slope[h] * static_cast<float>(q > kv ? q - kv : kv - q);
  }
};
struct softcap_fn {
  template <class S, class... I>
  LOOM_HD auto operator()(S s, I...) const {
    return 2.5f * loom::math::tanh(s / 2.5f);
  }
};
struct document_fn {
  template <class I>
  LOOM_HD bool operator()(I, I, I q, I kv) const {
    return q >= 5 && (q - 5) / 13 == kv / 13;
  }
};

}  // namespace

template <class T>
void check_kernels() {
  std::uint64_t seed = loom_test::seed_for("attention cuda");
  for (const dims& n : sizes) {
    check_device<T>(loom::attention(loom::causal), n, ++seed);
    check_device<T>(loom::attention(loom::score_mod(softcap_fn{}), loom::sliding_window(40)), n, ++seed);
    check_device<T>(loom::attention(loom::mask_mod(document_fn{})), n, ++seed);
    loom::host_tensor<float, 1> slopes({n.hq});
    for (index_t h = 0; h < n.hq; ++h) slopes.data()[h] = std::exp2(-1.0f - static_cast<float>(h));
    check_device<T>(loom::attention(loom::score_mod(alibi_fn{}), loom::no_mask), n, ++seed, slopes);
  }
}

TEMPLATE_TEST_CASE("attention's device kernels match their emulation and the host executor", "[nn][attention][cuda]",
                   float, loom::bf16) {
  check_kernels<TestType>();
}

TEST_CASE("attention on the device throws loom errors for bad shapes", "[nn][attention][cuda]") {
  loom::device_tensor<float, 4> q({1, 3, 4, 8}), k({1, 2, 5, 8}), big({1, 1, 3, 129});
  CHECK_THROWS_WITH(loom::attention(loom::causal)(q, k, k), Catch::Matchers::Contains("must divide the query heads"));
  CHECK_THROWS_WITH(loom::attention(loom::causal)(big, big, big), Catch::Matchers::Contains("D <= 128"));
}

TEST_CASE("attention on the device with a block mask gives the bits of its mask_mod", "[nn][attention][cuda]") {
  const auto doc = loom::mask_mod(document_fn{});
  const auto blocks = loom::make_block_mask<loom::device>(doc, 2, 2, 150, 150);
  std::mt19937_64 g(41);
  const auto q = loom::to_device(random_tensor<float>({2, 2, 150, 40}, g)),
             k = loom::to_device(random_tensor<float>({2, 1, 150, 40}, g)),
             v = loom::to_device(random_tensor<float>({2, 1, 150, 40}, g)),
             dout = loom::to_device(random_tensor<float>({2, 2, 150, 40}, g));
  const auto plain = loom::attention(loom::score_mod(softcap_fn{}), doc);
  const auto blocked = loom::attention(loom::score_mod(softcap_fn{}), blocks);
  auto a = plain(q, k, v);
  auto b = blocked(q, k, v);
  check_same_bits(a.o, b.o);
  check_same_bits(a.lse, b.lse);
  auto ga = loom::grad(plain)(q, k, v, a.o, a.lse, dout);
  auto gb = loom::grad(blocked)(q, k, v, b.o, b.lse, dout);
  check_same_bits(ga.dq, gb.dq);
  check_same_bits(ga.dk, gb.dk);
  check_same_bits(ga.dv, gb.dv);
}
