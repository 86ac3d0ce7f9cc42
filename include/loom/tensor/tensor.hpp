// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/launch.hpp"
#include "loom/memory/memory.hpp"
#include "loom/tensor/copy.hpp"
#include "loom/tensor/view.hpp"

namespace loom {

//! How a host tensor's memory is allocated.
enum class host_memory {
  pageable,  //!< ordinary aligned heap memory (works without a GPU)
  pinned     //!< page-locked (cudaMallocHost): truly asynchronous transfers; needs a GPU driver
};

namespace detail {
// Owning storage of one tensor in one space; move-only; frees on destruction.
template <class Space>
class buffer;

template <>
class buffer<device> {
 public:
  buffer() = default;
  buffer(std::size_t bytes, stream_ref s) : p_(device_allocate(bytes, s)), bytes_(bytes), s_(s) {}
  buffer(buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), s_(o.s_) {}
  buffer& operator=(buffer&& o) noexcept {
    if (this != &o) {
      device_free(p_, bytes_, s_);
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      s_ = o.s_;
    }
    return *this;
  }
  ~buffer() { device_free(p_, bytes_, s_); }
  void* get() const noexcept { return p_; }
  stream_ref stream() const noexcept { return s_; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
  stream_ref s_;
};

template <>
class buffer<host> {
 public:
  buffer() = default;
  buffer(std::size_t bytes, host_memory kind)
      : p_(kind == host_memory::pinned ? pinned_allocate(bytes) : host_allocate(bytes)), kind_(kind) {}
  buffer(buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), kind_(o.kind_) {}
  buffer& operator=(buffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      kind_ = o.kind_;
    }
    return *this;
  }
  ~buffer() { release(); }
  void* get() const noexcept { return p_; }
  host_memory kind() const noexcept { return kind_; }

 private:
  void release() noexcept {
    if (kind_ == host_memory::pinned)
      pinned_free(p_);
    else
      host_free(p_);
    p_ = nullptr;
  }
  void* p_ = nullptr;
  host_memory kind_ = host_memory::pageable;
};

template <std::size_t Rank>
std::size_t checked_bytes(const shape<Rank>& s, std::size_t elem) {
  check_shape(s);
  const auto n = static_cast<std::size_t>(shape_size(s));
  if (n != 0 && n > static_cast<std::size_t>(-1) / elem)
    throw shape_error("loom: shape " + shape_string(s) + " needs more bytes than fit in size_t");
  return n * elem;
}
}  // namespace detail

//! An owning, contiguous (row-major) tensor of `T` with compile-time rank and
//! run-time extents, in memory space `Space` (`loom::device` or `loom::host`).
//! Device tensors are allocated from CUDA's stream-ordered pool on the current
//! stream (or a given one) and freed in that stream's order. Copying a tensor
//! copies its elements (one transfer); moving it moves ownership. Assigning a
//! tensor to another copies the elements and requires equal shapes. Slicing
//! methods return non-owning views (the tensor must outlive them).
//! Example: `loom::tensor<float, 2, loom::host> h({3, 4}); h(1, 2) = 5.f;`
template <class T, std::size_t Rank, memory_space Space = device>
class tensor {
  static_assert(!std::is_const_v<T>, "loom: a tensor owns its elements; use a view<const T, ...> for read-only access");

 public:
  using value_type = T;
  using space = Space;
  static constexpr std::size_t rank = Rank;
  using view_type = loom::view<T, Rank, Space>;
  using const_view_type = loom::view<const T, Rank, Space>;

  //! A tensor that holds no data (has_storage() is false); give it some by
  //! move-assignment. Its extents are all 0 (rank 0: one element, not readable).
  tensor() = default;

  //! Uninitialized device tensor allocated on the current stream.
  explicit tensor(const shape<Rank>& s)
    requires std::is_same_v<Space, device>
      : tensor(s, detail::checked_bytes(s, sizeof(T)) ? (gpu::require_device("allocating a device tensor"), current_stream())
                                                    : stream_ref{}) {}

  //! Uninitialized device tensor allocated (and later freed) on stream `st`.
  tensor(const shape<Rank>& s, stream_ref st)
    requires std::is_same_v<Space, device>
      : buf_(detail::checked_bytes(s, sizeof(T)), st), view_(static_cast<T*>(buf_.get()), s), has_storage_(true) {}

