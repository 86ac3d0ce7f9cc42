// SPDX-License-Identifier: Apache-2.0
// Trains a small ResNet-style network on a synthetic image set on the host
// executor: 12 x 12 one-channel images of noise with a bright spot in one
// quadrant, labelled by the quadrant. The network: conv-bn-relu, a residual
// block (conv-bn-relu, conv-bn, + its input, relu), max pooling, adaptive
// average pooling, a linear head and loom's cross-entropy. The backward
// chains loom's gradient functions (convolution, batch norm, pooling, the
// head's matmul_backward); AdamW (loom/optim) updates the 11 parameters.
// Then classifies new images in inference mode, each batch norm folded into
// its convolution (fold_batch_norm). Exits non-zero unless the loss falls
// below half its first value and at least 75% of the new images are right.
//
// `08_cnn --torch-check DIR` also writes what examples/torch/check_conv.py
// compares with PyTorch in float64: the network's inputs, parameters and
// step-0 gradients (.npy), and a random sweep of convolution, pooling and
// batch-norm cases (examples/torch/conv_cases.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include <loom/core/device.hpp>
#include <loom/linalg/matmul.hpp>
#include <loom/linalg/matmul_backward.hpp>
#include <loom/nn/batch_norm.hpp>
#include <loom/nn/conv.hpp>
#include <loom/nn/loss.hpp>
#include <loom/nn/pool.hpp>
#include <loom/ops/activations.hpp>
#include <loom/ops/compare.hpp>
#include <loom/optim/optim.hpp>
#include <loom/tensor/npy.hpp>

#include "torch/conv_cases.hpp"

using namespace loom;

namespace {
constexpr index_t image = 12, classes = 4, width = 8;

// Noise with a bright 3 x 3 spot in quadrant labels[n] of image n.
void make_images(index_t n, std::mt19937& g, host_tensor<float, 4>& x, host_tensor<std::int64_t, 1>& labels) {
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::uniform_int_distribution<index_t> quadrant(0, classes - 1), offset(0, image / 2 - 3);
  for (index_t i = 0; i < x.size(); ++i) x.data()[i] = noise(g);
  for (index_t i = 0; i < n; ++i) {
    const index_t q = quadrant(g), y0 = q / 2 * image / 2 + offset(g), x0 = q % 2 * image / 2 + offset(g);
    labels.data()[i] = q;
    for (index_t dy = 0; dy < 3; ++dy)
      for (index_t dx = 0; dx < 3; ++dx) x.data()[(i * image + y0 + dy) * image + x0 + dx] += 1.5f;
  }
}

host_tensor<float, 4> kaiming(const shape<4>& s, std::mt19937& g) {
  std::normal_distribution<float> d(0.0f, std::sqrt(2.0f / float(s[1] * s[2] * s[3])));
  host_tensor<float, 4> w(s);
  for (index_t i = 0; i < w.size(); ++i) w.data()[i] = d(g);
  return w;
}

// A convolution's weight and a batch norm's parameters and running
// statistics, with their gradients.
struct conv_bn {
  host_tensor<float, 4> w, dw;
  host_tensor<float, 1> gamma, beta, dgamma, dbeta, running_mean, running_var;
  conv_bn(index_t in, index_t out, std::mt19937& g)
      : w(kaiming({out, in, 3, 3}, g)), dw(w.extents()), gamma(shape<1>{out}), beta(shape<1>{out}),
        dgamma(shape<1>{out}), dbeta(shape<1>{out}), running_mean(shape<1>{out}), running_var(shape<1>{out}) {
    fill(gamma, 1.0f), fill(beta, 0.0f), fill(running_mean, 0.0f), fill(running_var, 1.0f);
  }

  // The activations of one step: the convolution's output and batch norm's statistics.
  host_tensor<float, 4> conv;
  batch_norm_result<float, 4, host> bn;
  const host_tensor<float, 4>& forward(const host_tensor<float, 4>& x) {
    conv = conv2d(x, w, {.padding = {1, 1}});
    bn = batch_norm_training(conv, gamma, beta, running_mean, running_var);
    return bn.y;
  }
  // Writes dw, dgamma, dbeta for dy of batch norm's output; returns dx of the input x.
  host_tensor<float, 4> backward(const host_tensor<float, 4>& dy, const host_tensor<float, 4>& x) {
    const auto g = batch_norm_backward(dy, conv, gamma, bn.mean, bn.invstd);
    assign(dgamma, g.dweight), assign(dbeta, g.dbias);
    conv2d_backward_weight_into(dw, g.dx, x, {.padding = {1, 1}});
    return conv2d_backward_input(g.dx, w, x.extents(), {.padding = {1, 1}});
  }
};

struct network {
  conv_bn stem, block1, block2;
  host_tensor<float, 2> head_w, head_dw;
  host_tensor<float, 1> head_b, head_db;
  network(std::mt19937& g)
      : stem(1, width, g), block1(width, width, g), block2(width, width, g),
        head_w(shape<2>{width * 4, classes}), head_dw(head_w.extents()), head_b(shape<1>{classes}),
        head_db(head_b.extents()) {
    std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(float(width * 4)));
    for (index_t i = 0; i < head_w.size(); ++i) head_w.data()[i] = d(g);
    fill(head_b, 0.0f);
  }

