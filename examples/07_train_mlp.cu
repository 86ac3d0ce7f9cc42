// SPDX-License-Identifier: Apache-2.0
// Trains an MLP (784 -> 512 -> 10 on the GPU, 784 -> 256 -> 10 on the host)
// on a synthetic seeded set: the labels are the argmax of a fixed random
// linear map of the inputs. Forward: two GEMMs with the bias (and the ReLU)
// in their epilogues; loss: loom's cross-entropy; backward: loom's
// cross-entropy gradient and loom::matmul_backward (the ReLU's gradient is
// derived by loom::grad inside it); update: loom::optim::adamw. No backward
// math is written here. Exits non-zero unless the loss falls.
#include <cmath>
#include <cstdio>
#include <random>
#include <type_traits>

#include <loom/loom.hpp>
#include <loom/optim/optim.hpp>

using namespace loom;

template <memory_space Space>
tensor<float, 2, Space> random_matrix(index_t rows, index_t cols, float scale, std::mt19937& g) {
  std::normal_distribution<float> d(0.0f, scale);
  host_tensor<float, 2> h({rows, cols});
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = d(g);
  if constexpr (std::is_same_v<Space, device>)
    return to_device(h);
  else
    return h;
}

template <memory_space Space>
int train(index_t n, index_t d_in, index_t d_hidden, index_t classes, int steps) {
  std::mt19937 g(2024);
  const auto x = random_matrix<Space>(n, d_in, 1.0f, g);
  const auto teacher = random_matrix<Space>(d_in, classes, 1.0f, g);
  const auto labels = argmax(materialize(matmul(x, teacher)), 1);  // [n] int64

  // The model: parameters, their gradients, and the activations.
  auto w1 = random_matrix<Space>(d_in, d_hidden, 1.0f / std::sqrt(float(d_in)), g);
  auto w2 = random_matrix<Space>(d_hidden, classes, 1.0f / std::sqrt(float(d_hidden)), g);
  tensor<float, 1, Space> b1({d_hidden}), b2({classes}), db1({d_hidden}), db2({classes});
  tensor<float, 2, Space> dw1({d_in, d_hidden}), dw2({d_hidden, classes});
  tensor<float, 2, Space> h({n, d_hidden}), dh({n, d_hidden}), logits({n, classes});
  fill(b1, 0.0f), fill(b2, 0.0f);
  optim::adamw<Space> opt({.lr = 5e-4, .weight_decay = 0});
  opt.add(w1, dw1), opt.add(b1, db1), opt.add(w2, dw2), opt.add(b2, db2);

  float first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    h = relu(matmul(x, w1) + b1);  // one GEMM: bias and ReLU in its epilogue
    logits = matmul(h, w2) + b2;   // one GEMM: bias in its epilogue
    last = cross_entropy(logits, labels).item();
    const auto dlogits = cross_entropy_backward(logits, labels);
    matmul_backward_into(dh, dw2, db2, h, w2, dlogits);  // dh = dl W2^T, dW2 = h^T dl, db2 = column sums of dl
    matmul_backward_into(skip, dw1, db1, x, w1, dh, h, {.activation = matmul_activation::relu});
    opt.step();
    if (step == 0) first = last;
    if (step % 10 == 0 || step == steps - 1) std::printf("step %3d  loss %.4f\n", step, last);
  }
  const bool fell = std::isfinite(last) && last < 0.5f * first;
  std::printf("loss %.4f -> %.4f: %s\n", first, last, fell ? "falling" : "NOT falling");
  return fell ? 0 : 1;
}

int main() {
  try {
    if (gpu::is_available()) return train<device>(1024, 784, 512, 10, 60);
    std::printf("no GPU (%s): training on the host\n", gpu::unavailable_reason().c_str());
    return train<host>(512, 784, 256, 10, 40);
  } catch (const loom::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
