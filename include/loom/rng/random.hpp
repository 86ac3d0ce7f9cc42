// SPDX-License-Identifier: Apache-2.0
#pragma once

// Random numbers inside expressions (rand, randn, bernoulli), dropout and its
// backward, stochastic rounding to bf16, and the creation helpers
// (rand<T>(shape, seed), randn, rand_like, randn_like). Every value depends
// only on (seed, offset, the element's logical index): docs/09_random.md.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/space.hpp"
#include "loom/exec/assign.hpp"
#include "loom/expr/expression.hpp"
#include "loom/ops/arithmetic.hpp"  // dropout is mostly used inside arithmetic: x * w + b
#include "loom/rng/node.hpp"
#include "loom/rng/philox.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom {
namespace fn {
//! Inverted dropout of x given the drop bit: x * 0 where dropped, x * scale
//! where kept (a product, so NaN stays NaN as in PyTorch).
struct dropout_apply {
  static constexpr bool floating = true;
  float scale;
  //! loom::grad: d/dx is the same mask and scale, so x's adjoint is the
  //! dropout of y's adjoint with the same drop bits (regenerated from the
  //! same counters, nothing stored); the drop bits have no gradient.
  template <std::size_t I, class Y, class A>
  static auto grad(const Y& y, const A& a) {
    static_assert(I == 0, "loom: internal error: dropout's drop bits have no gradient");
    return loom::map(dropout_apply{y.f.scale}, a, detail::get<1>(y.children));
  }
  template <class T>
  LOOM_HD T operator()(T x, T drop) const {
    return x * (drop != T(0) ? T(0) : static_cast<T>(scale));
  }
};

//! Stochastic rounding of float x to bf16 given 16 random bits r (as an
//! exact float in [0, 65535]): the low 16 bits of x plus r carry into the
//! bf16 part with probability (low bits) / 2^16, then are cut, so x rounds
//! away from zero with probability equal to its distance from the bf16 value
//! towards zero, in units of that bf16 step. NaN and infinities pass through.
struct stochastic_round_bf16 {
  using result_type = bf16;
  LOOM_HD float operator()(float x, float r) const {
    std::uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7f800000u) == 0x7f800000u) return x;
    bits = (bits + static_cast<std::uint32_t>(r)) & 0xffff0000u;
    float y;
    memcpy(&y, &bits, sizeof y);
    return y;
  }
};
}  // namespace fn

namespace detail::rng {
inline void check_probability(float p, const char* what) {
  if (!(p >= 0.0f && p <= 1.0f))
    throw value_error(std::string("loom: ") + what + " needs a probability p in [0, 1], got " + std::to_string(p));
}
}  // namespace detail::rng

//! Uniform random values in [0, 1) as T (float unless given): element i of
//! the assignment (its row-major index in the output's shape) gets
//! uniform_bits<T> of word i % 4 of Philox4x32-10 block (i / 4, offset)
//! under key `seed`: the high 24 bits times 2^-24 for float (11 for half, 8
//! for bf16, 32 for double). The same values on every executor and path.
//! Reads no memory; costs one Philox block (10 rounds) per 4 elements.
//! Example: `y = x + 0.01f * loom::rand(seed, step);`
template <class T = float>
[[nodiscard]] auto rand(std::uint64_t seed, std::uint64_t offset = 0) {
  static_assert(is_floating_v<T>, "loom: rand<T> needs a floating type (float, double, half, bf16)");
  return random_node<fn::uniform_bits<T>>(fn::uniform_bits<T>{}, seed, offset);
}

//! Standard normal random values as T (float unless given), by Box-Muller
//! from the two uniform words of each pair of lanes (fn::normal_bits):
//! elements 4k, 4k+1 share words 0 and 1 of block k, 4k+2, 4k+3 words 2 and
//! 3. Computed in float (double for double); host and device agree to a few
//! ulps (their log, sin and cos differ), the uniform bits exactly.
//! Example: `w = 0.02f * loom::randn(seed);`
template <class T = float>
[[nodiscard]] auto randn(std::uint64_t seed, std::uint64_t offset = 0) {
  static_assert(is_floating_v<T>, "loom: randn<T> needs a floating type (float, double, half, bf16)");
  return random_node<fn::normal_bits<T>>(fn::normal_bits<T>{}, seed, offset);
}

//! A bool mask, true with probability p: rand(seed, offset) < p for the
//! same element, so exactly ceil(p * 2^24) / 2^24. p outside [0, 1] (or
//! NaN) throws value_error. Example: `y = where(bernoulli(0.5f, seed), x, 0);`
[[nodiscard]] inline auto bernoulli(float p, std::uint64_t seed, std::uint64_t offset = 0) {
  detail::rng::check_probability(p, "bernoulli");
  return random_node<fn::bernoulli_bits>(fn::bernoulli_bits{p}, seed, offset);
}

