// SPDX-License-Identifier: Apache-2.0
#pragma once

//! Zero-copy exchange with other frameworks through DLPack (1.x, versioned,
//! and the legacy unversioned struct): loom::from_dlpack borrows a producer's
//! tensor as a loom view, loom::to_dlpack lends a loom tensor or view. No
//! element is copied and nothing is synchronized; docs/11_pytorch.md has the
//! rules (ownership, lifetimes, read-only data, streams).

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "loom/core/device.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/interop/dlpack_abi.hpp"
#include "loom/interop/dlpack_stream.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
namespace dlpack {

//! The DLPack data type of a loom dtype (one lane): bool is kDLBool of 8
//! bits, the integers kDLInt/kDLUInt, half and float kDLFloat, bf16 kDLBfloat,
//! the fp8 types kDLFloat8_e4m3fn, kDLFloat8_e5m2 and kDLFloat8_e8m0fnu; the
//! packed 4-bit pairs have no DLPack type and are described as 8-bit
//! kDLOpaqueHandle.
constexpr dl_data_type data_type_of(dtype d) {
  const auto bits = static_cast<std::uint8_t>(dtype_size(d) * 8);
  switch (d) {
    case dtype::bool_:
      return {bool_code, bits, 1};
    case dtype::int8:
    case dtype::int32:
    case dtype::int64:
      return {int_code, bits, 1};
    case dtype::uint8:
      return {uint_code, bits, 1};
    case dtype::bfloat16:
      return {bfloat_code, bits, 1};
    case dtype::float16:
    case dtype::float32:
    case dtype::float64:
      return {float_code, bits, 1};
    case dtype::float8_e4m3fn:
      return {float8_e4m3fn_code, bits, 1};
    case dtype::float8_e5m2:
      return {float8_e5m2_code, bits, 1};
    case dtype::float8_e8m0fnu:
      return {float8_e8m0fnu_code, bits, 1};
    case dtype::float4_e2m1fn_x2:
    case dtype::int4x2:
      return {opaque_handle_code, bits, 1};  // no DLPack type for packed pairs
  }
  return {opaque_handle_code, 0, 0};
}

//! The loom dtype of a DLPack data type, or nothing when loom has no element
//! type for it (vector lanes, complex, int16, ...).
constexpr std::optional<dtype> dtype_from(dl_data_type t) {
  for (dtype d : {dtype::bool_, dtype::int8, dtype::uint8, dtype::int32, dtype::int64, dtype::float16, dtype::bfloat16,
                  dtype::float32, dtype::float64, dtype::float8_e4m3fn, dtype::float8_e5m2, dtype::float8_e8m0fnu}) {
    const dl_data_type u = data_type_of(d);
    if (u.code == t.code && u.bits == t.bits && u.lanes == t.lanes) return d;
  }
  return std::nullopt;
}

//! "code 2 = kDLFloat, 32 bits, 1 lane": a DLPack data type as error messages
//! spell it, with the specification's name for each code up to DLPack 1.1's
//! kDLFloat4_e2m1fn (17).
inline std::string describe(dl_data_type t) {
  static constexpr const char* names[] = {
      "kDLInt",           "kDLUInt",          "kDLFloat",          "kDLOpaqueHandle",       "kDLBfloat",
      "kDLComplex",       "kDLBool",          "kDLFloat8_e3m4",    "kDLFloat8_e4m3",        "kDLFloat8_e4m3b11fnuz",
      "kDLFloat8_e4m3fn", "kDLFloat8_e4m3fnuz", "kDLFloat8_e5m2",  "kDLFloat8_e5m2fnuz",    "kDLFloat8_e8m0fnu",
      "kDLFloat6_e2m3fn", "kDLFloat6_e3m2fn", "kDLFloat4_e2m1fn"};
  std::string s = "code " + std::to_string(t.code);
  if (t.code < std::size(names)) s += std::string(" = ") + names[t.code];
  return s + ", " + std::to_string(t.bits) + " bits, " + std::to_string(t.lanes) + (t.lanes == 1 ? " lane" : " lanes");
}

//! "kDLCUDA (2)": a DLPack device type as error messages spell it ("device type 4" for one loom does not know).
inline std::string describe_device_type(std::int32_t device_type) {
  switch (device_type) {
    case cpu:
      return "kDLCPU (1)";
    case cuda:
      return "kDLCUDA (2)";
    case cuda_host:
      return "kDLCUDAHost (3)";
    case cuda_managed:
      return "kDLCUDAManaged (13)";
    default:
      return "device type " + std::to_string(device_type);
  }
}
}  // namespace dlpack

