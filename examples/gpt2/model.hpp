// SPDX-License-Identifier: Apache-2.0
#pragma once
// GPT-2 in loom: the parameters as views of one buffer laid out as llm.c's
// checkpoint, GPT-2's initialization drawn with loom's Philox, and the
// forward pass with the mean cross-entropy of the next token.
#include <cmath>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include <loom/loom.hpp>

#include "checkpoint.hpp"

namespace gpt2 {

using loom::index_t;

//! The 16 parameter tensors of GPT-2, views into one buffer in llm.c's
//! order. Weights keep llm.c's (PyTorch's) [out, in] layout; a product
//! reads them transposed (`.t()`), which the GEMM takes as it is.
template <loom::memory_space Space>
struct parameters {
  template <std::size_t R>
  using view = loom::view<float, R, Space>;

  gpt2_config config;
  loom::tensor<float, 1, Space> storage;  // every parameter, back to back
  view<2> wte, wpe;                       // [padded V, C], [maxT, C]
  view<2> ln1w, ln1b;                     // [L, C]
  view<3> qkvw;                           // [L, 3C, C]
  view<2> qkvb;                           // [L, 3C]
  view<3> attprojw;                       // [L, C, C]
  view<2> attprojb, ln2w, ln2b;           // [L, C]
  view<3> fcw;                            // [L, 4C, C]
  view<2> fcb;                            // [L, 4C]
  view<3> fcprojw;                        // [L, C, 4C]
  view<2> fcprojb;                        // [L, C]
  view<1> lnfw, lnfb;                     // [C]

  explicit parameters(const gpt2_config& c) : config(c), storage(loom::shape<1>{c.parameter_count()}) {
    const index_t C = c.channels, L = c.layers;
    float* p = storage.data();
    const auto next = [&]<std::size_t R>(loom::shape<R> extents) {
      view<R> v(p, extents);
      p += v.size();
      return v;
    };
    using loom::shape;
    wte = next(shape<2>{c.padded_vocab, C}), wpe = next(shape<2>{c.max_seq, C});
    ln1w = next(shape<2>{L, C}), ln1b = next(shape<2>{L, C});
    qkvw = next(shape<3>{L, 3 * C, C}), qkvb = next(shape<2>{L, 3 * C});
    attprojw = next(shape<3>{L, C, C}), attprojb = next(shape<2>{L, C});
    ln2w = next(shape<2>{L, C}), ln2b = next(shape<2>{L, C});
    fcw = next(shape<3>{L, 4 * C, C}), fcb = next(shape<2>{L, 4 * C});
    fcprojw = next(shape<3>{L, C, 4 * C}), fcprojb = next(shape<2>{L, C});
    lnfw = next(shape<1>{C}), lnfb = next(shape<1>{C});
  }

  //! GPT-2's initialization: N(0, 0.02) for the embeddings and the weights,
  //! N(0, 0.02 / sqrt(2 L)) for the two residual projections (attprojw,
  //! fcprojw), 1 for the layer norms' weights, 0 for biases and for the
  //! padded rows of wte. Tensor k of the checkpoint's order draws Philox
  //! stream (seed, k), element i of it the tensor's i-th element.
  void init_random(std::uint64_t seed) {
    const float std_all = 0.02f, std_residual = 0.02f / std::sqrt(2.0f * static_cast<float>(config.layers));
    const auto normal = [&](auto v, std::uint64_t k, float sd) { v = loom::randn(seed, k) * sd; };
    normal(wte.slice(loom::range(0, config.vocab)), 0, std_all);
    loom::fill(wte.slice(loom::range(config.vocab, config.padded_vocab)), 0.0f);
    normal(wpe, 1, std_all);
    loom::fill(ln1w, 1.0f), loom::fill(ln1b, 0.0f);
    normal(qkvw, 4, std_all), loom::fill(qkvb, 0.0f);
    normal(attprojw, 6, std_residual), loom::fill(attprojb, 0.0f);
    loom::fill(ln2w, 1.0f), loom::fill(ln2b, 0.0f);
    normal(fcw, 10, std_all), loom::fill(fcb, 0.0f);
    normal(fcprojw, 12, std_residual), loom::fill(fcprojb, 0.0f);
    loom::fill(lnfw, 1.0f), loom::fill(lnfb, 0.0f);
  }
};

//! The activations of a forward pass over B sequences of T tokens, each
//! block's kept for the backward; allocated once. Tensors of rank 4 hold
//! one [B, T, ...] slice per block (residual one more: the blocks' inputs,
//! then the last block's output).
template <loom::memory_space Space>
struct activations {
  template <std::size_t R>
  using tensor = loom::tensor<float, R, Space>;
  index_t B, T;
  tensor<4> residual, ln1, qkv, atty, mid, ln2, fc, fch;  // [., B, T, C], qkv 3C, fc and fch 4C
  std::vector<tensor<4>> o;                              // each block's attention output [B, NH, T, hs]
  std::vector<tensor<3>> lse;                            // and its log-sum-exp [B, NH, T]
  tensor<3> lnf, logits;                                 // [B, T, C], [B, T, V]

