// SPDX-License-Identifier: Apache-2.0
// conv2d and conv1d on device tensors (cuDNN) against the host executor's
// im2col path, which test_conv checks against direct loops in double:
// random odd shapes and options, both layouts, the fused and the unfused
// epilogues, the three gradients; bits equal run to run; the workspace
// returned to the pool. [cuda]: skipped without a GPU.
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include <loom/exec/assign.hpp>
#include <loom/memory/memory.hpp>
#include <loom/nn/conv.hpp>
#include <loom/nn/conv_transpose.hpp>

#include "loom_test.hpp"

namespace {
using loom::index_t;

template <class T, std::size_t R>
loom::host_tensor<T, R> random_host(const loom::shape<R>& s, std::mt19937_64& g) {
  loom::host_tensor<T, R> t(s);
  std::uniform_real_distribution<double> d(-1, 1);
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = static_cast<T>(d(g));
  return t;
}

// max |a - b| / (1 + |b|) over the elements of two host tensors of one shape.
template <class T, std::size_t R>
double worst(const loom::host_tensor<T, R>& a, const loom::host_tensor<T, R>& b) {
  REQUIRE(a.extents() == b.extents());
  double w = 0;
  for (index_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(double(a.data()[i]) - double(b.data()[i])) / (1 + std::abs(double(b.data()[i])));
    if (!(e <= w)) w = e;  // NaN wins
  }
  return w;
}

template <class T>
void sweep(double tol) {
  std::mt19937_64 g(loom_test::seed_for("conv2d cudnn sweep"));
  const auto pick = [&](index_t lo, index_t hi) { return std::uniform_int_distribution<index_t>(lo, hi)(g); };
  for (int i = 0; i < 48; ++i) {
    loom::conv2d_options o;
    const index_t groups = i % 4 == 0 ? 1 : pick(1, 3);
    o.groups = groups;
    const index_t c = groups * pick(1, 3), cout = groups * pick(1, 3);
    const index_t kh = pick(1, 3), kw = pick(1, 3);
    for (int a = 0; a < 2; ++a) {
      o.stride[a] = pick(1, 2);
      o.padding[a] = pick(0, 2);
      o.dilation[a] = pick(1, 2);
    }
    o.activation = static_cast<loom::matmul_activation>(i % 3);
    o.layout = i % 2 ? loom::conv_layout::nhwc : loom::conv_layout::nchw;
    const bool nhwc = i % 2 != 0;
    const index_t n = pick(1, 3), h = pick(5, 11), w = pick(5, 11);
    const loom::shape<4> xs = nhwc ? loom::shape<4>{n, h, w, c} : loom::shape<4>{n, c, h, w};
    const loom::shape<4> ws{cout, c / groups, kh, kw};
    INFO("case " << i << ": x " << loom::shape_string(xs) << " w " << loom::shape_string(ws) << " groups " << groups
                 << " activation " << i % 3 << (nhwc ? " nhwc" : " nchw"));
    const auto x = random_host<T>(xs, g), wt = random_host<T>(ws, g);
    const auto b = random_host<T>(loom::shape<1>{cout}, g);
    const auto dy = random_host<T>(loom::conv2d_output_shape(xs, ws, o), g);
    const auto x_dev = loom::to_device(x), w_d = loom::to_device(wt);
    const auto b_d = loom::to_device(b);
    const auto dy_d = loom::to_device(dy);
    // With and without the bias: bias + ReLU runs inside cuDNN, the rest as a loom kernel after it.
    REQUIRE(worst(loom::to_host(loom::conv2d(x_dev, w_d, b_d, o)), loom::conv2d(x, wt, b, o)) <= tol);
    REQUIRE(worst(loom::to_host(loom::conv2d(x_dev, w_d, o)), loom::conv2d(x, wt, o)) <= tol);
    REQUIRE(worst(loom::to_host(loom::conv2d_backward_input(dy_d, w_d, xs, o)),
                  loom::conv2d_backward_input(dy, wt, xs, o)) <= tol);
    REQUIRE(worst(loom::to_host(loom::conv2d_backward_weight(dy_d, x_dev, ws, o)),
                  loom::conv2d_backward_weight(dy, x, ws, o)) <= tol);
    if (!nhwc) REQUIRE(worst(loom::to_host(loom::conv2d_backward_bias(dy_d)), loom::conv2d_backward_bias(dy)) <= tol);
  }
}

// conv_transpose2d: cuDNN's data gradient, its gradients a convolution and a weight gradient.
template <class T>
void transposed_sweep(double tol) {
  std::mt19937_64 g(loom_test::seed_for("conv_transpose2d cudnn sweep"));
  const auto pick = [&](index_t lo, index_t hi) { return std::uniform_int_distribution<index_t>(lo, hi)(g); };
  for (int i = 0; i < 16; ++i) {
    loom::conv_transpose2d_options o;
    o.groups = pick(1, 2);
    const index_t cin = o.groups * pick(1, 3), cout = o.groups * pick(1, 3);
    for (int a = 0; a < 2; ++a) {
      o.stride[a] = pick(1, 3);
      o.padding[a] = pick(0, 1);
      o.dilation[a] = pick(1, 2);
      o.output_padding[a] = pick(0, o.stride[a] - 1);
    }
    const loom::shape<4> xs{pick(1, 2), cin, pick(3, 7), pick(3, 7)}, ws{cin, cout / o.groups, pick(1, 3), pick(1, 3)};
    INFO("case " << i << ": x " << loom::shape_string(xs) << " w " << loom::shape_string(ws));
    const auto x = random_host<T>(xs, g), wt = random_host<T>(ws, g);
    const auto b = random_host<T>(loom::shape<1>{cout}, g);
    const auto dy = random_host<T>(loom::conv_transpose2d_output_shape(xs, ws, o), g);
    const auto x_d = loom::to_device(x), w_d = loom::to_device(wt);
    const auto b_d = loom::to_device(b);
    const auto dy_d = loom::to_device(dy);
    REQUIRE(worst(loom::to_host(loom::conv_transpose2d(x_d, w_d, b_d, o)), loom::conv_transpose2d(x, wt, b, o)) <=
            tol);
    REQUIRE(worst(loom::to_host(loom::conv_transpose2d_backward_input(dy_d, w_d, xs, o)),
                  loom::conv_transpose2d_backward_input(dy, wt, xs, o)) <= tol);
    REQUIRE(worst(loom::to_host(loom::conv_transpose2d_backward_weight(dy_d, x_d, ws, o)),
                  loom::conv_transpose2d_backward_weight(dy, x, ws, o)) <= tol);
  }
}
}  // namespace

