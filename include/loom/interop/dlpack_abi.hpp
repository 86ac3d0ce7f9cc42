// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The DLPack ABI (version 1.x), written from the DLPack specification: the
//! C structs that frameworks exchange to share a tensor without a copy, and
//! the codes loom reads in them. The names are snake_case, the fields are
//! the specification's, in its order, so these structs are layout-compatible
//! with another library's `DLManagedTensorVersioned`, `DLManagedTensor`,
//! `DLTensor`, ... (the static_asserts below pin the x86-64/aarch64 layout):
//! a pointer from torch or NumPy converts with `reinterpret_cast`.

#include <cstddef>
#include <cstdint>

namespace loom::dlpack {

//! The DLPack major version whose layout these structs are (a producer's
//! tensor of another major version must not be read, only deleted).
inline constexpr std::uint32_t major_version = 1;
//! The minor version loom writes into what it exports: loom uses nothing
//! that later minor versions added, and always writes strides.
inline constexpr std::uint32_t minor_version = 0;

//! `flags` bit: the consumer must not write the elements (DLPACK_FLAG_BITMASK_READ_ONLY).
inline constexpr std::uint64_t flag_read_only = std::uint64_t{1} << 0;
//! `flags` bit: the producer copied the data for this export (DLPACK_FLAG_BITMASK_IS_COPIED).
inline constexpr std::uint64_t flag_is_copied = std::uint64_t{1} << 1;

//! DLDeviceType codes that loom maps to its memory spaces (the
//! specification's kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged).
enum device_code : std::int32_t {
  cpu = 1,           //!< host memory
  cuda = 2,          //!< CUDA device memory
  cuda_host = 3,     //!< page-locked host memory (cudaMallocHost)
  cuda_managed = 13  //!< CUDA managed (unified) memory (cudaMallocManaged)
};

//! DLDataTypeCode values (kDLInt, kDLUInt, kDLFloat, kDLOpaqueHandle,
//! kDLBfloat, kDLComplex, kDLBool, and DLPack 1.1's kDLFloat8_e4m3fn,
//! kDLFloat8_e5m2, kDLFloat8_e8m0fnu).
enum type_code : std::uint8_t {
  int_code = 0,
  uint_code = 1,
  float_code = 2,
  opaque_handle_code = 3,
  bfloat_code = 4,
  complex_code = 5,
  bool_code = 6,
  float8_e4m3fn_code = 10,
  float8_e5m2_code = 12,
  float8_e8m0fnu_code = 14
};

//! DLPackVersion: the version a managed tensor was written with.
struct pack_version {
  std::uint32_t major;
  std::uint32_t minor;
};

//! DLDevice: where the data is (`device_type` holds a device_code).
struct dl_device {
  std::int32_t device_type;
  std::int32_t device_id;
};

//! DLDataType: `code` (a type_code), `bits` per lane, `lanes` (1 for scalars).
struct dl_data_type {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};

//! DLTensor: a plain description of strided data; owns nothing. `shape` and
//! `strides` (in elements) have `ndim` entries; null `strides` means compact
//! row-major; the first element is at `(char*)data + byte_offset`.
struct dl_tensor {
  void* data;
  dl_device device;
  std::int32_t ndim;
  dl_data_type dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};

//! DLManagedTensor (the legacy, unversioned exchange struct, capsule name
//! "dltensor"): a dl_tensor and the deleter that releases it.
struct managed_tensor {
  ::loom::dlpack::dl_tensor dl_tensor;  // qualified: the member shares the type's name
  void* manager_ctx;
  void (*deleter)(managed_tensor* self);
};

//! DLManagedTensorVersioned (capsule name "dltensor_versioned"): version and
//! deleter come first, so they can be read whatever the major version;
//! `flags` holds flag_read_only and flag_is_copied.
struct managed_tensor_versioned {
  pack_version version;
  void* manager_ctx;
  void (*deleter)(managed_tensor_versioned* self);
  std::uint64_t flags;
  ::loom::dlpack::dl_tensor dl_tensor;  // qualified: the member shares the type's name
};

static_assert(sizeof(pack_version) == 8 && sizeof(dl_device) == 8 && sizeof(dl_data_type) == 4);
static_assert(offsetof(dl_tensor, device) == 8 && offsetof(dl_tensor, ndim) == 16 && offsetof(dl_tensor, dtype) == 20 &&
              offsetof(dl_tensor, shape) == 24 && offsetof(dl_tensor, strides) == 32 &&
              offsetof(dl_tensor, byte_offset) == 40 && sizeof(dl_tensor) == 48);
static_assert(offsetof(managed_tensor, manager_ctx) == 48 && offsetof(managed_tensor, deleter) == 56 &&
              sizeof(managed_tensor) == 64);
static_assert(offsetof(managed_tensor_versioned, manager_ctx) == 8 &&
              offsetof(managed_tensor_versioned, deleter) == 16 && offsetof(managed_tensor_versioned, flags) == 24 &&
              offsetof(managed_tensor_versioned, dl_tensor) == 32 && sizeof(managed_tensor_versioned) == 80);
}  // namespace loom::dlpack
