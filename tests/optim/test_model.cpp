// SPDX-License-Identifier: Apache-2.0
// loom::model on the host executor: every parameter's derived gradient
// against central finite differences of a forward written out in double
// loops (an MLP; a residual block with layer norm whose input is used by two
// steps; a tied embedding; a transformer block with attention and an input's
// gradient), two runs bitwise equal, the recompute policy, and the refusals.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <loom/model/model.hpp>

#include "loom_test.hpp"

using Catch::Matchers::Contains;
using loom::index_t;
using loom::matmul_activation;
using mat = loom::host_tensor<double, 2>;
using vec = loom::host_tensor<double, 1>;

namespace {
mat random_mat(index_t r, index_t c, std::mt19937_64& g) {
  mat m({r, c});
  loom_test::randomize(m.view(), g);
  for (index_t i = 0; i < m.size(); ++i) m.data()[i] *= 0.25;
  return m;
}
vec random_vec(index_t n, std::mt19937_64& g) {
  vec v({n});
  for (index_t i = 0; i < n; ++i) v.data()[i] = loom_test::random_value<double>(g, -0.5, 0.5);
  return v;
}
template <class T>
void poison(T& t) {
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = loom_test::poison_value<double>();
}

// Plain double loops: y[n, m] = act(x[n, k] w[k, m] + b[m]).
std::vector<double> linear_ref(const std::vector<double>& x, index_t n, index_t k, const mat& w, const vec& b, bool relu) {
  const index_t m = w.extent(1);
  std::vector<double> y(static_cast<std::size_t>(n * m));
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < m; ++j) {
      double s = b.data()[j];
      for (index_t p = 0; p < k; ++p) s += x[static_cast<std::size_t>(i * k + p)] * w.data()[p * m + j];
      y[static_cast<std::size_t>(i * m + j)] = relu && s < 0 ? 0.0 : s;
    }
  return y;
}
std::vector<double> values(const mat& x) { return {x.data(), x.data() + x.size()}; }

// Plain double loops: layer norm of rows of length d (biased variance, eps 1e-5), times w plus b.
std::vector<double> layer_norm_ref(const std::vector<double>& in, index_t d, const vec& w, const vec& b) {
  std::vector<double> out(in.size());
  for (index_t i = 0; i < static_cast<index_t>(in.size()) / d; ++i) {
    double mean = 0, var = 0;
    for (index_t j = 0; j < d; ++j) mean += in[static_cast<std::size_t>(i * d + j)] / d;
    for (index_t j = 0; j < d; ++j) var += std::pow(in[static_cast<std::size_t>(i * d + j)] - mean, 2) / d;
    for (index_t j = 0; j < d; ++j)
      out[static_cast<std::size_t>(i * d + j)] =
          (in[static_cast<std::size_t>(i * d + j)] - mean) / std::sqrt(var + 1e-5) * w.data()[j] + b.data()[j];
  }
  return out;
}

// Every element of every parameter: the model's gradient against the
// central difference of the reference loss.
void check_gradients(const std::vector<double*>& params, const std::vector<index_t>& sizes,
                     const std::vector<const double*>& grads, const std::function<double()>& loss) {
  const double h = 1e-6;
  for (std::size_t p = 0; p != params.size(); ++p)
    for (index_t i = 0; i < sizes[p]; ++i) {
      const double keep = params[p][i];
      params[p][i] = keep + h;
      const double up = loss();
      params[p][i] = keep - h;
      const double down = loss();
      params[p][i] = keep;
      const double fd = (up - down) / (2 * h);
      INFO("parameter " << p << " element " << i);
      REQUIRE(std::abs(grads[p][i] - fd) <= 1e-7 + 1e-6 * std::abs(fd));
    }
}

