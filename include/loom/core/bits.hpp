// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "loom/config.hpp"

namespace loom::detail {
//! The unsigned integer as wide as a 1- or 2-byte element type (fp8, half, bf16).
template <class T>
using raw_bits_t = std::conditional_t<sizeof(T) == 1, std::uint8_t, std::uint16_t>;

//! The raw bits of a 1- or 2-byte element (an fp8 code, a half or bf16 pattern).
template <class T>
LOOM_HD raw_bits_t<T> bits_of(T v) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2);
  raw_bits_t<T> b;
  memcpy(&b, &v, sizeof(T));
  return b;
}
//! A 1- or 2-byte element from its raw bits.
template <class T>
LOOM_HD T from_bits(raw_bits_t<T> b) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2);
  T v;
  memcpy(static_cast<void*>(&v), &b, sizeof(T));
  return v;
}
}  // namespace loom::detail