namespace detail::dlpack {
using namespace loom::dlpack;

// Owns one producer's managed tensor: calls its deleter once, when the last
// loom::dlpack_tensor sharing it goes.
class managed_owner {
 public:
  managed_owner() = default;
  managed_owner(const managed_owner&) = delete;
  managed_owner& operator=(const managed_owner&) = delete;
  ~managed_owner() {
    if (versioned_ && versioned_->deleter) versioned_->deleter(versioned_);
    if (legacy_ && legacy_->deleter) legacy_->deleter(legacy_);
  }
  void adopt(managed_tensor_versioned* m) noexcept { versioned_ = m; }
  void adopt(managed_tensor* m) noexcept { legacy_ = m; }

 private:
  managed_tensor_versioned* versioned_ = nullptr;
  managed_tensor* legacy_ = nullptr;
};

// Takes ownership of `m` at once: from here on its deleter runs exactly once,
// through the returned owner, whatever the import does next.
template <class Managed>
std::shared_ptr<managed_owner> adopt(Managed* m) {
  std::shared_ptr<managed_owner> owner;
  try {
    owner = std::make_shared<managed_owner>();
  } catch (const std::bad_alloc&) {
    if (m->deleter) m->deleter(m);
    throw out_of_memory(sizeof(managed_owner), memory_kind::pageable_host);
  }
  owner->adopt(m);
  return owner;
}

// Whether memory of a DLPack device type can be read through a view of `Space`.
template <class Space>
bool readable_in(std::int32_t device_type) {
  if constexpr (std::is_same_v<Space, host>)
    return device_type == cpu || device_type == cuda_host || device_type == cuda_managed;
  else
    return device_type == cuda || device_type == cuda_managed;
}
inline bool known_device(std::int32_t device_type) {
  return readable_in<host>(device_type) || readable_in<device>(device_type);
}

template <class Error>
[[noreturn]] void fail(const std::string& what, const std::string& why) {
  throw Error("loom: " + what + ": " + why);
}

// Everything from_dlpack checks, in the order it checks it; throws with
// `what` ("from_dlpack<float32, 2, host>") in front of the reason.
template <class T, std::size_t Rank, class Space>
view<T, Rank, Space> checked_view(const dl_tensor& t, std::uint64_t flags, const std::string& what) {
  using E = std::remove_const_t<T>;
  const dl_data_type want = data_type_of(loom::dtype_of<E>);
  if (t.dtype.lanes != 1)
    fail<dtype_error>(
        what, "the DLPack tensor has vector elements (" + describe(t.dtype) + "); loom reads scalar elements (1 lane)");
  if (t.dtype.code != want.code || t.dtype.bits != want.bits) {
    const auto have = dtype_from(t.dtype);
    fail<dtype_error>(what, "the DLPack tensor holds " +
                                (have ? std::string(dtype_name(*have)) + " (" + describe(t.dtype) + ")"
                                      : "an element type loom does not have (" + describe(t.dtype) +
                                            "; loom has bool, int8, uint8, int32, int64, float16, bfloat16, "
                                            "float32, float64, float8_e4m3fn, float8_e5m2, float8_e8m0fnu)") +
                                "; expected " + std::string(dtype_name(loom::dtype_of<E>)) + " (" + describe(want) +
                                ")");
  }
  if (t.ndim != static_cast<std::int32_t>(Rank)) {
    std::string shape_text;
    if (t.ndim >= 0 && (t.ndim == 0 || t.shape)) {
      shape_text = " (shape [";
      for (std::int32_t d = 0; d < t.ndim; ++d) shape_text += (d ? ", " : "") + std::to_string(t.shape[d]);
      shape_text += "])";
    }
    fail<shape_error>(what, "the DLPack tensor has rank " + std::to_string(t.ndim) + shape_text + "; expected rank " +
                                std::to_string(Rank));
  }
  if ((flags & flag_read_only) && !std::is_const_v<T>)
    fail<value_error>(what,
                      "the DLPack tensor is read-only (flag READ_ONLY); import it with a const element type "
                      "(from_dlpack<const T, ...>) or ask the producer for a writable copy");
  if (!known_device(t.device.device_type))
    fail<value_error>(what, "the DLPack tensor is on " + describe_device_type(t.device.device_type) +
                                ", which loom does not read; loom reads kDLCPU (1), kDLCUDAHost (3) and kDLCUDAManaged "
                                "(13) into host views, "
                                "kDLCUDA (2) and kDLCUDAManaged (13) into device views");
  if (!readable_in<Space>(t.device.device_type))
    fail<value_error>(what, "the DLPack tensor is in " + describe_device_type(t.device.device_type) +
                                " memory, which a " + Space::name + " view cannot read; import it with Space = loom::" +
                                (std::is_same_v<Space, host> ? "device" : "host"));
  if constexpr (std::is_same_v<Space, device>) {
    gpu::require_device("from_dlpack of CUDA memory");
    const int current = gpu::current_device();
    if (t.device.device_id != current)
      fail<value_error>(what,
                        "the DLPack tensor is on CUDA device " + std::to_string(t.device.device_id) +
                            ", but the current device is " + std::to_string(current) + "; make device " +
                            std::to_string(t.device.device_id) +
                            " current first (loom::gpu::set_device, or a stream_guard on a stream of that device)");
  }
  if (Rank != 0 && !t.shape) fail<value_error>(what, "the DLPack tensor has a null shape pointer");
  shape<Rank> extents{}, strides{};
  for (std::size_t d = 0; d != Rank; ++d) extents[d] = t.shape[d];
  check_shape(extents);
  if (t.strides)
    for (std::size_t d = 0; d != Rank; ++d) strides[d] = t.strides[d];
  else
    strides = contiguous_strides(extents);
  char* first = t.data ? static_cast<char*>(t.data) + t.byte_offset : nullptr;
  if (shape_size(extents) != 0) {
    if (!t.data)
      fail<value_error>(
          what, "the DLPack tensor has a null data pointer and " + std::to_string(shape_size(extents)) + " elements");
    if (reinterpret_cast<std::uintptr_t>(first) % alignof(E) != 0)
      fail<value_error>(what, "the first element (data + byte_offset " + std::to_string(t.byte_offset) +
                                  ") is not aligned to the " + std::to_string(alignof(E)) + " bytes of " +
                                  std::string(dtype_name(loom::dtype_of<E>)));
  }
  return view<T, Rank, Space>(reinterpret_cast<T*>(first), extents, strides);
}

// Only the import makes a dlpack_tensor that holds a producer's tensor.
class import_key {
  explicit import_key() = default;
  template <class U, std::size_t R, class S, class Managed>
  friend auto import_tensor(Managed* m, std::string_view name);
};

template <class T, std::size_t Rank, class Space>
std::string import_name() {
  return std::string("from_dlpack<") + (std::is_const_v<T> ? "const " : "") +
         std::string(dtype_name(loom::dtype_of<T>)) + ", " + std::to_string(Rank) + ", " + Space::name + ">";
}
}  // namespace detail::dlpack