// An MLP: h = relu(x w1 + b1); logits = h w2 + b2; loss = cross_entropy.
struct mlp {
  static constexpr index_t n = 7, d_in = 5, hidden = 9, classes = 3;
  std::mt19937_64 g{loom_test::seed_for("model mlp")};
  mat x = random_mat(n, d_in, g), w1 = random_mat(d_in, hidden, g), w2 = random_mat(hidden, classes, g);
  vec b1 = random_vec(hidden, g), b2 = random_vec(classes, g);
  loom::host_tensor<std::int64_t, 1> labels{{n}};
  mat h{{n, hidden}}, logits{{n, classes}};
  loom::host_tensor<double, 0> loss{loom::shape<0>{}};
  mlp() {
    for (index_t i = 0; i < n; ++i) labels.data()[i] = (i * 2 + 1) % classes;
  }
  auto make(loom::step_policy hidden_policy = loom::step_policy::keep) {
    return loom::model(loom::parameters(w1, b1, w2, b2),
                       loom::step(h, hidden_policy) = loom::linear(x, w1, b1, matmul_activation::relu),
                       loom::step(logits) = loom::linear(h, w2, b2),
                       loom::step(loss) = loom::cross_entropy_loss(logits, labels));
  }
  double reference() const {
    const auto hv = linear_ref(values(x), n, d_in, w1, b1, true);
    const auto z = linear_ref(hv, n, hidden, w2, b2, false);
    double total = 0;
    for (index_t i = 0; i < n; ++i) {
      double mx = -INFINITY, s = 0;
      for (index_t c = 0; c < classes; ++c) mx = std::max(mx, z[static_cast<std::size_t>(i * classes + c)]);
      for (index_t c = 0; c < classes; ++c) s += std::exp(z[static_cast<std::size_t>(i * classes + c)] - mx);
      total += mx + std::log(s) - z[static_cast<std::size_t>(i * classes + labels.data()[i])];
    }
    return total / n;
  }
};

constexpr auto layer_norm = loom::layer([](auto x, auto w, auto b) {
  auto c = x - row_mean(x);
  return c * rsqrt(row_mean(c * c) + 1e-5) * w + b;
});
constexpr auto residual = loom::layer([](auto x, auto v) { return x + v; });

// A residual block over a projected input: e = x w0 + b0;
// y = e + (relu(layer_norm(e) w1 + b1) w2 + b2); e feeds two steps.
struct block {
  static constexpr index_t n = 5, d_in = 3, d = 7, f = 11;
  std::mt19937_64 g{loom_test::seed_for("model block")};
  mat x = random_mat(n, d_in, g), w0 = random_mat(d_in, d, g), w1 = random_mat(d, f, g), w2 = random_mat(f, d, g);
  vec b0 = random_vec(d, g), b1 = random_vec(f, g), b2 = random_vec(d, g), gamma = random_vec(d, g), beta = random_vec(d, g);
  mat dy = random_mat(n, d, g);
  mat e{{n, d}}, nrm{{n, d}}, u{{n, f}}, v{{n, d}}, y{{n, d}};
  block() {
    for (index_t i = 0; i < d; ++i) gamma.data()[i] += 1.0;
  }
  auto make(loom::step_policy u_policy = loom::step_policy::keep) {
    return loom::model(loom::parameters(w0, b0, gamma, beta, w1, b1, w2, b2),
                       loom::step(e) = loom::linear(x, w0, b0),
                       loom::step(nrm) = loom::apply(layer_norm, e, gamma, beta),
                       loom::step(u, u_policy) = loom::linear(nrm, w1, b1, matmul_activation::relu),
                       loom::step(v) = loom::linear(u, w2, b2),
                       loom::step(y) = loom::apply(residual, e, v));
  }
  // sum(y * dy): its gradient is the backward of dy.
  double reference() const {
    const auto ev = linear_ref(values(x), n, d_in, w0, b0, false);
    const auto nv = layer_norm_ref(ev, d, gamma, beta);
    const auto uv = linear_ref(nv, n, d, w1, b1, true);
    const auto vv = linear_ref(uv, n, f, w2, b2, false);
    double total = 0;
    for (index_t i = 0; i < n * d; ++i)
      total += (ev[static_cast<std::size_t>(i)] + vv[static_cast<std::size_t>(i)]) * dy.data()[i];
    return total;
  }
};

double gelu_tanh(double z) {
  const double c = std::sqrt(2 / 3.14159265358979323846);
  return 0.5 * z * (1 + std::tanh(c * (z + 0.044715 * z * z * z)));
}

