// SPDX-License-Identifier: Apache-2.0
#pragma once

// Out-of-range indices found by device kernels (gather, index_select,
// embedding and its backward). A kernel that meets one reads a clamped
// index instead (never out of bounds) and records the first such index it
// sees in one record of mapped, page-locked host memory; loom raises it as
// an index_error at the next point where it synchronizes with the device
// (stream, event or device synchronize, item(), copies to the host,
// printing) or when check_index_errors() is called. Nothing is added to the
// kernels' work but a compare, and nothing is synchronized for the check.

#include <cuda_runtime_api.h>

#include <atomic>
#include <string>

#include "loom/config.hpp"
#include "loom/core/error.hpp"

namespace loom {
//! How an indexing node treats an index outside its range.
enum class index_mode {
  //! The host throws index_error before anything runs; the device reads a
  //! clamped index and loom throws index_error at the next synchronization.
  checked,
  //! Nothing is checked or reported: an out-of-range index reads a clamped
  //! index (never out of bounds) and the embedding backward skips it.
  unchecked
};

namespace detail {
//! What a kernel records about an out-of-range index. state: 0 nothing,
//! 1 being written, 2 written.
struct index_fault_record {
  int state;
  int op;  // index_op
  int axis;
  int pad;
  long long index;
  long long bound;
};

//! The operation that met an out-of-range index (for the message).
enum class index_op : int { gather, index_select, embedding, embedding_backward };

inline const char* index_op_name(int op) {
  switch (op) {
    case 0:
      return "gather";
    case 1:
      return "index_select";
    case 2:
      return "embedding";
    default:
      return "embedding_backward";
  }
}

//! The message of an out-of-range index: the operation, the index and the
//! extent it indexes.
inline std::string index_fault_message(int op, int axis, long long index, long long bound) {
  return std::string("loom: ") + index_op_name(op) + ": index " + std::to_string(index) +
         " is out of range for axis " + std::to_string(axis) + " of extent " + std::to_string(bound) +
         " (valid: 0 to " + std::to_string(bound - 1) + ")";
}

// The host address of the record (null until a checked device kernel first
// needed it).
inline std::atomic<index_fault_record*>& index_fault_host() {
  static std::atomic<index_fault_record*> p{nullptr};
  return p;
}

//! The device address of the record, allocated on first use (once per
//! process, mapped and portable: every device writes the same record; never
//! freed, so that no kernel can outlive it).
inline index_fault_record* index_fault_device() {
  static index_fault_record* const dev = [] {
    void* h = nullptr;
    LOOM_CUDA_CHECK(cudaHostAlloc(&h, sizeof(index_fault_record), cudaHostAllocMapped | cudaHostAllocPortable));
    auto* rec = static_cast<index_fault_record*>(h);
    *rec = index_fault_record{0, 0, 0, 0, 0, 0};
    void* d = nullptr;
    LOOM_CUDA_CHECK(cudaHostGetDevicePointer(&d, h, 0));
    index_fault_host().store(rec);
    return static_cast<index_fault_record*>(d);
  }();
  return dev;
}

//! Records an out-of-range index from device code (the first one wins);
//! nothing on the host, whose executor checks before it runs.
LOOM_HD void record_index_fault(index_fault_record* rec, index_op op, int axis, long long index, long long bound) {
#if LOOM_DEVICE_CODE
  if (rec == nullptr) return;
  if (atomicCAS(&rec->state, 0, 1) == 0) {
    rec->op = static_cast<int>(op);
    rec->axis = axis;
    rec->index = index;
    rec->bound = bound;
    __threadfence_system();
    atomicExch(&rec->state, 2);
  }
#else
  (void)rec, (void)op, (void)axis, (void)index, (void)bound;
#endif
}

//! Throws the index_error a device kernel recorded, if any (and clears it).
inline void raise_index_fault() {
  index_fault_record* rec = index_fault_host().load(std::memory_order_acquire);
  if (rec == nullptr || __atomic_load_n(&rec->state, __ATOMIC_ACQUIRE) != 2) return;
  const int op = rec->op, axis = rec->axis;
  const long long index = rec->index, bound = rec->bound;
  int written = 2;
  // One host thread reports it (another one synchronizing at the same time
  // finds the record cleared).
  if (!__atomic_compare_exchange_n(&rec->state, &written, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
  throw index_error(index_fault_message(op, axis, index, bound) +
                    "; found by a device kernel, which read a clamped index, and reported at this synchronization");
}
}  // namespace detail

//! Throws the index_error of an out-of-range index that a device kernel
//! recorded since the last report, without synchronizing: only kernels that
//! have finished are seen. loom calls it after every synchronization it
//! makes (loom::synchronize, stream and event synchronize, item(), copies
//! to the host), so an out-of-range index surfaces there.
//! Example: `y = loom::embedding(ids, table); loom::synchronize(); // throws if an id was out of range`
inline void check_index_errors() { detail::raise_index_fault(); }
}  // namespace loom
