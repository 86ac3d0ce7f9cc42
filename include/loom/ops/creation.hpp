// SPDX-License-Identifier: Apache-2.0
#pragma once

// Creating tensors: the lazy leaves arange, linspace and eye
// (expr/creation.hpp), and helpers that return new tensors of them
// (`arange<float, device>(n)`: one allocation, one launch) and of ones.

#include <cstddef>

#include "loom/config.hpp"
#include "loom/core/space.hpp"
#include "loom/exec/assign.hpp"
#include "loom/expr/creation.hpp"
#include "loom/ops/arithmetic.hpp"  // the leaves are mostly used inside arithmetic: sin(arange<float>(n) * w)
#include "loom/tensor/tensor.hpp"

namespace loom {
namespace detail {
// A new tensor in Space holding the values of creation leaf e (one launch).
template <class Space, class E>
auto tensor_of(const E& e) {
  tensor<typename E::value_type, E::rank, Space> t(e.extents());
  assign(t, e);
  return t;
}
}  // namespace detail

//! A new rank-1 tensor in Space holding 0, 1, ..., n - 1 as T (one launch).
//! Example: `auto ids = loom::arange<std::int64_t, loom::device>(n);`
template <class T, memory_space Space>
[[nodiscard]] tensor<T, 1, Space> arange(index_t n) {
  return detail::tensor_of<Space>(arange<T>(n));
}

//! A new rank-1 tensor in Space of arange<T>(start, stop, step) (one launch).
//! Example: `auto x = loom::arange<float, loom::host>(0.0, 1.0, 0.25);`
template <class T, memory_space Space>
[[nodiscard]] tensor<T, 1, Space> arange(double start, double stop, double step = 1.0) {
  return detail::tensor_of<Space>(arange<T>(start, stop, step));
}

//! A new rank-1 tensor in Space of linspace<T>(start, stop, n) (one launch).
//! Example: `auto x = loom::linspace<float, loom::device>(-1.0, 1.0, 101);`
template <class T, memory_space Space>
[[nodiscard]] tensor<T, 1, Space> linspace(double start, double stop, index_t n) {
  return detail::tensor_of<Space>(linspace<T>(start, stop, n));
}

//! A new rows x cols tensor in Space of eye<T>(rows, cols, k) (one launch).
//! Example: `auto i = loom::eye<float, loom::host>(3, 4);`
template <class T, memory_space Space>
[[nodiscard]] tensor<T, 2, Space> eye(index_t rows, index_t cols, index_t k = 0) {
  return detail::tensor_of<Space>(eye<T>(rows, cols, k));
}

//! A new n x n identity matrix in Space (one launch).
//! Example: `auto i = loom::eye<double, loom::device>(64);`
template <class T, memory_space Space>
[[nodiscard]] tensor<T, 2, Space> eye(index_t n) {
  return eye<T, Space>(n, n);
}

//! A tensor of ones (one fill launch). Example: `auto w = loom::ones<float, 1>({256});`
template <class T, std::size_t Rank, memory_space Space = device>
[[nodiscard]] tensor<T, Rank, Space> ones(const shape<Rank>& s) {
  return full<T, Rank, Space>(s, T(1));
}
}  // namespace loom