  activations(const gpt2_config& c, index_t batch, index_t seq)
      : B(batch), T(seq), residual({c.layers + 1, B, T, c.channels}), ln1({c.layers, B, T, c.channels}),
        qkv({c.layers, B, T, 3 * c.channels}), atty({c.layers, B, T, c.channels}), mid({c.layers, B, T, c.channels}),
        ln2({c.layers, B, T, c.channels}), fc({c.layers, B, T, 4 * c.channels}), fch({c.layers, B, T, 4 * c.channels}),
        o(static_cast<std::size_t>(c.layers)), lse(static_cast<std::size_t>(c.layers)), lnf({B, T, c.channels}),
        logits({B, T, c.vocab}) {}
};

//! Causal attention with the default scale 1 / sqrt(C / NH).
inline constexpr auto causal_attention = loom::attention(loom::causal);

//! q, k and v as [B, NH, T, hs] views of a qkv tensor [B, T, (3, NH, hs)].
template <class QKV>
auto split_heads(const QKV& qkv, index_t heads) {
  using loom::shape, loom::whole;
  const index_t B = qkv.extent(0), T = qkv.extent(1), hs = qkv.extent(2) / (3 * heads);
  const auto h = qkv.reshape(shape<5>{B, T, 3, heads, hs});
  return std::array{h.slice(whole, whole, 0).transpose(1, 2), h.slice(whole, whole, 1).transpose(1, 2),
                    h.slice(whole, whole, 2).transpose(1, 2)};
}

//! The forward pass over tokens `inputs` [B, T] up to the logits (into
//! a.logits [B, T, V]). Per block: layer norm,
//! the qkv product (bias in the GEMM's epilogue), causal attention on
//! strided views of qkv, the output projection with bias and residual in
//! the epilogue, layer norm, the MLP (bias in the first GEMM's epilogue,
//! then the tanh-GELU; bias and residual in the second's). The classifier
//! reads wte's first V rows: the padded rows give no logits.
template <loom::memory_space Space, class Ids>
void forward_logits(const parameters<Space>& p, activations<Space>& a, const Ids& inputs) {
  using loom::range, loom::shape;
  const auto& c = p.config;
  const index_t B = a.B, T = a.T, C = c.channels, NH = c.heads, hs = C / NH;
  constexpr float eps = 1e-5f;
  a.residual.slice(0) = loom::embedding(inputs, p.wte) + p.wpe.slice(range(0, T));
  for (index_t l = 0; l < c.layers; ++l) {
    auto x = a.residual.slice(l), ln1 = a.ln1.slice(l), qkv = a.qkv.slice(l), atty = a.atty.slice(l),
         mid = a.mid.slice(l), ln2 = a.ln2.slice(l), fc = a.fc.slice(l), fch = a.fch.slice(l);
    ln1 = loom::layer_norm(x, p.ln1w.slice(l), p.ln1b.slice(l), eps);
    qkv = loom::matmul(ln1, p.qkvw.slice(l).t()) + p.qkvb.slice(l);
    const auto [q, k, v] = split_heads(qkv, NH);
    auto [o, lse] = causal_attention(q, k, v);  // o [B, NH, T, hs]
    atty.reshape(shape<4>{B, T, NH, hs}).transpose(1, 2) = o;
    mid = loom::matmul(atty, p.attprojw.slice(l).t()) + p.attprojb.slice(l) + x;
    ln2 = loom::layer_norm(mid, p.ln2w.slice(l), p.ln2b.slice(l), eps);
    fc = loom::matmul(ln2, p.fcw.slice(l).t()) + p.fcb.slice(l);
    fch = loom::gelu(fc, loom::approximate::tanh);
    a.residual.slice(l + 1) = loom::matmul(fch, p.fcprojw.slice(l).t()) + p.fcprojb.slice(l) + mid;
    a.o[static_cast<std::size_t>(l)] = std::move(o), a.lse[static_cast<std::size_t>(l)] = std::move(lse);
  }
  a.lnf = loom::layer_norm(a.residual.slice(c.layers), p.lnfw, p.lnfb, eps);
  a.logits = loom::matmul(a.lnf, p.wte.slice(range(0, c.vocab)).t());
}

//! The forward pass and the mean cross-entropy against `targets` [B, T]
//! (int64; a 0-d tensor).
template <loom::memory_space Space, class Ids, class Targets>
loom::tensor<float, 0, Space> forward(const parameters<Space>& p, activations<Space>& a, const Ids& inputs,
                                      const Targets& targets) {
  using loom::shape;
  forward_logits(p, a, inputs);
  const index_t N = a.B * a.T;
  return loom::cross_entropy(a.logits.view().reshape(shape<2>{N, p.config.vocab}), targets.view().reshape(shape<1>{N}));
}

}  // namespace gpt2