//! A tensor borrowed from another framework through DLPack: a loom view of
//! the producer's memory (no copy) that shares ownership of the producer's
//! managed tensor. Copies share it; the producer's deleter is called exactly
//! once, when the last copy goes (or reset() is called on it). Made by
//! loom::from_dlpack. `T` may be const (required for read-only tensors).
//! Example: `auto x = loom::from_dlpack<float, 2, loom::host>(m); y = x.view() * 2;`
template <class T, std::size_t Rank, memory_space Space>
class dlpack_tensor {
 public:
  using value_type = std::remove_const_t<T>;
  using element_type = T;
  using space = Space;
  static constexpr std::size_t rank = Rank;
  using view_type = loom::view<T, Rank, Space>;

  //! Holds nothing (an empty view, no producer).
  dlpack_tensor() = default;

  //! The borrowed elements: pointer (byte offset applied), extents, strides in elements.
  [[nodiscard]] view_type view() const noexcept { return view_; }
  operator view_type() const noexcept { return view_; }
  [[nodiscard]] T* data() const noexcept { return view_.data(); }
  [[nodiscard]] const shape<Rank>& extents() const noexcept { return view_.extents(); }
  [[nodiscard]] const shape<Rank>& strides() const noexcept { return view_.strides(); }
  [[nodiscard]] index_t size() const noexcept { return owner_ ? view_.size() : 0; }
  //! The producer's flags (dlpack::flag_read_only, dlpack::flag_is_copied); 0 for a legacy tensor.
  [[nodiscard]] std::uint64_t flags() const noexcept { return flags_; }
  [[nodiscard]] bool read_only() const noexcept { return (flags_ & dlpack::flag_read_only) != 0; }
  //! Where the producer says the data is (device type and id).
  [[nodiscard]] dlpack::dl_device device() const noexcept { return device_; }
  //! True while this object shares the producer's tensor.
  [[nodiscard]] bool holds_tensor() const noexcept { return owner_ != nullptr; }
  //! Drops this copy's share now (the deleter runs if it was the last one).
  void reset() noexcept { *this = dlpack_tensor(); }

