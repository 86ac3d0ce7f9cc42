// SPDX-License-Identifier: Apache-2.0
// A DLPack producer written from the specification, not with loom's export:
// it describes memory it does not own, in both exchange structs, and counts
// the calls of their deleters.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include <loom/core/dtype.hpp>
#include <loom/interop/dlpack_abi.hpp>

namespace test_dlpack {
namespace dl = loom::dlpack;

//! The DLDataTypeCode and bits that the DLPack specification gives each loom element type.
template <class T>
constexpr std::pair<int, int> code_and_bits() {
  if constexpr (std::is_same_v<T, bool>) return {6, 8};  // kDLBool
  if constexpr (std::is_same_v<T, std::int8_t>) return {0, 8};
  if constexpr (std::is_same_v<T, std::uint8_t>) return {1, 8};
  if constexpr (std::is_same_v<T, std::int32_t>) return {0, 32};
  if constexpr (std::is_same_v<T, std::int64_t>) return {0, 64};
  if constexpr (std::is_same_v<T, loom::half>) return {2, 16};
  if constexpr (std::is_same_v<T, loom::bf16>) return {4, 16};  // kDLBfloat
  if constexpr (std::is_same_v<T, float>) return {2, 32};
  if constexpr (std::is_same_v<T, double>) return {2, 64};
  if constexpr (std::is_same_v<T, loom::e4m3>) return {10, 8};  // kDLFloat8_e4m3fn (DLPack 1.1)
  if constexpr (std::is_same_v<T, loom::e5m2>) return {12, 8};  // kDLFloat8_e5m2
  if constexpr (std::is_same_v<T, loom::e8m0>) return {14, 8};  // kDLFloat8_e8m0fnu
  return {-1, -1};
}

//! One tensor description, offered as a versioned and as a legacy managed
//! tensor (a test uses one of them); `deletes` counts their deleters' calls.
//! Empty `strides` leaves the pointer null (compact row-major).
struct producer {
  int deletes = 0;
  std::vector<std::int64_t> shape, strides;
  dl::managed_tensor_versioned versioned{};
  dl::managed_tensor legacy{};

  producer(void* data, dl::dl_device device, dl::dl_data_type dtype, std::vector<std::int64_t> shape_,
           std::vector<std::int64_t> strides_, std::uint64_t byte_offset = 0)
      : shape(std::move(shape_)), strides(std::move(strides_)) {
    const dl::dl_tensor t{data,
                          device,
                          static_cast<std::int32_t>(shape.size()),
                          dtype,
                          shape.empty() ? nullptr : shape.data(),
                          strides.empty() ? nullptr : strides.data(),
                          byte_offset};
    versioned = {{1, 0}, this, &count_versioned, 0, t};
    legacy = {t, this, &count_legacy};
  }
  producer(const producer&) = delete;
  producer& operator=(const producer&) = delete;

  static void count_versioned(dl::managed_tensor_versioned* m) { ++static_cast<producer*>(m->manager_ctx)->deletes; }
  static void count_legacy(dl::managed_tensor* m) { ++static_cast<producer*>(m->manager_ctx)->deletes; }
};
}  // namespace test_dlpack
