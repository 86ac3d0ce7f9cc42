// SPDX-License-Identifier: Apache-2.0
// Convolution and pooling on the host executor against direct loops in
// double written here, over seeded random sweeps of the options; gradients
// also against central finite differences. Outputs are poisoned: the test
// main fills every loom allocation with NaN bytes, and the *_into outputs
// are filled with NaN before each call.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include <loom/nn/batch_norm.hpp>
#include <loom/nn/conv.hpp>
#include <loom/nn/conv_transpose.hpp>
#include <loom/nn/pool.hpp>

#include "loom_test.hpp"

namespace {
using Catch::Matchers::Contains;
using loom::index_t;
using vec = std::vector<double>;

// One convolution: x [n, c, h, w], weight [cout, c / groups, kh, kw].
struct conv_case {
  index_t n = 1, c = 1, h = 1, w = 1, cout = 1, kh = 1, kw = 1;
  loom::conv2d_options o;
  index_t span(int a) const { return ((a == 0 ? kh : kw) - 1) * o.dilation[a] + 1; }
  index_t out(int a) const { return ((a == 0 ? h : w) + 2 * o.padding[a] - span(a)) / o.stride[a] + 1; }
  bool convolves() const { return span(0) <= h + 2 * o.padding[0] && span(1) <= w + 2 * o.padding[1]; }
  loom::shape<4> x_shape() const { return {n, c, h, w}; }
  loom::shape<4> w_shape() const { return {cout, c / o.groups, kh, kw}; }
  loom::shape<4> y_shape() const { return {n, cout, out(0), out(1)}; }
};

// Calls f(n, o, ci, ki, kj, oy, ox, iy, ix) for every product term of the
// convolution: output (n, o, oy, ox) += x(n, group's channel ci, iy, ix) w(o, ci, ki, kj).
template <class F>
void for_each_term(const conv_case& k, F f) {
  const index_t cin = k.c / k.o.groups, cog = k.cout / k.o.groups;
  for (index_t n = 0; n < k.n; ++n)
    for (index_t o = 0; o < k.cout; ++o)
      for (index_t oy = 0; oy < k.out(0); ++oy)
        for (index_t ox = 0; ox < k.out(1); ++ox)
          for (index_t ci = 0; ci < cin; ++ci)
            for (index_t ki = 0; ki < k.kh; ++ki)
              for (index_t kj = 0; kj < k.kw; ++kj) {
                const index_t iy = oy * k.o.stride[0] - k.o.padding[0] + ki * k.o.dilation[0];
                const index_t ix = ox * k.o.stride[1] - k.o.padding[1] + kj * k.o.dilation[1];
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                const index_t c = o / cog * cin + ci;
                f(((n * k.cout + o) * k.out(0) + oy) * k.out(1) + ox, ((n * k.c + c) * k.h + iy) * k.w + ix,
                  ((o * cin + ci) * k.kh + ki) * k.kw + kj);
              }
}

vec ref_forward(const conv_case& k, const vec& x, const vec& w, const vec* b) {
  vec y(static_cast<std::size_t>(loom::shape_size(k.y_shape())), 0.0);
  if (b)
    for (std::size_t i = 0; i < y.size(); ++i)
      y[i] = (*b)[i / static_cast<std::size_t>(k.out(0) * k.out(1)) % static_cast<std::size_t>(k.cout)];
  for_each_term(k, [&](index_t yi, index_t xi, index_t wi) { y[yi] += x[xi] * w[wi]; });
  return y;
}
vec ref_backward_input(const conv_case& k, const vec& dy, const vec& w) {
  vec dx(static_cast<std::size_t>(loom::shape_size(k.x_shape())), 0.0);
  for_each_term(k, [&](index_t yi, index_t xi, index_t wi) { dx[xi] += dy[yi] * w[wi]; });
  return dx;
}
vec ref_backward_weight(const conv_case& k, const vec& dy, const vec& x) {
  vec dw(static_cast<std::size_t>(loom::shape_size(k.w_shape())), 0.0);
  for_each_term(k, [&](index_t yi, index_t xi, index_t wi) { dw[wi] += dy[yi] * x[xi]; });
  return dw;
}
vec ref_backward_bias(const conv_case& k, const vec& dy) {
  vec db(static_cast<std::size_t>(k.cout), 0.0);
  const index_t plane = k.out(0) * k.out(1);
  for (std::size_t i = 0; i < dy.size(); ++i) db[i / static_cast<std::size_t>(plane) % db.size()] += dy[i];
  return db;
}

// Random values in a fresh host tensor and as doubles (row-major).
template <class T, std::size_t R>
loom::host_tensor<T, R> random_tensor(const loom::shape<R>& s, std::mt19937_64& g, vec& values) {
  loom::host_tensor<T, R> t(s);
  values.resize(static_cast<std::size_t>(t.size()));
  std::uniform_real_distribution<double> d(-1, 1);
  for (index_t i = 0; i < t.size(); ++i) {
    t.data()[i] = static_cast<T>(d(g));
    values[static_cast<std::size_t>(i)] = static_cast<double>(t.data()[i]);
  }
  return t;
}

// The elements of v (any strides) in row-major order.
template <class V>
vec values_of(const V& v) {
  vec out(static_cast<std::size_t>(v.size()));
  for (index_t i = 0; i < v.size(); ++i)
    out[static_cast<std::size_t>(i)] = static_cast<double>(v.data()[v.offset_of(i)]);
  return out;
}

// got and want agree within tol relative to the magnitude `scale` (the sum
// of the absolute terms bounds the rounding); NaN never passes.
void require_close(const vec& got, const vec& want, double tol, const char* what) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]) / (1 + std::abs(want[i]));
    if (!(err <= worst)) {
      worst = err;
      at = i;
    }
  }
  INFO(what << ": worst element " << at << " of " << got.size() << ": " << (got.empty() ? 0 : got[at]) << " vs "
            << (want.empty() ? 0 : want[at]));
  REQUIRE(worst <= tol);
}

// Random extents (1 to max_extent), kernel (1 to 4) and per-axis options
// (stride 1 to 3, padding 0 to 2, dilation 1 to max_dilation) of a
// conv_case or a transpose_case.
template <class Case, class Pick>
void random_window(Case& k, const Pick& pick, index_t max_extent, index_t max_dilation) {
  k.h = pick(1, max_extent);
  k.w = pick(1, max_extent);
  k.kh = pick(1, 4);
  k.kw = pick(1, 4);
  for (int a = 0; a < 2; ++a) {
    k.o.stride[a] = pick(1, 3);
    k.o.padding[a] = pick(0, 2);
    k.o.dilation[a] = pick(1, max_dilation);
  }
}

conv_case random_case(std::mt19937_64& g) {
  const auto pick = [&](index_t lo, index_t hi) { return std::uniform_int_distribution<index_t>(lo, hi)(g); };
  for (;;) {
    conv_case k;
    k.n = pick(1, 3);
    const index_t mode = pick(0, 3);  // 0: groups 1, 1: 2 or 3 groups, 2: depthwise, 3: depthwise with a multiplier
    const index_t groups = mode == 0 ? 1 : mode == 1 ? pick(2, 3) : pick(1, 5);
    k.o.groups = groups;
    k.c = groups * (mode >= 2 ? 1 : pick(1, 3));
    k.cout = groups * (mode == 2 ? 1 : pick(1, 3));
    random_window(k, pick, 9, 3);
    if (k.convolves()) return k;
  }
}

// The reference output after the options' activation (relu, or GELU's tanh form).
vec activated(const conv_case& k, vec y) {
  for (double& v : y) {
    if (k.o.activation == loom::matmul_activation::relu) v = std::max(v, 0.0);
    if (k.o.activation == loom::matmul_activation::gelu_tanh)
      v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
  }
  return y;
}

void fill_nan(float* p, index_t n) { std::fill(p, p + n, std::numeric_limits<float>::quiet_NaN()); }

// y_ref less its bias: each output volume of `volume` elements less its channel's bias.
vec ref_forward_without_bias(vec y, const vec& bias, index_t volume) {
  for (std::size_t e = 0; e < y.size(); ++e) y[e] -= bias[e / static_cast<std::size_t>(volume) % bias.size()];
  return y;
}
}  // namespace

TEST_CASE("conv2d forward and gradients match a direct loop over a random sweep of options", "[nn][conv]") {
  std::mt19937_64 g(loom_test::seed_for("conv2d sweep"));
  constexpr int cases = 640;
  for (int i = 0; i < cases; ++i) {
    conv_case k = random_case(g);
    k.o.activation = i % 5 == 3   ? loom::matmul_activation::relu
                     : i % 5 == 4 ? loom::matmul_activation::gelu_tanh
                                  : loom::matmul_activation::none;
    INFO("case " << i << ": x " << loom::shape_string(k.x_shape()) << " w " << loom::shape_string(k.w_shape())
                 << " stride {" << k.o.stride[0] << ", " << k.o.stride[1] << "} padding {" << k.o.padding[0] << ", "
                 << k.o.padding[1] << "} dilation {" << k.o.dilation[0] << ", " << k.o.dilation[1] << "} groups "
                 << k.o.groups << " activation " << int(k.o.activation));
    vec xv, wv, bv, dyv;
    auto w = random_tensor<float>(k.w_shape(), g, wv);
    auto b = random_tensor<float>(loom::shape<1>{k.cout}, g, bv);
    auto dy = random_tensor<float>(k.y_shape(), g, dyv);
    // x dense, or every other column of a wider tensor (strided).
    const bool strided = i % 3 == 1;
    loom::shape<4> wide = k.x_shape();
    wide[3] = strided ? 2 * k.w : k.w;
    vec wide_values;
    auto x_store = random_tensor<float>(wide, g, wide_values);
    const auto x = x_store.view().slice(loom::range(0, k.n), loom::range(0, k.c), loom::range(0, k.h),
                                        loom::range(0, wide[3], strided ? 2 : 1));
    xv = values_of(x);
    const double tol = 1e-5;
    const bool with_bias = i % 2 == 0;

    // Forward: into a NaN-filled output, or a new tensor.
    loom::host_tensor<float, 4> y(k.y_shape());
    fill_nan(y.data(), y.size());
    if (i % 4 < 2) {
      if (with_bias)
        loom::conv2d_into(y, x, w, b, k.o);
      else
        loom::conv2d_into(y, x, w, k.o);
    } else {
      y = with_bias ? loom::conv2d(x, w, b, k.o) : loom::conv2d(x, w, k.o);
    }
    require_close(values_of(y.view()), activated(k, ref_forward(k, xv, wv, with_bias ? &bv : nullptr)), tol, "y");

    // Gradients.
    loom::host_tensor<float, 4> dx(k.x_shape()), dw(k.w_shape());
    fill_nan(dx.data(), dx.size());
    fill_nan(dw.data(), dw.size());
    if (i % 2 == 0) {
      loom::conv2d_backward_input_into(dx, dy, w, k.o);
      loom::conv2d_backward_weight_into(dw, dy, x, k.o);
    } else {
      dx = loom::conv2d_backward_input(dy, w, k.x_shape(), k.o);
      dw = loom::conv2d_backward_weight(dy, x, k.w_shape(), k.o);
    }
    require_close(values_of(dx.view()), ref_backward_input(k, dyv, wv), tol, "dx");
    require_close(values_of(dw.view()), ref_backward_weight(k, dyv, xv), tol, "dw");
    require_close(values_of(loom::conv2d_backward_bias(dy).view()), ref_backward_bias(k, dyv), tol, "db");
  }
}