  // One forward and backward pass; returns the loss and writes every gradient.
  float step(const host_tensor<float, 4>& x, const host_tensor<std::int64_t, 1>& labels) {
    const host_tensor<float, 4> a = materialize(relu(stem.forward(x)));
    const host_tensor<float, 4> h = materialize(relu(block1.forward(a)));
    const host_tensor<float, 4> r = materialize(relu(block2.forward(h) + a));  // the residual add
    auto [p, where_max] = max_pool2d(r, {.kernel = {2, 2}});
    const auto q = adaptive_avg_pool2d(p, {2, 2});
    const auto flat = q.view().reshape(shape<2>{x.extent(0), width * 4});
    const host_tensor<float, 2> logits = materialize(matmul(flat, head_w) + head_b);
    const float loss = cross_entropy(logits, labels).item();

    const auto dlogits = cross_entropy_backward(logits, labels);
    host_tensor<float, 2> dflat(flat.extents());
    matmul_backward_into(dflat, head_dw, head_db, flat, head_w, dlogits);
    const auto dp = adaptive_avg_pool2d_backward(dflat.view().reshape(q.extents()), p.extents());
    const auto dr = max_pool2d_backward(dp, where_max, r.extents());
    const host_tensor<float, 4> ds = materialize(where(r > 0.0f, dr, 0.0f));  // relu's gradient
    const auto dh = block2.backward(ds, h);
    const auto da = block1.backward(materialize(where(h > 0.0f, dh, 0.0f)), a);
    stem.backward(materialize(where(a > 0.0f, ds + da, 0.0f)), x);  // the residual's two paths meet
    return loss;
  }

  // Inference: each conv-bn folded into one convolution with the ReLU (where
  // one follows) in its GEMM's epilogue. Returns the share of x classified right.
  double accuracy(const host_tensor<float, 4>& x, const host_tensor<std::int64_t, 1>& labels) const {
    const auto conv = [](const conv_bn& l, const host_tensor<float, 4>& in, matmul_activation act) {
      const auto f = fold_batch_norm(l.w, l.gamma, l.beta, l.running_mean, l.running_var, 1e-5);
      return conv2d(in, f.weight, f.bias, {.padding = {1, 1}, .activation = act});
    };
    const auto a = conv(stem, x, matmul_activation::relu);
    const auto h = conv(block1, a, matmul_activation::relu);
    const host_tensor<float, 4> r = materialize(relu(conv(block2, h, matmul_activation::none) + a));
    const auto q = adaptive_avg_pool2d(max_pool2d(r, {.kernel = {2, 2}}).values, {2, 2});
    const auto predicted = argmax(materialize(matmul(q.view().reshape(shape<2>{x.extent(0), width * 4}), head_w) +
                                              head_b), 1);
    index_t right = 0;
    for (index_t i = 0; i < x.extent(0); ++i) right += predicted.data()[i] == labels.data()[i];
    return double(right) / double(x.extent(0));
  }

  // Calls f(name, parameter, gradient) for each of the 11 parameters.
  template <class F>
  void for_each_parameter(F f) {
    conv_bn* layers[] = {&stem, &block1, &block2};
    for (int i = 0; i < 3; ++i) {
      const std::string l = "conv" + std::to_string(i) + "_";
      f(l + "w", layers[i]->w, layers[i]->dw);
      f(l + "gamma", layers[i]->gamma, layers[i]->dgamma);
      f(l + "beta", layers[i]->beta, layers[i]->dbeta);
    }
    f(std::string("head_w"), head_w, head_dw);
    f(std::string("head_b"), head_b, head_db);
  }
  void add_to(optim::adamw<host>& opt) {
    for_each_parameter([&](const std::string&, auto& p, auto& grad) { opt.add(p, grad); });
  }
  // The parameters (before step 0) or, after it, their gradients and the
  // running statistics, as .npy files in dir.
  void save(const std::string& dir, bool gradients) {
    for_each_parameter([&](const std::string& name, auto& p, auto& grad) {
      save_npy(dir + (gradients ? "/cnn_grad_" : "/cnn_param_") + name + ".npy", (gradients ? grad : p).view());
    });
    if (!gradients) return;
    const conv_bn* layers[] = {&stem, &block1, &block2};
    for (int i = 0; i < 3; ++i) {
      const std::string l = dir + "/cnn_running_conv" + std::to_string(i);
      save_npy(l + "_mean.npy", layers[i]->running_mean.view());
      save_npy(l + "_var.npy", layers[i]->running_var.view());
    }
  }
};

