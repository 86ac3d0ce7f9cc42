// SPDX-License-Identifier: Apache-2.0
// The optimizers (SGD, AdamW, Lion) and assign_many, checked on both
// executors against updates computed independently in double (PyTorch's
// documented torch.optim.SGD / AdamW formulas and the Lion paper's), over
// several steps, with parameters of odd shapes, one a strided view into a
// NaN-poisoned buffer whose gaps must survive. The including file defines
// LOOM_TEST_SPACE and LOOM_TEST_TAG.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include <loom/exec/multi.hpp>
#include <loom/optim/optim.hpp>

#include "loom_test.hpp"

using Catch::Matchers::Contains;
using loom::index_t;
using loom::range;
using loom::whole;
using space_t = LOOM_TEST_SPACE;
namespace optim = loom::optim;

namespace {
// Writes random values of T in [lo, hi) into dst (any strides, any space);
// returns them as doubles, row-major.
template <class T, std::size_t R, class V>
std::vector<double> fill_random(V&& dst, std::mt19937_64& gen, double lo, double hi) {
  loom::host_tensor<T, R> h(dst.extents());
  std::vector<double> out(static_cast<std::size_t>(h.size()));
  for (index_t i = 0; i < h.size(); ++i) {
    h.data()[i] = loom_test::random_value<T>(gen, lo, hi);
    out[static_cast<std::size_t>(i)] = loom_test::as_double(h.data()[i]);
  }
  loom::copy(h, dst);
  return out;
}

template <class V>
std::vector<double> values_of(const V& v) {
  const auto h = loom::to_host(v);
  std::vector<double> out(static_cast<std::size_t>(h.size()));
  for (index_t i = 0; i < h.size(); ++i) out[static_cast<std::size_t>(i)] = loom_test::as_double(h.data()[i]);
  return out;
}

// Relative and absolute tolerance of a parameter of T against the double
// reference (bf16 and half: the master weights are float, the parameter
// their rounding to 8 or 11 bits).
template <class T>
double rtol() {
  if constexpr (std::is_same_v<T, double>)
    return 1e-12;
  else if constexpr (std::is_same_v<T, float>)
    return 2e-5;
  else if constexpr (std::is_same_v<T, loom::half>)
    return 1e-3;
  else
    return 5e-3;
}

// One parameter of the reference: its weights and state, in double.
struct ref_param {
  std::vector<double> w, a, b;
};

// torch.optim.SGD, one step.
void ref_sgd(const optim::sgd_options& o, int t, ref_param& p, const std::vector<double>& g) {
  p.a.resize(p.w.size());
  for (std::size_t i = 0; i != p.w.size(); ++i) {
    double d = g[i] + o.weight_decay * p.w[i];
    if (o.momentum != 0) {
      p.a[i] = t == 1 ? d : o.momentum * p.a[i] + (1 - o.dampening) * d;
      d = o.nesterov ? d + o.momentum * p.a[i] : p.a[i];
    }
    p.w[i] -= o.lr * d;
  }
}

// torch.optim.AdamW, one step (t counts from 1).
void ref_adamw(const optim::adamw_options& o, int t, ref_param& p, const std::vector<double>& g) {
  p.a.resize(p.w.size());
  p.b.resize(p.w.size());
  const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
  for (std::size_t i = 0; i != p.w.size(); ++i) {
    p.w[i] *= 1 - o.lr * o.weight_decay;
    p.a[i] = o.beta1 * p.a[i] + (1 - o.beta1) * g[i];
    p.b[i] = o.beta2 * p.b[i] + (1 - o.beta2) * g[i] * g[i];
    const double mhat = p.a[i] / bc1, vhat = p.b[i] / bc2;
    p.w[i] -= o.lr * mhat / (std::sqrt(vhat) + o.eps);
  }
}

// Lion (Chen et al. 2023, Algorithm 2), one step.
void ref_lion(const optim::lion_options& o, int, ref_param& p, const std::vector<double>& g) {
  p.a.resize(p.w.size());
  for (std::size_t i = 0; i != p.w.size(); ++i) {
    const double c = o.beta1 * p.a[i] + (1 - o.beta1) * g[i];
    const double s = c > 0 ? 1.0 : (c < 0 ? -1.0 : 0.0);
    p.w[i] -= o.lr * (s + o.weight_decay * p.w[i]);
    p.a[i] = o.beta2 * p.a[i] + (1 - o.beta2) * g[i];
  }
}

// Runs 4 steps of optimizer Opt (options o, update options u) over three
// parameters of T: a strided [7, 33] view into a poisoned [7, 67] buffer, a
// dense [257] and a [1]; fresh random gradients each step, the learning
// rate halved before step 3; compares every parameter with `ref` after
// every step.
template <class T, class Opt, class O, class Ref>
void check_steps(O o, const optim::update_options& u, const Ref& ref, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  INFO("seed " << seed);
  loom::host_tensor<T, 2> poison({7, 67});
  for (index_t i = 0; i < poison.size(); ++i) poison.data()[i] = loom_test::poison_value<T>();
  loom::tensor<T, 2, space_t> buf(poison.extents());
  loom::copy(poison, buf);
  auto p0 = buf.slice(whole, range(1, 67, 2));
  loom::tensor<T, 1, space_t> p1({257}), p2({1});
  loom::tensor<T, 2, space_t> g0({7, 33});
  loom::tensor<T, 1, space_t> g1({257}), g2({1});
  std::vector<ref_param> r(3);
  r[0].w = fill_random<T, 2>(p0, gen, -1, 1);
  r[1].w = fill_random<T, 1>(p1, gen, -1, 1);
  r[2].w = fill_random<T, 1>(p2, gen, -1, 1);
  Opt opt(o, u);
  CHECK(opt.add(p0, g0) == 0);
  CHECK(opt.add(p1, g1) == 1);
  CHECK(opt.add(p2, g2) == 2);
  for (int t = 1; t <= 4; ++t) {
    INFO("step " << t);
    if (t == 3) {
      opt.options().lr *= 0.5;
      o.lr *= 0.5;
    }
    std::vector<std::vector<double>> g = {fill_random<T, 2>(g0, gen, -2, 2), fill_random<T, 1>(g1, gen, -2, 2),
                                          fill_random<T, 1>(g2, gen, -2, 2)};
    double norm = 0;
    for (const auto& gk : g)
      for (double x : gk) norm += x * x;
    norm = std::sqrt(norm);
    if (u.max_grad_norm > 0) {
      const double coef = std::min(1.0, u.max_grad_norm / (norm + 1e-6));
      for (auto& gk : g)
        for (double& x : gk) x *= coef;
    }
    opt.step();
    for (std::size_t k = 0; k != 3; ++k) ref(o, t, r[k], g[k]);
    CHECK(opt.steps() == static_cast<std::uint64_t>(t));
    CHECK(opt.last_step().parameters == 3);
    CHECK(opt.last_step().groups == 1);
    CHECK(opt.last_step().kernels - opt.last_step().clip_kernels == 1);  // one launch for the three parameters
    if (u.max_grad_norm > 0) {
      // The squares of the three gradients in one launch, their partial
      // sums by one reduction, the norm and the factor in one more.
      if (!std::is_same_v<space_t, loom::device>) CHECK(opt.last_step().clip_kernels == 3);
      CHECK(opt.last_step().clip_kernels > 0);
      CHECK(std::abs(opt.grad_norm().item() - norm) <= 1e-5 * norm);
    } else {
      CHECK(opt.last_step().clip_kernels == 0);
    }
    const std::vector<std::vector<double>> got = {values_of(p0), values_of(p1), values_of(p2)};
    for (std::size_t k = 0; k != 3; ++k)
      for (std::size_t i = 0; i != got[k].size(); ++i) {
        const double want = r[k].w[i], err = std::abs(got[k][i] - want);
        if (!(err <= rtol<T>() * (std::abs(want) + 0.05))) {
          INFO("parameter " << k << ", element " << i << ": got " << got[k][i] << ", want " << want);
          REQUIRE(false);
        }
      }
  }
  // The gaps between the strided parameter's columns are never written.
  const auto b = loom::to_host(buf);
  for (index_t i = 0; i < 7; ++i)
    for (index_t j = 0; j < 67; j += 2) REQUIRE(std::isnan(loom_test::as_double(b.data()[i * 67 + j])));
}
}  // namespace

