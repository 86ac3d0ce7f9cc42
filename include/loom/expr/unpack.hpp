// SPDX-License-Identifier: Apache-2.0
#pragma once

// unpack: a packed 4-bit tensor (fp4x2, int4x2; [..., K / 2] bytes, two
// values per byte, low nibble first) read as the expression of its logical
// shape [..., K], one float per value. The node reads bytes and splits them
// in registers: on the device's contiguous path a vector step of W values
// loads W / 2 bytes (one 16-byte load holds 32 values), and on row kernels
// the same holds per row. Elsewhere (broadcast rows, strided outer axes) it
// reads the byte of each value through coordinates.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/float4.hpp"
#include "loom/core/shape.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/coords.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/traverse.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
namespace detail {
// Kernel-side unpacking of packed type P at output rank R. `bytes` is the
// packed memory bound like a leaf over the output's shape with the last
// extent halved (its periods and strides count bytes); logical element l of
// a linear order is nibble l % 2 of byte l / 2, which is why a vector step
// needs an even first element to split whole bytes.
template <class P, std::size_t R>
struct bound_unpack {
  using compute = float;
  // Vector steps of an even number of values hold their bytes; an odd step
  // (one value) holds its code.
  template <int vector_width>
  using regs = vec_regs<std::uint8_t, vector_width % 2 == 0 ? vector_width / 2 : vector_width>;
  static constexpr std::size_t slots = 0;
  bound_leaf<P, R> bytes;
  index_t base = 0;  // added to linear indices (rebase_linear)

  LOOM_HD std::uint8_t byte_at(index_t off) const { return packed_byte(bytes.p[off]); }
  template <bool allow_periodic>
  LOOM_HD std::uint8_t code_linear(index_t l) const {
    return static_cast<std::uint8_t>(byte_at(bytes.template linear_offset<allow_periodic>(l >> 1)) >> (4 * (l & 1)));
  }
  template <bool allow_periodic = false>
  LOOM_HD float at_linear(index_t i) const {
    return decode4<P>(code_linear<allow_periodic>(base + i));
  }
  template <class Ctx = no_ctx>
  LOOM_HD float at(const index_t* idx, const Ctx& = {}) const {
    index_t off = (idx[R - 1] >> 1) * bytes.st[R - 1];
    for (std::size_t d = R - 1; d-- > 0;) off += idx[d] * bytes.st[d];
    return decode4<P>(static_cast<std::uint8_t>(byte_at(off) >> (4 * (idx[R - 1] & 1))));
  }
  template <int vector_width, bool allow_periodic = false>
  LOOM_HD void load(index_t i0, regs<vector_width>& r) const {
    const index_t l = base + i0;
    if constexpr (vector_width % 2 == 0) {
      if ((l & 1) == 0) {
        // The device calls load on 16-byte aligned data only (bind_info::aligned).
        copy_bytes(bytes.p + bytes.template linear_offset<allow_periodic>(l >> 1), r);
        return;
      }
    }
    // An odd start puts pairs across bytes: the codes regrouped. (The
    // executors' steps start at even elements; load is exact at any start.)
    LOOM_UNROLL
    for (int j = 0; j < vector_width; ++j) set_code<vector_width>(r, j, code_linear<allow_periodic>(l + j));
  }
  //! Columns [c0, c0 + vector_width) of the row with leading coordinates
  //! `lead`: the row's bytes from c0 / 2 on when c0 is even (the row
  //! kernels' vector steps; on the device the rows are 16-byte aligned,
  //! row_vector_ok), else value by value.
  template <int vector_width>
  LOOM_HD void row_load(const index_t* lead, index_t c0, regs<vector_width>& r) const {
    index_t off = 0;
    for (std::size_t d = R - 1; d-- > 0;) off += lead[d] * bytes.st[d];
    if constexpr (vector_width % 2 == 0) {
      if ((c0 & 1) == 0) {
        copy_bytes(bytes.p + off + (c0 >> 1), r);
        return;
      }
    }
    LOOM_UNROLL
    for (int j = 0; j < vector_width; ++j) {
      const index_t c = c0 + j;
      const std::uint8_t byte = byte_at(off + (c >> 1) * bytes.st[R - 1]);
      set_code<vector_width>(r, j, static_cast<std::uint8_t>(byte >> (4 * (c & 1))));
    }
  }
  //! Whether row kernels may read this node's rows with 16-byte loads:
  //! contiguous rows, each starting 16-byte aligned (rows_vector_ok).
  bool row_vector_ok() const { return bytes.row_vector_ok(); }
  template <int vector_width, class Ctx = no_ctx>
  LOOM_HD float elem(const regs<vector_width>& r, int j, const Ctx& = {}) const {
    if constexpr (vector_width % 2 == 0)
      return decode4<P>(static_cast<std::uint8_t>(r.v[j >> 1] >> (4 * (j & 1))));
    else
      return decode4<P>(r.v[j]);
  }
  //! Moves linear index 0 to element `start` (the host's per-piece loops).
  void rebase_linear(index_t start) {
    const index_t l = base + start;
    if (bytes.periodic) {
      const auto u = static_cast<std::uint64_t>(l);
      const auto period = 2 * static_cast<std::uint64_t>(bytes.period.d);
      base = static_cast<index_t>(u % period);
    } else {
      base = l;
    }
  }
  //! The same bytes under the same index map.
  bool same_as(const bound_unpack& o) const { return bytes.same_as(o.bytes) && base == o.base; }