// A weight and a bias tied across three products: u = gelu_tanh(x w + c);
// v = u w + c; t = v w + d. In the backward, the last step writes the
// gradients of w, the middle one adds to w's (through scratch) while it
// writes c's, the first adds to both (in the GEMMs' epilogue).
struct tied {
  static constexpr index_t n = 5, d = 6;
  std::mt19937_64 g{loom_test::seed_for("model tied")};
  mat x = random_mat(n, d, g), w = random_mat(d, d, g), dy = random_mat(n, d, g);
  vec c = random_vec(d, g), bd = random_vec(d, g);
  mat u{{n, d}}, v{{n, d}}, t{{n, d}};
  auto make() {
    return loom::model(loom::parameters(w, c, bd),
                       loom::step(u, loom::step_policy::recompute) = loom::linear(x, w, c, matmul_activation::gelu_tanh),
                       loom::step(v) = loom::linear(u, w, c), loom::step(t) = loom::linear(v, w, bd));
  }
  double reference() const {
    auto uv = linear_ref(values(x), n, d, w, c, false);
    for (auto& z : uv) z = gelu_tanh(z);
    const auto vv = linear_ref(uv, n, d, w, c, false);
    const auto tv = linear_ref(vv, n, d, w, bd, false);
    double total = 0;
    for (index_t i = 0; i < n * d; ++i) total += tv[static_cast<std::size_t>(i)] * dy.data()[i];
    return total;
  }
};

// A tied embedding: tok = wte[ids]; e = tok + wpe (broadcast over the
// batch); logits = e wte[0:V]^T (a transposed row slice of the table: wte's
// last rows get only the embedding's gradient); the mean cross-entropy.
struct tied_embedding {
  static constexpr index_t batch = 2, t = 3, c = 5, vocab = 7, rows = 9, n = batch * t;
  std::mt19937_64 g{loom_test::seed_for("model tied embedding")};
  mat wte = random_mat(rows, c, g), wpe = random_mat(t, c, g);
  loom::host_tensor<std::int64_t, 2> ids{{batch, t}};
  loom::host_tensor<std::int64_t, 1> labels{{n}};
  loom::host_tensor<double, 3> tok{{batch, t, c}}, e{{batch, t, c}};
  mat logits{{n, vocab}};
  loom::host_tensor<double, 0> loss{loom::shape<0>{}};
  tied_embedding() {
    const std::int64_t id[n] = {3, 8, 0, 3, 6, 7};  // 3 twice, 7 and 8 beyond the classifier's rows
    for (index_t i = 0; i < n; ++i) ids.data()[i] = id[i], labels.data()[i] = (i * 4 + 1) % vocab;
  }
  auto make() {
    using namespace loom;
    return model(parameters(wte, wpe), step(tok) = embedding_lookup(ids, wte), step(e) = apply(residual, tok, wpe),
                 step(logits) = linear(e.view().reshape(shape<2>{n, c}), wte.view().slice(range(0, vocab)).t()),
                 step(loss) = cross_entropy_loss(logits, labels));
  }
  double reference() const {
    double total = 0;
    for (index_t i = 0; i < n; ++i) {
      std::vector<double> z(vocab);
      double mx = -INFINITY, s = 0;
      for (index_t v = 0; v < vocab; ++v) {
        for (index_t j = 0; j < c; ++j)
          z[static_cast<std::size_t>(v)] +=
              (wte.data()[ids.data()[i] * c + j] + wpe.data()[(i % t) * c + j]) * wte.data()[v * c + j];
        mx = std::max(mx, z[static_cast<std::size_t>(v)]);
      }
      for (index_t v = 0; v < vocab; ++v) s += std::exp(z[static_cast<std::size_t>(v)] - mx);
      total += mx + std::log(s) - z[static_cast<std::size_t>(labels.data()[i])];
    }
    return total / n;
  }
};

constexpr auto causal_attention = loom::attention(loom::causal);

