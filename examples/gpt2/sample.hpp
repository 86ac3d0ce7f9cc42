// SPDX-License-Identifier: Apache-2.0
#pragma once
// Generation from GPT-2 one token at a time with a key/value cache: each
// block keeps the keys and values of the tokens so far, so a new token
// computes only its own query, key and value, and its attention reads the
// cache. Greedy, or drawn from the top k tokens with loom's Philox.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <loom/loom.hpp>

#include "model.hpp"

namespace gpt2 {

//! The key/value cache of B sequences of up to maxT tokens (per block keys
//! and values [B, NH, maxT, hs]) and the activations of one token.
template <loom::memory_space Space>
struct kv_cache {
  template <std::size_t R>
  using tensor = loom::tensor<float, R, Space>;
  index_t B, length = 0;          // tokens cached so far
  tensor<5> k, v;                 // [L, B, NH, maxT, hs]
  tensor<3> x, ln, qkv, atty, mid, fc, fch, logits;  // [B, 1, C], qkv 3C, fc and fch 4C, logits V

  kv_cache(const gpt2_config& c, index_t batch)
      : B(batch), k({c.layers, B, c.heads, c.max_seq, c.channels / c.heads}),
        v({c.layers, B, c.heads, c.max_seq, c.channels / c.heads}), x({B, 1, c.channels}), ln({B, 1, c.channels}),
        qkv({B, 1, 3 * c.channels}), atty({B, 1, c.channels}), mid({B, 1, c.channels}), fc({B, 1, 4 * c.channels}),
        fch({B, 1, 4 * c.channels}), logits({B, 1, c.vocab}) {}
};

//! Attention of one new token over the cached keys: every key attended.
inline constexpr auto cached_attention = loom::attention(loom::no_mask);

//! Runs one token per sequence (`tokens` [B, 1], int32) at position
//! cache.length through the model: its keys and values join the cache,
//! its logits [B, 1, V] land in cache.logits. The same layers as forward,
//! on one row per sequence; the attention reads keys and values [0, t].
template <loom::memory_space Space, class Ids>
void decode_step(const parameters<Space>& p, kv_cache<Space>& cache, const Ids& tokens) {
  using loom::range, loom::shape, loom::whole;
  const auto& c = p.config;
  const index_t B = cache.B, t = cache.length, C = c.channels, NH = c.heads, hs = C / NH;
  if (t >= c.max_seq)
    throw loom::value_error("loom: gpt2: the key/value cache is full (" + std::to_string(c.max_seq) + " tokens)");
  constexpr float eps = 1e-5f;
  cache.x = loom::embedding(tokens, p.wte) + p.wpe.slice(range(t, t + 1));
  for (index_t l = 0; l < c.layers; ++l) {
    cache.ln = loom::layer_norm(cache.x, p.ln1w.slice(l), p.ln1b.slice(l), eps);
    cache.qkv = loom::matmul(cache.ln, p.qkvw.slice(l).t()) + p.qkvb.slice(l);
    const auto [q, k, v] = split_heads(cache.qkv, NH);  // [B, NH, 1, hs]
    const auto keys = cache.k.slice(l), values = cache.v.slice(l);
    loom::assign(keys.slice(whole, whole, range(t, t + 1)), k);
    loom::assign(values.slice(whole, whole, range(t, t + 1)), v);
    const auto [o, lse] = cached_attention(q, keys.slice(whole, whole, range(0, t + 1)),
                                           values.slice(whole, whole, range(0, t + 1)));
    loom::assign(cache.atty.view().reshape(shape<4>{B, 1, NH, hs}).transpose(1, 2), o);
    cache.mid = loom::matmul(cache.atty, p.attprojw.slice(l).t()) + p.attprojb.slice(l) + cache.x;
    cache.ln = loom::layer_norm(cache.mid, p.ln2w.slice(l), p.ln2b.slice(l), eps);
    cache.fc = loom::matmul(cache.ln, p.fcw.slice(l).t()) + p.fcb.slice(l);
    cache.fch = loom::gelu(cache.fc, loom::approximate::tanh);
    cache.x = loom::matmul(cache.fch, p.fcprojw.slice(l).t()) + p.fcprojb.slice(l) + cache.mid;
  }
  cache.ln = loom::layer_norm(cache.x, p.lnfw, p.lnfb, eps);
  cache.logits = loom::matmul(cache.ln, p.wte.slice(range(0, c.vocab)).t());
  ++cache.length;
}

//! The token drawn from one row of logits: the most likely (top_k 1; the
//! lowest index among equals), or one of the top_k most likely with
//! probability softmax(logits / temperature) among them, drawn with the
//! uniform u in [0, 1).
inline std::int32_t pick_token(const float* logits, index_t vocab, index_t top_k, double temperature, float u) {
  std::vector<std::int32_t> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const auto k = static_cast<std::ptrdiff_t>(std::clamp<index_t>(top_k, 1, vocab));
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int32_t a, std::int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  if (k == 1) return order[0];
  std::vector<double> weight(static_cast<std::size_t>(k));
  for (std::ptrdiff_t j = 0; j < k; ++j)
    weight[static_cast<std::size_t>(j)] = std::exp((logits[order[j]] - logits[order[0]]) / temperature);
  const double target = u * std::accumulate(weight.begin(), weight.end(), 0.0);
  double cumulative = 0;
  for (std::ptrdiff_t j = 0; j < k; ++j)
    if ((cumulative += weight[static_cast<std::size_t>(j)]) > target) return order[j];
  return order[k - 1];
}

//! Generates `count` tokens after each of B prompts (`prompt` [B, P] on the
//! host, P >= 1, P + count <= maxT), feeding the prompt and then each new
//! token through decode_step. Token s of sequence b is drawn with
//! pick_token and the uniform of element b of Philox stream (seed, s)
//! (loom::rand). Returns [B, P + count]: the prompts and their continuations.
template <loom::memory_space Space>
loom::host_tensor<std::int32_t, 2> generate(const parameters<Space>& p,
                                            const loom::host_tensor<std::int32_t, 2>& prompt, index_t count,
                                            index_t top_k = 1, double temperature = 1.0, std::uint64_t seed = 0) {
  const index_t B = prompt.extent(0), P = prompt.extent(1), V = p.config.vocab;
  if (P < 1 || P + count > p.config.max_seq)
    throw loom::value_error("loom: gpt2: a prompt of " + std::to_string(P) + " tokens and " + std::to_string(count) +
                            " more exceed the model's maxT " + std::to_string(p.config.max_seq) + " (or it is empty)");
  loom::host_tensor<std::int32_t, 2> out({B, P + count}), token({B, 1});
  for (index_t b = 0; b < B; ++b)
    for (index_t i = 0; i < P; ++i) out(b, i) = prompt(b, i);
  kv_cache<Space> cache(p.config, B);
  for (index_t i = 0; i + 1 < P + count; ++i) {  // token i in, the logits of token i + 1 out
    for (index_t b = 0; b < B; ++b) token(b, 0) = out(b, i);
    if constexpr (std::is_same_v<Space, loom::host>)
      decode_step(p, cache, token);
    else
      decode_step(p, cache, loom::to_device(token));
    if (i + 1 < P) continue;
    const auto logits = loom::to_host(cache.logits);  // [B, 1, V]
    const auto u = loom::rand<float, 1, loom::host>({B}, seed, static_cast<std::uint64_t>(i + 1 - P));
    for (index_t b = 0; b < B; ++b) out(b, i + 1) = pick_token(logits.data() + b * V, V, top_k, temperature, u(b));
  }
  return out;
}

}  // namespace gpt2
