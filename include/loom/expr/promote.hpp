// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <type_traits>

#include "loom/core/dtype.hpp"

// Type promotion, following PyTorch's rules:
//  - bool < integers < floating point: the higher category wins;
//  - two integer types: the wider one (int8 with uint8 gives int32, since loom
//    has no int16; PyTorch gives int16);
//  - two floating types: the wider one; half with bf16 gives float;
//  - a C++ scalar (a "wrapped number") does not widen a tensor of its own or a
//    higher category: half_tensor * 2.0 stays half, int_tensor * 2 stays int;
//    a scalar of a higher category gives that category's default type
//    (int64 for integers, float32 for floating point): int_tensor * 0.5 is float.
namespace loom {
namespace detail {
template <class T>
inline constexpr int category = std::is_same_v<T, bool> ? 0 : (std::is_integral_v<T> ? 1 : 2);

template <class A, class B>
struct promote2 {
  static constexpr int ca = category<A>, cb = category<B>;
  using type = std::conditional_t<
      (ca != cb), std::conditional_t<(ca > cb), A, B>,
      std::conditional_t<
          std::is_same_v<A, B>, A,
          std::conditional_t<
              ca == 1,
              std::conditional_t<(sizeof(A) == sizeof(B)), std::int32_t, std::conditional_t<(sizeof(A) > sizeof(B)), A, B>>,
              std::conditional_t<(sizeof(A) == sizeof(B)), float, std::conditional_t<(sizeof(A) > sizeof(B)), A, B>>>>>;
};

//! The element type a C++ scalar becomes when it stands alone.
template <class S>
using scalar_element_t = std::conditional_t<
    std::is_same_v<S, bool>, bool,
    std::conditional_t<std::is_same_v<S, half> || std::is_same_v<S, bf16>, S,
                       std::conditional_t<std::is_integral_v<S>, std::int64_t,
                                          std::conditional_t<std::is_same_v<S, double>, double, float>>>>;

//! Applies a scalar of type Scalar to the tensor-promoted type Promoted.
template <class Promoted, class Scalar>
using apply_scalar_t =
    std::conditional_t<(category<scalar_element_t<Scalar>> > category<Promoted>),
                       std::conditional_t<category<scalar_element_t<Scalar>> == 1, std::int64_t, float>, Promoted>;
}  // namespace detail

//! The type two tensor element types promote to, e.g. `promote_t<half, float>` is float.
template <class A, class B>
using promote_t = typename detail::promote2<A, B>::type;
}  // namespace loom
