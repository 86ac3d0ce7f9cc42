// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <string>

#include "loom/config.hpp"
#include "loom/core/error.hpp"

namespace loom {

//! Extents of a rank-R tensor (run-time sizes, compile-time rank).
//! Example: `loom::shape<2> s{4096, 1024};`
template <std::size_t Rank>
using shape = std::array<index_t, Rank>;

//! Largest rank loom supports.
inline constexpr std::size_t max_rank = 8;

//! Renders a shape as "[4, 1024]" (for messages and printing).
template <class Array>
std::string shape_string(const Array& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

//! Number of elements of a shape (1 for rank 0).
template <std::size_t Rank>
constexpr index_t shape_size(const shape<Rank>& s) {
  index_t n = 1;
  for (auto e : s) n *= e;
  return n;
}

//! Row-major (C order) strides, in elements, for a shape.
template <std::size_t Rank>
constexpr shape<Rank> contiguous_strides(const shape<Rank>& s) {
  shape<Rank> st{};
  index_t acc = 1;
  for (std::size_t i = Rank; i-- > 0;) {
    st[i] = acc;
    acc *= s[i] > 0 ? s[i] : 1;
  }
  return st;
}

namespace detail {
template <std::size_t R>
LOOM_COLD void throw_negative_broadcast(const shape<R>& s) {
  throw shape_error("loom: broadcast_to " + shape_string(s) + " has a negative extent");
}

template <std::size_t RA, std::size_t RB>
LOOM_COLD void throw_cannot_broadcast(const shape<RA>& from, const shape<RB>& to) {
  throw shape_error("loom: cannot broadcast shape " + shape_string(from) + " to " + shape_string(to));
}

//! Throws shape_error unless every extent is >= 0 and the element count fits in index_t.
template <std::size_t Rank>
void check_shape(const shape<Rank>& s) {
  index_t n = 1;
  for (auto e : s) {
    if (e < 0) throw shape_error("loom: negative extent in shape " + shape_string(s));
    if (e != 0 && n > std::numeric_limits<index_t>::max() / e)
      throw shape_error("loom: shape " + shape_string(s) + " has more elements than a 64-bit index holds");
    n *= e;
  }
}

//! Turns a possibly negative axis into [0, Rank), or throws index_error.
template <std::size_t Rank>
std::size_t normalize_axis(int axis, std::size_t rank = Rank) {
  const int r = static_cast<int>(rank);
  if (axis < -r || axis >= r)
    throw index_error("loom: axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r) +
                      " (expected -" + std::to_string(r) + " <= axis < " + std::to_string(r) + ")");
  return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
}
}  // namespace detail
}  // namespace loom