 private:
  // n consecutive bytes from p: 16-byte loads for whole 16-byte units (p
  // aligned), a copy otherwise (host steps of fewer values).
  template <int n>
  LOOM_HD static void copy_bytes(const P* p, vec_regs<std::uint8_t, n>& r) {
    if constexpr (n % 16 == 0)
      vec_load<std::uint8_t, n>(reinterpret_cast<const std::uint8_t*>(p), r);
    else
      memcpy(static_cast<void*>(&r), static_cast<const void*>(p), n);
  }
  template <int vector_width>
  LOOM_HD static void set_code(regs<vector_width>& r, int j, std::uint8_t code) {
    if constexpr (vector_width % 2 == 0) {
      const auto c = static_cast<std::uint8_t>(code & 0xfu);
      r.v[j >> 1] = (j & 1) ? static_cast<std::uint8_t>(r.v[j >> 1] | (c << 4)) : c;
    } else {
      r.v[j] = code;
    }
  }
};
// The node reads its packed memory itself: to the walks of a bound tree it
// is a leaf but not a bound_leaf, so the row cache does not copy its rows
// (they hold half a byte per value) and the host's rebasing calls its
// rebase_linear.
template <class P, std::size_t R>
struct children_of<bound_unpack<P, R>> : no_children<bound_unpack<P, R>> {};
template <class P, std::size_t R>
struct capability<cap::leaf_bits, bound_unpack<P, R>> : std::integral_constant<std::size_t, 4> {};

template <std::size_t R>
LOOM_COLD void throw_split_bytes(const shape<R>& ext, const shape<R>& st) {
  throw shape_error("loom: unpack() reads the pairs of a packed 4-bit view along its innermost axis, which must be "
                    "contiguous (stride 1, whole bytes); a view of shape " +
                    shape_string(ext) + " with strides " + shape_string(st) +
                    " (transposed or stepped) would split bytes: unpack the whole rows and transpose or slice the "
                    "result's consumer instead");
}
}  // namespace detail

