// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"

namespace loom {

//! "No bound" marker for `range`: the start or the end in the direction of the step.
inline constexpr index_t none = std::numeric_limits<index_t>::min();

//! A Python-style slice `start:stop:step` for `view::slice`. Negative bounds
//! count from the end; `none` means "from the first / to the last element in the
//! direction of the step". Bounds outside [-n, n] throw index_error (loom does
//! not clamp silently); a zero step throws value_error; empty results are fine.
//! Example: `x.slice(range(1, none, 2), whole)` takes every other row from row 1.
struct range {
  index_t start = none;
  index_t stop = none;
  index_t step = 1;
  constexpr range() = default;
  constexpr range(index_t start_, index_t stop_, index_t step_ = 1) : start(start_), stop(stop_), step(step_) {}
};

//! The whole axis (`:` in NumPy). (Not named `all`: that is a reduction, and
//! CUDA's headers declare a global `all` too.)
inline constexpr range whole{};

template <class T, std::size_t Rank, memory_space Space>
class view;

namespace detail {
template <class A>
inline constexpr bool is_slice_index = std::is_integral_v<A>;
template <class A>
inline constexpr bool is_slice_arg = std::is_integral_v<A> || std::is_same_v<A, range>;

struct slice_arg {
  bool index;
  index_t i;
  range r;
};
inline slice_arg to_slice_arg(range r) { return {false, 0, r}; }
template <class I>
  requires std::is_integral_v<I>
slice_arg to_slice_arg(I i) {
  return {true, static_cast<index_t>(i), {}};
}
// item() of a view or tensor without exactly one element (cold, out of line).
template <std::size_t R>
[[noreturn]] LOOM_COLD void throw_item_size(const shape<R>& extents) {
  const index_t n = shape_size(extents);
  if (n == 1) throw shape_error("loom: item() of a view or tensor without data (default-constructed or moved from)");
  throw shape_error("loom: item() needs exactly 1 element; got shape " + shape_string(extents) + " (" +
                    std::to_string(n) + " elements)");
}
}  // namespace detail

//! A non-owning, trivially copyable window on tensor data: a pointer plus
//! extents and strides (in elements, 64-bit, possibly zero or negative). Views
//! are what enter expressions and kernels. Slicing, permuting, reshaping and
//! broadcasting make new views over the same memory and never copy: O(1), no
//! kernel. The memory must outlive the view (like std::span).
//! Example: `auto row = x.view().slice(3);  // row 3 of a 2-D tensor, rank 1`
template <class T, std::size_t Rank, memory_space Space>
class view {
  static_assert(element<T>, "loom: a view's element type must be one of bool, int8_t, uint8_t, int32_t, "
                            "int64_t, loom::half, loom::bf16, float, double, loom::e4m3, loom::e5m2, loom::e8m0");
  static_assert(Rank <= max_rank, "loom: tensors have rank 0 to 8");

 public:
  using value_type = std::remove_const_t<T>;
  using element_type = T;
  using space = Space;
  static constexpr std::size_t rank = Rank;

  view() = default;
  view(const view&) = default;
  //! A named view rebinds when assigned another view of the same type, like
  //! std::span; use loom::assign(v, w) to copy elements into it.
  view& operator=(const view&) & = default;

  //! Writes the elements of an expression (or scalar) into the viewed memory:
  //! one launch; see loom::assign. Works on temporaries from slicing too:
  //! `x.slice(0) = y.slice(1) * 2;`
  template <class E>
    requires(!std::is_same_v<std::remove_cvref_t<E>, view>)
  const view& operator=(const E& e) & {
    assign(*this, e);
    return *this;
  }
  template <class E>
  const view& operator=(const E& e) && {
    assign(*this, e);
    return *this;
  }

