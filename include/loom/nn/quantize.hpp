// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <type_traits>

#include "loom/core/float4.hpp"
#include "loom/core/float8.hpp"
#include "loom/exec/assign.hpp"
#include "loom/exec/rows/run.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/expr/unpack.hpp"
#include "loom/ops/math.hpp"
#include "loom/reduce/api.hpp"
#include "loom/tensor/tensor.hpp"

// Quantization to fp8 with float scales, as loom expressions: a value x is
// stored as q = saturate(x / scale) in the fp8 type T and read back as
// q * scale. The scale maps the largest magnitude of x (its amax, over the
// tensor, a row or a block) onto T's largest finite value.
namespace loom {
//! The largest finite value of fp8 type T: 448 (e4m3), 57344 (e5m2), 2^127 (e8m0).
template <class T>
inline constexpr float max_finite_v = std::is_same_v<T, e4m3>   ? 448.0f
                                      : std::is_same_v<T, e5m2> ? 57344.0f
                                                                : 1.7014118346046923e38f;

namespace detail {
template <class T>
constexpr void require_fp8_values() {
  static_assert(std::is_same_v<T, e4m3> || std::is_same_v<T, e5m2>,
                "loom: fp8 values are quantized to loom::e4m3 or loom::e5m2 (e8m0 holds scales)");
}

//! 2^floor(log2 |a|) as an exponent, for a finite non-zero float.
LOOM_HD int floor_log2(float a) {
  std::uint32_t u = fp8::float_bits(a) & 0x7fffffffu;
  int e = static_cast<int>(u >> 23) - 127;
  if (e == -127) {  // subnormal: find the leading one
    e = -126;
    for (u &= 0x007fffffu; u < 0x00800000u; u <<= 1) --e;
  }
  return e;
}
}  // namespace detail

namespace fn {
//! x / scale clamped to T's finite range (NaN stays NaN) and rounded to T
//! (once: the node's values are T, which a store takes as they are).
template <class T>
struct quantize_to {
  using result_type = T;
  template <class C>
  LOOM_HD T operator()(C x, C scale) const {
    const C v = x / scale, m = static_cast<C>(max_finite_v<T>);
    const C clamped = v > m ? m : (v < -m ? -m : v);
    return detail::to_float8<T>(clamped);
  }
};
//! q * scale, in float (double for double operands).
struct dequantize {
  template <class C>
  LOOM_HD C operator()(C q, C scale) const {
    return q * scale;
  }
};
//! The float scale of values of amax `a` quantized to T: a / max_finite_v<T>
//! (1 when a is 0, so an all-zero tensor gets finite scales; NaN and
//! infinity propagate).
template <class T>
struct amax_scale {
  using result_type = float;
  template <class C>
  LOOM_HD float operator()(C a) const {
    const float f = static_cast<float>(a);
    return f == 0.0f ? 1.0f : f / max_finite_v<T>;
  }
};
//! The scale of values of amax `a` quantized to T with scales of type S,
//! as a float holding S's value:
//!  - S = e8m0 (OCP MX): 2^(floor(log2 a) - floor(log2 max_finite_v<T>)),
//!    clamped to e8m0's range [2^-127, 2^127]; 1 when a is 0; NaN for a NaN
//!    or infinite a;
//!  - S = e4m3 or e5m2 (NVFP4-style): a / max_finite_v<T> rounded to S with
//!    saturation, at least S's smallest subnormal; 1 when a is 0;
//!  - S = float: amax_scale.
template <class T, class S>
struct block_scale {
  using result_type = S;
  template <class C>
  LOOM_HD float operator()(C amax) const {
    const float a = static_cast<float>(amax);
    if constexpr (std::is_same_v<S, e8m0>) {
      if (a == 0.0f) return 1.0f;
      if (!(a - a == 0.0f)) return static_cast<float>(detail::from_bits<e8m0>(0xff));
      int code = detail::floor_log2(a) - detail::floor_log2(max_finite_v<T>) + 127;
      code = code < 0 ? 0 : (code > 254 ? 254 : code);
      return static_cast<float>(detail::from_bits<e8m0>(static_cast<std::uint8_t>(code)));
    } else if constexpr (std::is_same_v<S, float>) {
      return amax_scale<T>{}(a);
    } else {
      if (a == 0.0f) return 1.0f;
      const float s = static_cast<float>(detail::to_float8<S>(a / max_finite_v<T>, true));
      const float smallest = static_cast<float>(detail::from_bits<S>(1));
      return s < smallest ? smallest : s;  // NaN passes (the comparison is false)
    }
  }
};
}  // namespace fn

//! Lazily quantizes `x` to fp8 type T with `scale` (a scalar or anything that
//! broadcasts to x: a [1] tensor, a per-row [..., 1] scale):
//! saturate(x / scale) rounded to nearest even; NaN stays NaN. The node's
//! element type is T. Fused into the assignment that contains it.
//! Example: `q = loom::quantize<loom::e4m3>(x, s);`
template <class T, expression X, operand S>
[[nodiscard]] auto quantize(const X& x, const S& scale) {
  detail::require_fp8_values<T>();
  return map(fn::quantize_to<T>{}, x, scale);
}

//! Lazily dequantizes: q * scale in float (q of any type; scale as for
//! quantize). Fused into the expression that contains it:
//! `y = gelu(dequantize(w8, s) * x);` is one kernel reading 1 byte per weight.
template <expression Q, operand S>
[[nodiscard]] auto dequantize(const Q& q, const S& scale) {
  return map(fn::dequantize{}, q, scale);
}

//! The per-row scale of `x` for quantizing to T, lazily, shape [..., 1]:
//! row_max(abs(x)) / max_finite_v<T> (1 for an all-zero row).
//! Example: `s = loom::row_scale<loom::e4m3>(x);` (one row kernel).
template <class T, expression X>
[[nodiscard]] auto row_scale(const X& x) {
  detail::require_fp8_values<T>();
  return map(fn::amax_scale<T>{}, row_max(abs(x)));
}

//! Quantizes the rows of `x` to T, each with its own scale: writes
//! q = quantize<T>(x, s) and `scale` = s = row_scale<T>(x) ([..., 1], float)
//! in ONE row kernel (the row's amax computed once, x read once where the
//! row fits on chip).
//! Example: `loom::quantize_rows(q8, scales, x);`
template <tensor_like Q, tensor_like S, expression X>
eval_info quantize_rows(Q&& q, S&& scale, const X& x) {
  using T = typename decltype(detail::as_view(q))::value_type;
  detail::require_fp8_values<T>();
  const auto s = row_scale<T>(x);
  return assign_with_row_stat(q, quantize<T>(x, s), scale, s);
}

//! Quantizes all of `x` to T with one scale: `scale` (a float tensor of one
//! element, any rank) = max(abs(x)) / max_finite_v<T> (1 when x is all
//! zero), then q = quantize<T>(x, scale). Three launches on the device: the
//! amax reduction (CUB: one kernel, or two for large inputs), the scale (one
//! element) and the quantizing pass; nothing waits for the host.
//! Example: `loom::quantize_tensor(q8, s, x);`
template <tensor_like Q, tensor_like S, expression X>
void quantize_tensor(Q&& q, S&& scale, const X& x) {
  using T = typename decltype(detail::as_view(q))::value_type;
  detail::require_fp8_values<T>();
  const auto sv = detail::as_view(scale);
  if (sv.size() != 1)
    throw shape_error("loom: quantize_tensor needs a scale of one element, got shape " + shape_string(sv.extents()));
  const auto amax = max(abs(x));
  assign(sv, map(fn::amax_scale<T>{}, amax));
  assign(q, quantize<T>(x, sv));
}

//! The last axis of `v` split into blocks of `block` elements: [..., K] ->
//! [..., K / block, block], the same memory (any strides). Throws shape_error
//! unless `block` divides K. Block-scaled data is read in expressions through
//! this view: `dequantize(blocks(q, 32), scales.unsqueeze(-1))`.
template <class T, std::size_t R, class Sp>
[[nodiscard]] view<T, R + 1, Sp> blocks(const view<T, R, Sp>& v, index_t block) {
  static_assert(R >= 1, "loom: blocks() splits the last axis of a view of rank 1 or more");
  const index_t k = v.extent(R - 1);
  if (block <= 0 || k % block != 0)
    throw shape_error("loom: blocks of " + std::to_string(block) + " do not divide the last extent of shape " +
                      shape_string(v.extents()));
  shape<R + 1> ext{}, st{};
  for (std::size_t d = 0; d + 1 < R; ++d) {
    ext[d] = v.extent(d);
    st[d] = v.stride(d);
  }
  ext[R - 1] = k / block;
  st[R - 1] = v.stride(R - 1) * block;
  ext[R] = block;
  st[R] = v.stride(R - 1);
  return view<T, R + 1, Sp>(v.data(), ext, st);
}
//! See blocks(view, block); a tensor enters as its view.
template <class T, std::size_t R, class Sp>
[[nodiscard]] auto blocks(tensor<T, R, Sp>& t, index_t block) {
  return blocks(t.view(), block);
}
//! See blocks(view, block).
template <class T, std::size_t R, class Sp>
[[nodiscard]] auto blocks(const tensor<T, R, Sp>& t, index_t block) {
  return blocks(t.view(), block);
}

namespace detail {
// quantize_blocks on views (see below).
template <class Q, class S, class X, std::size_t R, class Sp>
eval_info quantize_blocks_views(const view<Q, R, Sp>& q, const view<S, R, Sp>& scales, const view<X, R, Sp>& x,
                                index_t block) {
  require_fp8_values<Q>();
  auto want = x.extents();
  want[R - 1] = x.extent(R - 1) / (block > 0 ? block : 1);
  if (q.extents() != x.extents() || scales.extents() != want || block <= 0 || x.extent(R - 1) % block != 0)
    throw shape_error("loom: quantize_blocks of x " + shape_string(x.extents()) + " in blocks of " +
                      std::to_string(block) + " needs q of x's shape and scales of shape " + shape_string(want) +
                      " (the block dividing the last extent), got q " + shape_string(q.extents()) + " and scales " +
                      shape_string(scales.extents()));
  const auto xb = loom::blocks(x, block);
  const auto s = loom::map(fn::block_scale<Q, S>{}, loom::row_max(loom::abs(xb)));
  return loom::assign_with_row_stat(loom::blocks(q, block), loom::quantize<Q>(xb, s), scales.unsqueeze(-1), s);
}
}  // namespace detail

//! Quantizes `x` ([..., K]) to T in blocks of `block` consecutive elements
//! along the last axis, each with its own scale of type S (block_scale:
//! e8m0 for OCP MX with block 32, e4m3 for NVFP4-style scales over 16, or
//! float): writes q ([..., K], type T) and `scales` ([..., K / block], type
//! S) in ONE row kernel whose rows are the blocks. Throws shape_error unless
//! `block` divides K and the shapes agree.
//! Example: `loom::quantize_blocks(q8, scales_e8m0, x, 32);  // MXFP8`
template <tensor_like Q, tensor_like S, tensor_like X>
eval_info quantize_blocks(Q&& q, S&& scales, const X& x, index_t block) {
  return detail::quantize_blocks_views(detail::as_view(q), detail::as_view(scales), detail::as_view(x), block);
}

// 4-bit values, two per byte (fp4x2, int4x2; core/float4.hpp).
//! The largest finite value of packed 4-bit type P: 6 (fp4 E2M1), 7 (int4).
template <>
inline constexpr float max_finite_v<fp4x2> = 6.0f;
template <>
inline constexpr float max_finite_v<int4x2> = 7.0f;

namespace fn {
//! Two values divided by the scale, rounded to nearest even, saturated and
//! packed into a pair (`first` in the low nibble). NaN gives +6 (fp4), 0 (int4).
template <class P>
struct quantize_pack {
  using result_type = P;
  template <class C>
  LOOM_HD P operator()(C first, C second, C scale) const {
    return detail::pack4<P>(static_cast<float>(first / scale), static_cast<float>(second / scale));
  }
};
//! The first (High = 0, low nibble) or second value of a packed pair, as a float.
template <int High>
struct unpack_nibble {
  using result_type = float;
  template <class P>
  LOOM_HD float operator()(P p) const {
    return detail::unpack4<High>(p);
  }
};
}  // namespace fn

//! The elements 0, 2, 4, ... (even) or 1, 3, 5, ... (odd) of the last axis
//! of `v`: [..., K] -> [..., K / 2], the same memory. The values a packed
//! 4-bit tensor holds in its low (even) and high (odd) nibbles line up with
//! these. Throws shape_error when K is odd (a pair would be split).
//! Example: `assign_pair(even(y), low(w4) * s, odd(y), high(w4) * s);`
template <class T, std::size_t R, class Sp>
[[nodiscard]] view<T, R, Sp> even(const view<T, R, Sp>& v) {
  static_assert(R >= 1, "loom: even() splits the last axis of a view of rank 1 or more");
  if (v.extent(R - 1) % 2 != 0)
    throw shape_error("loom: even() and odd() need an even last extent (4-bit values are packed in pairs), got shape " +
                      shape_string(v.extents()));
  auto ext = v.extents();
  auto st = v.strides();
  ext[R - 1] /= 2;
  st[R - 1] *= 2;
  return view<T, R, Sp>(v.data(), ext, st);
}
//! See even(view).
template <class T, std::size_t R, class Sp>
[[nodiscard]] view<T, R, Sp> odd(const view<T, R, Sp>& v) {
  const auto e = even(v);
  return view<T, R, Sp>(v.data() + v.stride(R - 1), e.extents(), e.strides());
}
//! See even(view); a tensor enters as its view.
template <class T, std::size_t R, class Sp>
[[nodiscard]] auto even(tensor<T, R, Sp>& t) {
  return even(t.view());
}
//! See even(view); a tensor enters as its view.
template <class T, std::size_t R, class Sp>
[[nodiscard]] auto even(const tensor<T, R, Sp>& t) {
  return even(t.view());
}
//! See even(view); a tensor enters as its view.
template <class T, std::size_t R, class Sp>
[[nodiscard]] auto odd(tensor<T, R, Sp>& t) {
  return odd(t.view());
}
//! See even(view); a tensor enters as its view.
template <class T, std::size_t R, class Sp>
[[nodiscard]] auto odd(const tensor<T, R, Sp>& t) {
  return odd(t.view());
}

//! The first (low-nibble) values of a packed 4-bit tensor, lazily, as floats
//! (the elements at even positions of the unpacked row; see even()).
template <expression E>
[[nodiscard]] auto low(const E& packed) {
  static_assert(is_packed4_v<typename detail::node_t<E>::value_type>, "loom: low() and high() read fp4x2 or int4x2");
  return map(fn::unpack_nibble<0>{}, packed);
}
//! The second (high-nibble) values of a packed 4-bit tensor, lazily, as floats.
template <expression E>
[[nodiscard]] auto high(const E& packed) {
  static_assert(is_packed4_v<typename detail::node_t<E>::value_type>, "loom: low() and high() read fp4x2 or int4x2");
  return map(fn::unpack_nibble<1>{}, packed);
}

namespace detail {
// quantize_packed on views (see below).
template <class P, class S, class X, std::size_t R, class Sp>
eval_info quantize_packed_views(const view<P, R, Sp>& packed, const view<S, R, Sp>& scales, const view<X, R, Sp>& x,
                                index_t block) {
  static_assert(is_packed4_v<P>, "loom: quantize_packed writes fp4x2 or int4x2 pairs");
  const index_t k = x.extent(R - 1);
  const bool block_ok = block > 0 && block % 2 == 0 && k % block == 0;
  auto want_packed = x.extents();
  auto want_scales = x.extents();
  want_packed[R - 1] = k / 2;
  want_scales[R - 1] = block_ok ? k / block : 0;
  if (!block_ok || packed.extents() != want_packed || scales.extents() != want_scales)
    throw shape_error("loom: quantize_packed of x " + shape_string(x.extents()) + " in blocks of " +
                      std::to_string(block) + " needs an even block dividing the last extent, packed of shape " +
                      shape_string(want_packed) + " and scales of shape [..., K / block], got packed " +
                      shape_string(packed.extents()) + " and scales " + shape_string(scales.extents()));
  const auto xb = loom::blocks(x, block);
  const auto xe = loom::even(xb);
  const auto xo = loom::odd(xb);
  const auto amax = loom::max(loom::row_max(loom::abs(xe)), loom::row_max(loom::abs(xo)));
  const auto s = loom::map(fn::block_scale<P, S>{}, amax);
  return loom::assign_with_row_stat(loom::blocks(packed, block / 2), loom::map(fn::quantize_pack<P>{}, xe, xo, s),
                                    scales.unsqueeze(-1), s);
}
}  // namespace detail

//! Quantizes `x` ([..., K]) to 4-bit pairs P (fp4x2 or int4x2) in blocks of
//! `block` (even) consecutive elements along the last axis, each with a scale
//! of type S (block_scale: e4m3 over 16 for NVFP4-style data, e8m0 over 32
//! for MXFP4, float; block = K gives one scale per row): writes `packed`
//! ([..., K / 2], element 2j in the low nibble of byte j) and `scales`
//! ([..., K / block]) in ONE row kernel whose rows are the blocks. Throws
//! shape_error unless `block` is even and divides K and the shapes agree.
//! Example: `loom::quantize_packed(w4, scales_e4m3, w, 16);  // NVFP4-style`
template <tensor_like P, tensor_like S, tensor_like X>
eval_info quantize_packed(P&& packed, S&& scales, const X& x, index_t block) {
  return detail::quantize_packed_views(detail::as_view(packed), detail::as_view(scales), detail::as_view(x), block);
}
}  // namespace loom