TEST_CASE("conv2d cut into chunks of images equals conv2d of each image", "[nn][conv]") {
  // Columns of 16 x 3 x 3 rows by 128 x 129 positions per image, above the
  // elements of a chunk: one image per chunk. Each image alone is one chunk,
  // checked against the direct loop by the sweep above. The weight and dy
  // are transposed views (copied to contiguous memory inside).
  std::mt19937_64 g(loom_test::seed_for("conv2d chunks"));
  const conv_case k{.n = 2, .c = 16, .h = 128, .w = 129, .cout = 1, .kh = 3, .kw = 3, .o = {.padding = {1, 1}}};
  REQUIRE(k.c * k.kh * k.kw * k.out(0) * k.out(1) > loom::detail::conv::column_budget);
  vec v;
  auto x = random_tensor<double>(k.x_shape(), g, v);
  auto w_t = random_tensor<double>(loom::shape<4>{k.cout, k.c, k.kw, k.kh}, g, v);
  const auto w = w_t.view().transpose(2, 3);
  auto dy_t = random_tensor<double>(loom::shape<4>{k.n, k.cout, k.out(1), k.out(0)}, g, v);
  const auto dy = dy_t.view().transpose(2, 3);
  const auto y = loom::conv2d(x, w, k.o);
  const auto dx = loom::conv2d_backward_input(dy, w, k.x_shape(), k.o);
  const auto dw = loom::conv2d_backward_weight(dy, x, k.w_shape(), k.o);
  vec y_each, dx_each, dw_each(static_cast<std::size_t>(dw.size()), 0.0);
  for (index_t n = 0; n < k.n; ++n) {
    const auto image =
        x.view().slice(loom::range(n, n + 1), loom::range(0, k.c), loom::range(0, k.h), loom::range(0, k.w));
    const auto dy_image =
        dy.slice(loom::range(n, n + 1), loom::range(0, k.cout), loom::range(0, k.out(0)), loom::range(0, k.out(1)));
    const vec yn = values_of(loom::conv2d(image, w, k.o).view());
    const vec dxn = values_of(loom::conv2d_backward_input(dy_image, w, image.extents(), k.o).view());
    const vec dwn = values_of(loom::conv2d_backward_weight(dy_image, image, k.w_shape(), k.o).view());
    y_each.insert(y_each.end(), yn.begin(), yn.end());
    dx_each.insert(dx_each.end(), dxn.begin(), dxn.end());
    for (std::size_t i = 0; i < dwn.size(); ++i) dw_each[i] += dwn[i];
  }
  require_close(values_of(y.view()), y_each, 1e-13, "y");
  require_close(values_of(dx.view()), dx_each, 1e-13, "dx");
  require_close(values_of(dw.view()), dw_each, 1e-13, "dw");
}

TEST_CASE("conv2d gradients equal central finite differences in double", "[nn][conv]") {
  std::mt19937_64 g(loom_test::seed_for("conv2d finite differences"));
  const conv_case k{.n = 2,
                    .c = 4,
                    .h = 5,
                    .w = 6,
                    .cout = 6,
                    .kh = 3,
                    .kw = 2,
                    .o = {.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}, .groups = 2}};
  vec xv, wv, bv, rv;
  auto x = random_tensor<double>(k.x_shape(), g, xv);
  auto w = random_tensor<double>(k.w_shape(), g, wv);
  auto b = random_tensor<double>(loom::shape<1>{k.cout}, g, bv);
  auto r = random_tensor<double>(k.y_shape(), g, rv);  // loss = sum(conv2d(x, w, b) * r), so dy = r
  const auto loss = [&] {
    const auto y = loom::conv2d(x, w, b, k.o);
    double s = 0;
    for (index_t i = 0; i < y.size(); ++i) s += y.data()[i] * rv[static_cast<std::size_t>(i)];
    return s;
  };
  const auto numeric = [&](double* p, index_t count) {
    vec out(static_cast<std::size_t>(count));
    const double eps = 1e-6;
    for (index_t i = 0; i < count; ++i) {
      const double keep = p[i];
      p[i] = keep + eps;
      const double up = loss();
      p[i] = keep - eps;
      const double down = loss();
      p[i] = keep;
      out[static_cast<std::size_t>(i)] = (up - down) / (2 * eps);
    }
    return out;
  };
  require_close(values_of(loom::conv2d_backward_input(r, w, k.x_shape(), k.o).view()), numeric(x.data(), x.size()),
                1e-7, "dx");
  require_close(values_of(loom::conv2d_backward_weight(r, x, k.w_shape(), k.o).view()), numeric(w.data(), w.size()),
                1e-7, "dw");
  require_close(values_of(loom::conv2d_backward_bias(r).view()), numeric(b.data(), b.size()), 1e-7, "db");
}

TEST_CASE("conv2d gives the same bits run to run, and an empty batch", "[nn][conv]") {
  std::mt19937_64 g(loom_test::seed_for("conv2d determinism"));
  vec v;
  auto x = random_tensor<float>(loom::shape<4>{5, 6, 17, 13}, g, v);
  auto w = random_tensor<float>(loom::shape<4>{9, 2, 3, 3}, g, v);
  const loom::conv2d_options o{.stride = {1, 2}, .padding = {1, 1}, .groups = 3};
  auto dy = random_tensor<float>(loom::conv2d_output_shape(x.extents(), w.extents(), o), g, v);
  const auto same = [](const auto& a, const auto& b) {
    return std::equal(a.data(), a.data() + a.size(), b.data(),
                      [](float p, float q) { return loom_test::same_bits(p, q); });
  };
  CHECK(same(loom::conv2d(x, w, o), loom::conv2d(x, w, o)));
  CHECK(same(loom::conv2d_backward_input(dy, w, x.extents(), o), loom::conv2d_backward_input(dy, w, x.extents(), o)));
  CHECK(same(loom::conv2d_backward_weight(dy, x, w.extents(), o), loom::conv2d_backward_weight(dy, x, w.extents(), o)));

  loom::host_tensor<float, 4> none(loom::shape<4>{0, 6, 17, 13}), dy0(loom::shape<4>{0, 9, 17, 7});
  CHECK(loom::conv2d(none, w, o).extents() == loom::shape<4>{0, 9, 17, 7});
  const auto dw = loom::conv2d_backward_weight(dy0, none, w.extents(), o);
  CHECK(std::all_of(dw.data(), dw.data() + dw.size(), [](float e) { return e == 0; }));
}

TEST_CASE("conv1d equals conv2d of height 1", "[nn][conv]") {
  std::mt19937_64 g(loom_test::seed_for("conv1d"));
  const conv_case k{.n = 3,
                    .c = 6,
                    .w = 23,
                    .cout = 4,
                    .kw = 3,
                    .o = {.stride = {1, 2}, .padding = {0, 2}, .dilation = {1, 2}, .groups = 2}};
  const loom::conv1d_options o1{.stride = 2, .padding = 2, .dilation = 2, .groups = 2};
  vec xv, wv, bv, dyv;
  auto x = random_tensor<double>(loom::shape<3>{k.n, k.c, k.w}, g, xv);
  auto w = random_tensor<double>(loom::shape<3>{k.cout, k.c / 2, k.kw}, g, wv);
  auto b = random_tensor<double>(loom::shape<1>{k.cout}, g, bv);
  auto dy = random_tensor<double>(loom::shape<3>{k.n, k.cout, k.out(1)}, g, dyv);
  const auto y = loom::conv1d(x, w, b, o1);
  CHECK(y.extents() == loom::shape<3>{k.n, k.cout, k.out(1)});
  require_close(values_of(y.view()), ref_forward(k, xv, wv, &bv), 1e-12, "y");
  conv_case relu = k;
  relu.o.activation = loom::matmul_activation::relu;
  loom::conv1d_options o1_relu = o1;
  o1_relu.activation = loom::matmul_activation::relu;
  require_close(values_of(loom::conv1d(x, w, b, o1_relu).view()), activated(relu, ref_forward(k, xv, wv, &bv)), 1e-12,
                "relu(y)");
  require_close(values_of(loom::conv1d(x, w, o1).view()), ref_forward(k, xv, wv, nullptr), 1e-12, "y");
  require_close(values_of(loom::conv1d_backward_input(dy, w, x.extents(), o1).view()), ref_backward_input(k, dyv, wv),
                1e-12, "dx");
  require_close(values_of(loom::conv1d_backward_weight(dy, x, w.extents(), o1).view()), ref_backward_weight(k, dyv, xv),
                1e-12, "dw");
  require_close(values_of(loom::conv2d_backward_bias(dy).view()), ref_backward_bias(k, dyv), 1e-12, "db");
}