  //! Uninitialized host tensor, pageable by default or pinned.
  explicit tensor(const shape<Rank>& s, host_memory kind = host_memory::pageable)
    requires std::is_same_v<Space, host>
      : buf_(detail::checked_bytes(s, sizeof(T)), kind), view_(static_cast<T*>(buf_.get()), s), has_storage_(true) {}

  //! Host tensor holding `values` in row-major order (their count must match the shape).
  tensor(const shape<Rank>& s, std::initializer_list<T> values)
    requires std::is_same_v<Space, host>
      : tensor(s) {
    if (static_cast<index_t>(values.size()) != size())
      throw shape_error("loom: " + std::to_string(values.size()) + " values given for shape " + shape_string(s) +
                        " (" + std::to_string(size()) + " elements)");
    std::copy(values.begin(), values.end(), data());
  }

  //! Deep copy: a new tensor of the same shape (same stream / host memory kind).
  tensor(const tensor& o) : tensor(o.clone_storage()) {
    detail::copy_views(view(), o.view(), copy_stream(), false);
  }
  tensor(tensor&& o) noexcept
      : buf_(std::move(o.buf_)), view_(o.view_), has_storage_(std::exchange(o.has_storage_, false)) {
    o.view_ = view_type{};
  }

  //! Copies the elements of `o` into this tensor; the shapes must be equal
  //! (shape_error otherwise, and this tensor is unchanged).
  tensor& operator=(const tensor& o) {
    if (this != &o) detail::copy_views(view(), o.view(), copy_stream(), false);
    return *this;
  }
  //! Takes over `o`'s storage; the old storage is freed.
  tensor& operator=(tensor&& o) noexcept {
    if (this != &o) {
      buf_ = std::move(o.buf_);
      view_ = o.view_;
      o.view_ = view_type{};
      has_storage_ = std::exchange(o.has_storage_, false);
    }
    return *this;
  }

  //! Evaluates an expression (or a scalar, or a tensor of another type or
  //! space-equal view) into this tensor's elements: one launch, no temporary;
  //! see loom::assign. The shape stays; the expression must broadcast to it.
  //! Example: `y = gelu(x * w + b);`
  template <class E>
    requires(!std::is_same_v<std::remove_cvref_t<E>, tensor>)
  tensor& operator=(const E& e) {
    assign(view(), e);
    return *this;
  }
  //! In-place arithmetic, one launch each, with the aliasing rules of
  //! loom::assign; see view::operator+=. Example: `x += y * 2;`
  template <class E>
  tensor& operator+=(const E& e) {
    view() += e;
    return *this;
  }
  //! `x -= e`; see operator+=.
  template <class E>
  tensor& operator-=(const E& e) {
    view() -= e;
    return *this;
  }
  //! `x *= e`; see operator+=.
  template <class E>
  tensor& operator*=(const E& e) {
    view() *= e;
    return *this;
  }
  //! `x /= e`; see operator+=.
  template <class E>
  tensor& operator/=(const E& e) {
    view() /= e;
    return *this;
  }
  //! `x %= e`; see operator+=.
  template <class E>
  tensor& operator%=(const E& e) {
    view() %= e;
    return *this;
  }

  view_type view() { return view_; }
  const_view_type view() const { return view_; }
  operator view_type() { return view_; }
  operator const_view_type() const { return view_; }

  T* data() { return view_.data(); }
  const T* data() const { return view_.data(); }
  const shape<Rank>& extents() const { return view_.extents(); }
  const shape<Rank>& strides() const { return view_.strides(); }
  index_t extent(std::size_t d) const { return view_.extent(d); }
  index_t size() const { return data() ? view_.size() : 0; }
  bool empty() const { return size() == 0; }
  //! True for a tensor made with a shape, even one of 0 elements (a valid
  //! empty array); false for a default-constructed or moved-from tensor,
  //! which holds no data. O(1).
  bool has_storage() const noexcept { return has_storage_; }
  //! The single element as a host value; see view::item (device data: one
  //! copy to the host and a wait for the current stream). Throws shape_error
  //! unless size() == 1. Example: `float total = loom::sum(x).item();`
  value_type item() const { return view_.item(); }
  //! Always true: tensors are row-major contiguous.
  bool is_contiguous() const { return true; }
  //! Bytes of element storage.
  std::size_t nbytes() const { return static_cast<std::size_t>(size()) * sizeof(T); }

