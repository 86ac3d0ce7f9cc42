// SPDX-License-Identifier: Apache-2.0
#pragma once

// Leaves that read no memory: arange, linspace and eye. Each value is a
// function of the element's coordinates along the leaf's own axes, so the
// leaf takes part in any assignment (`y = sin(arange<float>(n) * w)` is one
// kernel) on either executor, through every path: the contiguous one (from
// the linear index), the general one (from coordinates) and row kernels.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/coords.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/traverse.hpp"

namespace loom {
namespace fn {
//! arange's values: start + step * i, computed in double and rounded once to T.
template <class T>
struct arange_values {
  using result_type = T;
  double start, step;
  LOOM_HD compute_t<T> operator()(const index_t* c) const {
    return static_cast<compute_t<T>>(detail::convert<T>(start + step * static_cast<double>(c[0])));
  }
};

//! linspace's values as PyTorch computes them: with step = (stop - start) /
//! (n - 1), start + step * i in the first half and stop - step * (n - 1 - i)
//! in the second (so both ends are exact), in double, rounded once to T.
template <class T>
struct linspace_values {
  using result_type = T;
  double start, stop, step;
  index_t n;
  LOOM_HD compute_t<T> operator()(const index_t* c) const {
    const index_t i = c[0];
    const double v = i < n / 2 ? start + step * static_cast<double>(i) : stop - step * static_cast<double>(n - 1 - i);
    return static_cast<compute_t<T>>(detail::convert<T>(v));
  }
};

//! eye's values: 1 on diagonal k (column - row == k), else 0.
template <class T>
struct eye_values {
  using result_type = T;
  index_t k;
  LOOM_HD compute_t<T> operator()(const index_t* c) const {
    return static_cast<compute_t<T>>(detail::convert<T>(c[1] - c[0] == k ? 1 : 0));
  }
};
}  // namespace fn

namespace detail {
// Kernel-side coordinate leaf: F applied to the own coordinates (rank R) of
// each element of an output of rank RO.
template <class F, std::size_t R, std::size_t RO>
struct bound_coord_leaf : coord_reader<bound_coord_leaf<F, R, RO>, compute_t<typename F::result_type>, R, RO> {
  F f;

  LOOM_HD compute_t<typename F::result_type> value(const index_t* c) const { return f(c); }
  //! The same function under the same coordinate map: the same values.
  bool same_as(const bound_coord_leaf& o) const {
    return std::memcmp(&f, &o.f, sizeof(F)) == 0 && this->map.same_as(o.map);
  }
};
template <class F, std::size_t R, std::size_t RO>
struct children_of<bound_coord_leaf<F, R, RO>> : no_children<bound_coord_leaf<F, R, RO>> {};
}  // namespace detail

//! A leaf of rank R whose element at coordinates c is f(c); reads no memory
//! and fits either executor (as a scalar does). Broadcasts like a tensor of
//! its extents.
template <class F, std::size_t R>
struct coord_leaf_node : detail::node_tag {
  using value_type = typename F::result_type;
  using space = void;
  static constexpr std::size_t rank = R;
  F f;
  shape<R> ext;

  coord_leaf_node(const F& f_, const shape<R>& e) : f(f_), ext(e) {}
  shape<R> extents() const { return ext; }
  template <std::size_t Base, class Out>
  auto bind_node(const Out& out, detail::bind_info&) const {
    constexpr std::size_t RO = detail::out_rank_v<Out>;
    static_assert(R <= RO, "loom: a creation leaf has a higher rank than the output");
    return detail::bound_coord_leaf<F, R, RO>{{detail::own_coords<R, RO>::make(ext, out.extents())}, f};
  }
};

namespace detail {
template <class F, std::size_t R>
struct children_of<coord_leaf_node<F, R>> : no_children<coord_leaf_node<F, R>> {};

inline void check_creation_count(index_t n, const char* what) {
  if (n < 0) throw value_error(std::string("loom: ") + what + " needs a count >= 0, got " + std::to_string(n));
}

// The number of values of arange(start, stop, step), as PyTorch counts
// them: ceil((stop - start) / step); a step of 0, a non-finite bound or a
// step that points away from stop throws value_error.
inline index_t arange_count(double start, double stop, double step) {
  if (step == 0 || !std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step))
    throw value_error("loom: arange(" + std::to_string(start) + ", " + std::to_string(stop) + ", " +
                      std::to_string(step) + ") needs finite bounds and a non-zero step");
  if ((stop - start) / step < 0)
    throw value_error("loom: arange(" + std::to_string(start) + ", " + std::to_string(stop) + ", " +
                      std::to_string(step) + "): the step points away from stop");
  const double n = std::ceil((stop - start) / step);
  if (n >= 9.2e18) throw value_error("loom: arange with more values than a 64-bit index holds");
  return static_cast<index_t>(n);
}
}  // namespace detail