  //! Made by loom::from_dlpack only (the key is not constructible elsewhere).
  dlpack_tensor(detail::dlpack::import_key, std::shared_ptr<const void> owner, view_type v, std::uint64_t flags,
                dlpack::dl_device device)
      : owner_(std::move(owner)), view_(v), flags_(flags), device_(device) {}

 private:
  std::shared_ptr<const void> owner_;
  view_type view_;
  std::uint64_t flags_ = 0;
  dlpack::dl_device device_{};
};

namespace detail::dlpack {
template <class U, std::size_t R, class S, class Managed>
auto import_tensor(Managed* m, std::string_view name) {
  const std::string what = import_name<U, R, S>() + (name.empty() ? "" : " of " + std::string(name));
  if (!m) throw value_error("loom: " + what + ": got a null pointer");
  auto owner = adopt(m);  // from here the deleter runs once, also when a check throws
  std::uint64_t flags = 0;
  if constexpr (std::is_same_v<Managed, managed_tensor_versioned>) {
    if (m->version.major != major_version)
      throw value_error("loom: " + what + ": the DLPack tensor has major version " + std::to_string(m->version.major) +
                        "." + std::to_string(m->version.minor) + "; loom reads major version " +
                        std::to_string(major_version) + " (the tensor's deleter has been called)");
    flags = m->flags;
  }
  const auto v = checked_view<U, R, S>(m->dl_tensor, flags, what);
  return dlpack_tensor<U, R, S>(import_key{}, std::move(owner), v, flags, m->dl_tensor.device);
}
}  // namespace detail::dlpack

//! Borrows a producer's DLPack tensor (1.x, versioned) as a loom view, with no
//! copy and no synchronization. `from_dlpack` takes ownership of `m` at once:
//! on success the returned object calls its deleter exactly once, when the
//! last copy goes; when a check fails the deleter has been called before the
//! exception leaves (so a Python binding marks the capsule used before
//! calling). Checks, each with a `loom:` message that names the problem:
//! the major version (value_error), lanes and element type against `T`
//! exactly (dtype_error), the rank against `Rank` (shape_error), a read-only
//! tensor imported with non-const `T` (value_error), the device type against
//! `Space` (value_error: kDLCPU, kDLCUDAHost and kDLCUDAManaged read as host,
//! kDLCUDA and kDLCUDAManaged as device), for a device view the device id
//! against the current device (value_error), the shape, a null data pointer
//! and the alignment of data + byte_offset (value_error). Null strides mean
//! compact row-major. O(rank), no kernel.
//! `name` (optional) says which argument the tensor is, and every message
//! names it: `from_dlpack<const float, 1, host>(m, "input w")` throws
//! "loom: from_dlpack<const float32, 1, host> of input w: ...".
//! Example: `auto x = loom::from_dlpack<const float, 2, loom::device>(m);`
template <class T, std::size_t Rank, memory_space Space>
[[nodiscard]] dlpack_tensor<T, Rank, Space> from_dlpack(dlpack::managed_tensor_versioned* m,
                                                        std::string_view name = {}) {
  return detail::dlpack::import_tensor<T, Rank, Space>(m, name);
}