//! Inverted dropout, lazily and anywhere in an expression: each element of
//! `e` is dropped (multiplied by 0) where bernoulli(p, seed, offset) is true
//! and otherwise multiplied by 1.0f / (1.0f - p) (computed in float). The
//! mask is keyed by the element's index in the assignment's shape, so the
//! whole assignment stays one kernel and nothing is stored; dropout_backward
//! regenerates the same mask. p = 0 returns e unchanged in value, p = 1
//! drops everything; p outside [0, 1] throws value_error. Use a new offset
//! (the step) for each call and distinct offsets for distinct dropouts.
//! Example: `y = dropout(x * w + b, 0.1f, seed, step) + r;` (one kernel)
template <expression E>
[[nodiscard]] auto dropout(const E& e, float p, std::uint64_t seed, std::uint64_t offset = 0) {
  detail::rng::check_probability(p, "dropout");
  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  return map(fn::dropout_apply{scale}, e, bernoulli(p, seed, offset));
}

//! The gradient of dropout(x, p, seed, offset) with respect to x, given the
//! gradient `grad` of its result: the same mask and scale applied to grad,
//! regenerated from the same counters (nothing is stored between forward
//! and backward). The backward assignment must have the forward's shape, so
//! that each element has the same logical index in both.
//! Example: `dx = dropout_backward(dy, 0.1f, seed, step);`
template <expression E>
[[nodiscard]] auto dropout_backward(const E& grad, float p, std::uint64_t seed, std::uint64_t offset = 0) {
  return dropout(grad, p, seed, offset);
}

//! `e` rounded to T = bf16 stochastically: each element (computed in
//! float) becomes the bf16 value above or below it with probabilities
//! proportional to its closeness, so the rounding is unbiased on average,
//! with the random bits of word i (its high 16) of stream (seed, offset) for
//! element i. Exact bf16 values, NaN and infinities are unchanged. Lazily,
//! anywhere in an expression; its value type is bf16.
//! Example: `w_bf16 = loom::stochastic_round<loom::bf16>(w - lr * g, seed, step);`
template <class T, expression E>
[[nodiscard]] auto stochastic_round(const E& e, std::uint64_t seed, std::uint64_t offset = 0) {
  static_assert(std::is_same_v<T, bf16>, "loom: stochastic_round supports bf16 only");
  return map(fn::stochastic_round_bf16{}, cast<float>(e), random_node<fn::round_bits>(fn::round_bits{}, seed, offset));
}

//! A new tensor of uniform values in [0, 1) (see rand(seed, offset)): one
//! allocation, one launch. Example: `auto u = loom::rand<float, 2>({64, 33}, seed);`
template <class T, std::size_t Rank, memory_space Space = device>
[[nodiscard]] tensor<T, Rank, Space> rand(const shape<Rank>& s, std::uint64_t seed, std::uint64_t offset = 0) {
  tensor<T, Rank, Space> t(s);
  assign(t, rand<T>(seed, offset));
  return t;
}

//! A new tensor of standard normal values (see randn(seed, offset)): one
//! allocation, one launch. Example: `auto w = loom::randn<bf16, 2, host>({256, 256}, seed);`
template <class T, std::size_t Rank, memory_space Space = device>
[[nodiscard]] tensor<T, Rank, Space> randn(const shape<Rank>& s, std::uint64_t seed, std::uint64_t offset = 0) {
  tensor<T, Rank, Space> t(s);
  assign(t, randn<T>(seed, offset));
  return t;
}

//! A new tensor shaped like `x` (its type, rank and space) of uniform values
//! in [0, 1). Example: `auto noise = loom::rand_like(x, seed);`
template <tensor_like X>
[[nodiscard]] auto rand_like(const X& x, std::uint64_t seed, std::uint64_t offset = 0) {
  auto t = empty_like(x);
  assign(t, rand<typename decltype(t)::value_type>(seed, offset));
  return t;
}

//! A new tensor shaped like `x` of standard normal values.
//! Example: `auto noise = loom::randn_like(x, seed);`
template <tensor_like X>
[[nodiscard]] auto randn_like(const X& x, std::uint64_t seed, std::uint64_t offset = 0) {
  auto t = empty_like(x);
  assign(t, randn<typename decltype(t)::value_type>(seed, offset));
  return t;
}
}  // namespace loom