// A transformer (GPT-2) block over x [B T, C] with torch's weight layout
// ([out, in], read through transposed views): ln1 = layer_norm(x); qkv =
// ln1 wqkv^T + bqkv; causal attention over q, k, v, views of qkv's heads,
// into atty's heads; mid = atty wp^T + bp + x; ln2 = layer_norm(mid); fc =
// gelu_tanh(ln2 wfc^T + bfc); y = fc wfp^T + bfp + mid. x is an input with
// a gradient.
struct transformer_block {
  static constexpr index_t batch = 2, t = 5, c = 6, heads = 2, hs = c / heads, f = 4 * c, n = batch * t;
  std::mt19937_64 g{loom_test::seed_for("model transformer block")};
  mat x = random_mat(n, c, g), wqkv = random_mat(3 * c, c, g), wp = random_mat(c, c, g), wfc = random_mat(f, c, g),
      wfp = random_mat(c, f, g), dy = random_mat(n, c, g);
  vec g1 = random_vec(c, g), be1 = random_vec(c, g), bqkv = random_vec(3 * c, g), bp = random_vec(c, g),
      g2 = random_vec(c, g), be2 = random_vec(c, g), bfc = random_vec(f, g), bfp = random_vec(c, g);
  mat ln1{{n, c}}, qkv{{n, 3 * c}}, atty{{n, c}}, mid{{n, c}}, ln2{{n, c}}, fc{{n, f}}, y{{n, c}};
  transformer_block() {
    for (index_t i = 0; i < c; ++i) g1.data()[i] += 1.0, g2.data()[i] += 1.0;
    for (index_t i = 0; i < wqkv.size(); ++i) wqkv.data()[i] *= 4;  // scores of order 1
  }
  auto make() {
    using namespace loom;
    const auto h = qkv.view().reshape(shape<5>{batch, t, 3, heads, hs});
    const auto head = [&](index_t i) { return h.slice(whole, whole, i).transpose(1, 2); };  // [B, NH, T, hs]
    return model(parameters(g1, be1, wqkv, bqkv, wp, bp, g2, be2, wfc, bfc, wfp, bfp), inputs(x),
                 step(ln1) = apply(layer_norm, x, g1, be1), step(qkv) = linear(ln1, wqkv.view().t(), bqkv),
                 step(atty.view().reshape(shape<4>{batch, t, heads, hs}).transpose(1, 2)) =
                     attend(causal_attention, head(0), head(1), head(2)),
                 step(mid) = linear(atty, wp.view().t(), bp).plus(x), step(ln2) = apply(layer_norm, mid, g2, be2),
                 step(fc) = linear(ln2, wfc.view().t(), bfc, matmul_activation::gelu_tanh),
                 step(y) = linear(fc, wfp.view().t(), bfp).plus(mid));
  }
  // in [n, k] times w^T (w [m, k]) plus b.
  static std::vector<double> dense(const std::vector<double>& in, index_t k, const mat& w, const vec& b) {
    const index_t m = w.extent(0);
    std::vector<double> out(static_cast<std::size_t>(n * m));
    for (index_t i = 0; i < n; ++i)
      for (index_t o = 0; o < m; ++o) {
        double s = b.data()[o];
        for (index_t p = 0; p < k; ++p) s += in[static_cast<std::size_t>(i * k + p)] * w.data()[o * k + p];
        out[static_cast<std::size_t>(i * m + o)] = s;
      }
    return out;
  }
  // sum(y * dy).
  double reference() const {
    const auto xv = values(x);
    const auto q = dense(layer_norm_ref(xv, c, g1, be1), c, wqkv, bqkv);
    std::vector<double> a(static_cast<std::size_t>(n * c));
    const auto at = [&](index_t b, index_t s, index_t part, index_t hd, index_t d) {
      return q[static_cast<std::size_t>((b * t + s) * 3 * c + part * c + hd * hs + d)];
    };
    for (index_t b = 0; b < batch; ++b)
      for (index_t hd = 0; hd < heads; ++hd)
        for (index_t i = 0; i < t; ++i) {
          std::vector<double> p(static_cast<std::size_t>(i + 1));
          double mx = -INFINITY, z = 0;
          for (index_t s = 0; s <= i; ++s) {
            double dot = 0;
            for (index_t d = 0; d < hs; ++d) dot += at(b, i, 0, hd, d) * at(b, s, 1, hd, d);
            p[static_cast<std::size_t>(s)] = dot / std::sqrt(double(hs));
            mx = std::max(mx, p[static_cast<std::size_t>(s)]);
          }
          for (auto& v : p) z += v = std::exp(v - mx);
          for (index_t d = 0; d < hs; ++d) {
            double o = 0;
            for (index_t s = 0; s <= i; ++s) o += p[static_cast<std::size_t>(s)] / z * at(b, s, 2, hd, d);
            a[static_cast<std::size_t>((b * t + i) * c + hd * hs + d)] = o;
          }
        }
    auto m = dense(a, c, wp, bp);
    for (std::size_t i = 0; i != m.size(); ++i) m[i] += xv[i];
    auto u = dense(layer_norm_ref(m, c, g2, be2), c, wfc, bfc);
    for (auto& v : u) v = gelu_tanh(v);
    const auto yv = dense(u, f, wfp, bfp);
    double total = 0;
    for (index_t i = 0; i < n * c; ++i) total += (yv[static_cast<std::size_t>(i)] + m[static_cast<std::size_t>(i)]) * dy.data()[i];
    return total;
  }
};

