// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>

#include "loom/config.hpp"

namespace loom::detail {
// A minimal tuple that is trivially copyable when its members are and works
// in device code: expression nodes keep their children in one. Its elements
// are members (a head and the tuple of the rest), never base classes: nvcc's
// device front end takes time exponential in the nesting depth to copy a
// tree of nodes whose children are base subobjects (a left-leaning chain of
// 14 `+` took 77 s of cicc, 3x per level), and linear time for members
// (tests/compile_time).
template <class... T>
struct tuple {};

template <class T0>
struct tuple<T0> {
  T0 head;

  tuple() = default;
  LOOM_HD explicit tuple(const T0& h) : head(h) {}
};

template <class T0, class T1, class... T>
struct tuple<T0, T1, T...> {
  T0 head;
  tuple<T1, T...> tail;

  tuple() = default;
  LOOM_HD explicit tuple(const T0& h, const T1& t1, const T&... t) : head(h), tail(t1, t...) {}
};

template <std::size_t I, class T0, class... T>
LOOM_HD const auto& get(const tuple<T0, T...>& t) {
  if constexpr (I == 0)
    return t.head;
  else
    return get<I - 1>(t.tail);
}
template <std::size_t I, class T0, class... T>
LOOM_HD auto& get(tuple<T0, T...>& t) {
  if constexpr (I == 0)
    return t.head;
  else
    return get<I - 1>(t.tail);
}
}  // namespace loom::detail
