// SPDX-License-Identifier: Apache-2.0
// Shared helpers for loom's tests: seeded random data, poisoning, references.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>

#include <loom/loom.hpp>

namespace loom_test {

//! The seed of a test case; printed by Catch on failure via INFO.
inline std::uint64_t seed_for(const char* name) {
  std::uint64_t h = 1469598103934665603ull;
  for (const char* p = name; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  return h;
}

//! A random value of T; floats in [lo, hi), ints in a small range, bools 50/50.
template <class T>
T random_value(std::mt19937_64& g, double lo = -4.0, double hi = 4.0) {
  if constexpr (std::is_same_v<T, bool>) {
    return (g() & 1) != 0;
  } else if constexpr (std::is_integral_v<T>) {
    std::uniform_int_distribution<int> d(std::is_signed_v<T> ? -100 : 0, 100);
    return static_cast<T>(d(g));
  } else {
    std::uniform_real_distribution<double> d(lo, hi);
    return T(d(g));
  }
}

//! Fills a host view with random values.
template <class V>
void randomize(const V& v, std::mt19937_64& g) {
  using T = typename V::value_type;
  for (loom::index_t i = 0; i < v.size(); ++i) v.data()[v.offset_of(i)] = random_value<T>(g);
}

//! A value that must not survive in an output: NaN for floats, a sentinel otherwise.
template <class T>
T poison_value() {
  if constexpr (std::is_same_v<T, bool>)
    return true;
  else if constexpr (std::is_integral_v<T>)
    return std::numeric_limits<T>::min();
  else
    return T(std::numeric_limits<float>::quiet_NaN());
}

//! Bit-level equality of two elements (NaN equals NaN of the same bits).
template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

//! The value of an element as a double (the reference type of every test).
template <class T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, loom::half> || std::is_same_v<T, loom::bf16>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}
//! The device's vector forms of a bound tree (load, row_load: shared
//! host/device code) against at_linear, at every start, aligned or not, over
//! n elements in rows of `cols`.
template <int V, class B>
void check_vector_forms(const B& b, loom::index_t n, loom::index_t cols) {
  for (loom::index_t i0 = 0; i0 + V <= n; ++i0) {
    typename B::template regs<V> r{}, rr{};
    b.template load<V>(i0, r);
    const loom::index_t lead[1] = {i0 / cols};
    const bool in_row = i0 % cols + V <= cols;
    if (in_row) b.template row_load<V>(lead, i0 % cols, rr);
    for (int j = 0; j < V; ++j) {
      const auto want = b.at_linear(i0 + j);
      if (!same_bits(b.template elem<V>(r, j), want) || (in_row && !same_bits(b.template elem<V>(rr, j), want))) {
        INFO("V = " << V << ", i0 = " << i0 << ", j = " << j);
        REQUIRE(false);
      }
    }
  }
}
}  // namespace loom_test