//! The same for the legacy, unversioned DLManagedTensor (no flags: always writable).
template <class T, std::size_t Rank, memory_space Space>
[[nodiscard]] dlpack_tensor<T, Rank, Space> from_dlpack(dlpack::managed_tensor* m, std::string_view name = {}) {
  return detail::dlpack::import_tensor<T, Rank, Space>(m, name);
}

namespace detail::dlpack {
// What an export allocates: the managed struct, the shape and strides it
// points to, and what keeps the data alive; the deleter deletes it all.
template <class Managed, std::size_t Rank, class Keep>
struct export_context {
  Managed managed{};
  std::array<std::int64_t, Rank> shape{};
  std::array<std::int64_t, Rank> strides{};
  Keep keep;
  static void release(Managed* m) noexcept { delete static_cast<export_context*>(m->manager_ctx); }
};

// The DLPack device of a view's memory: the host is kDLCPU; device memory is
// asked of the driver (kDLCUDA or kDLCUDAManaged, and its device).
template <class T, std::size_t Rank, class Space>
dl_device device_of(const view<T, Rank, Space>& v) {
  if constexpr (std::is_same_v<Space, host>) {
    return {cpu, 0};
  } else {
    if (!v.data()) return {cuda, gpu::current_device()};
    cudaPointerAttributes a{};
    LOOM_CUDA_CHECK(cudaPointerGetAttributes(&a, v.data()));
    return {a.type == cudaMemoryTypeManaged ? cuda_managed : cuda, a.device};
  }
}

template <class Managed, class T, std::size_t Rank, class Space, class Keep>
Managed* export_view(const view<T, Rank, Space>& v, Keep&& keep) {
  static_assert(!(is_tensor<std::decay_t<Keep>>::value && std::is_lvalue_reference_v<Keep>),
                "loom: to_dlpack(view, keep_alive) with a named tensor would copy its elements; pass "
                "std::move(t) to keep t's memory alive");
  if (v.size() != 0 && !v.data())
    throw value_error("loom: to_dlpack of a view or tensor without data (default-constructed or moved from)");
  const dl_device where = device_of(v);
  using context = export_context<Managed, Rank, std::decay_t<Keep>>;
  auto* c = new (std::nothrow) context{Managed{}, {}, {}, std::forward<Keep>(keep)};
  if (!c) throw out_of_memory(sizeof(context), memory_kind::pageable_host);
  for (std::size_t d = 0; d != Rank; ++d) {
    c->shape[d] = v.extent(d);
    c->strides[d] = v.stride(d);
  }
  Managed& m = c->managed;
  m.dl_tensor = {const_cast<std::remove_const_t<T>*>(v.data()),
                 where,
                 static_cast<std::int32_t>(Rank),
                 data_type_of(loom::dtype_of<T>),
                 c->shape.data(),
                 c->strides.data(),
                 0};
  m.manager_ctx = c;
  m.deleter = &context::release;
  if constexpr (std::is_same_v<Managed, managed_tensor_versioned>) {
    m.version = {major_version, minor_version};
    m.flags = std::is_const_v<T> ? flag_read_only : 0;
  } else {
    static_assert(!std::is_const_v<T>,
                  "loom: the legacy DLManagedTensor cannot mark data read-only; export a view of const elements "
                  "with loom::to_dlpack (versioned, flag READ_ONLY)");
  }
  return &m;
}

template <class X>
inline constexpr bool is_dlpack_tensor = false;
template <class T, std::size_t Rank, class Space>
inline constexpr bool is_dlpack_tensor<dlpack_tensor<T, Rank, Space>> = true;

// The three forms of to_dlpack and to_dlpack_legacy: a tensor moved in, a
// borrowed tensor (shared), a view with what keeps its memory alive.
template <class Managed, class X, class... Keep>
Managed* export_as(X&& x, Keep&&... keep_alive) {
  using D = std::remove_cvref_t<X>;
  if constexpr (is_tensor<D>::value) {
    static_assert(
        sizeof...(Keep) == 0 && std::is_rvalue_reference_v<X&&> && !std::is_const_v<std::remove_reference_t<X>>,
        "loom: to_dlpack(t) of a named tensor: move it in (to_dlpack(std::move(t))) to hand it to the "
        "consumer, or export a view with what keeps its memory alive (to_dlpack(t.view(), keep_alive))");
    if (!x.has_storage())
      throw value_error("loom: to_dlpack of a view or tensor without data (default-constructed or moved from)");
    const auto v = x.view();
    return export_view<Managed>(v, std::move(x));
  } else if constexpr (is_dlpack_tensor<D>) {
    static_assert(sizeof...(Keep) == 0, "loom: to_dlpack(t) of a dlpack_tensor keeps t's producer alive by itself");
    return export_view<Managed>(x.view(), x);
  } else {
    static_assert(sizeof...(Keep) == 1,
                  "loom: to_dlpack(view, keep_alive): say what keeps the view's memory alive (a tensor moved in, a "
                  "shared_ptr, a dlpack_tensor), or nullptr when the caller does");
    return export_view<Managed>(x, std::forward<Keep>(keep_alive)...);
  }
}
}  // namespace detail::dlpack

