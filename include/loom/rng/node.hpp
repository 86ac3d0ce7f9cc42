// SPDX-License-Identifier: Apache-2.0
#pragma once

// The random leaf: a node that reads no memory and gives every element of
// the assignment a value that depends only on (seed, offset, the element's
// logical index), through Philox4x32-10. Its kernel-side form, and the
// distributions that turn the 128 bits of one Philox block into values.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/math.hpp"
#include "loom/core/shape.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/traverse.hpp"
#include "loom/rng/philox.hpp"

namespace loom {
namespace fn {
// Distributions: the value of lane `lane` (0..3) of one Philox block.

//! Uniform in [0, 1) of T: the high `digits` bits of the lane's word times
//! 2^-digits, where digits is T's significand (24 for float, 11 for half, 8
//! for bf16) and 32 for double. Every value is exact in T and below 1.
template <class T>
struct uniform_bits {
  using result_type = T;
  static constexpr int digits = std::is_same_v<T, double> ? 32
                                : std::is_same_v<T, half> ? 11
                                : std::is_same_v<T, bf16> ? 8
                                                          : 24;
  LOOM_HD compute_t<T> operator()(const philox_words& r, int lane) const {
    using C = compute_t<T>;
    return static_cast<C>(r.w[lane] >> (32 - digits)) * (C(1) / static_cast<C>(std::uint64_t{1} << digits));
  }
};

//! Standard normal by Box-Muller: lanes 0, 1 come from the words (0, 1) and
//! lanes 2, 3 from (2, 3). With u1 in (0, 1] and u2 in [0, 1) made from the
//! two words as uniform_bits makes them (u1 = that value + 2^-digits), the
//! even lane is sqrt(-2 ln u1) cos(2 pi u2), the odd lane the same with sin.
//! Computed in float (double for T = double); |value| <= 5.77 for float.
template <class T>
struct normal_bits {
  using result_type = T;
  LOOM_HD compute_t<T> operator()(const philox_words& r, int lane) const {
    using C = compute_t<T>;
    constexpr int digits = std::is_same_v<C, double> ? 32 : 24;
    constexpr C unit = C(1) / static_cast<C>(std::uint64_t{1} << digits);
    const int pair = lane & 2;
    const C u1 = (static_cast<C>(r.w[pair] >> (32 - digits)) + C(1)) * unit;
    const C u2 = static_cast<C>(r.w[pair + 1] >> (32 - digits)) * unit;
    const C radius = math::sqrt(C(-2) * math::log(u1));
    const C angle = C(6.283185307179586476925286766559) * u2;
    return radius * ((lane & 1) != 0 ? math::sin(angle) : math::cos(angle));
  }
};

//! True with probability p: uniform_bits<float> of the lane's word < p (so
//! exactly ceil(p * 2^24) / 2^24).
struct bernoulli_bits {
  using result_type = bool;
  float p;
  LOOM_HD bool operator()(const philox_words& r, int lane) const { return uniform_from_bits(r.w[lane]) < p; }
};

//! The high 16 bits of the lane's word, as a float (an integer in [0, 65535],
//! exact): the random part of a stochastic rounding to bf16.
struct round_bits {
  using result_type = float;
  LOOM_HD float operator()(const philox_words& r, int lane) const { return static_cast<float>(r.w[lane] >> 16); }
};
}  // namespace fn

namespace detail::rng {
LOOM_HD std::uint32_t low32(std::uint64_t v) { return static_cast<std::uint32_t>(v); }
LOOM_HD std::uint32_t high32(std::uint64_t v) { return static_cast<std::uint32_t>(v >> 32); }

//! The Philox stream of one (seed, offset): element i is lane i % 4 of the
//! block of counter (i / 4 as 64 bits, offset as 64 bits) under key seed.
struct stream_key {
  std::uint32_t k0, k1, o0, o1;

  static stream_key of(std::uint64_t seed, std::uint64_t offset) {
    return {low32(seed), high32(seed), low32(offset), high32(offset)};
  }
  LOOM_HD philox_words block(std::uint64_t b) const {
    return philox4x32_10(philox_words{{low32(b), high32(b), o0, o1}}, k0, k1);
  }
  bool operator==(const stream_key&) const = default;
};

// The host executors evaluate one element at a time (at_linear, at), each
// thread walking consecutive elements, four to a block: each thread keeps
// the last block of each distribution it computed, so that one Philox call
// serves four elements there as on the device's vector path.
template <class Dist>
inline philox_words host_block(const stream_key& key, std::uint64_t b) {
  struct last_block {
    std::uint64_t b;  // no block has the number ~0 (at most 2^62 of them)
    stream_key key;
    philox_words w;
  };
  thread_local last_block last{~std::uint64_t{0}, {}, {}};
  if (last.b != b || !(last.key == key)) last = {b, key, key.block(b)};
  return last.w;
}
}  // namespace detail::rng

namespace detail {
// Kernel-side random leaf bound to a shape of rank R: `st` holds that
// shape's row-major strides, so coordinates give the logical index.
template <class Dist, std::size_t R>
struct bound_random {
  using compute = std::remove_cvref_t<decltype(std::declval<const Dist&>()(std::declval<const philox_words&>(), 0))>;
  template <int vector_width>
  using regs = vec_regs<compute, vector_width>;
  static constexpr std::size_t slots = 0;
  // The host's linear loops compute four elements per Philox block (load):
  // they take this leaf whole in runs of elements (host_block_loop).
  static constexpr bool linear_blocks = true;
  Dist dist;
  rng::stream_key key;
  shape<R> st;
  // Added to a linear index (at_linear, load): the first element of the run
  // of elements a host loop moved the tree to (rebase_linear); 0 otherwise.
  index_t base = 0;