  //! Compound assignment on the viewed elements: `v += e` is `v = v + e`, one
  //! launch, with the aliasing rules of loom::assign (an expression may read
  //! the updated elements only at the positions it writes). Works on named
  //! views and on temporaries from slicing: `z.t() *= 2;`. A view of const
  //! elements is rejected at compile time. Needs the operators
  //! (loom/ops/arithmetic.hpp, part of loom/loom.hpp).
  template <class E>
  const view& operator+=(const E& e) const {
    return update(*this + e);
  }
  //! `v -= e` is `v = v - e`; see operator+=.
  template <class E>
  const view& operator-=(const E& e) const {
    return update(*this - e);
  }
  //! `v *= e` is `v = v * e`; see operator+=.
  template <class E>
  const view& operator*=(const E& e) const {
    return update(*this * e);
  }
  //! `v /= e` is `v = v / e` (true division, converted to the element type); see operator+=.
  template <class E>
  const view& operator/=(const E& e) const {
    return update(*this / e);
  }
  //! `v %= e` is `v = v % e` (Python-style remainder); see operator+=.
  template <class E>
  const view& operator%=(const E& e) const {
    return update(*this % e);
  }

  //! A view of `data` with the given extents and strides (in elements).
  LOOM_HD view(T* data, const shape<Rank>& extents, const shape<Rank>& strides)
      : data_(data), extents_(extents), strides_(strides) {}
  //! A row-major contiguous view of `data` with the given extents.
  view(T* data, const shape<Rank>& extents) : data_(data), extents_(extents), strides_(contiguous_strides(extents)) {}

  //! A view of non-const elements converts to a view of const ones.
  template <class U>
    requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
  LOOM_HD view(const view<U, Rank, Space>& v) : data_(v.data()), extents_(v.extents()), strides_(v.strides()) {}

  LOOM_HD T* data() const { return data_; }
  LOOM_HD const shape<Rank>& extents() const { return extents_; }
  LOOM_HD const shape<Rank>& strides() const { return strides_; }
  LOOM_HD index_t extent(std::size_t d) const { return extents_[d]; }
  LOOM_HD index_t stride(std::size_t d) const { return strides_[d]; }
  //! Number of elements.
  LOOM_HD index_t size() const {
    index_t n = 1;
    for (std::size_t d = Rank; d-- > 0;) n *= extents_[d];
    return n;
  }
  LOOM_HD bool empty() const { return size() == 0; }

  //! The single element (any rank, size 1) as a host value. For device data
  //! this copies the element to the host and waits for the current stream:
  //! the one synchronization of a reduction, as `sum(x).item()` in PyTorch.
  //! Throws shape_error unless size() == 1.
  //! Example: `float total = loom::sum(x).item();`
  value_type item() const {
    if (size() != 1 || data_ == nullptr) detail::throw_item_size(extents_);
    if constexpr (std::is_same_v<Space, host>) {
      return data_[0];
    } else {
      value_type r;
      const stream_ref s = current_stream();
      LOOM_CUDA_CHECK(cudaMemcpyAsync(&r, data_, sizeof(value_type), cudaMemcpyDeviceToHost, s.get()));
      s.synchronize();
      return r;
    }
  }

  //! True when the elements are laid out row-major with no gaps (extent-1 axes
  //! may have any stride). Empty views are contiguous.
  LOOM_HD bool is_contiguous() const {
    if (size() == 0) return true;
    index_t expect = 1;
    for (std::size_t d = Rank; d-- > 0;) {
      if (extents_[d] == 1) continue;
      if (strides_[d] != expect) return false;
      expect *= extents_[d];
    }
    return true;
  }

  //! Offset (in elements) of the element with row-major linear index `i`.
  LOOM_HD index_t offset_of(index_t i) const {
    index_t off = 0;
    for (std::size_t d = Rank; d-- > 0;) {
      const index_t e = extents_[d];
      off += (i % e) * strides_[d];
      i /= e;
    }
    return off;
  }

  //! Element access by coordinates, unchecked. Valid in the code of the view's space only.
  template <class... I>
    requires(sizeof...(I) == Rank && (std::is_integral_v<I> && ...))
  LOOM_HD T& operator()(I... idx) const {
    const index_t ix[] = {static_cast<index_t>(idx)..., 0};
    index_t off = 0;
    for (std::size_t d = Rank; d-- > 0;) off += ix[d] * strides_[d];
    return data_[off];
  }