int train(index_t n, int steps, const char* torch_dir) {
  std::mt19937 g(2025);
  host_tensor<float, 4> x(shape<4>{n, 1, image, image});
  host_tensor<std::int64_t, 1> labels(shape<1>{n});
  make_images(n, g, x, labels);
  network net(g);
  optim::adamw<host> opt({.lr = 1e-2, .weight_decay = 0});
  net.add_to(opt);

  float first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    if (step == 0 && torch_dir) {
      net.save(torch_dir, false);
      save_npy(std::string(torch_dir) + "/cnn_x.npy", x.view());
      save_npy(std::string(torch_dir) + "/cnn_labels.npy", labels.view());
    }
    last = net.step(x, labels);
    if (step == 0 && torch_dir) {
      net.save(torch_dir, true);
      std::FILE* f = std::fopen((std::string(torch_dir) + "/cnn_loss.txt").c_str(), "w");
      if (!f) throw value_error(std::string("loom: 08_cnn: cannot write into ") + torch_dir);
      std::fprintf(f, "%.9g\n", double(last));
      std::fclose(f);
    }
    opt.step();
    if (step == 0) first = last;
    if (step % 10 == 0 || step == steps - 1) std::printf("step %3d  loss %.4f\n", step, last);
  }
  const bool fell = std::isfinite(last) && last < 0.5f * first;
  std::printf("loss %.4f -> %.4f: %s\n", first, last, fell ? "falling" : "NOT falling");
  host_tensor<float, 4> test_x(shape<4>{n, 1, image, image});
  host_tensor<std::int64_t, 1> test_labels(shape<1>{n});
  make_images(n, g, test_x, test_labels);
  const double right = net.accuracy(test_x, test_labels);
  std::printf("inference with batch norm folded into the convolutions: %.0f%% of %lld new images right\n",
              100 * right, static_cast<long long>(n));
  return fell && right >= 0.75 ? 0 : 1;
}
// Batch norm runs on either executor: with a GPU, its training forward and
// backward and the folding on device tensors must equal the host's.
int check_device_batch_norm() {
  std::mt19937 g(7);
  const auto x = kaiming({8, 5, 7, 9}, g), dy = kaiming({8, 5, 7, 9}, g);
  host_tensor<float, 1> gamma(shape<1>{5}), beta(shape<1>{5}), mean(shape<1>{5}), var(shape<1>{5});
  fill(gamma, 1.5f), fill(beta, 0.25f), fill(mean, 0.0f), fill(var, 1.0f);
  auto dev_mean = to_device(mean), dev_var = to_device(var);
  const auto r = batch_norm_training(x, gamma, beta, mean, var);
  const auto d = batch_norm_training(to_device(x), to_device(gamma), to_device(beta), dev_mean, dev_var);
  const auto gh = batch_norm_backward(dy, x, gamma, r.mean, r.invstd);
  const auto gd = batch_norm_backward(to_device(dy), to_device(x), to_device(gamma), d.mean, d.invstd);
  const auto w = kaiming({5, 3, 3, 3}, g);
  const auto fh = fold_batch_norm(w, gamma, beta, mean, var, 1e-5);
  const auto fd = fold_batch_norm(to_device(w), to_device(gamma), to_device(beta), dev_mean, dev_var, 1e-5);
  const float diff = std::max({amax(abs(to_host(d.y) - r.y)).item(), amax(abs(to_host(gd.dx) - gh.dx)).item(),
                               amax(abs(to_host(gd.dweight) - gh.dweight)).item(),
                               amax(abs(to_host(dev_var) - var)).item(),
                               amax(abs(to_host(fd.weight) - fh.weight)).item()});
  std::printf("batch norm on the device vs the host: max difference %.2e\n", double(diff));
  return diff <= 1e-4f ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    const char* torch_dir = argc == 3 && std::strcmp(argv[1], "--torch-check") == 0 ? argv[2] : nullptr;
    if (argc != 1 && !torch_dir) {
      std::fprintf(stderr, "usage: %s [--torch-check DIR]\n", argv[0]);
      return 2;
    }
    // The network trains on the host executor (tests/conv's [cuda] program checks conv2d on device tensors).
    std::printf("training on the host executor\n");
    const int status = train(64, 40, torch_dir);
    if (torch_dir) std::printf("wrote %d convolution, pooling and batch-norm cases into %s\n",
                               conv_cases::write(torch_dir), torch_dir);
    if (!gpu::is_available()) {
      std::printf("no GPU (%s): batch norm's device path is compiled, not run\n", gpu::unavailable_reason().c_str());
      return status;
    }
    return status != 0 ? status : check_device_batch_norm();
  } catch (const loom::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