TEST_CASE("conv2d names the operand that does not convolve", "[nn][conv][errors]") {
  loom::host_tensor<float, 4> x(loom::shape<4>{2, 6, 8, 8}), w(loom::shape<4>{4, 3, 3, 3});
  loom::host_tensor<float, 1> b(loom::shape<1>{5});
  const loom::conv2d_options two{.groups = 2};
  loom::fill(x, 1.0f);
  loom::fill(w, 1.0f);
  loom::fill(b, 1.0f);
  REQUIRE_THROWS_AS(loom::conv2d(x, w, {.groups = 4}), loom::shape_error);
  REQUIRE_THROWS_WITH(loom::conv2d(x, w, {.groups = 4}),
                      Contains("loom: conv2d: groups (4) does not divide the 6 channels of input x [2, 6, 8, 8]"));
  REQUIRE_THROWS_WITH(loom::conv2d(x, loom::host_tensor<float, 4>(loom::shape<4>{5, 2, 3, 3}), {.groups = 3}),
                      Contains("does not divide the 5 output channels of weight w [5, 2, 3, 3]"));
  REQUIRE_THROWS_WITH(loom::conv2d(x, w), Contains("weight w [4, 3, 3, 3] takes 3 channels per group") &&
                                              Contains("input x [2, 6, 8, 8] has 6"));
  REQUIRE_THROWS_AS(loom::conv2d(x, w, {.groups = 0}), loom::value_error);
  REQUIRE_THROWS_WITH(loom::conv2d(x, w, {.stride = {1, 0}, .groups = 2}), Contains("stride must be at least 1"));
  REQUIRE_THROWS_WITH(loom::conv2d(x, w, {.dilation = {0, 1}, .groups = 2}), Contains("dilation must be at least 1"));
  REQUIRE_THROWS_WITH(loom::conv2d(x, w, {.padding = {-1, 0}, .groups = 2}), Contains("padding must not be negative"));
  REQUIRE_THROWS_AS(loom::conv2d(x, w, {.dilation = {4, 1}, .groups = 2}), loom::shape_error);
  REQUIRE_THROWS_WITH(loom::conv2d(x, w, {.dilation = {4, 1}, .groups = 2}),
                      Contains("spans 9 x 3") && Contains("padded to 8 x 8"));
  REQUIRE_THROWS_WITH(loom::conv2d(x, loom::host_tensor<float, 4>(loom::shape<4>{4, 3, 0, 3}), two),
                      Contains("empty kernel"));
  REQUIRE_THROWS_WITH(loom::conv2d(x, w, b, two), Contains("bias [5]") && Contains("(4)"));

  // Outputs of the *_into forms and the gradients' dy.
  loom::host_tensor<float, 4> y(loom::shape<4>{2, 4, 6, 6}), dx(x.extents()), dw(w.extents());
  REQUIRE_THROWS_WITH(loom::conv2d_into(y, x, w, {.padding = {1, 1}, .groups = 2}),
                      Contains("output y has shape [2, 4, 6, 6]; the result has shape [2, 4, 8, 8]"));
  loom::host_tensor<float, 4> wide(loom::shape<4>{2, 4, 6, 12});
  REQUIRE_THROWS_AS(
      loom::conv2d_into(
          wide.view().slice(loom::range(0, 2), loom::range(0, 4), loom::range(0, 6), loom::range(0, 12, 2)), x, w, two),
      loom::value_error);
  loom::host_tensor<float, 4> flat(loom::shape<4>{2, 4, 6, 6});
  const auto x_alias =
      loom::view<const float, 4, loom::host>(flat.data(), loom::shape<4>{2, 6, 8, 8}, loom::shape<4>{0, 0, 0, 0});
  REQUIRE_THROWS_AS(loom::conv2d_into(flat, x_alias, w, two), loom::aliasing_error);
  REQUIRE_THROWS_WITH(loom::conv2d_backward_input_into(dx, y, w, {.padding = {1, 1}, .groups = 2}),
                      Contains("dy has shape [2, 4, 6, 6]; the convolution's output has shape [2, 4, 8, 8]"));
  REQUIRE_THROWS_WITH(loom::conv2d_backward_weight(y, x, w.extents(), {.padding = {1, 1}, .groups = 2}),
                      Contains("conv2d_backward_weight: the output gradient dy"));
  REQUIRE_THROWS_WITH(loom::conv2d_backward_input(y, w, loom::shape<4>{2, 5, 8, 8}, two),
                      Contains("input x [2, 5, 8, 8]"));
  REQUIRE_THROWS_WITH(loom::conv2d_output_shape({1, 3, 2, 2}, {1, 3, 3, 3}), Contains("no output position"));
  REQUIRE_THROWS_WITH(loom::conv1d(loom::host_tensor<float, 3>(loom::shape<3>{1, 3, 5}),
                                   loom::host_tensor<float, 3>(loom::shape<3>{2, 2, 3})),
                      Contains("loom: conv1d:"));
}

namespace {
// One transposed convolution: x [n, cin, h, w], weight [cin, cout / groups, kh, kw].
struct transpose_case {
  index_t n = 1, cin = 1, h = 1, w = 1, cout = 1, kh = 1, kw = 1;
  loom::conv_transpose2d_options o;
  index_t out(int a) const {
    return ((a == 0 ? h : w) - 1) * o.stride[a] - 2 * o.padding[a] + ((a == 0 ? kh : kw) - 1) * o.dilation[a] + 1 +
           o.output_padding[a];
  }
  loom::shape<4> x_shape() const { return {n, cin, h, w}; }
  loom::shape<4> w_shape() const { return {cin, cout / o.groups, kh, kw}; }
  loom::shape<4> y_shape() const { return {n, cout, out(0), out(1)}; }
};

// Calls f(y index, x index, w index) for every term of the transposed
// convolution: x(n, c, iy, ix) w(c, oc, ki, kj) adds to y(n, group's oc,
// iy stride - padding + ki dilation, ...). These are the terms of the
// convolution of an input of y's shape with the same weight and options,
// whose output has x's shape (output_padding < stride adds no output
// position), with the roles of x and y swapped.
template <class F>
void for_each_transpose_term(const transpose_case& k, F f) {
  conv_case c;
  c.n = k.n, c.c = k.cout, c.h = k.out(0), c.w = k.out(1), c.cout = k.cin, c.kh = k.kh, c.kw = k.kw;
  c.o.stride = k.o.stride, c.o.padding = k.o.padding, c.o.dilation = k.o.dilation, c.o.groups = k.o.groups;
  for_each_term(c, [&](index_t yi, index_t xi, index_t wi) { f(xi, yi, wi); });
}
}  // namespace

TEST_CASE("conv_transpose2d and its gradients match a direct loop over a random sweep of options", "[nn][conv]") {
  std::mt19937_64 g(loom_test::seed_for("conv_transpose2d sweep"));
  for (int i = 0; i < 200; ++i) {
    const auto pick = [&](index_t lo, index_t hi) { return std::uniform_int_distribution<index_t>(lo, hi)(g); };
    transpose_case k;
    k.n = pick(1, 2);
    k.o.groups = pick(1, 3);
    k.cin = k.o.groups * pick(1, 2);
    k.cout = k.o.groups * pick(1, 3);
    random_window(k, pick, 6, 2);
    for (int a = 0; a < 2; ++a) k.o.output_padding[a] = pick(0, k.o.stride[a] - 1);
    if (k.out(0) < 1 || k.out(1) < 1) continue;
    INFO("case " << i << ": x " << loom::shape_string(k.x_shape()) << " w " << loom::shape_string(k.w_shape()) << " -> "
                 << loom::shape_string(k.y_shape()));
    vec xv, wv, bv, dyv;
    auto x = random_tensor<double>(k.x_shape(), g, xv);
    auto w = random_tensor<double>(k.w_shape(), g, wv);
    auto b = random_tensor<double>(loom::shape<1>{k.cout}, g, bv);
    auto dy = random_tensor<double>(k.y_shape(), g, dyv);
    vec y_want(static_cast<std::size_t>(loom::shape_size(k.y_shape())), 0.0), dx_want(xv.size(), 0.0),
        dw_want(wv.size(), 0.0);
    for_each_transpose_term(k, [&](index_t yi, index_t xi, index_t wi) {
      y_want[yi] += xv[xi] * wv[wi];
      dx_want[xi] += dyv[yi] * wv[wi];
      dw_want[wi] += dyv[yi] * xv[xi];
    });
    REQUIRE(loom::conv_transpose2d_output_shape(k.x_shape(), k.w_shape(), k.o) == k.y_shape());
    require_close(values_of(loom::conv_transpose2d(x, w, k.o).view()), y_want, 1e-12, "y");
    const std::size_t plane = static_cast<std::size_t>(k.out(0) * k.out(1));
    for (std::size_t e = 0; e < y_want.size(); ++e) y_want[e] += bv[e / plane % bv.size()];
    require_close(values_of(loom::conv_transpose2d(x, w, b, k.o).view()), y_want, 1e-12, "y + bias");
    require_close(values_of(loom::conv_transpose2d_backward_input(dy, w, k.x_shape(), k.o).view()), dx_want, 1e-12,
                  "dx");
    require_close(values_of(loom::conv_transpose2d_backward_weight(dy, x, k.w_shape(), k.o).view()), dw_want, 1e-12,
                  "dw");
  }
}

TEST_CASE("conv_transpose2d names the operand that does not fit", "[nn][conv][errors]") {
  loom::host_tensor<float, 4> x(loom::shape<4>{2, 4, 3, 3}), w(loom::shape<4>{4, 3, 3, 3});
  loom::fill(x, 1.0f);
  loom::fill(w, 1.0f);
  REQUIRE_THROWS_WITH(loom::conv_transpose2d(x, loom::host_tensor<float, 4>(loom::shape<4>{5, 3, 3, 3})),
                      Contains("loom: conv_transpose2d: weight w [5, 3, 3, 3] takes 5 input channels (axis 0), but "
                               "input x [2, 4, 3, 3] has 4"));
  REQUIRE_THROWS_AS(loom::conv_transpose2d(x, w, {.groups = 3}), loom::shape_error);
  REQUIRE_THROWS_WITH(loom::conv_transpose2d(x, w, {.stride = {2, 2}, .output_padding = {2, 0}}),
                      Contains("output_padding must lie in 0 to stride - 1"));
  REQUIRE_THROWS_WITH(loom::conv_transpose2d(x, w, {.padding = {3, 0}}), Contains("no output position"));
  REQUIRE_THROWS_AS(loom::conv_transpose2d(x, w, loom::host_tensor<float, 1>(loom::shape<1>{2})), loom::shape_error);
  REQUIRE_THROWS_WITH(
      loom::conv_transpose2d_backward_input(x, w, x.extents()),
      Contains("dy has shape [2, 4, 3, 3]; the transposed convolution's output has shape [2, 3, 5, 5]"));
  REQUIRE_THROWS_AS(loom::conv_transpose2d_backward_weight(x, x, w.extents()), loom::shape_error);
}