//! The logical view of a packed 4-bit tensor: `packed` of shape [..., K / 2]
//! (fp4x2 or int4x2) read as an expression of shape [..., K] whose element
//! k is value k of its row as a float (even k in the low nibble of byte
//! k / 2). Only the last axis changes; it never broadcasts (K is even), the
//! leading axes broadcast as any operand's do.
template <class P, std::size_t R, class S>
struct unpack_node : detail::node_tag {
  using value_type = float;
  using space = S;
  static constexpr std::size_t rank = R;
  leaf_node<P, R, S> e;  // the packed bytes

  explicit unpack_node(const leaf_node<P, R, S>& packed) : e(packed) {
    static_assert(R >= 1, "loom: unpack() needs a packed view of rank 1 or more");
    const auto& v = e.v;
    if (v.extent(R - 1) > 1 && v.stride(R - 1) != 1) detail::throw_split_bytes(v.extents(), v.strides());
  }
  shape<R> extents() const {
    auto s = e.extents();
    s[R - 1] *= 2;
    return s;
  }
  template <std::size_t Base, class Out>
  auto bind_node(const Out& out, detail::bind_info& info) const {
    constexpr std::size_t RO = detail::out_rank_v<Out>;
    static_assert(R <= RO, "loom: unpack() has a higher rank than the output");
    shape<RO> logical{};
    bool first = true;
    detail::broadcast_into(logical, out.extents(), first);
    detail::broadcast_into(logical, extents(), first);
    if (logical != out.extents()) detail::throw_cannot_broadcast(extents(), out.extents());
    shape<RO> packed = out.extents();
    packed[RO - 1] /= 2;
    const auto b = e.v.broadcast_to(packed);
    if constexpr (any_view<Out>) {
      if (may_overlap(b, out))
        detail::throw_overlap(out.extents(), out.strides(), b.strides());
    }
    // The leaf's bookkeeping counts bytes; the executors count values.
    detail::bind_info bytes_info;
    const auto leaf = detail::bind_leaf_view(b, bytes_info);
    info.contiguous = info.contiguous && bytes_info.contiguous;
    info.aligned = info.aligned && bytes_info.aligned;
    info.linear = info.linear && bytes_info.linear;
    if (bytes_info.period_gcd > 0) info.period_gcd = std::gcd(info.period_gcd, 2 * bytes_info.period_gcd);
    return detail::bound_unpack<P, RO>{leaf};
  }
};

namespace detail {
template <class P, std::size_t R, class S>
struct children_of<unpack_node<P, R, S>> : one_child_e<leaf_node<P, R, S>> {
  template <class C>
  using rebind = unpack_node<typename C::value_type, C::rank, typename C::space>;
  template <class C>
  static auto rebuild(const unpack_node<P, R, S>&, const C& c) {
    return unpack_node<typename C::value_type, C::rank, typename C::space>(c);
  }
};
template <class P, std::size_t R, class S>
struct capability<cap::leaf_bits, unpack_node<P, R, S>> : std::integral_constant<std::size_t, 4> {};
}  // namespace detail

//! Reads a packed 4-bit tensor or view (fp4x2, int4x2) of shape [..., K / 2]
//! as the lazy expression of its K values per row, [..., K], as floats:
//! `y = dequantize(unpack(w4), s) * x` with x of shape [..., K] is one
//! kernel. The values split from the bytes in registers: a 16-byte load
//! of the device's contiguous path holds 32 values. The view's innermost
//! axis must be contiguous (stride 1): a transposed or stepped view would
//! split bytes, and throws shape_error naming its shape and strides.
//! Example: `y = loom::unpack(w4) * scales + bias;`
template <expression E>
[[nodiscard]] auto unpack(const E& packed) {
  using N = detail::node_t<E>;
  static_assert(detail::is_leaf_node<N> && is_packed4_v<typename N::value_type>,
                "loom: unpack() reads a tensor or view of fp4x2 or int4x2 (packed 4-bit values)");
  using P = typename N::value_type;
  return unpack_node<P, N::rank, typename N::space>(
      leaf_node<P, N::rank, typename N::space>(detail::as_node(packed).v));
}
}  // namespace loom