  //! Bounds-checked element access for host views; throws index_error.
  template <class... I>
    requires(sizeof...(I) == Rank && (std::is_integral_v<I> && ...) && std::is_same_v<Space, host>)
  T& at(I... idx) const {
    const index_t ix[] = {static_cast<index_t>(idx)..., 0};
    for (std::size_t d = 0; d != Rank; ++d)
      if (ix[d] < 0 || ix[d] >= extents_[d])
        throw index_error("loom: index " + std::to_string(ix[d]) + " is out of range for axis " +
                          std::to_string(d) + " of extent " + std::to_string(extents_[d]) + " (shape " +
                          shape_string(extents_) + ")");
    return (*this)(idx...);
  }

  //! NumPy-style basic slicing, one argument per leading axis: an integer picks
  //! one index and drops the axis, a `range` keeps it. Axes not named are kept whole.
  //! Example: `x.slice(whole, range(0, 8, 2))`, `x.slice(-1)` (last row).
  template <class... A>
    requires(detail::is_slice_arg<A> && ...)
  auto slice(A... args) const {
    static_assert(sizeof...(A) <= Rank, "loom: slice() takes at most one argument per axis");
    constexpr std::size_t dropped = (std::size_t{0} + ... + (detail::is_slice_index<A> ? 1u : 0u));
    const detail::slice_arg a[] = {detail::to_slice_arg(args)..., detail::slice_arg{false, 0, {}}};
    view<T, Rank - dropped, Space> out;
    shape<Rank - dropped> ext{}, str{};
    index_t off = 0;  // elements from data_; a view without memory stays without
    std::size_t o = 0;
    for (std::size_t d = 0; d != Rank; ++d) {
      const index_t n = extents_[d];
      if (d < sizeof...(A) && a[d].index) {
        index_t i = a[d].i;
        if (i < -n || i >= n)
          throw index_error("loom: index " + std::to_string(i) + " is out of range for axis " +
                            std::to_string(d) + " of extent " + std::to_string(n) + " (shape " +
                            shape_string(extents_) + ")");
        if (i < 0) i += n;
        off += i * strides_[d];
        continue;
      }
      const range r = d < sizeof...(A) ? a[d].r : range{};
      index_t start = 0, count = 0;
      resolve(r, n, d, start, count);
      off += count > 0 ? start * strides_[d] : 0;
      ext[o] = count;
      str[o] = strides_[d] * r.step;
      ++o;
    }
    out = view<T, Rank - dropped, Space>(data_ ? data_ + off : data_, ext, str);
    return out;
  }

  //! Reorders the axes: result axis i is this view's axis perm[i].
  //! Example: `x.permute({2, 0, 1})`.
  view permute(const std::array<int, Rank>& perm) const {
    shape<Rank> ext{}, str{};
    std::array<bool, Rank> seen{};
    for (std::size_t i = 0; i != Rank; ++i) {
      const std::size_t p = detail::normalize_axis<Rank>(perm[i]);
      if (seen[p]) throw index_error("loom: permute() got axis " + std::to_string(p) + " twice");
      seen[p] = true;
      ext[i] = extents_[p];
      str[i] = strides_[p];
    }
    return view(data_, ext, str);
  }

  //! Swaps two axes (negative axes count from the end).
  view transpose(int a, int b) const {
    const std::size_t i = detail::normalize_axis<Rank>(a), j = detail::normalize_axis<Rank>(b);
    view out = *this;
    std::swap(out.extents_[i], out.extents_[j]);
    std::swap(out.strides_[i], out.strides_[j]);
    return out;
  }

  //! Matrix transpose of a rank-2 view.
  view t() const
    requires(Rank == 2)
  {
    return transpose(0, 1);
  }