  //! The stream this device tensor was allocated on (its memory is freed there).
  stream_ref stream() const
    requires std::is_same_v<Space, device>
  {
    return buf_.stream();
  }
  //! Whether this host tensor's memory is page-locked.
  bool is_pinned() const
    requires std::is_same_v<Space, host>
  {
    return buf_.kind() == host_memory::pinned;
  }

  //! Host element access by coordinates (unchecked; `at` checks).
  template <class... I>
    requires(std::is_same_v<Space, host> && sizeof...(I) == Rank && (std::is_integral_v<I> && ...))
  T& operator()(I... i) {
    return view_(i...);
  }
  template <class... I>
    requires(std::is_same_v<Space, host> && sizeof...(I) == Rank && (std::is_integral_v<I> && ...))
  const T& operator()(I... i) const {
    return view_(i...);
  }
  template <class... I>
    requires(std::is_same_v<Space, host> && sizeof...(I) == Rank)
  T& at(I... i) {
    return view_.at(i...);
  }

  //! Views over this tensor's memory; see the same names on `loom::view`.
  template <class... A>
  auto slice(A... a) {
    return view_.slice(a...);
  }
  template <class... A>
  auto slice(A... a) const {
    return const_view_type(view_).slice(a...);
  }
  //! A const tensor gives views of const elements.
  auto permute(const std::array<int, Rank>& p) { return view_.permute(p); }
  auto permute(const std::array<int, Rank>& p) const { return const_view_type(view_).permute(p); }
  auto transpose(int a, int b) { return view_.transpose(a, b); }
  auto transpose(int a, int b) const { return const_view_type(view_).transpose(a, b); }
  auto t()
    requires(Rank == 2)
  {
    return view_.t();
  }
  auto t() const
    requires(Rank == 2)
  {
    return const_view_type(view_).t();
  }
  template <std::size_t N>
  auto reshape(const shape<N>& s) {
    return view_.reshape(s);
  }
  template <std::size_t N>
  auto reshape(const shape<N>& s) const {
    return const_view_type(view_).reshape(s);
  }
  template <std::size_t N>
  auto broadcast_to(const shape<N>& s) {
    return view_.broadcast_to(s);
  }
  template <std::size_t N>
  auto broadcast_to(const shape<N>& s) const {
    return const_view_type(view_).broadcast_to(s);
  }
  auto squeeze(int axis)
    requires(Rank > 0)
  {
    return view_.squeeze(axis);
  }
  auto squeeze(int axis) const
    requires(Rank > 0)
  {
    return const_view_type(view_).squeeze(axis);
  }
  auto unsqueeze(int axis) { return view_.unsqueeze(axis); }
  auto unsqueeze(int axis) const { return const_view_type(view_).unsqueeze(axis); }

 private:
  tensor clone_storage() const {
    if (!has_storage_) return tensor();  // default-constructed or moved from: nothing to copy
    if constexpr (std::is_same_v<Space, device>)
      return tensor(extents(), buf_.stream());
    else
      return tensor(extents(), buf_.kind());
  }
  stream_ref copy_stream() const {
    if constexpr (std::is_same_v<Space, device>)
      return data() ? current_stream() : stream_ref{};
    else
      return {};
  }