TEMPLATE_TEST_CASE("sgd matches torch.optim.SGD's update in double over four steps", "[optim]" LOOM_TEST_TAG, float,
                   double, loom::bf16) {
  const auto seed = loom_test::seed_for("optim sgd");
  SECTION("plain, with weight decay") {
    check_steps<TestType, optim::sgd<space_t>>(optim::sgd_options{.lr = 0.05, .weight_decay = 0.01}, {}, ref_sgd,
                                                seed);
  }
  SECTION("momentum with dampening") {
    check_steps<TestType, optim::sgd<space_t>>(optim::sgd_options{.lr = 0.05, .momentum = 0.9, .dampening = 0.1}, {},
                                                ref_sgd, seed + 1);
  }
  SECTION("nesterov with weight decay, clipped") {
    check_steps<TestType, optim::sgd<space_t>>(
        optim::sgd_options{.lr = 0.05, .momentum = 0.8, .weight_decay = 0.02, .nesterov = true},
        {.max_grad_norm = 1.5}, ref_sgd, seed + 2);
  }
}

TEMPLATE_TEST_CASE("adamw matches torch.optim.AdamW's update in double over four steps", "[optim]" LOOM_TEST_TAG,
                   float, double, loom::bf16, loom::half) {
  const auto seed = loom_test::seed_for("optim adamw");
  SECTION("defaults but the learning rate") {
    check_steps<TestType, optim::adamw<space_t>>(optim::adamw_options{.lr = 0.01}, {}, ref_adamw, seed);
  }
  SECTION("other betas, strong decay, clipped") {
    check_steps<TestType, optim::adamw<space_t>>(
        optim::adamw_options{.lr = 0.02, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1},
        {.max_grad_norm = 2.0}, ref_adamw, seed + 1);
  }
}

