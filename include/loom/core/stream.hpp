// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "loom/core/device.hpp"
#include "loom/core/error.hpp"
#include "loom/core/index_fault.hpp"

namespace loom {

//! A non-owning handle to a CUDA stream and the device it belongs to. Cheap to
//! copy; what device operations take. The default is the device's legacy
//! default stream.
class stream_ref {
 public:
  stream_ref() = default;
  stream_ref(cudaStream_t s, int device) : stream_(s), device_(device) {}
  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  //! Blocks the calling thread until all work queued on this stream is
  //! done; then throws the index_error of an out-of-range index a kernel
  //! recorded, if any (loom::check_index_errors).
  void synchronize() const {
    gpu::require_device("stream synchronize");
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    detail::raise_index_fault();
  }
  friend bool operator==(const stream_ref&, const stream_ref&) = default;

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

//! An owning CUDA stream (non-blocking with respect to the default stream),
//! created on the current device and destroyed with the object. Move-only.
//! Example: `loom::stream s; { loom::stream_guard on(s); y = relu(x); } s.synchronize();`
class stream {
 public:
  stream() {
    device_ = gpu::current_device();
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  stream(stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)), device_(o.device_) {}
  stream& operator=(stream&& o) noexcept {
    if (this != &o) {
      reset();
      stream_ = std::exchange(o.stream_, nullptr);
      device_ = o.device_;
    }
    return *this;
  }
  ~stream() { reset(); }

  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  operator stream_ref() const noexcept { return {stream_, device_}; }
  void synchronize() const { stream_ref(*this).synchronize(); }

 private:
  void reset() noexcept {
    // Destroying a stream with queued work is allowed: CUDA finishes the work first.
    if (stream_) LOOM_CUDA_RELEASE(cudaStreamDestroy(stream_));
    stream_ = nullptr;
  }
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

namespace detail {
struct current_stream_state {
  bool set = false;
  stream_ref s;
};
inline current_stream_state& current_stream_slot() {
  thread_local current_stream_state st;
  return st;
}
}  // namespace detail

//! The calling thread's current stream: the one a stream_guard installed, else
//! the current device's default stream. Device operations without an explicit
//! stream are enqueued here.
inline stream_ref current_stream() {
  auto& st = detail::current_stream_slot();
  if (st.set) return st.s;
  return stream_ref(nullptr, gpu::current_device());
}

//! Makes a stream (and its device) current for the calling thread for the
//! guard's lifetime, then restores the previous stream and device. Like a
//! scoped stream context in PyTorch.
class stream_guard {
 public:
  explicit stream_guard(stream_ref s) : prev_(detail::current_stream_slot()) {
    prev_device_ = gpu::current_device();
    if (s.device() != prev_device_) LOOM_CUDA_CHECK(cudaSetDevice(s.device()));
    detail::current_stream_slot() = {true, s};
  }
  stream_guard(const stream_guard&) = delete;
  stream_guard& operator=(const stream_guard&) = delete;
  ~stream_guard() {
    detail::current_stream_slot() = prev_;
    LOOM_CUDA_RELEASE(cudaSetDevice(prev_device_));
  }

 private:
  detail::current_stream_state prev_;
  int prev_device_ = 0;
};

//! An owning CUDA event, for ordering streams and timing. Move-only.
//! Example: `loom::event a, b; a.record(s); ...; b.record(s); float ms = elapsed_ms(a, b);`
class event {
 public:
  //! `timing`: whether the event records time (disable for cheap ordering-only events).
  explicit event(bool timing = true) {
    gpu::require_device("loom::event");
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&ev_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  event(event&& o) noexcept : ev_(std::exchange(o.ev_, nullptr)) {}
  event& operator=(event&& o) noexcept {
    if (this != &o) {
      if (ev_) LOOM_CUDA_RELEASE(cudaEventDestroy(ev_));
      ev_ = std::exchange(o.ev_, nullptr);
    }
    return *this;
  }
  ~event() {
    if (ev_) LOOM_CUDA_RELEASE(cudaEventDestroy(ev_));
  }
  //! Records the event on `s` (default: the current stream).
  void record(stream_ref s = current_stream()) { LOOM_CUDA_CHECK(cudaEventRecord(ev_, s.get())); }
  //! Makes `s` wait for the work recorded before this event.
  void wait_on(stream_ref s) const { LOOM_CUDA_CHECK(cudaStreamWaitEvent(s.get(), ev_, 0)); }
  //! Blocks the calling thread until the recorded work is done; then throws
  //! the index_error of an out-of-range index a kernel recorded, if any.
  void synchronize() const {
    LOOM_CUDA_CHECK(cudaEventSynchronize(ev_));
    detail::raise_index_fault();
  }
  //! True when the recorded work is done (never blocks).
  [[nodiscard]] bool query() const {
    const cudaError_t e = cudaEventQuery(ev_);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    LOOM_CUDA_CHECK(e);
    return true;
  }
  [[nodiscard]] cudaEvent_t get() const noexcept { return ev_; }

 private:
  cudaEvent_t ev_ = nullptr;
};

//! Milliseconds between two recorded, completed events.
inline float elapsed_ms(const event& start, const event& stop) {
  float ms = 0;
  LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

//! Blocks until the current stream's work is done.
inline void synchronize() { current_stream().synchronize(); }
}  // namespace loom