namespace {
// One pooling: x [n, c, h, w].
struct pool_case {
  index_t n = 1, c = 1, h = 1, w = 1;
  loom::pool2d_options o;
  index_t stride(int a) const { return o.stride[a] ? o.stride[a] : o.kernel[a]; }
  index_t out(int a) const {
    const index_t in = a == 0 ? h : w, p = o.padding[a], s = stride(a);
    const index_t span = (o.kernel[a] - 1) * o.dilation[a] + 1;
    index_t r = (in + 2 * p - span + (o.ceil_mode ? s - 1 : 0)) / s + 1;
    if (o.ceil_mode && (r - 1) * s >= in + p) --r;
    return r;
  }
  loom::shape<4> x_shape() const { return {n, c, h, w}; }
  loom::shape<4> y_shape() const { return {n, c, out(0), out(1)}; }
};

// Max pooling by direct loops: values and the flat index of the first maximum (NaN wins).
void ref_max(const pool_case& k, const vec& x, vec& values, std::vector<std::int64_t>& indices) {
  values.assign(static_cast<std::size_t>(loom::shape_size(k.y_shape())), 0);
  indices.assign(values.size(), -1);
  std::size_t i = 0;
  for (index_t p = 0; p < k.n * k.c; ++p)
    for (index_t oy = 0; oy < k.out(0); ++oy)
      for (index_t ox = 0; ox < k.out(1); ++ox, ++i) {
        double best = -INFINITY;
        for (index_t ki = 0; ki < k.o.kernel[0]; ++ki)
          for (index_t kj = 0; kj < k.o.kernel[1]; ++kj) {
            const index_t iy = oy * k.stride(0) - k.o.padding[0] + ki * k.o.dilation[0];
            const index_t ix = ox * k.stride(1) - k.o.padding[1] + kj * k.o.dilation[1];
            if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
            const double v = x[static_cast<std::size_t>((p * k.h + iy) * k.w + ix)];
            if (v > best || std::isnan(v)) {
              best = v;
              indices[i] = iy * k.w + ix;
            }
          }
        values[i] = best;
      }
}

// Average pooling's windows as PyTorch defines them, over the unpadded input.
template <class F>
void for_each_average_term(const pool_case& k, F f) {
  std::size_t i = 0;
  for (index_t p = 0; p < k.n * k.c; ++p)
    for (index_t oy = 0; oy < k.out(0); ++oy)
      for (index_t ox = 0; ox < k.out(1); ++ox, ++i) {
        const index_t y0 = oy * k.stride(0) - k.o.padding[0], x0 = ox * k.stride(1) - k.o.padding[1];
        const index_t y1 = std::min(y0 + k.o.kernel[0], k.h + k.o.padding[0]);
        const index_t x1 = std::min(x0 + k.o.kernel[1], k.w + k.o.padding[1]);
        index_t inside = 0;
        for (index_t iy = std::max<index_t>(y0, 0); iy < std::min(y1, k.h); ++iy)
          for (index_t ix = std::max<index_t>(x0, 0); ix < std::min(x1, k.w); ++ix) ++inside;
        const double divisor = k.o.count_include_pad ? double((y1 - y0) * (x1 - x0)) : double(inside);
        for (index_t iy = std::max<index_t>(y0, 0); iy < std::min(y1, k.h); ++iy)
          for (index_t ix = std::max<index_t>(x0, 0); ix < std::min(x1, k.w); ++ix)
            f(i, static_cast<std::size_t>((p * k.h + iy) * k.w + ix), 1 / divisor);
      }
}

pool_case random_pool_case(std::mt19937_64& g, bool dilation) {
  const auto pick = [&](index_t lo, index_t hi) { return std::uniform_int_distribution<index_t>(lo, hi)(g); };
  for (;;) {
    pool_case k;
    k.n = pick(1, 2);
    k.c = pick(1, 3);
    k.h = pick(1, 9);
    k.w = pick(1, 9);
    for (int a = 0; a < 2; ++a) {
      k.o.kernel[a] = pick(1, 4);
      k.o.stride[a] = pick(0, 3);
      k.o.padding[a] = pick(0, k.o.kernel[a] / 2);
      k.o.dilation[a] = dilation ? pick(1, 2) : 1;
    }
    k.o.ceil_mode = pick(0, 1) == 1;
    k.o.count_include_pad = pick(0, 1) == 1;
    const index_t span0 = (k.o.kernel[0] - 1) * k.o.dilation[0] + 1, span1 = (k.o.kernel[1] - 1) * k.o.dilation[1] + 1;
    if (span0 <= k.h + 2 * k.o.padding[0] && span1 <= k.w + 2 * k.o.padding[1] && k.out(0) > 0 && k.out(1) > 0)
      return k;
  }
}
}  // namespace

TEST_CASE("max_pool2d and its backward match a direct loop over random windows", "[nn][pool]") {
  std::mt19937_64 g(loom_test::seed_for("max_pool2d sweep"));
  for (int i = 0; i < 300; ++i) {
    const pool_case k = random_pool_case(g, true);
    INFO("case " << i << ": x " << loom::shape_string(k.x_shape()) << " kernel {" << k.o.kernel[0] << ", "
                 << k.o.kernel[1] << "} stride {" << k.o.stride[0] << ", " << k.o.stride[1] << "} padding {"
                 << k.o.padding[0] << ", " << k.o.padding[1] << "} dilation {" << k.o.dilation[0] << ", "
                 << k.o.dilation[1] << "} ceil " << k.o.ceil_mode);
    vec xv, dyv;
    auto x = random_tensor<float>(k.x_shape(), g, xv);
    if (i % 5 == 0 && x.size() > 2) {  // a NaN, and ties
      x.data()[1] = std::numeric_limits<float>::quiet_NaN();
      xv[1] = NAN;
      x.data()[2] = x.data()[0];
      xv[2] = xv[0];
    }
    vec want;
    std::vector<std::int64_t> want_at;
    ref_max(k, xv, want, want_at);
    auto [y, at] = loom::max_pool2d(x, k.o);
    REQUIRE(y.extents() == k.y_shape());
    for (std::size_t e = 0; e < want.size(); ++e) {
      INFO("element " << e);
      REQUIRE(at.data()[e] == want_at[e]);
      REQUIRE((std::isnan(want[e]) ? std::isnan(y.data()[e]) : y.data()[e] == static_cast<float>(want[e])));
    }
    auto dy = random_tensor<float>(k.y_shape(), g, dyv);
    vec dx_want(xv.size(), 0.0);
    for (std::size_t e = 0; e < want.size(); ++e)
      if (want_at[e] >= 0)
        dx_want[e / static_cast<std::size_t>(k.out(0) * k.out(1)) * static_cast<std::size_t>(k.h * k.w) +
                static_cast<std::size_t>(want_at[e])] += dyv[e];
    require_close(values_of(loom::max_pool2d_backward(dy, at, k.x_shape()).view()), dx_want, 1e-6, "dx");
  }
}

TEST_CASE("avg_pool2d and its backward match a direct loop over random windows", "[nn][pool]") {
  std::mt19937_64 g(loom_test::seed_for("avg_pool2d sweep"));
  for (int i = 0; i < 300; ++i) {
    const pool_case k = random_pool_case(g, false);
    INFO("case " << i << ": x " << loom::shape_string(k.x_shape()) << " kernel {" << k.o.kernel[0] << ", "
                 << k.o.kernel[1] << "} stride {" << k.o.stride[0] << ", " << k.o.stride[1] << "} padding {"
                 << k.o.padding[0] << ", " << k.o.padding[1] << "} ceil " << k.o.ceil_mode << " count_include_pad "
                 << k.o.count_include_pad);
    vec xv, dyv;
    auto x = random_tensor<double>(k.x_shape(), g, xv);
    auto dy = random_tensor<double>(k.y_shape(), g, dyv);
    vec want(static_cast<std::size_t>(loom::shape_size(k.y_shape())), 0.0), dx_want(xv.size(), 0.0);
    for_each_average_term(k, [&](std::size_t yi, std::size_t xi, double scale) {
      want[yi] += xv[xi] * scale;
      dx_want[xi] += dyv[yi] * scale;
    });
    require_close(values_of(loom::avg_pool2d(x, k.o).view()), want, 1e-12, "y");
    require_close(values_of(loom::avg_pool2d_backward(dy, k.x_shape(), k.o).view()), dx_want, 1e-12, "dx");
  }
}

TEST_CASE("adaptive_avg_pool2d and its backward average PyTorch's bins", "[nn][pool]") {
  std::mt19937_64 g(loom_test::seed_for("adaptive_avg_pool2d"));
  for (int i = 0; i < 60; ++i) {
    const auto pick = [&](index_t lo, index_t hi) { return std::uniform_int_distribution<index_t>(lo, hi)(g); };
    const index_t n = pick(1, 2), c = pick(1, 3), h = pick(1, 11), w = pick(1, 11), oh = pick(1, 7), ow = pick(1, 7);
    vec xv, dyv;
    auto x = random_tensor<double>(loom::shape<4>{n, c, h, w}, g, xv);
    auto dy = random_tensor<double>(loom::shape<4>{n, c, oh, ow}, g, dyv);
    vec want(static_cast<std::size_t>(n * c * oh * ow), 0.0), dx_want(xv.size(), 0.0);
    std::size_t e = 0;
    for (index_t p = 0; p < n * c; ++p)
      for (index_t i0 = 0; i0 < oh; ++i0)
        for (index_t j0 = 0; j0 < ow; ++j0, ++e) {
          const auto lo = [](index_t o, index_t in, index_t out) { return index_t(std::floor(double(o) * in / out)); };
          const auto hi = [](index_t o, index_t in, index_t out) {
            return index_t(std::ceil(double(o + 1) * in / out));
          };
          const index_t y0 = lo(i0, h, oh), y1 = hi(i0, h, oh), x0 = lo(j0, w, ow), x1 = hi(j0, w, ow);
          const double count = double((y1 - y0) * (x1 - x0));
          for (index_t iy = y0; iy < y1; ++iy)
            for (index_t ix = x0; ix < x1; ++ix) {
              const std::size_t xi = static_cast<std::size_t>((p * h + iy) * w + ix);
              want[e] += xv[xi] / count;
              dx_want[xi] += dyv[e] / count;
            }
        }
    require_close(values_of(loom::adaptive_avg_pool2d(x, {oh, ow}).view()), want, 1e-12, "y");
    require_close(values_of(loom::adaptive_avg_pool2d_backward(dy, x.extents()).view()), dx_want, 1e-12, "dx");
  }
}

