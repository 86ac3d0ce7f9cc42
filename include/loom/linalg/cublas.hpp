// SPDX-License-Identifier: Apache-2.0
#pragma once

// cuBLASLt plumbing for loom's matrix products: the error type, per-device
// handles, the per-shape heuristic cache and one checked cublasLtMatmul call.
// Host code only (cuBLASLt is a host library), so this header compiles with g++;
// it is called only for device tensors, so a g++ program still runs without a GPU.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/device.hpp"
#include "loom/core/error.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/launch.hpp"
#include "loom/memory/memory.hpp"
#include "loom/tensor/copy.hpp"

namespace loom {

//! A failed cuBLAS / cuBLASLt call, naming the call, file:line and the status
//! name (e.g. CUBLAS_STATUS_NOT_SUPPORTED); `status()` gives the code.
//! Example: `try { y = matmul(a, b); } catch (const loom::cublas_error& e) { e.status(); }`
class cublas_error : public error {
 public:
  cublas_error(cublasStatus_t status, const char* call, const char* file, int line, const std::string& hint = "")
      : error("loom: " + std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
              cublasLtGetStatusName(status) + " (" + cublasLtGetStatusString(status) + ")" +
              (hint.empty() ? "" : "; " + hint)),
        status_(status) {}
  //! cuBLAS's status code.
  [[nodiscard]] cublasStatus_t status() const noexcept { return status_; }

 private:
  cublasStatus_t status_;
};
}  // namespace loom

