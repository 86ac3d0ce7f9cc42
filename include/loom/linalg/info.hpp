// SPDX-License-Identifier: Apache-2.0
#pragma once

// What an assignment containing a matmul does (loom::explain) or did
// (loom::last_matmul).

#include <cstdint>
#include <string>

#include "loom/linalg/host_gemm.hpp"

namespace loom {
//! Which way an assignment containing a matmul ran.
enum class matmul_path : std::uint8_t {
  none,                   //!< no matmul in the expression: the ordinary one-kernel assignment
  empty,                  //!< the output has no elements: nothing ran
  fused,                  //!< ONE GEMM call with alpha, beta C, row bias and relu/gelu(tanh) in its epilogue
  gemm_then_elementwise,  //!< the GEMM writes the output, then ONE fused elementwise kernel reads it back
  elementwise             //!< inner extent 0: the product is zero; ONE elementwise kernel
};

//! What an assignment containing a matmul does (loom::explain) or did
//! (loom::last_matmul): its path, the fused epilogue, the kernels it enqueues.
struct matmul_info {
  matmul_path path = matmul_path::none;
  matmul_activation activation = matmul_activation::none;  //!< fused activation
  bool bias = false;                                       //!< a row bias fused into the epilogue
  bool accumulate = false;                                 //!< beta * C fused into the epilogue
  double alpha = 1;                                        //!< the product's scale
  double beta = 0;                                         //!< C's scale when `accumulate`
  int launches = 0;  //!< kernels (cuBLASLt calls included) or host loops the assignment runs
  bool on_device = false;
};

//! A one-line description of `i`, e.g. "fused: gelu_tanh(alpha*A@B + bias), 1 launch".
inline std::string to_string(const matmul_info& i) {
  const char* act = i.activation == matmul_activation::relu        ? "relu"
                    : i.activation == matmul_activation::gelu_tanh ? "gelu_tanh"
                                                                   : "";
  const auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  std::string body = i.alpha != 1 ? num(i.alpha) + "*A@B" : std::string("A@B");
  if (i.accumulate) body += i.beta == 1 ? std::string(" + C") : " + " + num(i.beta) + "*C";
  if (i.bias) body += " + bias";
  if (*act) body = std::string(act) + "(" + body + ")";
  std::string p;
  switch (i.path) {
    case matmul_path::none:
      p = "no matmul: elementwise";
      break;
    case matmul_path::empty:
      p = "empty";
      break;
    case matmul_path::fused:
      p = "fused: " + body;
      break;
    case matmul_path::gemm_then_elementwise:
      p = "gemm then elementwise";
      break;
    case matmul_path::elementwise:
      p = "inner extent 0: elementwise";
      break;
  }
  return p + ", " + std::to_string(i.launches) + (i.launches == 1 ? " launch" : " launches") +
         (i.on_device ? " on the device" : " on the host");
}

namespace detail {
inline matmul_info& last_matmul_slot() {
  thread_local matmul_info info;
  return info;
}

}  // namespace detail
}  // namespace loom