  detail::buffer<Space> buf_;
  view_type view_;
  bool has_storage_ = false;
};

//! Host tensor alias: `host_tensor<float, 2>`.
template <class T, std::size_t Rank>
using host_tensor = tensor<T, Rank, host>;
//! Device tensor alias: `device_tensor<bf16, 2>`.
template <class T, std::size_t Rank>
using device_tensor = tensor<T, Rank, device>;

namespace detail {
template <class X>
struct is_tensor : std::false_type {};
template <class T, std::size_t R, class S>
struct is_tensor<tensor<T, R, S>> : std::true_type {};

template <class X>
auto as_view(X&& x) {
  if constexpr (is_tensor<std::remove_cvref_t<X>>::value)
    return x.view();
  else
    return x;
}
}  // namespace detail

//! Satisfied by tensors and views: things that own or point at elements.
template <class X>
concept tensor_like = any_view<X> || detail::is_tensor<std::remove_cvref_t<X>>::value;

//! Copies `src` into `dst` (equal shapes and element types; any spaces, any
//! strides) and returns when the data is in place. Device work runs on the
//! current stream, which this call synchronizes. One transfer when both are
//! contiguous; otherwise at most one gather/scatter kernel per side.
//! Example: `loom::copy(host_view, device_tensor);`
template <tensor_like Dst, tensor_like Src>
void copy(Src&& src, Dst&& dst) {
  auto d = detail::as_view(dst);
  auto s = detail::as_view(src);
  constexpr bool any_dev = std::is_same_v<typename decltype(d)::space, device> ||
                           std::is_same_v<typename decltype(s)::space, device>;
  stream_ref st{};
  if constexpr (any_dev)
    if (d.size() != 0) st = current_stream();
  detail::copy_views(d, s, st, any_dev);
}

//! Enqueues the copy of `src` into `dst` on stream `st` and returns without
//! waiting (asynchronous for pinned or device memory). Exceptions, as CUDA
//! itself behaves: a copy into pageable host memory returns when done, and a
//! copy into a non-contiguous host view waits for the stream, since the host
//! must scatter the data.
template <tensor_like Dst, tensor_like Src>
void copy_async(Src&& src, Dst&& dst, stream_ref st) {
  detail::copy_views(detail::as_view(dst), detail::as_view(src), st, false);
}

//! Sets every element of `x` to `value`: one loop on the host, one kernel on
//! the device (the device form needs nvcc).
//! Example: `loom::fill(x, 1.0f);`
template <tensor_like X>
void fill(X&& x, std::type_identity_t<typename decltype(detail::as_view(x))::value_type> value) {
  auto v = detail::as_view(x);
  using V = decltype(v);
  detail::require_cuda_compiler_for<typename V::space>();
  const detail::fill_fn<typename V::element_type, V::rank, typename V::space> f{v, value};
  if constexpr (std::is_same_v<typename V::space, host>) {
    detail::host_for_each(v.size(), f);
  } else {
#if LOOM_CUDA_COMPILER
    if (v.size()) detail::device_for_each(v.size(), f, current_stream());
#endif
  }
}

//! An uninitialized tensor with the extents of `x`, in the same space.
template <tensor_like X>
auto empty_like(const X& x) {
  auto v = detail::as_view(x);
  using V = decltype(v);
  return tensor<typename V::value_type, V::rank, typename V::space>(v.extents());
}

//! A tensor of zeros (all-zero bytes; no kernel: a memset).
template <class T, std::size_t Rank, memory_space Space = device>
tensor<T, Rank, Space> zeros(const shape<Rank>& s) {
  tensor<T, Rank, Space> t(s);
  if (t.nbytes() == 0) return t;
  if constexpr (std::is_same_v<Space, device>)
    LOOM_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, t.nbytes(), t.stream().get()));
  else
    std::memset(static_cast<void*>(t.data()), 0, t.nbytes());
  return t;
}

//! A tensor with every element equal to `value` (one fill launch).
template <class T, std::size_t Rank, memory_space Space = device>
tensor<T, Rank, Space> full(const shape<Rank>& s, T value) {
  tensor<T, Rank, Space> t(s);
  fill(t, value);
  return t;
}

//! A contiguous copy of any view or tensor, in the same space.
template <tensor_like X>
auto contiguous(const X& x) {
  auto t = empty_like(x);
  auto v = detail::as_view(x);
  detail::copy_views(t.view(), v, std::is_same_v<typename decltype(v)::space, device> && v.size() ? current_stream()
                                                                                                 : stream_ref{},
                     false);
  return t;
}

//! Copies a device tensor or view to a new host tensor and returns when the
//! data is there (synchronizes the current stream).
//! Example: `auto h = loom::to_host(y);`
template <tensor_like X>
auto to_host(const X& x, host_memory kind = host_memory::pageable) {
  auto v = detail::as_view(x);
  using V = decltype(v);
  tensor<typename V::value_type, V::rank, host> h(v.extents(), kind);
  copy(v, h);
  return h;
}

//! Copies a host (or device) tensor or view to a new device tensor allocated on
//! the current stream; the copy is enqueued there.
//! Example: `auto d = loom::to_device(loom::load_npy<float, 2>("w.npy"));`
template <tensor_like X>
auto to_device(const X& x) {
  auto v = detail::as_view(x);
  using V = decltype(v);
  tensor<typename V::value_type, V::rank, device> d(v.extents());
  detail::copy_views(d.view(), v, v.size() ? current_stream() : stream_ref{}, false);
  return d;
}
}  // namespace loom
