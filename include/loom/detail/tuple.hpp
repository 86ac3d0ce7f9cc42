// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <utility>

#include "loom/config.hpp"

namespace loom::detail {
// A minimal tuple that is trivially copyable when its members are and works
// in device code: expression nodes keep their children in one.
template <std::size_t I, class T>
struct tuple_leaf {
  T value;
};

template <class Seq, class... T>
struct tuple_impl;

template <std::size_t... I, class... T>
struct tuple_impl<std::index_sequence<I...>, T...> : tuple_leaf<I, T>... {
  tuple_impl() = default;
  LOOM_HD explicit tuple_impl(const T&... v) : tuple_leaf<I, T>{v}... {}
};

template <class... T>
struct tuple : tuple_impl<std::index_sequence_for<T...>, T...> {
  using tuple_impl<std::index_sequence_for<T...>, T...>::tuple_impl;
};

template <std::size_t I, class T>
LOOM_HD const T& get(const tuple_leaf<I, T>& l) {
  return l.value;
}
template <std::size_t I, class T>
LOOM_HD T& get(tuple_leaf<I, T>& l) {
  return l.value;
}
}  // namespace loom::detail