template <class Net, class... P>
std::vector<std::vector<double>> grads_of(const Net& net, const P&... p) {
  return {std::vector<double>(net.grad(p).data(), net.grad(p).data() + p.size())...};
}
}  // namespace

TEST_CASE("model derives every gradient of an MLP as finite differences of its loss", "[optim][model]") {
  mlp m;
  auto net = m.make();
  poison(m.h), poison(m.logits);
  net.forward();
  REQUIRE(std::abs(m.loss() - m.reference()) < 1e-12);
  net.backward();
  // cross-entropy: count, gradient, copy; each linear: bias sum and its copy, the GEMMs
  // (the first without da), the ReLU's dz.
  CHECK(net.last_backward().steps == 3);
  CHECK(net.last_backward().kernels == 11);
  // The memory plan, in 256-byte units: the gradients of w1 (45 doubles, 2
  // units), b1, w2, b2 (1 each) for the whole backward; of the logits (21
  // doubles, 1) from the loss's backward to the second product's; of h (63,
  // 2) from the second product's backward to the first's. The two overlap
  // at the second product's backward: 5 + 1 + 2 units.
  CHECK(net.peak_bytes() == 8 * 256);
  CHECK(net.arena_bytes() == 8 * 256);
  check_gradients({m.w1.data(), m.b1.data(), m.w2.data(), m.b2.data()}, {m.w1.size(), m.b1.size(), m.w2.size(), m.b2.size()},
                  {net.grad(m.w1).data(), net.grad(m.b1).data(), net.grad(m.w2).data(), net.grad(m.b2).data()},
                  [&] { return m.reference(); });
}

TEST_CASE("model derives every gradient of a residual block with layer norm, adding the two uses of a value",
          "[optim][model]") {
  block b;
  auto net = b.make();
  poison(b.e), poison(b.nrm), poison(b.u), poison(b.v), poison(b.y);
  net.forward();
  net.backward(b.dy);
  CHECK(net.last_backward().steps == 5);
  // The residual add's 1 (de and dv), v's 4, u's 5 (with the ReLU's dz), the
  // layer norm's 2 and the add of its de into the residual's, e's 3 (no dx).
  CHECK(net.last_backward().kernels == 16);
  check_gradients({b.w0.data(), b.b0.data(), b.gamma.data(), b.beta.data(), b.w1.data(), b.b1.data(), b.w2.data(),
                   b.b2.data()},
                  {b.w0.size(), b.b0.size(), b.gamma.size(), b.beta.size(), b.w1.size(), b.b1.size(), b.w2.size(),
                   b.b2.size()},
                  {net.grad(b.w0).data(), net.grad(b.b0).data(), net.grad(b.gamma).data(), net.grad(b.beta).data(),
                   net.grad(b.w1).data(), net.grad(b.b1).data(), net.grad(b.w2).data(), net.grad(b.b2).data()},
                  [&] { return b.reference(); });
}