//! Checks a cuBLAS/cuBLASLt call; throws loom::cublas_error naming the call,
//! file:line and the status name.
#define LOOM_CUBLAS_CHECK(call)                                                     \
  do {                                                                              \
    const cublasStatus_t loom_cublas_status_ = (call);                              \
    if (loom_cublas_status_ != CUBLAS_STATUS_SUCCESS)                               \
      throw ::loom::cublas_error(loom_cublas_status_, #call, __FILE__, __LINE__);  \
  } while (0)

namespace loom::detail {

//! The cuBLASLt handle of `device`, created on first use. Handles live for the
//! whole process, like CUDA's primary context: destroying them from a static
//! destructor would race the runtime's own teardown at exit.
inline cublasLtHandle_t lt_handle(int device) {
  static std::mutex mu;
  static std::array<cublasLtHandle_t, max_devices> handles{};
  if (device < 0 || device >= max_devices)
    throw index_error("loom: device " + std::to_string(device) + " is outside loom's device table");
  std::lock_guard<std::mutex> lock(mu);
  auto& h = handles[static_cast<std::size_t>(device)];
  if (!h) {
    int prev = 0;
    LOOM_CUDA_CHECK(cudaGetDevice(&prev));
    if (prev != device) LOOM_CUDA_CHECK(cudaSetDevice(device));
    const cublasStatus_t st = cublasLtCreate(&h);
    if (prev != device) LOOM_CUDA_RELEASE(cudaSetDevice(prev));
    if (st != CUBLAS_STATUS_SUCCESS) {
      h = nullptr;
      throw cublas_error(st, "cublasLtCreate(&handle)", __FILE__, __LINE__);
    }
  }
  return h;
}

// RAII owners of cuBLASLt descriptors: destroyed on every path, exceptions included.
// A failed destroy is counted (release_error_count), not thrown.
inline void check_lt_release(cublasStatus_t st, const char* call, const char* file, int line) noexcept {
  if (st != CUBLAS_STATUS_SUCCESS)
    note_release_error(call, file, line, cublasLtGetStatusName(st), cublasLtGetStatusString(st));
}
struct lt_desc_deleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const noexcept {
    check_lt_release(cublasLtMatmulDescDestroy(d), "cublasLtMatmulDescDestroy(d)", __FILE__, __LINE__);
  }
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const noexcept {
    check_lt_release(cublasLtMatrixLayoutDestroy(l), "cublasLtMatrixLayoutDestroy(l)", __FILE__, __LINE__);
  }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const noexcept {
    check_lt_release(cublasLtMatmulPreferenceDestroy(p), "cublasLtMatmulPreferenceDestroy(p)", __FILE__, __LINE__);
  }
};
using lt_op_ptr = std::unique_ptr<cublasLtMatmulDescOpaque_t, lt_desc_deleter>;
using lt_layout_ptr = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, lt_desc_deleter>;
using lt_pref_ptr = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, lt_desc_deleter>;

//! One column-major cuBLASLt operand: op(X) is what enters the product.
struct lt_matrix {
  const void* p = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  std::uint64_t rows = 0, cols = 0;  // of the stored column-major matrix (before op)
  std::int64_t ld = 1;
  std::int64_t batch_stride = 0;
};

//! Everything one cublasLtMatmul call needs: D = epilogue(alpha op(A) op(B) + beta C + bias),
//! all column-major, m x n result, inner extent k, `batch` matrices. With
//! fp8 operands (cuBLAS documentation, "Tensorwide Scaling For FP8 Data
//! Types"): D = d_scale * epilogue(alpha a_scale b_scale op(A) op(B) +
//! beta c_scale C + bias), amax_d = max |epilogue(...)| before d_scale.
struct lt_call {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale_type = CUDA_R_32F;
  cudaDataType_t ab_type = CUDA_R_32F;
  cudaDataType_t b_type = CUDA_R_32F;  // of op B when b_type_differs (fp8 mixes e4m3 and e5m2)
  bool b_type_differs = false;
  cudaDataType_t cd_type = CUDA_R_32F;
  lt_matrix a, b;
  const void* c = nullptr;  // null: beta is 0 and D itself stands in for C (or nothing, when c_type differs)
  std::int32_t c_type = -1;  // cudaDataType_t of C when not D's (fp8 D takes a bf16 or fp16 C), or -1
  std::int64_t ldc = 0;      // C's leading dimension when not D's, or 0
  void* d = nullptr;
  std::uint64_t m = 0, n = 0, k = 0;
  std::int64_t ldd = 1, d_batch_stride = 0;
  std::int32_t batch = 1;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // m elements, packed, shared by every batch
  std::int32_t bias_type = -1;  // cudaDataType_t of the bias when not D's (fp8 products into float), or -1
  double alpha = 1, beta = 0;
  const float* a_scale = nullptr;  // device float multiplying op(A) (fp8 operands), or null
  const float* b_scale = nullptr;  // the same for op(B)
  const float* c_scale = nullptr;  // device float multiplying C, or null
  const float* d_scale = nullptr;  // device float multiplying D before its conversion (fp8 D), or null
  float* amax_d = nullptr;         // device float receiving max |D| before d_scale (fp8 D), or null
};

// Largest power of two (up to 256) dividing the address: what the heuristic
// may assume about a pointer; part of the cache key.
inline std::uint32_t lt_alignment(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

//! Largest workspace loom offers cuBLASLt (32 MiB, as NVIDIA recommends for
//! Hopper); each call takes from the stream-ordered pool only what its algorithm needs.
inline constexpr std::size_t lt_max_workspace = std::size_t{32} << 20;

struct lt_algo {
  cublasLtMatmulAlgo_t algo;
  std::size_t workspace;
};

using lt_key = std::array<std::int64_t, 38>;

inline lt_key lt_key_of(const lt_call& c) {
  return {c.device,
          static_cast<std::int64_t>(c.compute),
          static_cast<std::int64_t>(c.scale_type),
          static_cast<std::int64_t>(c.ab_type),
          static_cast<std::int64_t>(c.cd_type),
          static_cast<std::int64_t>(c.a.op),
          static_cast<std::int64_t>(c.a.rows),
          static_cast<std::int64_t>(c.a.cols),
          c.a.ld,
          c.a.batch_stride,
          static_cast<std::int64_t>(c.b.op),
          static_cast<std::int64_t>(c.b.rows),
          static_cast<std::int64_t>(c.b.cols),
          c.b.ld,
          c.b.batch_stride,
          static_cast<std::int64_t>(c.m),
          static_cast<std::int64_t>(c.n),
          static_cast<std::int64_t>(c.k),
          c.ldd,
          c.d_batch_stride,
          c.batch,
          static_cast<std::int64_t>(c.epilogue),
          c.c != nullptr && c.c != c.d,
          lt_alignment(c.a.p),
          lt_alignment(c.b.p),
          lt_alignment(c.c ? c.c : c.d),
          lt_alignment(c.d),
          c.bias ? lt_alignment(c.bias) : 0,
          c.beta != 0,
          c.b_type_differs ? static_cast<std::int64_t>(c.b_type) : -1,
          c.bias_type,
          c.a_scale != nullptr,
          c.b_scale != nullptr,
          c.c_type,
          c.ldc,
          c.c_scale != nullptr,
          c.d_scale != nullptr,
          c.amax_d != nullptr};
}

// The heuristic's best algorithm for a call's shape, types, layouts, epilogue
// and alignments, asked once per key and cached for the process.
inline lt_algo lt_pick_algo(const lt_call& c, cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                            cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld) {
  static std::mutex mu;
  static std::map<lt_key, lt_algo> cache;
  const lt_key key = lt_key_of(c);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  cublasLtMatmulPreference_t raw = nullptr;
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw));
  const lt_pref_ptr pref(raw);
  const std::size_t max_ws = lt_max_workspace;
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &max_ws, sizeof(max_ws)));
  // The default assumes 256-byte aligned buffers; views into tensors often are not.
  const std::uint32_t al[4] = {lt_alignment(c.a.p), lt_alignment(c.b.p), lt_alignment(c.c ? c.c : c.d),
                               lt_alignment(c.d)};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i != 4; ++i)
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), which[i], &al[i], sizeof(al[i])));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  LOOM_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, ld, pref.get(), 1, &result, &found));
  if (found == 0)
    throw cublas_error(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__,
                       "cuBLASLt has no algorithm for this product (m=" + std::to_string(c.m) + ", n=" +
                           std::to_string(c.n) + ", k=" + std::to_string(c.k) + ", lda=" + std::to_string(c.a.ld) +
                           ", ldb=" + std::to_string(c.b.ld) + ", ldd=" + std::to_string(c.ldd) +
                           ", batch=" + std::to_string(c.batch) +
                           "); make the operands contiguous (loom::contiguous) so rows are 16-byte aligned");
  const lt_algo a{result.algo, result.workspaceSize};
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(key, a);
  return a;
}

