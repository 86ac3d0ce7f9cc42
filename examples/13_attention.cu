// SPDX-License-Identifier: Apache-2.0
// Attention with a score_mod and a mask kind on the host executor
// (docs/15_attention.md): ALiBi slopes per head under a causal mask, with
// grouped-query heads, then its gradients by loom::grad. Exits non-zero
// unless every output is finite and each row of o, a convex combination of
// rows of v in [-1, 1], stays in [-1, 1]. With a GPU, a soft-capped causal
// attention also runs on device tensors and must match the host executor.
#include <loom/loom.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

// ALiBi: a per-head slope times the distance, subtracted from the score.
constexpr auto alibi = loom::score_mod([](auto s, auto b, auto h, auto q, auto kv, auto slope) {
  (void)b;
  return s - slope[h] * static_cast<float>(q - kv);
});
constexpr auto attn = loom::attention(alibi, loom::causal);

// Soft-capping as a functor: on device tensors a score_mod must be one
// (docs/15_attention.md says why); the host executor takes it as well.
struct softcap_fn {
  template <class S, class... I>
  LOOM_HD auto operator()(S s, I...) const { return 30.f * loom::math::tanh(s / 30.f); }
};

// The soft-capped attention on the GPU against the host executor: the
// largest difference of o.
float softcap_on_device(const loom::host_tensor<float, 4>& q, const loom::host_tensor<float, 4>& k,
                        const loom::host_tensor<float, 4>& v) {
  const auto q_dev = loom::to_device(q), k_dev = loom::to_device(k), v_dev = loom::to_device(v);
  auto attn = loom::attention(loom::score_mod(softcap_fn{}), loom::causal);
  auto [o, lse] = attn(q_dev, k_dev, v_dev); // one kernel on the current stream
  const auto o_dev = loom::to_host(o);
  const auto host = attn(q, k, v);
  const auto& o_host = host.o;
  float worst = 0;
  for (loom::index_t i = 0; i < o_host.size(); ++i)
    worst = std::max(worst, std::abs(o_dev.data()[i] - o_host.data()[i]));
  return worst;
}

int main() {
  const loom::index_t batch = 2, heads = 4, kv_heads = 2, sq = 45, skv = 45, dim = 24;
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  loom::host_tensor<float, 4> q({batch, heads, sq, dim}), dout({batch, heads, sq, dim});
  loom::host_tensor<float, 4> k({batch, kv_heads, skv, dim}), v({batch, kv_heads, skv, dim});
  loom::host_tensor<float, 1> slopes({heads});
  for (loom::index_t i = 0; i < q.size(); ++i) q.data()[i] = dist(gen), dout.data()[i] = dist(gen);
  for (loom::index_t i = 0; i < k.size(); ++i) k.data()[i] = dist(gen), v.data()[i] = dist(gen);
  for (loom::index_t h = 0; h < heads; ++h) slopes(h) = std::exp2(-1.0f - static_cast<float>(h));

  auto [o, lse] = attn(q, k, v, loom::args(slopes));                     // o [B, Hq, Sq, D], lse [B, Hq, Sq]
  auto g = loom::grad(attn)(q, k, v, o, lse, dout, loom::args(slopes));  // g.dq, g.dk, g.dv, g.dargs
  const auto& dslopes = std::get<0>(g.dargs);                            // [Hq], float

  bool ok = true;
  for (loom::index_t i = 0; i < o.size(); ++i) ok = ok && std::abs(o.data()[i]) <= 1.0f;
  for (loom::index_t i = 0; i < g.dq.size(); ++i) ok = ok && std::isfinite(g.dq.data()[i]);
  for (loom::index_t i = 0; i < g.dk.size(); ++i) ok = ok && std::isfinite(g.dk.data()[i] + g.dv.data()[i]);
  std::printf("lse[0, 0, 44] = %.4f, dslopes[0] = %.4g: %s\n", static_cast<double>(lse.data()[sq - 1]),
              static_cast<double>(dslopes.data()[0]), ok ? "ok" : "FAILED");
  if (loom::gpu::is_available()) {
    const float worst = softcap_on_device(q, k, v);
    ok = ok && worst <= 1e-4f;
    std::printf("soft-capped causal attention, GPU vs host executor: max |o| difference %.3g: %s\n",
                static_cast<double>(worst), worst <= 1e-4f ? "ok" : "FAILED");
  }
  return ok ? 0 : 1;
}