TEST_CASE("model adds the gradients of a weight and a bias tied across three products", "[optim][model]") {
  tied m;
  auto net = m.make();
  poison(m.u), poison(m.v), poison(m.t);
  net.forward();
  poison(m.u);  // recomputed, with gelu's input, before the middle step's backward reads it
  net.backward(m.dy);
  CHECK(net.last_backward().recomputed == 1);
  check_gradients({m.w.data(), m.c.data(), m.bd.data()}, {m.w.size(), m.c.size(), m.bd.size()},
                  {net.grad(m.w).data(), net.grad(m.c).data(), net.grad(m.bd).data()}, [&] { return m.reference(); });
}

TEST_CASE("model derives a tied embedding's gradients: the lookup and a classifier on a transposed row slice",
          "[optim][model]") {
  tied_embedding m;
  auto net = m.make();
  poison(m.tok), poison(m.e), poison(m.logits);
  net.forward();
  REQUIRE(std::abs(m.loss() - m.reference()) < 1e-12);
  net.backward();
  net.backward();  // twice: wte's gradient is cleared before each backward, not added to the last one
  CHECK(net.last_backward().steps == 4);
  CHECK(net.last_backward().cleared == 1);  // wte: read in part by the classifier, zeroed, both steps add
  check_gradients({m.wte.data(), m.wpe.data()}, {m.wte.size(), m.wpe.size()},
                  {net.grad(m.wte).data(), net.grad(m.wpe).data()}, [&] { return m.reference(); });
}

TEST_CASE("model derives every gradient of a transformer block and of its input", "[optim][model]") {
  transformer_block b;
  auto net = b.make();
  poison(b.ln1), poison(b.qkv), poison(b.atty), poison(b.mid), poison(b.ln2), poison(b.fc), poison(b.y);
  net.forward();
  net.backward(b.dy);
  net.backward(b.dy);  // twice: qkv's gradient is cleared before each backward
  CHECK(net.last_backward().steps == 7);
  CHECK(net.last_backward().cleared == 1);  // qkv's gradient: q, k and v each add their part
  CHECK(net.last_backward().zeroed == 0);
  // The clearing of qkv's gradient; y's product 4 and its residual's copy;
  // fc's 5 (with gelu's dz); the second layer norm's 2 and its add into
  // mid's gradient; mid's product 4 and x's copy; the attention's 3 passes
  // and 3 adds of dq, dk, dv into qkv's gradient; qkv's product 4; the
  // first layer norm's 2 and its add into x's gradient.
  CHECK(net.last_backward().kernels == 32);
  // The memory plan in 256-byte units. Parameters and x, all backward: g1,
  // be1, bqkv, bp, g2, be2, bfc, bfp 1 each, wqkv 4, wp 2, wfc 5, wfp 5, x 2:
  // 26. At the backward of fc's step (its input's gradient written, mid's
  // and fc's gradients live): fc's gradient 8 (240 doubles), gelu's input
  // kept from the forward 8, mid's gradient 2, ln2's 2: 20, more than at
  // any other time (qkv's gradient 6 and ln1's 2 at the qkv product's).
  CHECK(net.peak_bytes() == (26 + 20) * 256);
  CHECK(net.arena_bytes() >= net.peak_bytes());
  std::vector<double*> params;
  std::vector<index_t> sizes;
  std::vector<const double*> grads;
  const auto add = [&](auto& p) {
    params.push_back(p.data()), sizes.push_back(p.size()), grads.push_back(net.grad(p).data());
  };
  add(b.x), add(b.g1), add(b.be1), add(b.wqkv), add(b.bqkv), add(b.wp), add(b.bp), add(b.g2), add(b.be2);
  add(b.wfc), add(b.bfc), add(b.wfp), add(b.bfp);
  check_gradients(params, sizes, grads, [&] { return b.reference(); });
}

