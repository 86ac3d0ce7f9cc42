// SPDX-License-Identifier: Apache-2.0
#pragma once

// The values of a loom::model and its memory plan: what a tensor's memory
// is (value_key: its span, type, layout, whether it is dense), how a view
// into a value reads the value's gradient, and where each gradient,
// scratch tensor and kept step buffer lies in the model's one arena,
// placed from the times it is live.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "loom/core/shape.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
namespace detail::model {
//! The identity of a tensor's elements: where they start, their type, their
//! layout, and the bytes they span (for overlaps).
struct value_key {
  const void* data = nullptr;
  const void* type = nullptr;
  std::size_t rank = 0;
  std::array<index_t, max_rank> extents{}, strides{};
  std::uintptr_t lo = 0, hi = 0;  // [lo, hi): the bytes the elements span

  bool same(const value_key& o) const {
    return data == o.data && type == o.type && rank == o.rank && extents == o.extents && strides == o.strides;
  }
  bool overlaps(const value_key& o) const { return lo < o.hi && o.lo < hi; }
  bool contains(const value_key& o) const { return lo <= o.lo && o.hi <= hi; }
  //! Every byte of [lo, hi) is one element (a permutation of a dense
  //! block: a contiguous tensor, its transpose, ...).
  bool dense = false;
};

template <class T>
inline constexpr char type_tag = 0;

template <class V>
value_key key_of(const V& v) {
  using T = typename V::value_type;
  value_key k;
  k.data = v.data();
  k.type = &type_tag<T>;
  k.rank = V::rank;
  std::intptr_t first = 0, last = 0;
  bool empty = false;
  for (std::size_t d = 0; d != V::rank; ++d) {
    k.extents[d] = v.extent(d), k.strides[d] = v.stride(d);
    if (v.extent(d) == 0) empty = true;
    const std::intptr_t span = static_cast<std::intptr_t>(v.extent(d) - 1) * v.stride(d);
    (span < 0 ? first : last) += span;
  }
  const auto base = reinterpret_cast<std::intptr_t>(v.data());
  k.lo = static_cast<std::uintptr_t>(base + first * static_cast<std::intptr_t>(sizeof(T)));
  k.hi = empty ? k.lo : static_cast<std::uintptr_t>(base + (last + 1) * static_cast<std::intptr_t>(sizeof(T)));
  // Dense: the axes of extent above 1, by increasing stride, each step by
  // the extent times stride of the one before, the first by 1.
  std::array<std::size_t, max_rank> axes{};
  std::size_t n = 0;
  for (std::size_t d = 0; d != V::rank; ++d)
    if (v.extent(d) > 1) axes[n++] = d;
  std::sort(axes.begin(), axes.begin() + static_cast<std::ptrdiff_t>(n),
            [&](std::size_t x, std::size_t y) { return v.stride(x) < v.stride(y); });
  index_t next = 1;
  k.dense = !empty;
  for (std::size_t i = 0; i != n && k.dense; ++i) {
    k.dense = v.stride(axes[i]) == next;
    next *= v.extent(axes[i]);
  }
  return k;
}

//! The elements of a value's span: the offset of view `v`'s first element
//! from lo, in elements.
template <class V>
index_t offset_in(const value_key& k, const V& v) {
  return static_cast<index_t>((reinterpret_cast<std::uintptr_t>(v.data()) - k.lo) / sizeof(typename V::value_type));
}

//! A value the model knows: a parameter, an input with a gradient, or a
//! step's output.
struct value_info {
  value_key key;
  int producer = -1;  // the step that writes it, or -1 for a parameter or an input
  int param = -1;     // its index among the parameters, then the inputs
  bool needs_grad = false;
  bool written = false;   // a backward step writes its gradient (planning)
  bool partial = false;   // a step reads part of it: its gradient is zeroed, then every contribution adds
  index_t grad_elements = 0;  // its gradient's storage: this many elements in the arena
  std::size_t element_size = 0;
  int grad_buffer = -1;       // the storage's buffer in the memory plan
  void* grad_data = nullptr;
  void (*zero)(const value_info&) = nullptr;  // sets the gradient's storage to 0: one kernel
  int first_contribution = -1;  // the step whose backward first writes or adds to it
};

template <class T, class S>
void zero_storage(const value_info& val) {
  fill(view<T, 1, S>(static_cast<T*>(val.grad_data), shape<1>{val.grad_elements}), T(0));
}

//! The gradient of the elements that view `v` (of value `val`) reads: a
//! dense value's gradient has the value's layout over its span, so any view
//! within it maps to the view of its gradient at the same offset and
//! strides; another value's gradient is a contiguous tensor of its shape,
//! read only through a view that is the value itself.
template <class T, std::size_t R, class S>
view<T, R, S> grad_view(const value_info& val, const view<const T, R, S>& v) {
  T* const g = static_cast<T*>(val.grad_data);
  if (val.key.dense) return view<T, R, S>(g + offset_in(val.key, v), v.extents(), v.strides());
  return view<T, R, S>(g, v.extents());
}

//! The size of the gradient of a value read as view `v` (its span when
//! dense, else its shape, contiguous); its storage comes from the arena.
template <class T, std::size_t R, class S>
void size_grad(value_info& val, const view<const T, R, S>& v) {
  val.grad_elements = val.key.dense ? static_cast<index_t>((val.key.hi - val.key.lo) / sizeof(T)) : v.size();
  val.element_size = sizeof(T);
  val.zero = &zero_storage<T, S>;
}

//! One buffer of a model's memory plan: its bytes (rounded up to
//! arena_alignment), where it lies in the arena, and the times it is live
//! (forward step i at time i, backward step i at time 2n - 1 - i for n
//! steps; a buffer read after the backward lives to time 2n).
struct planned_buffer {
  std::size_t bytes = 0, offset = 0;
  int first = 0, last = 0;
  bool live_with(const planned_buffer& o) const { return first <= o.last && o.first <= last; }
};
inline constexpr std::size_t arena_alignment = 256;

//! Places the buffers: by decreasing size, each at the lowest offset where
//! it overlaps no placed buffer live at the same time. Returns the arena's
//! size in bytes.
inline std::size_t place_buffers(std::vector<planned_buffer>& b) {
  std::vector<std::size_t> order(b.size());
  for (std::size_t i = 0; i != b.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return b[x].bytes > b[y].bytes; });
  std::vector<std::size_t> placed;
  std::size_t size = 0;
  for (const auto i : order) {
    std::size_t at = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (const auto j : placed)
        if (b[j].live_with(b[i]) && at < b[j].offset + b[j].bytes && b[j].offset < at + b[i].bytes)
          at = b[j].offset + b[j].bytes, moved = true;
    }
    b[i].offset = at;
    placed.push_back(i);
    size = std::max(size, at + b[i].bytes);
  }
  return size;
}

//! The most bytes of the buffers live at one time.
inline std::size_t live_peak(const std::vector<planned_buffer>& b) {
  std::size_t peak = 0;
  for (const auto& x : b) {
    std::size_t at = 0;  // the bytes live at x's first time
    for (const auto& y : b)
      if (y.first <= x.first && x.first <= y.last) at += y.bytes;
    peak = std::max(peak, at);
  }
  return peak;
}
}  // namespace detail::model
}  // namespace loom
