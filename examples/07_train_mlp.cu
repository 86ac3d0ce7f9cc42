// SPDX-License-Identifier: Apache-2.0
// Trains an MLP (784 -> 512 -> 10 on the GPU, 784 -> 256 -> 10 on the host)
// on a synthetic seeded set: the labels are the argmax of a fixed random
// linear map of the inputs. The forward is a loom::model of three steps (two
// GEMMs with the bias and the ReLU in their epilogues, then the
// cross-entropy); its backward is derived by the model, in reverse order,
// from the steps; the update is loom::optim::adamw. No backward is written
// here. Exits non-zero unless the loss falls.
#include <cmath>
#include <cstdio>
#include <random>
#include <type_traits>

#include <loom/loom.hpp>
#include <loom/model/model.hpp>
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

  // The model: parameters, the named intermediates, and the steps.
  auto w1 = random_matrix<Space>(d_in, d_hidden, 1.0f / std::sqrt(float(d_in)), g);
  auto w2 = random_matrix<Space>(d_hidden, classes, 1.0f / std::sqrt(float(d_hidden)), g);
  tensor<float, 1, Space> b1({d_hidden}), b2({classes});
  tensor<float, 2, Space> h({n, d_hidden}), logits({n, classes});
  tensor<float, 0, Space> loss(shape<0>{});
  fill(b1, 0.0f), fill(b2, 0.0f);
  model net(parameters(w1, b1, w2, b2),
            step(h) = linear(x, w1, b1, matmul_activation::relu),  // h = relu(x w1 + b1): one GEMM
            step(logits) = linear(h, w2, b2),                      // logits = h w2 + b2: one GEMM
            step(loss) = cross_entropy_loss(logits, labels));
  optim::adamw<Space> opt({.lr = 5e-4, .weight_decay = 0});
  net.add_parameters_to(opt);  // each parameter with its gradient, which the model owns

  float first = 0, last = 0;
  for (int i = 0; i < steps; ++i) {
    net.forward();
    last = loss.item();
    net.backward();  // derived: dlogits, then dW2, db2, dh, then dW1, db1
    opt.step();
    if (i == 0) first = last;
    if (i % 10 == 0 || i == steps - 1) std::printf("step %3d  loss %.4f\n", i, last);
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