TEST_CASE("pooling names the option or operand that does not fit", "[nn][pool][errors]") {
  loom::host_tensor<float, 4> x(loom::shape<4>{1, 2, 5, 5});
  loom::fill(x, 1.0f);
  REQUIRE_THROWS_WITH(loom::max_pool2d(x, {.kernel = {0, 2}}), Contains("loom: max_pool2d: kernel must be at least 1"));
  REQUIRE_THROWS_AS(loom::max_pool2d(x, {.kernel = {2, 2}, .padding = {2, 0}}), loom::value_error);
  REQUIRE_THROWS_WITH(loom::max_pool2d(x, {.kernel = {2, 2}, .stride = {-1, 1}}),
                      Contains("stride must be at least 1"));
  REQUIRE_THROWS_WITH(loom::max_pool2d(x, {.kernel = {2, 2}, .dilation = {0, 1}}),
                      Contains("dilation must be at least 1"));
  REQUIRE_THROWS_WITH(loom::avg_pool2d(x, {.kernel = {2, 2}, .dilation = {2, 1}}),
                      Contains("loom: avg_pool2d: takes no dilation"));
  REQUIRE_THROWS_AS(loom::avg_pool2d(x, {.kernel = {6, 2}}), loom::shape_error);
  REQUIRE_THROWS_WITH(loom::avg_pool2d(x, {.kernel = {6, 2}}), Contains("input x [1, 2, 5, 5] padded to 5"));

  auto [y, at] = loom::max_pool2d(x, {.kernel = {2, 2}});
  REQUIRE_THROWS_AS(loom::max_pool2d_backward(y, at, loom::shape<4>{1, 3, 5, 5}), loom::shape_error);
  at.data()[0] = 25;
  REQUIRE_THROWS_AS(loom::max_pool2d_backward(y, at, x.extents()), loom::index_error);
  REQUIRE_THROWS_WITH(loom::max_pool2d_backward(y, at, x.extents()), Contains("indices hold 25, outside the 25"));
  REQUIRE_THROWS_WITH(loom::avg_pool2d_backward(y, x.extents(), {.kernel = {3, 3}}),
                      Contains("dy has shape [1, 2, 2, 2]; the pooling's output has shape [1, 2, 1, 1]"));
  REQUIRE_THROWS_AS(loom::adaptive_avg_pool2d(x, {0, 2}), loom::value_error);
  REQUIRE_THROWS_AS(loom::adaptive_avg_pool2d(loom::host_tensor<float, 4>(loom::shape<4>{1, 1, 0, 3}), {1, 1}),
                    loom::shape_error);
  REQUIRE_THROWS_AS(loom::adaptive_avg_pool2d_backward(y, loom::shape<4>{2, 2, 5, 5}), loom::shape_error);
}

namespace {
// Batch norm in double over the channel axis of x [N, C, rest] (row-major
// values): the batch mean and biased variance of each channel, y, and the
// gradients for dy, by the textbook formulas.
struct bn_reference {
  vec mean, var, y, dx, dweight, dbias;
};
bn_reference ref_batch_norm(index_t n, index_t c, index_t rest, const vec& x, const vec& w, const vec& b, const vec& dy,
                            double eps) {
  bn_reference r;
  const auto at = [&](index_t i, index_t ch, index_t j) { return static_cast<std::size_t>((i * c + ch) * rest + j); };
  const double m = double(n * rest);
  r.y.assign(x.size(), 0.0);
  r.dx.assign(x.size(), 0.0);
  for (index_t ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0, db = 0, dw = 0;
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < rest; ++j) mean += x[at(i, ch, j)] / m;
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < rest; ++j) var += (x[at(i, ch, j)] - mean) * (x[at(i, ch, j)] - mean) / m;
    const double invstd = 1 / std::sqrt(var + eps);
    const auto cw = static_cast<std::size_t>(ch);
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < rest; ++j) {
        const double xhat = (x[at(i, ch, j)] - mean) * invstd;
        r.y[at(i, ch, j)] = xhat * w[cw] + b[cw];
        db += dy[at(i, ch, j)];
        dw += dy[at(i, ch, j)] * xhat;
      }
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < rest; ++j) {
        const double xhat = (x[at(i, ch, j)] - mean) * invstd;
        r.dx[at(i, ch, j)] = w[cw] * invstd * (dy[at(i, ch, j)] - db / m - xhat * dw / m);
      }
    r.mean.push_back(mean);
    r.var.push_back(var);
    r.dweight.push_back(dw);
    r.dbias.push_back(db);
  }
  return r;
}

template <class T, std::size_t R>
void check_batch_norm(const loom::shape<R>& s, std::mt19937_64& g, double tol) {
  INFO("x " << loom::shape_string(s) << (std::is_same_v<T, float> ? " float" : " double"));
  const index_t n = s[0], c = s[1], rest = loom::shape_size(s) / (n * c);
  vec xv, wv, bv, dyv, rmv, rvv;
  // x: every other element of the last axis of a wider tensor (strided), shifted off 0.
  loom::shape<R> wide = s;
  wide[R - 1] *= 2;
  vec wide_values;
  auto x_store = random_tensor<T>(wide, g, wide_values);
  loom::assign(x_store, x_store * 2 + 0.5);
  auto x = x_store.view();
  if constexpr (R == 2)
    x = x.slice(loom::range(0, n), loom::range(0, 2 * c, 2));
  else if constexpr (R == 3)
    x = x.slice(loom::range(0, n), loom::range(0, c), loom::range(0, wide[2], 2));
  else
    x = x.slice(loom::range(0, n), loom::range(0, c), loom::range(0, s[2]), loom::range(0, wide[3], 2));
  xv = values_of(x);
  auto w = random_tensor<T>(loom::shape<1>{c}, g, wv);
  auto b = random_tensor<T>(loom::shape<1>{c}, g, bv);
  auto dy = random_tensor<T>(s, g, dyv);
  auto rm = random_tensor<T>(loom::shape<1>{c}, g, rmv);
  auto rv = random_tensor<T>(loom::shape<1>{c}, g, rvv);
  loom::assign(rv, rv + 1.5);
  for (double& v : rvv) v += 1.5;
  const loom::batch_norm_options o{.eps = 1e-3, .momentum = 0.25};
  const bn_reference want = ref_batch_norm(n, c, rest, xv, wv, bv, dyv, o.eps);

  auto r = loom::batch_norm_training(x, w, b, rm, rv.view(), o);
  require_close(values_of(r.y.view()), want.y, tol, "y");
  require_close(values_of(r.mean.view()), want.mean, tol, "mean");
  vec invstd, rm_want, rv_want;
  const double m = double(n * rest);
  for (std::size_t ch = 0; ch < want.var.size(); ++ch) {
    invstd.push_back(1 / std::sqrt(want.var[ch] + o.eps));
    rm_want.push_back(0.75 * rmv[ch] + 0.25 * want.mean[ch]);
    rv_want.push_back(0.75 * rvv[ch] + 0.25 * want.var[ch] * m / (m - 1));
  }
  require_close(values_of(r.invstd.view()), invstd, tol, "invstd");
  require_close(values_of(rm.view()), rm_want, tol, "running_mean");
  require_close(values_of(rv.view()), rv_want, tol, "running_var");

  auto [dx, dw, db] = loom::batch_norm_backward(dy, x, w, r.mean, r.invstd);
  require_close(values_of(dx.view()), want.dx, tol, "dx");
  require_close(values_of(dw.view()), want.dweight, tol * double(n * rest), "dweight");
  require_close(values_of(db.view()), want.dbias, tol * double(n * rest), "dbias");

  // Inference with the updated running statistics.
  const bn_reference inf = ref_batch_norm(n, c, rest, xv, wv, bv, dyv, o.eps);
  vec y_inf(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const std::size_t ch = i / static_cast<std::size_t>(rest) % static_cast<std::size_t>(c);
    y_inf[i] = (xv[i] - rm_want[ch]) / std::sqrt(rv_want[ch] + o.eps) * wv[ch] + bv[ch];
  }
  require_close(values_of(loom::batch_norm_inference(x, w, b, rm, rv, o.eps).view()), y_inf, tol, "inference y");
}
}  // namespace

TEST_CASE("batch_norm training, running statistics, inference and gradients match a double loop", "[nn][norm]") {
  std::mt19937_64 g(loom_test::seed_for("batch_norm"));
  check_batch_norm<float>(loom::shape<4>{3, 5, 7, 3}, g, 2e-5);
  check_batch_norm<float>(loom::shape<4>{2, 3, 1, 9}, g, 2e-5);
  check_batch_norm<double>(loom::shape<3>{4, 6, 11}, g, 1e-12);
  check_batch_norm<float>(loom::shape<2>{13, 7}, g, 2e-5);
  check_batch_norm<float>(loom::shape<2>{2, 1}, g, 2e-5);
}

TEST_CASE("batch_norm names the operand that does not fit", "[nn][norm][errors]") {
  loom::host_tensor<float, 4> x(loom::shape<4>{2, 3, 4, 5});
  loom::fill(x, 1.0f);
  loom::host_tensor<float, 1> v3(loom::shape<1>{3}), v4(loom::shape<1>{4});
  loom::fill(v3, 1.0f);
  loom::fill(v4, 7.0f);
  REQUIRE_THROWS_WITH(loom::batch_norm_training(x, v4, v3, v3, v3),
                      Contains("loom: batch_norm_training: weight [4] must have one element per channel of input x "
                               "[2, 3, 4, 5] (3)"));
  REQUIRE_THROWS_WITH(loom::batch_norm_training(x, v3, v3, v3, v4), Contains("running_var [4]"));
  REQUIRE_THROWS_AS(loom::batch_norm_training(x, v3, v3, v3, v3, {.momentum = 1.5}), loom::value_error);
  REQUIRE_THROWS_AS(loom::batch_norm_training(x, v3, v3, v3, v3, {.eps = 0}), loom::value_error);
  REQUIRE(v3.data()[0] == 1.0f);  // nothing written by a failed call
  loom::host_tensor<float, 2> single(loom::shape<2>{1, 3});
  REQUIRE_THROWS_WITH(loom::batch_norm_training(single, v3, v3, v3, v3), Contains("has 1 value(s) per channel"));
  const auto empty_batch = loom::host_tensor<float, 4>(loom::shape<4>{0, 3, 2, 2});
  REQUIRE_THROWS_WITH(loom::batch_norm_training(empty_batch, v3, v3, v3, v3), Contains("has 0 value(s) per channel"));
  const auto no_channels = loom::host_tensor<float, 4>(loom::shape<4>{2, 0, 2, 2});
  const loom::host_tensor<float, 1> v0(loom::shape<1>{0});
  REQUIRE(loom::batch_norm_backward(no_channels, no_channels, v0, v0, v0).dx.size() == 0);
  REQUIRE_THROWS_WITH(loom::batch_norm_inference(x, v3, v3, v4, v3), Contains("running_mean [4]"));
  REQUIRE_THROWS_WITH(loom::batch_norm_backward(loom::host_tensor<float, 4>(loom::shape<4>{2, 3, 4, 4}), x, v3, v3, v3),
                      Contains("dy has shape [2, 3, 4, 4]; input x has shape [2, 3, 4, 5]"));
  REQUIRE_THROWS_WITH(loom::batch_norm_backward(x, x, v3, v3, v4), Contains("saved_invstd [4]"));
}

