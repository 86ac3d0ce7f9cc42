// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/launch.hpp"
#include "loom/memory/memory.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail {

// Copies element i of one view to element i of another (row-major order); the
// body of every strided copy on either executor.
template <class T, std::size_t R, class DS, class SS>
struct strided_copy_fn {
  view<T, R, DS> dst;
  view<const T, R, SS> src;
  LOOM_HD void operator()(index_t i) const { dst.data()[dst.offset_of(i)] = src.data()[src.offset_of(i)]; }
};

// Owns a scratch buffer for one copy; freed on every path, exceptions included.
template <class Space>
struct scratch {
  void* p = nullptr;
  std::size_t bytes = 0;
  stream_ref s;
  scratch(std::size_t b, stream_ref st) : bytes(b), s(st) {
    if constexpr (std::is_same_v<Space, device>)
      p = device_allocate(b, st);
    else
      p = host_allocate(b);
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  ~scratch() {
    if constexpr (std::is_same_v<Space, device>)
      device_free(p, bytes, s);
    else
      host_free(p);
  }
};

template <class T, std::size_t R, class DS, class SS>
void strided_copy(const view<T, R, DS>& dst, const view<const T, R, SS>& src, stream_ref s) {
  static_assert(std::is_same_v<DS, SS>);
  const strided_copy_fn<T, R, DS, SS> f{dst, src};
  if constexpr (std::is_same_v<DS, host>) {
    host_for_each(dst.size(), f);
  } else {
#if LOOM_CUDA_COMPILER
    device_for_each(dst.size(), f, s);
#else
    (void)s;
    throw error("loom: copying a non-contiguous device view (shape " + shape_string(dst.extents()) +
                ") launches a kernel; compile this file with nvcc (a .cu file)");
#endif
  }
}

template <class T, std::size_t R, class S>
view<T, R, S> contiguous_view_of(void* p, const shape<R>& ext) {
  return view<T, R, S>(static_cast<T*>(p), ext, contiguous_strides(ext));
}

//! Copies src into dst (same shape, same element type), in any pair of spaces.
//! Device transfers are enqueued on `s`; when `sync`, returns after they finished.
template <class T, std::size_t R, class DS, class U, class SS>
void copy_views(const view<T, R, DS>& dst, const view<U, R, SS>& src_in, stream_ref s, bool sync) {
  static_assert(!std::is_const_v<T>, "loom: cannot copy into a view of const elements");
  static_assert(std::is_same_v<std::remove_const_t<U>, T>,
                "loom: copy() needs the same element type on both sides; convert with loom::cast<T>(x) in an "
                "expression");
  const view<const T, R, SS> src = src_in;
  if (dst.extents() != src.extents())
    throw shape_error("loom: copy from shape " + shape_string(src.extents()) + " into shape " +
                      shape_string(dst.extents()) + ": the shapes must be equal");
  const index_t n = dst.size();
  if (n == 0) return;
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
  constexpr bool dst_dev = std::is_same_v<DS, device>, src_dev = std::is_same_v<SS, device>;

  if constexpr (std::is_same_v<DS, SS>) {
    if (static_cast<const T*>(dst.data()) == src.data() && dst.strides() == src.strides()) return;
    if (may_overlap(dst, src)) {  // go through a scratch copy so no element is read after being overwritten
      scratch<DS> tmp(bytes, s);
      auto t = contiguous_view_of<T, R, DS>(tmp.p, dst.extents());
      strided_copy(t, src, s);
      strided_copy(dst, view<const T, R, DS>(t), s);
      if (dst_dev && sync) s.synchronize();
      return;
    }
    if constexpr (!dst_dev) {
      if (dst.is_contiguous() && src.is_contiguous())
        std::memcpy(dst.data(), src.data(), bytes);
      else
        strided_copy(dst, src, s);
      return;
    } else {
      if (dst.is_contiguous() && src.is_contiguous())
        LOOM_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, s.get()));
      else
        strided_copy(dst, src, s);
      if (sync) s.synchronize();
      return;
    }
  } else if constexpr (dst_dev && !src_dev) {  // host -> device
    scratch<host> hs(src.is_contiguous() ? 0 : bytes, s);
    const T* from = src.data();
    if (!src.is_contiguous()) {
      strided_copy(contiguous_view_of<T, R, host>(hs.p, src.extents()), src, s);
      from = static_cast<const T*>(hs.p);
    }
    if (dst.is_contiguous()) {
      LOOM_CUDA_CHECK(cudaMemcpyAsync(dst.data(), from, bytes, cudaMemcpyHostToDevice, s.get()));
    } else {
      scratch<device> ds(bytes, s);
      LOOM_CUDA_CHECK(cudaMemcpyAsync(ds.p, from, bytes, cudaMemcpyHostToDevice, s.get()));
      strided_copy(dst, view<const T, R, device>(contiguous_view_of<T, R, device>(ds.p, dst.extents())), s);
    }
    // A copy from pageable memory returns once CUDA has staged the data, so the
    // host scratch may be freed right away without waiting for the transfer.
    if (sync) s.synchronize();
  } else {  // device -> host
    scratch<device> ds(src.is_contiguous() ? 0 : bytes, s);
    const T* from = src.data();
    if (!src.is_contiguous()) {
      strided_copy(contiguous_view_of<T, R, device>(ds.p, src.extents()), src, s);
      from = static_cast<const T*>(ds.p);
    }
    if (dst.is_contiguous()) {
      LOOM_CUDA_CHECK(cudaMemcpyAsync(dst.data(), from, bytes, cudaMemcpyDeviceToHost, s.get()));
      if (sync) s.synchronize();
    } else {
      scratch<host> hs(bytes, s);
      LOOM_CUDA_CHECK(cudaMemcpyAsync(hs.p, from, bytes, cudaMemcpyDeviceToHost, s.get()));
      s.synchronize();  // the host scatter below needs the data
      strided_copy(dst, view<const T, R, host>(contiguous_view_of<T, R, host>(hs.p, dst.extents())), s);
    }
  }
}

// Fills every element of a view with one value (one launch).
template <class T, std::size_t R, class S>
struct fill_fn {
  view<T, R, S> dst;
  T value;
  LOOM_HD void operator()(index_t i) const { dst.data()[dst.offset_of(i)] = value; }
};
}  // namespace loom::detail