//! The values start, start + step, ... below stop (above it for a negative
//! step), ceil((stop - start) / step) of them as PyTorch counts, lazily: a
//! rank-1 leaf that reads no memory, so it costs nothing but its arithmetic
//! inside any assignment (one kernel). Each value is start + step * i in
//! double, rounded once to T. A zero step or one pointing away from stop
//! throws value_error. Example: `y = sin(loom::arange<float>(0.0, 1.0, 0.125) * w);`
template <class T>
[[nodiscard]] auto arange(double start, double stop, double step = 1.0) {
  static_assert(element<T> && !std::is_same_v<T, bool>, "loom: arange<T> needs a numeric element type");
  return coord_leaf_node<fn::arange_values<T>, 1>(fn::arange_values<T>{start, step},
                                                  shape<1>{detail::arange_count(start, stop, step)});
}

//! The integers 0, 1, ..., n - 1 as T, lazily (see the three-argument form).
//! Example: `y = sin(loom::arange<float>(n) * w);` (one kernel)
template <class T>
[[nodiscard]] auto arange(index_t n) {
  static_assert(element<T> && !std::is_same_v<T, bool>, "loom: arange<T> needs a numeric element type");
  detail::check_creation_count(n, "arange");
  return coord_leaf_node<fn::arange_values<T>, 1>(fn::arange_values<T>{0.0, 1.0}, shape<1>{n});
}

//! n values evenly spaced from start to stop (both included), lazily, as
//! PyTorch's linspace computes them (fn::linspace_values): rank 1, reads no
//! memory. n = 1 gives start; n < 0 throws value_error.
//! Example: `y = loom::linspace<float>(-1.0, 1.0, 9);`
template <class T>
[[nodiscard]] auto linspace(double start, double stop, index_t n) {
  static_assert(element<T> && !std::is_same_v<T, bool>, "loom: linspace<T> needs a numeric element type");
  detail::check_creation_count(n, "linspace");
  const double step = n > 1 ? (stop - start) / static_cast<double>(n - 1) : 0.0;
  // One value is start (PyTorch fills it so; the formula would give stop).
  return coord_leaf_node<fn::linspace_values<T>, 1>(fn::linspace_values<T>{start, n > 1 ? stop : start, step, n},
                                                    shape<1>{n});
}

//! The rows x cols matrix with ones on diagonal k (k > 0 above the main
//! diagonal, k < 0 below) and zeros elsewhere, lazily: rank 2, reads no
//! memory. Example: `y = x + 1e-3f * loom::eye<float>(n, n);`
template <class T>
[[nodiscard]] auto eye(index_t rows, index_t cols, index_t k = 0) {
  static_assert(element<T>, "loom: eye<T> needs one of loom's element types");
  detail::check_creation_count(rows, "eye");
  detail::check_creation_count(cols, "eye");
  return coord_leaf_node<fn::eye_values<T>, 2>(fn::eye_values<T>{k}, shape<2>{rows, cols});
}

//! The n x n identity matrix, lazily. Example: `a = b + loom::eye<float>(n);`
template <class T>
[[nodiscard]] auto eye(index_t n) {
  return eye<T>(n, n);
}
}  // namespace loom
