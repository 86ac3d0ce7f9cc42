// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <mutex>
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

namespace detail {
// The errors a faulting kernel leaves: sticky, CUDA returns them from every
// later call of the process, whichever kernel (or call) caused them.
inline bool sticky_kernel_error(cudaError_t code) noexcept {
  switch (code) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorLaunchTimeout:
    case cudaErrorTensorMemoryLeak:
      return true;
    default:
      return false;
  }
}
}  // namespace detail

//! A failed CUDA runtime call, naming the call, the place and CUDA's error
//! name. For the sticky errors of a faulting kernel the message adds that
//! the fault may be an earlier kernel's (CUDA reports it asynchronously, at
//! whatever call comes next) and that the context cannot be used again.
class cuda_error : public error {
 public:
  cuda_error(cudaError_t code, const char* call, const char* file, int line)
      : error(std::string("loom: ") + call + " failed at " + file + ":" + std::to_string(line) + ": " +
              cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")" +
              (detail::sticky_kernel_error(code)
                   ? "; a kernel faulted, this call's or one queued before it (CUDA reports faults at a later "
                     "call), and the device's context cannot be used again in this process"
                   : "")),
        code_(code) {}
  //! CUDA's error code.
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

//! The memory an allocation asks for (out_of_memory::kind()).
enum class memory_kind {
  device,        //!< device memory from CUDA's stream-ordered pool
  pinned_host,   //!< page-locked host memory (cudaMallocHost)
  pageable_host  //!< ordinary aligned heap memory
};

//! "device", "pinned host" or "pageable host".
inline const char* memory_kind_name(memory_kind k) noexcept {
  switch (k) {
    case memory_kind::device:
      return "device";
    case memory_kind::pinned_host:
      return "pinned host";
    case memory_kind::pageable_host:
      return "pageable host";
  }
  return "unknown";
}

//! An allocation that could not be served: device memory, pinned or pageable
//! host memory. Says how much was asked and of which memory; for device
//! memory also how much the device has (for host memory free() and total()
//! are 0: not known). loom throws it instead of std::bad_alloc.
//! Example: `catch (const loom::out_of_memory& e) { log(e.requested(), loom::memory_kind_name(e.kind())); }`
class out_of_memory : public error {
 public:
  //! A device allocation of `requested` bytes on `device`, with the device's free and total bytes.
  out_of_memory(std::size_t requested, std::size_t free, std::size_t total, int device)
      : error("loom: out of device memory on device " + std::to_string(device) + ": requested " +
              std::to_string(requested) + " bytes, " + std::to_string(free) + " bytes free of " +
              std::to_string(total) + " total"),
        requested_(requested),
        free_(free),
        total_(total),
        device_(device) {}
  //! A host allocation of `requested` bytes of memory `kind` (pinned_host or pageable_host).
  out_of_memory(std::size_t requested, memory_kind kind)
      : error(std::string("loom: out of ") + memory_kind_name(kind) + " memory: requested " +
              std::to_string(requested) + " bytes"),
        requested_(requested),
        kind_(kind) {}
  //! Bytes the failed allocation asked for.
  [[nodiscard]] std::size_t requested() const noexcept { return requested_; }
  //! Free bytes of the device at the failure (0 for host memory).
  [[nodiscard]] std::size_t free() const noexcept { return free_; }
  //! Total bytes of the device (0 for host memory).
  [[nodiscard]] std::size_t total() const noexcept { return total_; }
  //! Which memory was asked for.
  [[nodiscard]] memory_kind kind() const noexcept { return kind_; }
  //! The device of a device allocation; -1 for host memory.
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  std::size_t requested_ = 0, free_ = 0, total_ = 0;
  memory_kind kind_ = memory_kind::device;
  int device_ = -1;
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

// What failed in a release path: a destructor or another noexcept clean-up
// (freeing memory, destroying a stream, an event or a descriptor, restoring
// the caller's device) cannot throw, so a failed call there is counted and
// its message kept for release_error_count() / last_release_error().
struct release_log {
  std::atomic<std::size_t> count{0};
  std::mutex m;
  std::string last;
};
// Never destroyed: a tensor or stream freed by a static destructor at exit
// may still need it after function-local statics made later are gone.
inline release_log& release_errors() {
  static release_log* const log = new release_log;
  return *log;
}
inline void note_release_error(const char* call, const char* file, int line, const char* name,
                               const char* text) noexcept {
  auto& log = release_errors();
  log.count.fetch_add(1, std::memory_order_relaxed);
  try {
    std::string msg = std::string("loom: ") + call + " failed at " + file + ":" + std::to_string(line) + ": " +
                      name + " (" + text + ")";
    const std::lock_guard<std::mutex> lock(log.m);
    log.last = std::move(msg);
  } catch (...) {  // no memory for the message: the count still says it happened
  }
}
//! Checks a CUDA call of a release path: a failure is counted and kept (it
//! cannot be thrown from there), and CUDA's last error is cleared, so that
//! the next launch check does not report it as its own. Not counted:
//! cudaErrorCudartUnloading, a release at exit after the CUDA runtime has
//! shut down and reclaimed everything itself.
inline void check_release(cudaError_t code, const char* call, const char* file, int line) noexcept {
  if (code == cudaSuccess || code == cudaErrorCudartUnloading) return;
  (void)cudaGetLastError();
  note_release_error(call, file, line, cudaGetErrorName(code), cudaGetErrorString(code));
}
}  // namespace detail

//! How many CUDA (or cuBLASLt) calls in loom's release paths have failed in
//! this process: freeing device or pinned memory, destroying a stream, an
//! event or a cuBLASLt descriptor, and switching back to the caller's
//! device where loom switched it (a stream_guard ending; an allocation or a
//! cuBLASLt handle made for another device than the current one). Those run
//! in destructors or after the work succeeded, and do not throw; a failure
//! there is counted instead (usually the trace of an earlier error: after a
//! kernel faults, CUDA fails every later call with the same sticky error).
//! A release at exit after the CUDA runtime has shut down
//! (cudaErrorCudartUnloading) is not counted. loom's [cuda] test programs
//! fail when the count is not 0 at their end.
//! Example: `if (loom::release_error_count() != 0) std::cerr << loom::last_release_error() << "\n";`
inline std::size_t release_error_count() noexcept {
  return detail::release_errors().count.load(std::memory_order_relaxed);
}

//! The message of the latest failed release (call, file:line, CUDA's error
//! name and text), or "" when none failed.
inline std::string last_release_error() {
  auto& log = detail::release_errors();
  const std::lock_guard<std::mutex> lock(log.m);
  return log.last;
}
}  // namespace loom

//! Checks a CUDA call in a noexcept release path (a destructor): counts and
//! keeps a failure (loom::release_error_count, loom::last_release_error)
//! instead of throwing.
#define LOOM_CUDA_RELEASE(call) ::loom::detail::check_release((call), #call, __FILE__, __LINE__)

//! Checks a CUDA runtime call; throws loom::cuda_error (or device_unavailable)
//! naming the call, file:line and CUDA's error name.
#define LOOM_CUDA_CHECK(call)                                                         \
  do {                                                                                \
    const cudaError_t loom_status_ = (call);                                          \
    if (loom_status_ != cudaSuccess)                                                  \
      ::loom::detail::throw_cuda(loom_status_, #call, __FILE__, __LINE__);            \
  } while (0)