  //! Moves linear index 0 to output element `start` (the host's runs).
  void rebase_linear(index_t start) { base += start; }
  LOOM_HD compute value_at(index_t i) const {
    const auto u = static_cast<std::uint64_t>(i);
#if LOOM_DEVICE_CODE
    return dist(key.block(u >> 2), static_cast<int>(u & 3));
#else
    return dist(rng::host_block<Dist>(key, u >> 2), static_cast<int>(u & 3));
#endif
  }
  template <bool allow_periodic = false>
  LOOM_HD compute at_linear(index_t i) const {
    return value_at(base + i);
  }
  template <class Ctx = no_ctx>
  LOOM_HD compute at(const index_t* idx, const Ctx& = {}) const {
    index_t i = 0;
    for (std::size_t d = 0; d != R; ++d) i += idx[d] * st[d];
    return value_at(i);
  }
  // Values of elements [i0, i0 + vector_width) of the shape: one Philox block
  // per four elements when i0 starts a block, one per element otherwise.
  template <int vector_width>
  LOOM_HD void values_from(index_t i0, regs<vector_width>& r) const {
    if constexpr (vector_width % 4 == 0) {
      if ((i0 & 3) == 0) {
        LOOM_UNROLL
        for (int b = 0; b < vector_width / 4; ++b) {
          const philox_words w = key.block((static_cast<std::uint64_t>(i0) >> 2) + static_cast<std::uint64_t>(b));
          LOOM_UNROLL
          for (int lane = 0; lane < 4; ++lane) r.v[4 * b + lane] = dist(w, lane);
        }
        return;
      }
    }
    LOOM_UNROLL
    for (int j = 0; j < vector_width; ++j) r.v[j] = value_at(i0 + j);
  }
  template <int vector_width, bool allow_periodic = false>
  LOOM_HD void load(index_t i0, regs<vector_width>& r) const {
    values_from<vector_width>(base + i0, r);
  }
  template <int vector_width>
  LOOM_HD void row_load(const index_t* lead, index_t c0, regs<vector_width>& r) const {
    index_t i = c0;
    for (std::size_t d = 0; d + 1 < R; ++d) i += lead[d] * st[d];
    values_from<vector_width>(i, r);
  }
  template <int vector_width, class Ctx = no_ctx>
  LOOM_HD compute elem(const regs<vector_width>& r, int j, const Ctx& = {}) const {
    return r.v[j];
  }
  //! Same distribution, stream and shape: the same values.
  bool same_as(const bound_random& o) const {
    if constexpr (!std::is_empty_v<Dist>)
      if (std::memcmp(&dist, &o.dist, sizeof(Dist)) != 0) return false;
    return key == o.key && st == o.st && base == o.base;
  }
};
template <class Dist, std::size_t R>
struct children_of<bound_random<Dist, R>> : no_children<bound_random<Dist, R>> {};
}  // namespace detail

//! A leaf of random values that reads no memory: rank 0, so it takes the
//! shape of what it is bound to (the assignment's output, or the rows of a
//! row reduction), and element i of that shape (row-major logical index)
//! gets Dist applied to lane i % 4 of Philox4x32-10 block i / 4 of the
//! stream (seed, offset). The values depend on nothing else: not on the
//! executor, the path, the vector width, the output's strides or threads.
template <class Dist>
struct random_node : detail::node_tag {
  using value_type = typename Dist::result_type;
  using space = void;  // fits either executor, as a scalar does
  static constexpr std::size_t rank = 0;
  Dist dist;
  std::uint64_t seed;
  std::uint64_t offset;

  random_node(const Dist& d, std::uint64_t seed_, std::uint64_t offset_) : dist(d), seed(seed_), offset(offset_) {}
  shape<0> extents() const { return {}; }
  //! Binds to the output's shape; the linear path stays open (at_linear(i)
  //! is element i's value), the alignment of nothing is involved.
  template <std::size_t Base, class Out>
  auto bind_node(const Out& out, detail::bind_info&) const {
    constexpr std::size_t RO = std::tuple_size_v<std::remove_cvref_t<decltype(out.extents())>>;
    const auto ext = out.extents();
    shape<RO> st{};
    index_t stride = 1;
    for (std::size_t d = RO; d-- > 0;) {
      st[d] = stride;
      stride *= ext[d];
    }
    return detail::bound_random<Dist, RO>{dist, detail::rng::stream_key::of(seed, offset), st};
  }
};

namespace detail {
template <class Dist>
struct children_of<random_node<Dist>> : no_children<random_node<Dist>> {};
}  // namespace detail
}  // namespace loom