TEST_CASE("fold_batch_norm gives one convolution equal to conv2d then batch_norm_inference", "[nn][norm]") {
  std::mt19937_64 g(loom_test::seed_for("fold_batch_norm"));
  const conv_case k{.n = 2, .c = 6, .h = 7, .w = 5, .cout = 4, .kh = 3, .kw = 2, .o = {.padding = {1, 0}, .groups = 2}};
  vec xv, wv, bv, gv, betav, mv, vv;
  auto x = random_tensor<float>(k.x_shape(), g, xv);
  auto w = random_tensor<float>(k.w_shape(), g, wv);
  auto b = random_tensor<float>(loom::shape<1>{k.cout}, g, bv);
  auto gamma = random_tensor<float>(loom::shape<1>{k.cout}, g, gv);
  auto beta = random_tensor<float>(loom::shape<1>{k.cout}, g, betav);
  auto mean = random_tensor<float>(loom::shape<1>{k.cout}, g, mv);
  auto var = random_tensor<float>(loom::shape<1>{k.cout}, g, vv);
  loom::assign(var, var + 1.25);
  for (double& v : vv) v += 1.25;
  const double eps = 1e-3;
  for (const bool with_bias : {false, true}) {
    INFO("conv bias " << with_bias);
    vec want = ref_forward(k, xv, wv, with_bias ? &bv : nullptr);
    const std::size_t plane = static_cast<std::size_t>(k.out(0) * k.out(1));
    for (std::size_t i = 0; i < want.size(); ++i) {
      const std::size_t o = i / plane % static_cast<std::size_t>(k.cout);
      want[i] = std::max(0.0, (want[i] - mv[o]) / std::sqrt(vv[o] + eps) * gv[o] + betav[o]);
    }
    const auto f = with_bias ? loom::fold_batch_norm(w, gamma, beta, mean, var, eps, b)
                             : loom::fold_batch_norm(w, gamma, beta, mean, var, eps);
    auto o = k.o;
    o.activation = loom::matmul_activation::relu;
    require_close(values_of(loom::conv2d(x, f.weight, f.bias, o).view()), want, 2e-5, "conv + bn + relu");
  }
  REQUIRE_THROWS_WITH(loom::fold_batch_norm(w, gamma, beta, mean, loom::host_tensor<float, 1>(loom::shape<1>{3}), eps),
                      Contains("loom: fold_batch_norm: running_var [3] must have one element per output channel of "
                               "weight w [4, 3, 3, 2] (4)"));
  REQUIRE_THROWS_AS(loom::fold_batch_norm(w, gamma, beta, mean, var, 0.0), loom::value_error);
}

TEST_CASE("channels-last (NHWC) tensors enter as permuted views and give the NCHW results", "[nn][conv]") {
  std::mt19937_64 g(loom_test::seed_for("channels last"));
  const conv_case k{.n = 2, .c = 6, .h = 9, .w = 7, .cout = 4, .kh = 3, .kw = 3,
                    .o = {.stride = {2, 1}, .padding = {1, 1}, .groups = 2}};
  vec xv, wv, dyv;
  // The same values in channels-last memory [N, H, W, C] and in NCHW.
  auto nhwc = random_tensor<float>(loom::shape<4>{k.n, k.h, k.w, k.c}, g, xv);
  const auto x_view = nhwc.view().permute({0, 3, 1, 2});  // logical NCHW, strides {H W C, 1, W C, C}
  const auto x = loom::materialize(x_view);
  auto w = random_tensor<float>(k.w_shape(), g, wv);
  auto dy = random_tensor<float>(k.y_shape(), g, dyv);
  const auto same = [](const auto& a, const auto& b, const char* what) {
    INFO(what);
    REQUIRE(a.extents() == b.extents());
    REQUIRE(std::equal(a.data(), a.data() + a.size(), b.data()));
  };
  same(loom::conv2d(x_view, w, k.o), loom::conv2d(x, w, k.o), "conv2d");
  same(loom::conv2d_backward_weight(dy, x_view, k.w_shape(), k.o),
       loom::conv2d_backward_weight(dy, x, k.w_shape(), k.o), "conv2d_backward_weight");
  same(loom::max_pool2d(x_view, {.kernel = {3, 2}, .padding = {1, 1}}).values,
       loom::max_pool2d(x, {.kernel = {3, 2}, .padding = {1, 1}}).values, "max_pool2d");
  same(loom::avg_pool2d(x_view, {.kernel = {2, 2}}), loom::avg_pool2d(x, {.kernel = {2, 2}}), "avg_pool2d");
  loom::host_tensor<float, 1> ones(loom::shape<1>{k.c}), zeros(loom::shape<1>{k.c}), m1(loom::shape<1>{k.c}),
      v1(loom::shape<1>{k.c}), m2(loom::shape<1>{k.c}), v2(loom::shape<1>{k.c});
  for (auto* t : {&ones, &v1, &v2}) loom::fill(*t, 1.0f);
  for (auto* t : {&zeros, &m1, &m2}) loom::fill(*t, 0.0f);
  const auto bn_view = loom::batch_norm_training(x_view, ones, zeros, m1, v1);
  const auto bn = loom::batch_norm_training(x, ones, zeros, m2, v2);
  require_close(values_of(bn_view.y.view()), values_of(bn.y.view()), 1e-6, "batch_norm");
}

TEST_CASE("conv2d with layout nhwc takes and gives channels-last tensors", "[nn][conv]") {
  std::mt19937_64 g(loom_test::seed_for("conv2d nhwc"));
  const auto to_nhwc = [](const loom::shape<4>& s) { return loom::shape<4>{s[0], s[2], s[3], s[1]}; };
  for (int i = 0; i < 60; ++i) {
    conv_case k = random_case(g);
    k.o.layout = loom::conv_layout::nhwc;
    k.o.activation = i % 2 ? loom::matmul_activation::relu : loom::matmul_activation::none;
    INFO("case " << i << ": x " << loom::shape_string(k.x_shape()) << " w " << loom::shape_string(k.w_shape())
                 << " groups " << k.o.groups);
    vec xv, wv, bv, dyv;
    // Channels-last tensors; their values in NCHW order for the references.
    auto x = random_tensor<float>(to_nhwc(k.x_shape()), g, xv);
    auto dy = random_tensor<float>(to_nhwc(k.y_shape()), g, dyv);
    auto w = random_tensor<float>(k.w_shape(), g, wv);
    auto b = random_tensor<float>(loom::shape<1>{k.cout}, g, bv);
    xv = values_of(x.view().permute({0, 3, 1, 2}));
    dyv = values_of(dy.view().permute({0, 3, 1, 2}));
    REQUIRE(loom::conv2d_output_shape(x.extents(), w.extents(), k.o) == to_nhwc(k.y_shape()));
    loom::host_tensor<float, 4> y(to_nhwc(k.y_shape())), dx(x.extents());
    fill_nan(y.data(), y.size());
    fill_nan(dx.data(), dx.size());
    loom::conv2d_into(y, x, w, b, k.o);
    require_close(values_of(y.view().permute({0, 3, 1, 2})), activated(k, ref_forward(k, xv, wv, &bv)), 1e-5, "y");
    if (i % 2)
      loom::conv2d_backward_input_into(dx, dy, w, k.o);
    else
      dx = loom::conv2d_backward_input(dy, w, x.extents(), k.o);
    require_close(values_of(dx.view().permute({0, 3, 1, 2})), ref_backward_input(k, dyv, wv), 1e-5, "dx");
    require_close(values_of(loom::conv2d_backward_weight(dy, x, k.w_shape(), k.o).view()),
                  ref_backward_weight(k, dyv, xv), 1e-5, "dw");
  }
  loom::host_tensor<float, 4> x(loom::shape<4>{2, 8, 8, 6}), w(loom::shape<4>{4, 3, 3, 3});
  loom::fill(x, 1.0f);
  loom::fill(w, 1.0f);
  REQUIRE_THROWS_WITH(loom::conv2d(x, w, {.layout = loom::conv_layout::nhwc}),
                      Contains("takes 3 channels per group, 3 in all"));
  REQUIRE(loom::conv2d(x, w, {.groups = 2, .layout = loom::conv_layout::nhwc}).extents() ==
          loom::shape<4>{2, 6, 6, 4});
}