  //! The same elements with another shape; the view must be contiguous (else
  //! shape_error: copy it first). One extent may be -1 and is inferred.
  //! Example: `x.reshape(shape<2>{-1, 64})`.
  template <std::size_t N>
  view<T, N, Space> reshape(shape<N> s) const {
    int infer = -1;
    index_t known = 1;
    for (std::size_t i = 0; i != N; ++i) {
      if (s[i] == -1) {
        if (infer >= 0) throw shape_error("loom: reshape to " + shape_string(s) + " has more than one -1");
        infer = static_cast<int>(i);
      } else if (s[i] < 0) {
        throw shape_error("loom: reshape to " + shape_string(s) + " has a negative extent");
      } else {
        known *= s[i];
      }
    }
    const index_t n = size();
    if (infer >= 0) {
      if (known == 0 || n % known != 0)
        throw shape_error("loom: cannot reshape " + shape_string(extents_) + " (" + std::to_string(n) +
                          " elements) to " + shape_string(s));
      s[infer] = n / known;
    }
    if (shape_size(s) != n)
      throw shape_error("loom: cannot reshape " + shape_string(extents_) + " (" + std::to_string(n) +
                        " elements) to " + shape_string(s) + " (" + std::to_string(shape_size(s)) + " elements)");
    if (!is_contiguous())
      throw shape_error("loom: reshape of a non-contiguous view (shape " + shape_string(extents_) + ", strides " +
                        shape_string(strides_) + ") to " + shape_string(s) +
                        "; copy it into a contiguous tensor first (loom::contiguous)");
    return view<T, N, Space>(data_, s, contiguous_strides(s));
  }

  //! NumPy broadcasting to a shape of equal or higher rank: trailing axes align,
  //! an extent-1 axis repeats with stride 0, new leading axes have stride 0.
  //! Throws shape_error naming both shapes when they are not compatible.
  template <std::size_t N>
  view<T, N, Space> broadcast_to(const shape<N>& s) const {
    static_assert(N >= Rank, "loom: broadcast_to() cannot lower the rank");
    shape<N> str{};
    for (std::size_t i = 0; i != N; ++i) {
      if (s[i] < 0) detail::throw_negative_broadcast(s);
      if (i + Rank < N) continue;  // a new leading axis
      const std::size_t d = i + Rank - N;
      if (extents_[d] == s[i])
        str[i] = strides_[d];
      else if (extents_[d] == 1)
        str[i] = 0;
      else
        detail::throw_cannot_broadcast(extents_, s);
    }
    return view<T, N, Space>(data_, s, str);
  }

  //! Removes an axis of extent 1 (shape_error if its extent is not 1).
  view<T, (Rank > 0 ? Rank - 1 : 0), Space> squeeze(int axis) const
    requires(Rank > 0)
  {
    const std::size_t a = detail::normalize_axis<Rank>(axis);
    if (extents_[a] != 1)
      throw shape_error("loom: squeeze(" + std::to_string(axis) + ") on shape " + shape_string(extents_) +
                        ": that axis has extent " + std::to_string(extents_[a]) + ", not 1");
    shape<Rank - 1> ext{}, str{};
    for (std::size_t i = 0, o = 0; i != Rank; ++i)
      if (i != a) ext[o] = extents_[i], str[o++] = strides_[i];
    return view<T, Rank - 1, Space>(data_, ext, str);
  }

  //! Inserts an axis of extent 1 at position `axis` (0..Rank; negative counts from the end).
  view<T, Rank + 1, Space> unsqueeze(int axis) const {
    const std::size_t a = detail::normalize_axis<Rank + 1>(axis);
    shape<Rank + 1> ext{}, str{};
    for (std::size_t i = 0, o = 0; i <= Rank; ++i) {
      if (i == a) {
        ext[i] = 1;
        str[i] = (a < Rank) ? strides_[a] * extents_[a] : 1;
      } else {
        ext[i] = extents_[o];
        str[i] = strides_[o++];
      }
    }
    return view<T, Rank + 1, Space>(data_, ext, str);
  }

 private:
  template <class E>
  const view& update(const E& e) const {
    static_assert(!std::is_const_v<T>,
                  "loom: compound assignment (+=, -=, *=, /=, %=) writes the viewed elements; this view's "
                  "elements are const (take the view from a non-const tensor)");
    if constexpr (!std::is_const_v<T>) assign(*this, e);
    return *this;
  }