TEST_CASE("model gives the same bits in two runs and under the recompute policy", "[optim][model]") {
  block b;
  auto net = b.make();
  net.forward();
  net.backward(b.dy);
  const auto first = grads_of(net, b.w0, b.b0, b.gamma, b.beta, b.w1, b.b1, b.w2, b.b2);
  for (auto* p : {&b.w0, &b.w1, &b.w2}) {
    auto gv = net.grad(*p);
    poison(gv);
  }
  net.forward();
  net.backward(b.dy);
  CHECK(grads_of(net, b.w0, b.b0, b.gamma, b.beta, b.w1, b.b1, b.w2, b.b2) == first);
  CHECK(net.last_backward().recomputed == 0);

  // u recomputed: overwritten between the forward and the backward, the same bits.
  block r;
  auto rnet = r.make(loom::step_policy::recompute);
  rnet.forward();
  poison(r.u);
  rnet.backward(r.dy);
  CHECK(rnet.last_backward().recomputed == 1);
  CHECK(grads_of(rnet, r.w0, r.b0, r.gamma, r.beta, r.w1, r.b1, r.w2, r.b2) == first);
}

TEST_CASE("model refuses shapes that do not match between steps, naming the step and the operand", "[optim][model]") {
  mlp m;
  mat w2_bad({m.hidden + 1, m.classes}), logits_bad({m.n, m.classes + 2});
  using namespace loom;
  CHECK_THROWS_AS(model(parameters(m.w1, m.b1, w2_bad), step(m.h) = linear(m.x, m.w1, m.b1, matmul_activation::relu),
                        step(m.logits) = linear(m.h, w2_bad, m.b2)),
                  shape_error);
  CHECK_THROWS_WITH(model(parameters(m.w1, m.b1, w2_bad), step(m.h) = linear(m.x, m.w1, m.b1, matmul_activation::relu),
                          step(m.logits) = linear(m.h, w2_bad, m.b2)),
                    Contains("loom: model step 1 (linear): operand a of shape [7, 9] (the output of step 0) and operand b of "
                             "shape [10, 3] (parameter 2)"));
  CHECK_THROWS_WITH(model(parameters(m.w1, m.b1), step(m.h) = linear(m.x, m.w1, m.b1, matmul_activation::relu),
                          step(logits_bad) = linear(m.h, m.w2, m.b2)),
                    Contains("loom: model step 1 (linear): its output of shape [7, 5] for a product of shape [7, 3]"));
  block b;
  mat short_rows({b.n - 1, b.d});
  CHECK_THROWS_WITH(model(parameters(b.w0, b.b0), step(b.e) = linear(b.x, b.w0, b.b0),
                          step(b.y) = apply(residual, b.e, short_rows)),
                    Contains("loom: model step 1 (layer): its operands (operand 0 of shape [5, 7] (the output of step "
                             "0), operand 1 of shape [4, 7]) do not broadcast"));
  // A view that reaches beyond another step's output is neither that output
  // nor a view into it: refused, not silently constant.
  CHECK_THROWS_WITH(model(parameters(b.w0, b.b0), step(b.e.view().slice(range(1, b.n))) = linear(b.x.view().slice(range(1, b.n)), b.w0, b.b0),
                          step(b.y) = apply(residual, b.e, b.v)),
                    Contains("loom: model step 1 (layer): operand 0 of shape [5, 7] overlaps the output of step 0 "
                             "without being it or a view into it"));
  // A residual after an activation.
  CHECK_THROWS_WITH(model(parameters(b.w0, b.b0), step(b.e) = linear(b.x, b.w0, b.b0, matmul_activation::relu).plus(b.v)),
                    Contains("loom: model step 0 (linear): a residual is added to a product without an activation"));
  // A step that reads a tensor a later step writes: the steps out of order.
  CHECK_THROWS_WITH(model(parameters(m.w2, m.b2), step(m.logits) = linear(m.h, m.w2, m.b2),
                          step(m.h) = linear(m.x, m.w1, m.b1, matmul_activation::relu)),
                    Contains("loom: model step 1 (linear): its output overlaps operand a of step 0, which reads it "
                             "before it is written"));
  // The MLP without its loss: backward() asks for dy.
  auto net = model(parameters(m.w1, m.b1), step(m.h) = linear(m.x, m.w1, m.b1, matmul_activation::relu));
  mat dh_bad({m.n, m.hidden + 1});
  CHECK_THROWS_WITH(net.backward(dh_bad), Contains("loom: model: backward(dy): dy of shape [7, 10]"));
  CHECK_THROWS_WITH(net.grad(m.w2), Contains("is not one of the model's parameters or inputs"));
}