TEMPLATE_TEST_CASE("conv2d and conv_transpose2d on device tensors equal the host executor", "[nn][conv][cuda]", float,
                   double) {
  const double tol = std::is_same_v<TestType, double> ? 1e-12 : 2e-5;
  sweep<TestType>(tol);
  transposed_sweep<TestType>(tol);
}

TEST_CASE("conv on device tensors: strided input, conv1d, conv3d, bf16, bits run to run, workspace freed",
          "[nn][conv][cuda]") {
  std::mt19937_64 g(loom_test::seed_for("conv2d cudnn misc"));
  const auto x = random_host<float>(loom::shape<4>{3, 5, 9, 13}, g), w = random_host<float>(loom::shape<4>{7, 5, 3, 3}, g);
  const auto b = random_host<float>(loom::shape<1>{7}, g);
  const loom::conv2d_options o{.stride = {2, 1}, .padding = {1, 1}, .activation = loom::matmul_activation::relu};
  const auto x_d = loom::to_device(x), w_d = loom::to_device(w);
  const auto b_d = loom::to_device(b);
  // A strided input (every other column) is read in place through its strides.
  const auto x_cols = x.view().slice(loom::whole, loom::whole, loom::whole, loom::range(0, 13, 2));
  REQUIRE(worst(loom::to_host(loom::conv2d(x_d.view().slice(loom::whole, loom::whole, loom::whole, loom::range(0, 13, 2)), w_d, b_d, o)),
                loom::conv2d(x_cols, w, b, o)) <= 2e-5);
  // conv1d runs as conv2d of height 1.
  const auto x1 = random_host<float>(loom::shape<3>{2, 6, 17}, g), w1 = random_host<float>(loom::shape<3>{4, 3, 5}, g);
  const loom::conv1d_options o1{.stride = 2, .padding = 2, .dilation = 2, .groups = 2};
  REQUIRE(worst(loom::to_host(loom::conv1d(loom::to_device(x1), loom::to_device(w1), o1)), loom::conv1d(x1, w1, o1)) <=
          2e-5);
  // conv3d (NCDHW) through cuDNN's Nd descriptors, with bias + ReLU fused, and its gradients.
  const auto x3 = random_host<float>(loom::shape<5>{2, 4, 5, 7, 6}, g), w3 = random_host<float>(loom::shape<5>{6, 2, 3, 2, 3}, g);
  const auto b3 = random_host<float>(loom::shape<1>{6}, g);
  const loom::conv3d_options o3{.stride = {1, 2, 1}, .padding = {1, 0, 1}, .dilation = {2, 1, 1}, .groups = 2,
                                .activation = loom::matmul_activation::relu};
  const auto dy3 = random_host<float>(loom::conv3d_output_shape(x3.extents(), w3.extents(), o3), g);
  const auto x3_d = loom::to_device(x3), w3_d = loom::to_device(w3);
  const auto b3_d = loom::to_device(b3);
  const auto dy3_d = loom::to_device(dy3);
  REQUIRE(worst(loom::to_host(loom::conv3d(x3_d, w3_d, b3_d, o3)), loom::conv3d(x3, w3, b3, o3)) <= 2e-5);
  REQUIRE(worst(loom::to_host(loom::conv3d_backward_input(dy3_d, w3_d, x3.extents(), o3)),
                loom::conv3d_backward_input(dy3, w3, x3.extents(), o3)) <= 2e-5);
  REQUIRE(worst(loom::to_host(loom::conv3d_backward_weight(dy3_d, x3_d, w3.extents(), o3)),
                loom::conv3d_backward_weight(dy3, x3, w3.extents(), o3)) <= 2e-5);
  REQUIRE(worst(loom::to_host(loom::conv2d_backward_bias(dy3_d)), loom::conv2d_backward_bias(dy3)) <= 2e-5);
  // bf16 in, bf16 out, float accumulation: against the host in float on the same (rounded) values.
  const auto x_b = loom::to_device(loom::materialize(loom::cast<loom::bf16>(x)));
  const auto w_b = loom::to_device(loom::materialize(loom::cast<loom::bf16>(w)));
  const auto b_b = loom::to_device(loom::materialize(loom::cast<loom::bf16>(b)));
  const auto y_b = loom::to_host(loom::materialize(loom::cast<float>(loom::conv2d(x_b, w_b, b_b, o))));
  const auto want = loom::conv2d(loom::materialize(loom::cast<float>(loom::to_host(x_b))),
                                 loom::materialize(loom::cast<float>(loom::to_host(w_b))),
                                 loom::materialize(loom::cast<float>(loom::to_host(b_b))), o);
  REQUIRE(worst(y_b, want) <= 2e-2);
  // Deterministic algorithms: the weight gradient twice gives the same bits.
  const auto dy_d = loom::to_device(random_host<float>(loom::conv2d_output_shape(x.extents(), w.extents(), o), g));
  const auto dw1 = loom::to_host(loom::conv2d_backward_weight(dy_d, x_d, w.extents(), o));
  const auto dw2 = loom::to_host(loom::conv2d_backward_weight(dy_d, x_d, w.extents(), o));
  REQUIRE(std::memcmp(dw1.data(), dw2.data(), sizeof(float) * static_cast<std::size_t>(dw1.size())) == 0);
  // The workspace goes back to the pool: only the new output stays allocated.
  loom::current_stream().synchronize();
  const auto before = loom::device_memory_stats().in_use;
  {
    const auto dx = loom::conv2d_backward_input(dy_d, w_d, x.extents(), o);
    loom::current_stream().synchronize();
    REQUIRE(loom::device_memory_stats().in_use - before == static_cast<std::size_t>(dx.size()) * sizeof(float));
  }
  REQUIRE(loom::device_memory_stats().in_use == before);
}
