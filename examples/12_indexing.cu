// SPDX-License-Identifier: Apache-2.0
// The first layer of a language model in loom: token embeddings plus
// position embeddings, scaled, as one assignment and one kernel; the
// gradient of the token table, deterministic (the same bits on every run),
// given by embedding_backward and derived by loom::grad;
// and the creation leaves and concat, fused like any other operand. Runs
// on the GPU when there is one and on the host executor otherwise.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

#include <loom/loom.hpp>

template <class Space>
int run() {
  const loom::index_t vocab = 1001, width = 64, batch = 3, seq = 17;
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::uniform_int_distribution<std::int64_t> token(0, vocab - 1);
  loom::host_tensor<float, 2> wte_h({vocab, width}), wpe_h({seq, width});
  loom::host_tensor<std::int64_t, 2> ids_h({batch, seq});
  for (loom::index_t i = 0; i < wte_h.size(); ++i) wte_h.data()[i] = dist(gen);
  for (loom::index_t i = 0; i < wpe_h.size(); ++i) wpe_h.data()[i] = dist(gen);
  for (loom::index_t i = 0; i < ids_h.size(); ++i) ids_h.data()[i] = token(gen);
  auto put = [](const auto& h) {
    if constexpr (std::is_same_v<Space, loom::device>)
      return loom::to_device(h);
    else
      return h;
  };
  const auto wte = put(wte_h), wpe = put(wpe_h);
  const auto ids = put(ids_h);
  loom::tensor<float, 3, Space> h({batch, seq, width});
  const float scale = std::sqrt(static_cast<float>(width));

  // Token rows scaled, plus the position rows broadcast over the batch: one kernel.
  const auto before = loom::launches();
  h = loom::embedding(ids, wte) * scale + wpe;
  const auto after = loom::launches();
  const auto launches = std::is_same_v<Space, loom::device> ? after.device - before.device : after.host - before.host;

  // The gradient of the token table for a gradient of ones: each row counts
  // its token's occurrences; padding row 0 gets none.
  loom::tensor<float, 3, Space> dh({batch, seq, width});
  dh = 1.0f;
  const auto dwte = loom::embedding_backward(dh, ids, vocab, 0);
  const auto again = loom::embedding_backward(dh, ids, vocab, 0);

  // The same gradient derived by loom::grad from the layer itself: the
  // adjoint at the embedding (dh * 8) summed into the table's rows.
  constexpr auto first_layer = loom::layer([](auto tokens, auto table, auto positions) {
    return loom::embedding(tokens, table, 0) * 8.0f + positions;  // padding row 0
  });
  loom::tensor<float, 2, Space> dtable({vocab, width});
  dtable = loom::grad<1>(first_layer)(ids, wte, wpe, dh);

  // Creation leaves and concat inside expressions: a sinusoid next to a copy of h's first row.
  loom::tensor<float, 2, Space> joined({seq, 2 * width});
  const auto wave = loom::broadcast_to(loom::sin(loom::arange<float>(width) * 0.1f), loom::shape<2>{seq, width});
  joined = loom::concat(wave, h.slice(0), 1);

  const auto h_h = loom::to_host(h);
  const auto d_h = loom::to_host(dwte), a_h = loom::to_host(again), g_h = loom::to_host(dtable);
  const auto j_h = loom::to_host(joined);
  int bad = 0;
  for (loom::index_t b = 0; b < batch; ++b)
    for (loom::index_t t = 0; t < seq; ++t)
      for (loom::index_t c = 0; c < width; ++c) {
        const float want = wte_h(ids_h(b, t), c) * scale + wpe_h(t, c);
        bad += std::fabs(h_h(b, t, c) - want) > 1e-5f * (1.0f + std::fabs(want));
      }
  for (loom::index_t v = 0; v < vocab; ++v) {
    loom::index_t count = 0;
    for (loom::index_t i = 0; i < ids_h.size(); ++i) count += v != 0 && ids_h.data()[i] == v;
    bad += d_h(v, 5) != static_cast<float>(count) || g_h(v, 5) != 8.0f * static_cast<float>(count);
  }
  bad += std::memcmp(d_h.data(), a_h.data(), d_h.nbytes()) != 0;
  for (loom::index_t c = 0; c < width; ++c)
    bad += j_h(4, width + c) != h_h(0, 4, c) || std::fabs(j_h(4, c) - std::sin(static_cast<float>(c) * 0.1f)) > 1e-6f;
  std::printf("%s: embedding * scale + positions in %llu launch; table gradient deterministic; %s\n", Space::name,
              static_cast<unsigned long long>(launches), bad == 0 ? "ok" : "MISMATCH");
  return bad == 0 && launches == 1 ? 0 : 1;
}

int main() {
  if (loom::gpu::is_available()) return run<loom::device>();
  std::printf("no GPU (%s): running on the host executor\n", loom::gpu::unavailable_reason().c_str());
  return run<loom::host>();
}