//! Lends loom data to another framework as a DLPack 1.x managed tensor,
//! without copying: shape and strides in elements (owned by the managed
//! tensor), byte_offset 0, device kDLCPU for host data, kDLCUDA or
//! kDLCUDAManaged with the memory's device id for device data. The consumer
//! calls its deleter once when done. What keeps the data alive until then:
//! - `to_dlpack(std::move(t))`, a tensor: moved into the managed tensor and
//!   freed by the deleter (device memory in its stream's order). A named
//!   tensor without std::move does not compile: the call must say that
//!   ownership moves.
//! - `to_dlpack(x)`, a dlpack_tensor (a borrowed tensor lent onward): the
//!   managed tensor shares the original producer's, whose deleter runs when
//!   both are done.
//! - `to_dlpack(v, keep_alive)`, a view: `keep_alive` is moved (an lvalue:
//!   copied) into the managed tensor after the view is read, and destroyed by
//!   the deleter: std::move of the tensor that owns the memory, a shared_ptr,
//!   a dlpack_tensor; or `nullptr` to state that the caller keeps the memory
//!   alive until the deleter runs (as for the view itself). A named tensor as
//!   keep_alive does not compile (it would copy its elements).
//! Views of const elements are flagged READ_ONLY. O(rank), no kernel, no
//! synchronization (see dlpack::make_ready_for for device data).
//! Example: `auto* m = loom::to_dlpack(t.t(), std::move(t));  // the transpose, owning t`
template <class X, class... Keep>
  requires(tensor_like<X> || detail::dlpack::is_dlpack_tensor<std::remove_cvref_t<X>>)
[[nodiscard]] dlpack::managed_tensor_versioned* to_dlpack(X&& x, Keep&&... keep_alive) {
  return detail::dlpack::export_as<dlpack::managed_tensor_versioned>(std::forward<X>(x),
                                                                     std::forward<Keep>(keep_alive)...);
}

//! to_dlpack for consumers that only take the legacy, unversioned
//! DLManagedTensor (capsule name "dltensor"): the same forms and ownership
//! rules; it has no flags, so views of const elements do not compile.
template <class X, class... Keep>
  requires(tensor_like<X> || detail::dlpack::is_dlpack_tensor<std::remove_cvref_t<X>>)
[[nodiscard]] dlpack::managed_tensor* to_dlpack_legacy(X&& x, Keep&&... keep_alive) {
  return detail::dlpack::export_as<dlpack::managed_tensor>(std::forward<X>(x), std::forward<Keep>(keep_alive)...);
}
}  // namespace loom
