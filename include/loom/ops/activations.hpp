// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "loom/config.hpp"
#include "loom/core/math.hpp"
#include "loom/expr/expression.hpp"
#include "loom/ops/math.hpp"

namespace loom {
namespace fn {
//! max(x, 0); NaN stays NaN (as torch.relu). Derivative 0 at 0 (as PyTorch).
struct relu {
  template <int, class T>
  LOOM_HD LOOM_HOST_INLINE T derivative(T x) const {
    return x > T(0) ? T(1) : T(0);
  }
  template <class T>
  LOOM_HD LOOM_HOST_INLINE T operator()(T x) const {
    return x < T(0) ? T(0) : x;
  }
};
//! x for x >= 0, slope * x otherwise.
struct leaky_relu {
  static constexpr bool floating = true;
  double slope = 0.01;
  template <class T>
  LOOM_HD LOOM_HOST_INLINE T operator()(T x) const {
    return x < T(0) ? x * T(slope) : x;
  }
  //! 1 for x > 0, slope otherwise (at 0 too, as PyTorch).
  template <int, class T>
  LOOM_HD LOOM_HOST_INLINE T derivative(T x) const {
    return x > T(0) ? T(1) : T(slope);
  }
};
//! GELU: exact, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); or with `tanh_form`
//! the approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct gelu {
  static constexpr bool floating = true;
  bool tanh_form = false;
  template <class T>
  LOOM_HD LOOM_HOST_INLINE T operator()(T x) const {
#if !LOOM_DEVICE_CODE
    // On the host, float takes one branch-free function for both forms, so
    // the host loop over it runs in SIMD lanes (docs/02_expressions.md).
    if constexpr (std::is_same_v<T, float>) return vmath::gelu(x, tanh_form);
#endif
    if (tanh_form)
      return T(0.5) * x * (T(1) + math::tanh(T(0.79788456080286535588) * (x + T(0.044715) * x * x * x)));
    return T(0.5) * x * (T(1) + math::erf(x * T(0.70710678118654752440)));
  }
  template <int, class T>
  LOOM_HD LOOM_HOST_INLINE T derivative(T x) const {
#if !LOOM_DEVICE_CODE
    if constexpr (std::is_same_v<T, float>) return vmath::gelu_derivative(x, tanh_form);
#endif
    if (tanh_form) {
      const T k = T(0.79788456080286535588), u = k * (x + T(0.044715) * x * x * x);
      const T t = math::tanh(u);
      return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3 * 0.044715) * x * x);
    }
    // Phi(x) + x phi(x), phi the standard normal density.
    return T(0.5) * (T(1) + math::erf(x * T(0.70710678118654752440))) +
           x * T(0.39894228040143267794) * math::exp(T(-0.5) * x * x);
  }
};
//! 1 / (1 + exp(-x)).
struct sigmoid {
  static constexpr bool floating = true;
  template <class T>
  LOOM_HD LOOM_HOST_INLINE T operator()(T x) const {
    return T(1) / (T(1) + math::exp(-x));
  }
  template <int, class T>
  LOOM_HD LOOM_HOST_INLINE T derivative(T x) const {
    const T s = T(1) / (T(1) + math::exp(-x));
    return s * (T(1) - s);
  }
};
//! SiLU (swish): x * sigmoid(x).
struct silu {
  static constexpr bool floating = true;
  template <class T>
  LOOM_HD LOOM_HOST_INLINE T operator()(T x) const {
    return x / (T(1) + math::exp(-x));
  }
  template <int, class T>
  LOOM_HD LOOM_HOST_INLINE T derivative(T x) const {
    const T s = T(1) / (T(1) + math::exp(-x));
    return s * (T(1) + x * (T(1) - s));
  }
};
//! log(1 + exp(beta x)) / beta, linear above `threshold` (torch.nn.functional.softplus).
struct softplus {
  static constexpr bool floating = true;
  double beta = 1.0;
  double threshold = 20.0;
  template <class T>
  LOOM_HD LOOM_HOST_INLINE T operator()(T x) const {
    const T bx = x * T(beta);
    return bx > T(threshold) ? x : math::log1p(math::exp(bx)) / T(beta);
  }
  //! 1 above the threshold, sigmoid(beta x) below it (as PyTorch).
  template <int, class T>
  LOOM_HD LOOM_HOST_INLINE T derivative(T x) const {
    const T bx = x * T(beta);
    return bx > T(threshold) ? T(1) : T(1) / (T(1) + math::exp(-bx));
  }
};
//! Mish: x * tanh(softplus(x)).
struct mish {
  static constexpr bool floating = true;
  template <class T>
  LOOM_HD LOOM_HOST_INLINE T operator()(T x) const {
    return x * math::tanh(softplus{}(x));
  }
  template <int, class T>
  LOOM_HD LOOM_HOST_INLINE T derivative(T x) const {
    const T t = math::tanh(softplus{}(x));
    return t + x * (T(1) - t * t) / (T(1) + math::exp(-x));
  }
};
}  // namespace fn

//! Which GELU formula to use.
enum class approximate { none, tanh };

//! Elementwise activations, lazy; integer inputs compute in float32.
//! Example: `y = gelu(x * w + b);`
LOOM_UNARY_FUNCTION(relu)
LOOM_UNARY_FUNCTION(sigmoid)
LOOM_UNARY_FUNCTION(silu)
LOOM_UNARY_FUNCTION(mish)

//! GELU, exact (erf) by default or the tanh approximation (as PyTorch's
//! approximate='tanh'). Lazy.
template <expression E>
[[nodiscard]] auto gelu(const E& e, approximate a = approximate::none) {
  return map(fn::gelu{a == approximate::tanh}, e);
}

//! x for x >= 0, slope * x otherwise. Lazy.
template <expression E>
[[nodiscard]] auto leaky_relu(const E& e, double slope = 0.01) {
  return map(fn::leaky_relu{slope}, e);
}

//! log(1 + exp(beta x)) / beta, and x where beta x > threshold. Lazy.
template <expression E>
[[nodiscard]] auto softplus(const E& e, double beta = 1.0, double threshold = 20.0) {
  return map(fn::softplus{beta, threshold}, e);
}
}  // namespace loom