TEMPLATE_TEST_CASE("lion matches the paper's update in double over four steps", "[optim]" LOOM_TEST_TAG, float,
                   double, loom::bf16) {
  const auto seed = loom_test::seed_for("optim lion");
  SECTION("no decay") {
    check_steps<TestType, optim::lion<space_t>>(optim::lion_options{.lr = 0.01}, {}, ref_lion, seed);
  }
  SECTION("with decay, clipped (a no-op on the signs, not on the momentum)") {
    check_steps<TestType, optim::lion<space_t>>(optim::lion_options{.lr = 0.01, .beta1 = 0.95, .weight_decay = 0.1},
                                                {.max_grad_norm = 0.5}, ref_lion, seed + 1);
  }
}

TEST_CASE("optimizer clipping leaves small gradients alone", "[optim]" LOOM_TEST_TAG) {
  check_steps<double, optim::sgd<space_t>>(optim::sgd_options{.lr = 0.1, .momentum = 0.5},
                                           {.max_grad_norm = 1e6}, ref_sgd, loom_test::seed_for("optim clip large"));
}

TEST_CASE("optimizer updates many parameters of two dtypes in one launch per dtype", "[optim]" LOOM_TEST_TAG) {
  std::mt19937_64 gen(loom_test::seed_for("optim groups"));
  const optim::sgd_options o{.lr = 0.1, .momentum = 0.9, .nesterov = true};
  optim::sgd<space_t> opt(o);
  constexpr int nf = 70, nd = 5;
  std::vector<loom::tensor<float, 1, space_t>> pf, gf;
  std::vector<loom::tensor<double, 2, space_t>> pd, gd;
  std::vector<ref_param> r(nf + nd);
  for (int k = 0; k < nf + nd; ++k) {
    const index_t len = (k * 37) % 101 + 1;
    if (k % 15 == 14) {  // every 15th a double [len, 3], added among the floats
      pd.emplace_back(loom::shape<2>{len, 3});
      gd.emplace_back(loom::shape<2>{len, 3});
      r[static_cast<std::size_t>(k)].w = fill_random<double, 2>(pd.back(), gen, -1, 1);
      opt.add(pd.back(), gd.back());
    } else {
      pf.emplace_back(loom::shape<1>{len});
      gf.emplace_back(loom::shape<1>{len});
      r[static_cast<std::size_t>(k)].w = fill_random<float, 1>(pf.back(), gen, -1, 1);
      opt.add(pf.back(), gf.back());
    }
  }
  REQUIRE(pd.size() == nd);
  for (int t = 1; t <= 3; ++t) {
    std::size_t f = 0, d = 0;
    for (int k = 0; k < nf + nd; ++k) {
      const auto g = k % 15 == 14 ? fill_random<double, 2>(gd[d++], gen, -2, 2) : fill_random<float, 1>(gf[f++], gen, -2, 2);
      ref_sgd(o, t, r[static_cast<std::size_t>(k)], g);
    }
    opt.step();
    CHECK(opt.last_step().parameters == nf + nd);
    CHECK(opt.last_step().groups == 2);
    CHECK(opt.last_step().kernels == 2);
  }
  std::size_t f = 0, d = 0;
  for (int k = 0; k < nf + nd; ++k) {
    const bool dbl = k % 15 == 14;
    const auto got = dbl ? values_of(pd[d++]) : values_of(pf[f++]);
    const auto& want = r[static_cast<std::size_t>(k)].w;
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i != got.size(); ++i) {
      INFO("parameter " << k << ", element " << i);
      REQUIRE(std::abs(got[i] - want[i]) <= (dbl ? rtol<double>() : rtol<float>()) * (std::abs(want[i]) + 0.05));
    }
  }
}

