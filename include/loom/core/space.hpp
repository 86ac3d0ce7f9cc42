// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <type_traits>

namespace loom {
//! Memory-space tag: GPU memory, evaluated by the CUDA executor.
struct device {
  static constexpr const char* name = "device";
};
//! Memory-space tag: CPU memory, evaluated by the host executor.
struct host {
  static constexpr const char* name = "host";
};

//! Satisfied by loom's memory-space tags (`loom::device`, `loom::host`).
template <class S>
concept memory_space = std::is_same_v<S, device> || std::is_same_v<S, host>;
}  // namespace loom
