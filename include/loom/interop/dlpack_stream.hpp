// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The stream exchange of DLPack's Python protocol for CUDA data: the values
//! a consumer passes to `__dlpack__(stream=...)` and the producer's ordering
//! (an event, never a host wait). Part of loom/interop/dlpack.hpp.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "loom/core/error.hpp"
#include "loom/core/stream.hpp"

namespace loom {
namespace dlpack {
//! The `stream` value a consumer passes to a producer's `__dlpack__(stream=...)`
//! for loom's stream `s` (default: the current stream), as the Python array
//! API defines it for CUDA: 1 for the legacy default stream, 2 for the
//! per-thread default stream, otherwise the cudaStream_t as an integer. The
//! producer then orders its work before `s`; loom synchronizes nothing.
//! Example (a binding): `x.attr("__dlpack__")(py::arg("stream") = loom::dlpack::stream_argument())`
inline std::intptr_t stream_argument(stream_ref s = current_stream()) {
  const cudaStream_t h = s.get();
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
  if (h == nullptr) return 2;
#else
  if (h == nullptr) return 1;
#endif
  if (h == cudaStreamLegacy) return 1;
  if (h == cudaStreamPerThread) return 2;
  return reinterpret_cast<std::intptr_t>(h);
}

//! The CUDA stream that a consumer's `stream` value names (the inverse of
//! stream_argument): 1 is cudaStreamLegacy, 2 cudaStreamPerThread, a value
//! above 2 the stream handle. Throws value_error for 0 (the specification
//! disallows it: ambiguous), -1 (it asks for no synchronization and names no
//! stream) and other negative values.
inline cudaStream_t consumer_stream(std::intptr_t stream) {
  if (stream == 1) return cudaStreamLegacy;
  if (stream == 2) return cudaStreamPerThread;
  if (stream > 2) return reinterpret_cast<cudaStream_t>(stream);
  if (stream == 0)
    throw value_error(
        "loom: DLPack stream 0 is not allowed (it is ambiguous); the consumer passes 1 for the legacy "
        "default stream, 2 for the per-thread default stream, or the stream's handle");
  throw value_error("loom: DLPack stream " + std::to_string(stream) +
                    " names no stream (-1 asks for no synchronization; other negative values are invalid)");
}

//! The producer's side of the stream exchange, for a `__dlpack__(stream=...)`
//! of device data that loom wrote on `producer` (default: the current
//! stream): makes the consumer's stream wait for the work queued so far on
//! `producer` (an event recorded there, waited on there: no host
//! synchronization). Nothing when `stream` is -1 (the consumer asked for
//! none) or names `producer` itself. Python's `stream=None` means the legacy
//! default stream for CUDA: pass 1. Host data has no stream (None).
//! Example: `loom::dlpack::make_ready_for(stream); return capsule(loom::to_dlpack(std::move(y)));`
inline void make_ready_for(std::intptr_t stream, stream_ref producer = current_stream()) {
  if (stream == -1) return;
  const cudaStream_t consumer = consumer_stream(stream);
  if (stream == stream_argument(producer)) return;
  event ready(false);
  ready.record(producer);
  ready.wait_on(stream_ref(consumer, producer.device()));
}
}  // namespace dlpack
}  // namespace loom