TEST_CASE("bf16 stochastic rounding is unbiased and deterministic for a seed and step", "[optim]" LOOM_TEST_TAG) {
  // Every master weight becomes 1 + 0.30078125 ulp (ulp = 2^-7 at 1): to
  // nearest that is always 1 (biased by -0.3 ulp); stochastically 1 + ulp
  // with probability 77/256.
  constexpr index_t n = 20011;
  const double ulp = std::ldexp(1.0, -7), frac = 77.0 / 256.0;
  const auto run = [&](bool sr, std::uint64_t seed, int steps) {
    loom::tensor<loom::bf16, 1, space_t> p({n}), g({n});
    p = 1.0f;
    g = static_cast<float>(-frac * ulp);
    optim::sgd<space_t> opt({.lr = 1.0}, {.stochastic_rounding = sr, .seed = seed});
    opt.add(p, g);
    for (int t = 0; t < steps; ++t) opt.step();
    return loom::to_host(p);
  };
  const auto a = run(true, 7, 1);
  double mean_err = 0;
  index_t ups = 0;
  for (index_t i = 0; i < n; ++i) {
    const double v = loom_test::as_double(a.data()[i]);
    REQUIRE((v == 1.0 || v == 1.0 + ulp));
    ups += v != 1.0;
    mean_err += v - (1.0 + frac * ulp);
  }
  mean_err /= static_cast<double>(n);
  const double sigma = ulp * std::sqrt(frac * (1 - frac) / static_cast<double>(n));
  INFO("rounded up: " << ups << " of " << n << ", mean error " << mean_err / ulp << " ulp");
  CHECK(std::abs(mean_err) < 5 * sigma);
  // Bitwise the same for the same seed and step; other bits for another seed
  // or step.
  const auto b = run(true, 7, 1);
  CHECK(std::memcmp(a.data(), b.data(), sizeof(loom::bf16) * n) == 0);
  const auto c = run(true, 8, 1);
  CHECK(std::memcmp(a.data(), c.data(), sizeof(loom::bf16) * n) != 0);
  // Two steps: the master is 1 + 0.6 ulp; the parameter is not the first
  // step's rounding again.
  const auto d = run(true, 7, 2);
  double mean2 = 0;
  for (index_t i = 0; i < n; ++i) mean2 += loom_test::as_double(d.data()[i]) - (1.0 + 2 * frac * ulp);
  CHECK(std::abs(mean2 / static_cast<double>(n)) < 5 * std::sqrt(2 * frac * (1 - 2 * frac) / static_cast<double>(n)) * ulp);
  // To nearest: all 1, the bias stochastic rounding removes.
  const auto e = run(false, 7, 1);
  for (index_t i = 0; i < n; ++i) REQUIRE(loom_test::as_double(e.data()[i]) == 1.0);
}

TEST_CASE("bf16 parameters without master weights are updated in place", "[optim]" LOOM_TEST_TAG) {
  loom::tensor<loom::bf16, 1, space_t> p({33}), g({33});
  p = 1.0f;
  g = 0.5f;
  optim::sgd<space_t> opt({.lr = 0.25}, {.master_weights = false});
  opt.add(p, g);
  opt.step();
  opt.step();
  const auto h = loom::to_host(p);
  for (index_t i = 0; i < 33; ++i) CHECK(loom_test::as_double(h.data()[i]) == 0.75);
}