  static void resolve(const range& r, index_t n, std::size_t axis, index_t& start, index_t& count) {
    if (r.step == 0) throw value_error("loom: slice step must not be zero (axis " + std::to_string(axis) + ")");
    auto bad = [&](const char* what, index_t v) {
      throw index_error(std::string("loom: slice ") + what + " " + std::to_string(v) + " is out of range for axis " +
                        std::to_string(axis) + " of extent " + std::to_string(n) + " (allowed: -" +
                        std::to_string(n) + " to " + std::to_string(n) + ")");
    };
    auto norm = [&](const char* what, index_t v) {
      if (v < -n || v > n) bad(what, v);
      return v < 0 ? v + n : v;
    };
    index_t b, e;
    if (r.step > 0) {
      b = r.start == none ? 0 : norm("start", r.start);
      e = r.stop == none ? n : norm("stop", r.stop);
      count = e > b ? (e - b + r.step - 1) / r.step : 0;
    } else {
      b = r.start == none ? n - 1 : norm("start", r.start);
      if (r.start != none && b == n && n > 0) bad("start", r.start);
      e = r.stop == none ? -1 : norm("stop", r.stop);
      count = b > e ? (b - e + (-r.step) - 1) / (-r.step) : 0;
    }
    start = b;
  }

  T* data_ = nullptr;
  shape<Rank> extents_{};
  shape<Rank> strides_{};

  template <class, std::size_t, memory_space>
  friend class view;
};

//! Views of host memory.
template <class T, std::size_t Rank>
using host_view = view<T, Rank, host>;
//! Views of device memory.
template <class T, std::size_t Rank>
using device_view = view<T, Rank, device>;

namespace detail {
template <class V>
struct is_view : std::false_type {};
template <class T, std::size_t R, class S>
struct is_view<view<T, R, S>> : std::true_type {};
}  // namespace detail

//! Satisfied by `loom::view` specializations.
template <class V>
concept any_view = detail::is_view<std::remove_cvref_t<V>>::value;

//! True when two views may share memory: their address ranges intersect,
//! unless their elements provably interleave without touching (every byte
//! stride of both a multiple of g, and the two starts a distance apart modulo
//! g that leaves room for an element on each side: the even and odd columns
//! of one tensor).
template <class A, std::size_t RA, class B, std::size_t RB, class S>
bool may_overlap(const view<A, RA, S>& a, const view<B, RB, S>& b) {
  if (a.empty() || b.empty() || !a.data() || !b.data()) return false;  // no memory (a skipped output)
  std::uint64_t g = 0;
  auto gather = [&g](const auto& v) {
    using E = typename std::remove_cvref_t<decltype(v)>::value_type;
    for (std::size_t d = 0; d != std::remove_cvref_t<decltype(v)>::rank; ++d)
      if (v.extent(d) > 1)
        g = std::gcd(g, static_cast<std::uint64_t>(v.stride(d) < 0 ? -v.stride(d) : v.stride(d)) * sizeof(E));
  };
  gather(a);
  gather(b);
  if (g > 0) {
    const auto pa = reinterpret_cast<std::uintptr_t>(a.data()), pb = reinterpret_cast<std::uintptr_t>(b.data());
    const std::uint64_t r = pa >= pb ? (pa - pb) % g : (g - (pb - pa) % g) % g;
    if (r >= sizeof(B) && g - r >= sizeof(A)) return false;
  }
  // Address ranges in integers: no pointer is formed outside the views.
  auto bounds = [](auto& v, std::intptr_t& lo, std::intptr_t& hi) {
    index_t mn = 0, mx = 0;
    for (std::size_t d = 0; d != std::remove_cvref_t<decltype(v)>::rank; ++d) {
      const index_t span = (v.extent(d) - 1) * v.stride(d);
      (span < 0 ? mn : mx) += span;
    }
    using E = typename std::remove_cvref_t<decltype(v)>::value_type;
    const auto base = reinterpret_cast<std::intptr_t>(v.data());
    lo = base + static_cast<std::intptr_t>(mn) * static_cast<std::intptr_t>(sizeof(E));
    hi = base + (static_cast<std::intptr_t>(mx) + 1) * static_cast<std::intptr_t>(sizeof(E));
  };
  std::intptr_t alo, ahi, blo, bhi;
  bounds(a, alo, ahi);
  bounds(b, blo, bhi);
  return alo < bhi && blo < ahi;
}
}  // namespace loom