namespace {
// One 3-D convolution: x [n, c, d, h, w], weight [cout, c / groups, kd, kh, kw].
struct conv3d_case {
  index_t n = 1, c = 1, cout = 1;
  std::array<index_t, 3> in{1, 1, 1}, k{1, 1, 1};
  loom::conv3d_options o;
  index_t out(std::size_t a) const { return (in[a] + 2 * o.padding[a] - (k[a] - 1) * o.dilation[a] - 1) / o.stride[a] + 1; }
  bool convolves() const {
    for (std::size_t a = 0; a < 3; ++a)
      if ((k[a] - 1) * o.dilation[a] + 1 > in[a] + 2 * o.padding[a]) return false;
    return true;
  }
  loom::shape<5> x_shape() const { return {n, c, in[0], in[1], in[2]}; }
  loom::shape<5> w_shape() const { return {cout, c / o.groups, k[0], k[1], k[2]}; }
  loom::shape<5> y_shape() const { return {n, cout, out(0), out(1), out(2)}; }
};

// f(y index, x index, w index) for every product term of the 3-D convolution, row-major indices.
template <class F>
void for_each_term_3d(const conv3d_case& q, F f) {
  const index_t cin = q.c / q.o.groups, cog = q.cout / q.o.groups;
  const loom::shape<5> ys = q.y_shape();
  for (index_t n = 0; n < q.n; ++n)
    for (index_t o = 0; o < q.cout; ++o)
      for (index_t oz = 0; oz < ys[2]; ++oz)
        for (index_t oy = 0; oy < ys[3]; ++oy)
          for (index_t ox = 0; ox < ys[4]; ++ox)
            for (index_t ci = 0; ci < cin; ++ci)
              for (index_t kz = 0; kz < q.k[0]; ++kz)
                for (index_t ky = 0; ky < q.k[1]; ++ky)
                  for (index_t kx = 0; kx < q.k[2]; ++kx) {
                    const index_t iz = oz * q.o.stride[0] - q.o.padding[0] + kz * q.o.dilation[0];
                    const index_t iy = oy * q.o.stride[1] - q.o.padding[1] + ky * q.o.dilation[1];
                    const index_t ix = ox * q.o.stride[2] - q.o.padding[2] + kx * q.o.dilation[2];
                    if (iz < 0 || iz >= q.in[0] || iy < 0 || iy >= q.in[1] || ix < 0 || ix >= q.in[2]) continue;
                    const index_t c = o / cog * cin + ci;
                    f((((n * q.cout + o) * ys[2] + oz) * ys[3] + oy) * ys[4] + ox,
                      (((n * q.c + c) * q.in[0] + iz) * q.in[1] + iy) * q.in[2] + ix,
                      (((o * cin + ci) * q.k[0] + kz) * q.k[1] + ky) * q.k[2] + kx);
                  }
}

conv3d_case random_case_3d(std::mt19937_64& g) {
  const auto pick = [&](index_t lo, index_t hi) { return std::uniform_int_distribution<index_t>(lo, hi)(g); };
  for (;;) {
    conv3d_case q;
    q.n = pick(1, 2);
    const index_t mode = pick(0, 2);  // 0: groups 1, 1: 2 or 3 groups, 2: depthwise
    q.o.groups = mode == 0 ? 1 : pick(2, 3);
    q.c = q.o.groups * (mode == 2 ? 1 : pick(1, 2));
    q.cout = q.o.groups * pick(1, 2);
    for (std::size_t a = 0; a < 3; ++a) {
      q.in[a] = pick(1, 7);
      q.k[a] = pick(1, 3);
      q.o.stride[a] = pick(1, 3);
      q.o.padding[a] = pick(0, 2);
      q.o.dilation[a] = pick(1, 2);
    }
    if (q.convolves()) return q;
  }
}
}  // namespace

TEST_CASE("conv3d forward and gradients match a direct loop over a random sweep of options", "[nn][conv]") {
  std::mt19937_64 g(loom_test::seed_for("conv3d sweep"));
  for (int i = 0; i < 150; ++i) {
    conv3d_case q = random_case_3d(g);
    q.o.activation = static_cast<loom::matmul_activation>(i % 3);
    INFO("case " << i << ": x " << loom::shape_string(q.x_shape()) << " w " << loom::shape_string(q.w_shape())
                 << " groups " << q.o.groups << " stride {" << q.o.stride[0] << ", " << q.o.stride[1] << ", "
                 << q.o.stride[2] << "} padding {" << q.o.padding[0] << ", " << q.o.padding[1] << ", "
                 << q.o.padding[2] << "} dilation {" << q.o.dilation[0] << ", " << q.o.dilation[1] << ", "
                 << q.o.dilation[2] << "}");
    vec xv, wv, bv, dyv;
    auto x = random_tensor<float>(q.x_shape(), g, xv);
    auto w = random_tensor<float>(q.w_shape(), g, wv);
    auto b = random_tensor<float>(loom::shape<1>{q.cout}, g, bv);
    auto dy = random_tensor<float>(q.y_shape(), g, dyv);
    REQUIRE(loom::conv3d_output_shape(q.x_shape(), q.w_shape(), q.o) == q.y_shape());
    // References in double.
    vec y_ref(static_cast<std::size_t>(loom::shape_size(q.y_shape())));
    const index_t volume = q.out(0) * q.out(1) * q.out(2);
    for (std::size_t e = 0; e < y_ref.size(); ++e) y_ref[e] = bv[e / static_cast<std::size_t>(volume) % bv.size()];
    vec dx_ref(xv.size(), 0.0), dw_ref(wv.size(), 0.0), db_ref(bv.size(), 0.0);
    for_each_term_3d(q, [&](index_t yi, index_t xi, index_t wi) {
      const auto y_at = static_cast<std::size_t>(yi), x_at = static_cast<std::size_t>(xi),
                 w_at = static_cast<std::size_t>(wi);
      y_ref[y_at] += xv[x_at] * wv[w_at];
      dx_ref[x_at] += dyv[y_at] * wv[w_at];
      dw_ref[w_at] += dyv[y_at] * xv[x_at];
    });
    for (std::size_t e = 0; e < dyv.size(); ++e) db_ref[e / static_cast<std::size_t>(volume) % db_ref.size()] += dyv[e];
    conv_case activation_only;
    activation_only.o.activation = q.o.activation;
    // Into poisoned outputs, and as new tensors (the test main poisons every allocation).
    loom::host_tensor<float, 5> y(q.y_shape());
    fill_nan(y.data(), y.size());
    loom::conv3d_into(y, x, w, b, q.o);
    require_close(values_of(y.view()), activated(activation_only, y_ref), 1e-5, "y");
    if (q.o.activation == loom::matmul_activation::none)
      require_close(values_of(loom::conv3d(x, w, q.o).view()),
                    ref_forward_without_bias(y_ref, bv, volume), 1e-5, "y without bias");
    require_close(values_of(loom::conv3d_backward_input(dy, w, q.x_shape(), q.o).view()), dx_ref, 1e-5, "dx");
    require_close(values_of(loom::conv3d_backward_weight(dy, x, q.w_shape(), q.o).view()), dw_ref, 1e-5, "dw");
    require_close(values_of(loom::conv2d_backward_bias(dy).view()), db_ref, 1e-5, "db");
  }
}

TEST_CASE("conv3d reads strided inputs and names the operand that does not convolve", "[nn][conv][errors]") {
  std::mt19937_64 g(loom_test::seed_for("conv3d strided"));
  vec xv, wv;
  // Every other depth slice of x: the same result as its contiguous copy.
  auto x = random_tensor<float>(loom::shape<5>{2, 4, 9, 5, 6}, g, xv);
  auto w = random_tensor<float>(loom::shape<5>{6, 2, 2, 3, 1}, g, wv);
  const loom::conv3d_options o{.stride = {1, 2, 1}, .padding = {1, 0, 2}, .dilation = {2, 1, 1}, .groups = 2};
  const auto xs = x.view().slice(loom::whole, loom::whole, loom::range(0, 9, 2), loom::whole, loom::whole);
  const auto xc = loom::contiguous(xs);
  require_close(values_of(loom::conv3d(xs, w, o).view()), values_of(loom::conv3d(xc, w, o).view()), 0, "y");
  const auto dy = loom::conv3d(xc, w, o);
  require_close(values_of(loom::conv3d_backward_weight(dy, xs, w.extents(), o).view()),
                values_of(loom::conv3d_backward_weight(dy, xc, w.extents(), o).view()), 0, "dw");
  // Errors name the operand, as conv2d's.
  REQUIRE_THROWS_WITH(loom::conv3d(xc, w, {.groups = 3}), Contains("loom: conv3d: groups (3) does not divide the 4 channels of input x [2, 4, 5, 5, 6]"));
  REQUIRE_THROWS_WITH(loom::conv3d(xc, w), Contains("weight w [6, 2, 2, 3, 1] takes 2 channels per group, 2 in all"));
  REQUIRE_THROWS_WITH(loom::conv3d(xc, w, {.dilation = {5, 1, 1}, .groups = 2}),
                      Contains("spans 6 x 3 x 1 (dilation {5, 1, 1}), more than input x [2, 4, 5, 5, 6] padded to 5 x 5 x 6"));
  REQUIRE_THROWS_WITH(loom::conv3d(xc, w, {.stride = {1, 0, 1}, .groups = 2}), Contains("stride must be at least 1; got {1, 0, 1}"));
  REQUIRE_THROWS_WITH(loom::conv3d_backward_input(xc, w, xc.extents(), {.groups = 2}),
                      Contains("loom: conv3d_backward_input: the output gradient dy has shape [2, 4, 5, 5, 6]; the "
                               "convolution's output has shape [2, 6, 4, 3, 6]"));
  loom::host_tensor<float, 1> b5(loom::shape<1>{5});
  REQUIRE_THROWS_WITH(loom::conv3d(xc, w, b5, {.groups = 2}), Contains("bias [5] must have one element per output channel of weight w [6, 2, 2, 3, 1] (6)"));
}