TEST_CASE("optimizer parameters with a gradient of another dtype or shape are refused, naming the parameter",
          "[optim][errors]" LOOM_TEST_TAG) {
  loom::tensor<float, 2, space_t> w({3, 4}), g({3, 4}), gt({4, 3});
  loom::tensor<double, 2, space_t> gd({3, 4});
  loom::tensor<float, 1, space_t> g1({12});
  loom::tensor<loom::half, 1, space_t> h({5}), hg({5});
  optim::adamw<space_t> opt;
  opt.add(w, g);
  CHECK_THROWS_AS(opt.add(w, gd), loom::dtype_error);
  CHECK_THROWS_WITH(opt.add(w, gd), Contains("loom: optimizer parameter 1") && Contains("float64") && Contains("float32"));
  CHECK_THROWS_AS(opt.add(w, gt), loom::shape_error);
  CHECK_THROWS_WITH(opt.add(w, gt), Contains("loom: optimizer parameter 1") && Contains("[4, 3]") && Contains("[3, 4]"));
  CHECK_THROWS_AS(opt.add(w, g1), loom::shape_error);
  CHECK_THROWS_WITH(opt.add(w, g1), Contains("loom: optimizer parameter 1") && Contains("[12]"));
  CHECK_THROWS_AS(opt.add(w, w), loom::aliasing_error);
  CHECK_THROWS_WITH(opt.add(w, w), Contains("loom: optimizer parameter 1"));
  CHECK(opt.size() == 1);
  optim::sgd<space_t> sr({}, {.stochastic_rounding = true});
  CHECK_THROWS_AS(sr.add(h, hg), loom::value_error);
  CHECK_THROWS_WITH(sr.add(h, hg), Contains("loom: optimizer parameter 0") && Contains("half"));
}

TEST_CASE("assign_many writes several outputs in one launch, each value computed before any store",
          "[optim][expr]" LOOM_TEST_TAG) {
  std::mt19937_64 gen(loom_test::seed_for("assign_many"));
  loom::tensor<float, 2, space_t> x({5, 9}), y({5, 9});
  const auto xs = fill_random<float, 2>(x, gen, -1, 1);
  const auto ys = fill_random<float, 2>(y, gen, -1, 1);
  loom::tensor<double, 2, space_t> z({5, 9});
  z = std::numeric_limits<double>::quiet_NaN();
  loom::reset_launch_counts();
  // x and y swap through each other; z reads both before either is stored.
  const auto info = loom::assign_many(x, y, y, x, z, x * 2.0f + y);
  const auto n = loom::launches();
  CHECK(n.host + n.device == 1);
  CHECK(info.path == loom::eval_path::contiguous);
  const auto hx = values_of(x), hy = values_of(y), hz = values_of(z);
  for (std::size_t i = 0; i != xs.size(); ++i) {
    CHECK(hx[i] == ys[i]);
    CHECK(hy[i] == xs[i]);
    CHECK(hz[i] == static_cast<double>(static_cast<float>(xs[i] * 2.0f) + static_cast<float>(ys[i])));
  }
  // Transposed outputs take the general path.
  loom::tensor<float, 2, space_t> a({9, 5});
  const auto info2 = loom::assign_many(a.t(), x + 1.0f, z, x - 1.0f);
  CHECK(info2.path == loom::eval_path::general);
  const auto ha = values_of(a), hz2 = values_of(z);
  for (index_t i = 0; i < 5; ++i)
    for (index_t j = 0; j < 9; ++j) {
      CHECK(ha[static_cast<std::size_t>(j * 5 + i)] == static_cast<float>(hx[static_cast<std::size_t>(i * 9 + j)] + 1.0f));
      CHECK(hz2[static_cast<std::size_t>(i * 9 + j)] == static_cast<float>(hx[static_cast<std::size_t>(i * 9 + j)] - 1.0f));
    }
  CHECK_THROWS_AS(loom::assign_many(x, y, a, y.t()), loom::shape_error);
  CHECK_THROWS_WITH(loom::assign_many(x, y, a, y.t()), Contains("one shape"));
  CHECK_THROWS_AS(loom::assign_many(x, y, x, y), loom::aliasing_error);
  CHECK_THROWS_AS(loom::assign_many(x, y, y, x.slice(range(0, 5), whole) * 1.0f + x.slice(0)), loom::aliasing_error);
}