inline lt_layout_ptr lt_layout(cudaDataType_t type, std::uint64_t rows, std::uint64_t cols, std::int64_t ld,
                               std::int32_t batch, std::int64_t batch_stride) {
  cublasLtMatrixLayout_t raw = nullptr;
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&raw, type, rows, cols, ld));
  lt_layout_ptr l(raw);
  if (batch > 1) {
    LOOM_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l.get(), CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l.get(), CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                       &batch_stride, sizeof(batch_stride)));
  }
  return l;
}

//! Enqueues one cublasLtMatmul on c.stream (one counted device launch). The
//! workspace comes from the stream-ordered pool and returns to it in stream
//! order, so nothing synchronizes and the call can be captured in a graph.
inline void lt_matmul(const lt_call& c) {
  gpu::require_device("a matrix product on device tensors");
  const cublasLtHandle_t h = lt_handle(c.device);
  cublasLtMatmulDesc_t raw = nullptr;
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw, c.compute, c.scale_type));
  const lt_op_ptr op(raw);
  const std::int32_t ta = c.a.op, tb = c.b.op;
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const std::uint32_t ep = c.epilogue;
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
  if (c.bias) {
    // Set before the heuristic: it reads the pointer's alignment. Batch stride 0
    // (the default): one bias for every matrix of the batch.
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof(c.bias)));
    if (c.bias_type >= 0)
      LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &c.bias_type,
                                                       sizeof(c.bias_type)));
  }
  // The per-tensor scales of fp8 products and the amax of an fp8 D, each set only when given.
  const std::pair<cublasLtMatmulDescAttributes_t, const void*> pointers[] = {
      {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, c.a_scale}, {CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, c.b_scale},
      {CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, c.c_scale}, {CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, c.d_scale},
      {CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, c.amax_d}};
  for (const auto& [attribute, pointer] : pointers)
    if (pointer)
      LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.get(), attribute, &pointer, sizeof(pointer)));
  const auto la = lt_layout(c.ab_type, c.a.rows, c.a.cols, c.a.ld, c.batch, c.a.batch_stride);
  const auto lb =
      lt_layout(c.b_type_differs ? c.b_type : c.ab_type, c.b.rows, c.b.cols, c.b.ld, c.batch, c.b.batch_stride);
  const auto ld = lt_layout(c.cd_type, c.m, c.n, c.ldd, c.batch, c.d_batch_stride);
  // C shares D's layout unless its type or leading dimension differs (an
  // out-of-place C may have its own leading dimension; in place, C == D
  // takes the same layout: cuBLAS documentation, cublasLtMatmul).
  const bool c_type_differs = c.c_type >= 0 && c.c_type != static_cast<std::int32_t>(c.cd_type);
  const bool own_c = c_type_differs || (c.ldc != 0 && c.ldc != c.ldd);
  const lt_layout_ptr lc =
      own_c ? lt_layout(c_type_differs ? static_cast<cudaDataType_t>(c.c_type) : c.cd_type, c.m, c.n,
                        c.ldc != 0 ? c.ldc : c.ldd, c.batch, c.d_batch_stride)
            : nullptr;
  const cublasLtMatrixLayout_t c_layout = own_c ? lc.get() : ld.get();
  const lt_algo algo = lt_pick_algo(c, h, op.get(), la.get(), lb.get(), c_layout, ld.get());
  const scratch<device> ws(algo.workspace, stream_ref(c.stream, c.device));
  const float af = static_cast<float>(c.alpha), bf = static_cast<float>(c.beta);
  const bool dbl = c.scale_type == CUDA_R_64F;
  const void* alpha = dbl ? static_cast<const void*>(&c.alpha) : static_cast<const void*>(&af);
  const void* beta = dbl ? static_cast<const void*>(&c.beta) : static_cast<const void*>(&bf);
  // Without C, beta is 0 and cuBLASLt reads no C: D stands in when it has C's type, otherwise null.
  const void* c_ptr = c.c ? c.c : (c_type_differs ? nullptr : c.d);
  LOOM_CUBLAS_CHECK(cublasLtMatmul(h, op.get(), alpha, c.a.p, la.get(), c.b.p, lb.get(), beta, c_ptr, c_layout, c.d,
                                   ld.get(), &algo.algo, ws.p, algo.workspace, c.stream));
  count_device_launch();
}
}  // namespace loom::detail
