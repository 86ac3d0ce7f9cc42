// SPDX-License-Identifier: Apache-2.0
#pragma once
// GPT-2's backward from loom's derived gradients, layer by layer in reverse
// order, and AdamW. Nothing here differentiates by hand: each call is a
// gradient loom derives for its layer (the fused cross-entropy's, matmul_backward
// with the tanh-GELU's derivative from loom::grad, layer_norm_backward,
// loom::grad of the attention, embedding_backward); this file only routes
// each value's gradient to the layers that read it, adding where a value
// is read twice (the residual stream, the tied wte).
#include <loom/loom.hpp>
#include <loom/optim/optim.hpp>

#include "model.hpp"

namespace gpt2 {

//! Every parameter's gradient, in a buffer laid out as the parameters.
template <loom::memory_space Space>
struct gradients : parameters<Space> {
  using parameters<Space>::parameters;
};

//! The fused classifier: the mean cross-entropy of a.logits against
//! `targets` [B, T] (returned, 0-d), and its gradient written over a.logits
//! (loom::cross_entropy_with_gradient: one row kernel, no probabilities).
template <loom::memory_space Space, class Targets>
loom::tensor<float, 0, Space> classifier_loss(const parameters<Space>& p, activations<Space>& a,
                                              const Targets& targets) {
  using loom::shape;
  const index_t N = a.B * a.T;
  const auto logits = a.logits.view().reshape(shape<2>{N, p.config.vocab});
  return loom::cross_entropy_with_gradient(logits, targets.view().reshape(shape<1>{N}), logits);
}

//! Writes into g (every element) the gradient of the loss whose gradient
//! with respect to the logits a.logits holds (after classifier_loss).
template <loom::memory_space Space, class Ids>
void backward_from_logits(const parameters<Space>& p, activations<Space>& a, gradients<Space>& g, const Ids& inputs) {
  using loom::range, loom::shape, loom::skip;
  const auto& c = p.config;
  const index_t B = a.B, T = a.T, C = c.channels, NH = c.heads, hs = C / NH, N = B * T, V = c.vocab;
  constexpr double eps = 1e-5;
  const auto rows = [&](auto t) { return t.reshape(shape<2>{N, t.extent(2)}); };  // [B, T, X] as [B T, X]

  // The classifier: logits = lnf wte[:V]^T, so wte[:V] receives dlogits^T lnf.
  loom::tensor<float, 3, Space> dres({B, T, C}), dx({B, T, C}), dmid({B, T, C}), dfch({B, T, 4 * C}),
      dqkv({B, T, 3 * C});
  loom::matmul_backward_into(dx, g.wte.slice(range(0, V)).t(), skip, a.lnf, p.wte.slice(range(0, V)).t(), a.logits);
  loom::fill(g.wte.slice(range(V, c.padded_vocab)), 0.0f);
  {
    const auto r = loom::layer_norm_backward(rows(a.residual.slice(c.layers)), p.lnfw, rows(dx.view()), eps);
    rows(dres.view()) = r.dx, g.lnfw = r.dweight, g.lnfb = r.dbias;
  }
  for (index_t l = c.layers; l-- > 0;) {
    // residual[l + 1] = gelu(fc) fcprojw^T + fcprojb + mid
    loom::matmul_backward_into(dfch, g.fcprojw.slice(l).t(), g.fcprojb.slice(l), a.fch.slice(l),
                               p.fcprojw.slice(l).t(), dres);
    // fc = ln2 fcw^T + fcb, the GELU's derivative derived by loom::grad
    loom::matmul_backward_into(dx, g.fcw.slice(l).t(), g.fcb.slice(l), a.ln2.slice(l), p.fcw.slice(l).t(), dfch,
                               a.fc.slice(l), {.activation = loom::matmul_activation::gelu_tanh});
    {
      const auto r = loom::layer_norm_backward(rows(a.mid.slice(l)), p.ln2w.slice(l), rows(dx.view()), eps);
      rows(dmid.view()) = rows(dres.view()) + r.dx, g.ln2w.slice(l) = r.dweight, g.ln2b.slice(l) = r.dbias;
    }
    // mid = atty attprojw^T + attprojb + residual[l]
    loom::matmul_backward_into(dx, g.attprojw.slice(l).t(), g.attprojb.slice(l), a.atty.slice(l),
                               p.attprojw.slice(l).t(), dmid);
    {
      const auto [q, k, v] = split_heads(a.qkv.slice(l), NH);
      const auto dout = dx.view().reshape(shape<4>{B, T, NH, hs}).transpose(1, 2);
      const auto d = loom::grad(causal_attention)(q, k, v, a.o[static_cast<std::size_t>(l)],
                                                  a.lse[static_cast<std::size_t>(l)], dout);
      auto [dq, dk, dv] = split_heads(dqkv.view(), NH);
      dq = d.dq, dk = d.dk, dv = d.dv;
    }
    // qkv = ln1 qkvw^T + qkvb
    loom::matmul_backward_into(dx, g.qkvw.slice(l).t(), g.qkvb.slice(l), a.ln1.slice(l), p.qkvw.slice(l).t(), dqkv);
    {
      const auto r = loom::layer_norm_backward(rows(a.residual.slice(l)), p.ln1w.slice(l), rows(dx.view()), eps);
      rows(dres.view()) = rows(dmid.view()) + r.dx, g.ln1w.slice(l) = r.dweight, g.ln1b.slice(l) = r.dbias;
    }
  }
  // residual[0] = wte[inputs] + wpe[:T]
  const auto dwte = loom::embedding_backward(dres, inputs, c.padded_vocab);
  g.wte = g.wte + dwte;
  auto dwpe = g.wpe.slice(range(0, T));
  loom::assign(dwpe, dres.slice(0));  // `dwpe = view` would rebind the view, not copy
  for (index_t b = 1; b < B; ++b) dwpe = dwpe + dres.slice(b);
  loom::fill(g.wpe.slice(range(T, c.max_seq)), 0.0f);
}

//! Writes the gradient of the mean loss of the last forward(p, a, inputs,
//! targets) into g (every element written); a.logits is overwritten with
//! the logits' gradient.
template <loom::memory_space Space, class Ids, class Targets>
void backward(const parameters<Space>& p, activations<Space>& a, gradients<Space>& g, const Ids& inputs,
              const Targets& targets) {
  (void)classifier_loss(p, a, targets);
  backward_from_logits(p, a, g, inputs);
}

}  // namespace gpt2