#if LOOM_HAS_CUDNN
// cuDNN's part that needs no GPU: the descriptors loom builds, read back
// through cuDNN's own getters, and cuDNN's output extents; the error types.
namespace {
namespace cudnn = loom::detail::cudnn;

// The NCHW-ordered strides of an input of shape k.x_shape(): 0 NCHW, 1 NHWC,
// 2 NCHW with each row padded by 3 elements (a strided view).
loom::shape<4> input_strides(const conv_case& k, int layout) {
  if (layout == 1) return {k.h * k.w * k.c, 1, k.w * k.c, k.c};
  const index_t row = layout == 2 ? k.w + 3 : k.w;
  return {k.c * k.h * row, k.h * row, row, 1};
}

template <class T>
void check_descriptors(const conv_case& k, int layout, cudnnDataType_t type, cudnnDataType_t compute,
                       cudnnMathType_t math) {
  const auto geo = loom::detail::conv::checked_geometry("conv2d", k.x_shape(), k.w_shape(), k.o);
  const loom::shape<4> ys = k.y_shape(), xs = input_strides(k, layout);
  const loom::shape<4> y_strides =
      layout == 1 ? loom::shape<4>{ys[1] * ys[2] * ys[3], 1, ys[3] * ys[1], ys[1]}
                  : loom::shape<4>{ys[1] * ys[2] * ys[3], ys[2] * ys[3], ys[3], 1};
  cudnn::conv_descriptors d;
  // Channels-last data takes a channels-last filter ([Cout, kh, kw, C / groups]).
  const cudnnTensorFormat_t want_format = loom::detail::conv::filter_format(layout == 1);
  cudnn::describe<T>(d, geo, xs, y_strides, want_format);
  REQUIRE(cudnn::output_extents(d) == ys);
  // The tensors as described: extents, and the strides of every axis of more than one element.
  const auto read_back = [](cudnnTensorDescriptor_t t, const loom::shape<4>& extents, const loom::shape<4>& strides,
                            cudnnDataType_t want_type) {
    cudnnDataType_t got_type{};
    int rank = 0;
    std::array<int, 4> dims{}, steps{};
    LOOM_CUDNN_CHECK(cudnnGetTensorNdDescriptor(t, 4, &got_type, &rank, dims.data(), steps.data()));
    REQUIRE(rank == 4);
    REQUIRE(got_type == want_type);
    for (std::size_t a = 0; a != 4; ++a) {
      REQUIRE(dims[a] == extents[a]);
      if (extents[a] > 1) REQUIRE(steps[a] == strides[a]);
    }
  };
  read_back(d.x.get(), k.x_shape(), xs, type);
  read_back(d.y.get(), ys, y_strides, type);
  cudnnDataType_t wt{};
  cudnnTensorFormat_t format{};
  int ko = 0, kc = 0, kh = 0, kw = 0;
  LOOM_CUDNN_CHECK(cudnnGetFilter4dDescriptor(d.w.get(), &wt, &format, &ko, &kc, &kh, &kw));
  REQUIRE(wt == type);
  REQUIRE(format == want_format);
  REQUIRE(loom::shape<4>{ko, kc, kh, kw} == k.w_shape());
  int ph = 0, pw = 0, sh = 0, sw = 0, dh = 0, dw = 0, groups = 0;
  cudnnConvolutionMode_t mode{};
  cudnnDataType_t ct{};
  LOOM_CUDNN_CHECK(cudnnGetConvolution2dDescriptor(d.conv.get(), &ph, &pw, &sh, &sw, &dh, &dw, &mode, &ct));
  LOOM_CUDNN_CHECK(cudnnGetConvolutionGroupCount(d.conv.get(), &groups));
  REQUIRE(std::array<index_t, 7>{ph, pw, sh, sw, dh, dw, groups} ==
          std::array<index_t, 7>{k.o.padding[0], k.o.padding[1], k.o.stride[0], k.o.stride[1], k.o.dilation[0],
                                 k.o.dilation[1], k.o.groups});
  REQUIRE(mode == CUDNN_CROSS_CORRELATION);
  REQUIRE(ct == compute);
  cudnnMathType_t got_math{};
  LOOM_CUDNN_CHECK(cudnnGetConvolutionMathType(d.conv.get(), &got_math));
  REQUIRE(got_math == math);
}
}  // namespace

TEST_CASE("cudnn descriptors hold loom's geometry and give loom's output shape", "[nn][conv][cudnn]") {
  REQUIRE(loom::cudnn_version() >= 90000);
  std::mt19937_64 g(loom_test::seed_for("cudnn descriptors"));
  for (int i = 0; i < 300; ++i) {
    const conv_case k = random_case(g);
    const int layout = i % 3;
    INFO("case " << i << ": x " << loom::shape_string(k.x_shape()) << " w " << loom::shape_string(k.w_shape())
                 << " groups " << k.o.groups << " layout " << layout);
    switch (i % 4) {
      case 0: check_descriptors<float>(k, layout, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH); break;
      case 1: check_descriptors<double>(k, layout, CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_FMA_MATH); break;
      case 2: check_descriptors<loom::half>(k, layout, CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH); break;
      default:
        check_descriptors<loom::bf16>(k, layout, CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH);
    }
  }
  // Only bias with ReLU runs inside cuDNN's call; the rest is a loom kernel after it.
  using loom::matmul_activation;
  REQUIRE(loom::detail::conv::cudnn_fuses_epilogue(true, matmul_activation::relu));
  REQUIRE_FALSE(loom::detail::conv::cudnn_fuses_epilogue(true, matmul_activation::gelu_tanh));
  REQUIRE_FALSE(loom::detail::conv::cudnn_fuses_epilogue(true, matmul_activation::none));
  REQUIRE_FALSE(loom::detail::conv::cudnn_fuses_epilogue(false, matmul_activation::relu));
}

TEST_CASE("cudnn descriptors of a 3-D convolution hold loom's geometry and give conv3d's output shape",
          "[nn][conv][cudnn]") {
  std::mt19937_64 g(loom_test::seed_for("cudnn descriptors 3d"));
  for (int i = 0; i < 100; ++i) {
    const conv3d_case q = random_case_3d(g);
    INFO("case " << i << ": x " << loom::shape_string(q.x_shape()) << " w " << loom::shape_string(q.w_shape())
                 << " groups " << q.o.groups);
    const auto geo = loom::detail::conv::checked_geometry_3d("conv3d", q.x_shape(), q.w_shape(), q.o);
    const loom::shape<5> xs = q.x_shape(), ys = q.y_shape();
    const loom::shape<5> x_strides{xs[1] * xs[2] * xs[3] * xs[4], xs[2] * xs[3] * xs[4], xs[3] * xs[4], xs[4], 1};
    const loom::shape<5> y_strides{ys[1] * ys[2] * ys[3] * ys[4], ys[2] * ys[3] * ys[4], ys[3] * ys[4], ys[4], 1};
    cudnn::conv_descriptors d;
    cudnn::describe<float>(d, geo, x_strides, y_strides, CUDNN_TENSOR_NCHW);
    REQUIRE(cudnn::output_extents<5>(d) == ys);
    cudnnDataType_t type{};
    cudnnTensorFormat_t format{};
    int rank = 0;
    std::array<int, 5> filter{};
    LOOM_CUDNN_CHECK(cudnnGetFilterNdDescriptor(d.w.get(), 5, &type, &format, &rank, filter.data()));
    REQUIRE(rank == 5);
    REQUIRE(loom::shape<5>{filter[0], filter[1], filter[2], filter[3], filter[4]} == q.w_shape());
    std::array<int, 3> pad{}, stride{}, dilation{};
    cudnnConvolutionMode_t mode{};
    cudnnDataType_t compute{};
    LOOM_CUDNN_CHECK(cudnnGetConvolutionNdDescriptor(d.conv.get(), 3, &rank, pad.data(), stride.data(),
                                                     dilation.data(), &mode, &compute));
    REQUIRE(rank == 3);
    for (std::size_t a = 0; a < 3; ++a) {
      REQUIRE(pad[a] == q.o.padding[a]);
      REQUIRE(stride[a] == q.o.stride[a]);
      REQUIRE(dilation[a] == q.o.dilation[a]);
    }
    int groups = 0;
    LOOM_CUDNN_CHECK(cudnnGetConvolutionGroupCount(d.conv.get(), &groups));
    REQUIRE(groups == q.o.groups);
  }
}

TEST_CASE("cudnn statuses become typed loom errors with cuDNN's message", "[nn][conv][cudnn][errors]") {
  // Input channels (6) that the filter (3 per group, 1 group) does not take:
  // cuDNN refuses the output extents with BAD_PARAM and says why.
  cudnn::tensor_descriptor x;
  cudnn::filter_descriptor w;
  cudnn::convolution_descriptor c;
  cudnn::describe_tensor<4>(x.get(), CUDNN_DATA_FLOAT, {2, 6, 9, 7}, {378, 63, 7, 1}, "input x");
  LOOM_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 3, 3, 3));
  LOOM_CUDNN_CHECK(
      cudnnSetConvolution2dDescriptor(c.get(), 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  int n = 0, k = 0, h = 0, wo = 0;
  try {
    LOOM_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(c.get(), x.get(), w.get(), &n, &k, &h, &wo));
    FAIL("cuDNN accepted a filter of 3 channels for an input of 6");
  } catch (const loom::cudnn_not_supported&) {
    FAIL("BAD_PARAM must not read as not supported");
  } catch (const loom::cudnn_error& e) {
    REQUIRE(CUDNN_STATUS_CATEGORY(e.status()) == CUDNN_STATUS_BAD_PARAM);
    const std::string text = e.what();
    CHECK_THAT(text, Contains("loom: cudnnGetConvolution2dForwardOutputDim"));
    CHECK_THAT(text, Contains("CUDNN_STATUS_BAD_PARAM"));
    CHECK_THAT(text, Contains("groupCount"));  // cuDNN's own explanation
  }
  // The NOT_SUPPORTED family is its own type, named by cuDNN's status string.
  REQUIRE_THROWS_MATCHES(cudnn::raise(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT, "a call", "here.cpp", 7, "why"),
                         loom::cudnn_not_supported,
                         Catch::Matchers::Message("loom: a call failed at here.cpp:7: CUDNN_STATUS_NOT_SUPPORTED_LAYOUT "
                                                  "(why)"));
  REQUIRE_THROWS_AS(cudnn::raise(CUDNN_STATUS_EXECUTION_FAILED, "a call", "here.cpp", 7, ""), loom::cudnn_error);
  // Extents past 32 bits, and no GPU.
  REQUIRE_THROWS_WITH(cudnn::describe_tensor<4>(x.get(), CUDNN_DATA_FLOAT, {1, 1, index_t{1} << 31, 1}, {1, 1, 1, 1}, "input x"),
                      Contains("32 bits; input x is 2147483648"));
  if (!loom::gpu::is_available()) {
    const conv_case kc{.n = 1, .c = 2, .h = 5, .w = 5, .cout = 3, .kh = 3, .kw = 3, .o = {}};
    const auto geo = loom::detail::conv::checked_geometry("conv2d", kc.x_shape(), kc.w_shape(), kc.o);
    const loom::view<const float, 4, loom::device> xv(nullptr, kc.x_shape()), wv(nullptr, kc.w_shape());
    const loom::view<float, 4, loom::device> yv(nullptr, kc.y_shape());
    REQUIRE_THROWS_AS(cudnn::forward(xv, wv.data(), CUDNN_TENSOR_NCHW, static_cast<const float*>(nullptr), geo, yv),
                      loom::device_unavailable);
  }
}
#endif
