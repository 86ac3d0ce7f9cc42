// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "loom/config.hpp"

namespace loom {

//! Base of every exception loom throws; catch this to catch them all.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

//! Shapes that do not agree (the message names both shapes).
class shape_error : public error {
 public:
  using error::error;
};

//! An index or a slice bound outside the extent it selects from, or a bad axis.
class index_error : public error {
 public:
  using error::error;
};

//! An argument of the right type but an unusable value (a zero step, say).
class value_error : public error {
 public:
  using error::error;
};

//! Element types that do not match (for example a .npy file of another dtype).
class dtype_error : public error {
 public:
  using error::error;
};

//! A file that cannot be opened, read or written, or whose contents are malformed.
class io_error : public error {
 public:
  using error::error;
};

//! An output that overlaps an input under a different index map.
class aliasing_error : public error {
 public:
  using error::error;
};

//! No usable GPU: no driver, a driver older than the runtime, or no device.
class device_unavailable : public error {
 public:
  using error::error;
};

//! A failed CUDA runtime call, naming the call, the place and CUDA's error name.
class cuda_error : public error {
 public:
  cuda_error(cudaError_t code, const char* call, const char* file, int line)
      : error(std::string("loom: ") + call + " failed at " + file + ":" + std::to_string(line) + ": " +
              cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")"),
        code_(code) {}
  //! CUDA's error code.
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

//! A device allocation that could not be served; says how much was asked and
//! how much the device has.
class out_of_memory : public error {
 public:
  out_of_memory(std::size_t requested, std::size_t free, std::size_t total, int device)
      : error("loom: out of device memory on device " + std::to_string(device) + ": requested " +
              std::to_string(requested) + " bytes, " + std::to_string(free) + " bytes free of " +
              std::to_string(total) + " total"),
        requested_(requested),
        free_(free),
        total_(total) {}
  [[nodiscard]] std::size_t requested() const noexcept { return requested_; }
  [[nodiscard]] std::size_t free() const noexcept { return free_; }
  [[nodiscard]] std::size_t total() const noexcept { return total_; }

 private:
  std::size_t requested_, free_, total_;
};

namespace detail {
[[noreturn]] inline void throw_cuda(cudaError_t code, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so later calls start clean
  if (code == cudaErrorInsufficientDriver || code == cudaErrorNoDevice ||
      code == cudaErrorCallRequiresNewerDriver)
    throw device_unavailable(std::string("loom: ") + call + " at " + file + ":" +
                             std::to_string(line) + ": " + cudaGetErrorName(code) + " (" +
                             cudaGetErrorString(code) + ")");
  throw cuda_error(code, call, file, line);
}
}  // namespace detail
}  // namespace loom

//! Checks a CUDA runtime call; throws loom::cuda_error (or device_unavailable)
//! naming the call, file:line and CUDA's error name.
#define LOOM_CUDA_CHECK(call)                                                         \
  do {                                                                                \
    const cudaError_t loom_status_ = (call);                                          \
    if (loom_status_ != cudaSuccess)                                                  \
      ::loom::detail::throw_cuda(loom_status_, #call, __FILE__, __LINE__);            \
  } while (0)
