// SPDX-License-Identifier: Apache-2.0
#include "loom_test.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {
cudaError_t returns(cudaError_t e) { return e; }
}  // namespace

TEST_CASE("LOOM_CUDA_CHECK names the call, the place and CUDA's error name", "[core][error]") {
  int line = 0;
  try {
    line = __LINE__ + 1;
    LOOM_CUDA_CHECK(returns(cudaErrorInvalidValue));
    FAIL("no exception");
  } catch (const loom::cuda_error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, StartsWith("loom: returns(cudaErrorInvalidValue) failed at "));
    CHECK_THAT(msg, Contains("test_errors.cpp:" + std::to_string(line)));
    CHECK_THAT(msg, Contains("cudaErrorInvalidValue"));
    CHECK(e.code() == cudaErrorInvalidValue);
  }
  CHECK_NOTHROW([] { LOOM_CUDA_CHECK(returns(cudaSuccess)); }());
}

TEST_CASE("a kernel fault's sticky error says that it may be an earlier kernel's", "[core][error]") {
  for (const cudaError_t code : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorMisalignedAddress}) {
    try {
      LOOM_CUDA_CHECK(returns(code));
      FAIL("no exception");
    } catch (const loom::cuda_error& e) {
      CHECK_THAT(std::string(e.what()), Contains(cudaGetErrorName(code)));
      CHECK_THAT(std::string(e.what()), Contains("a kernel faulted, this call's or one queued before it"));
      CHECK(e.code() == code);
    }
  }
  try {
    LOOM_CUDA_CHECK(returns(cudaErrorInvalidValue));
    FAIL("no exception");
  } catch (const loom::cuda_error& e) {
    CHECK_THAT(std::string(e.what()), !Contains("kernel faulted"));
  }
}

TEST_CASE("LOOM_CUDA_CHECK reports a missing or old driver as device_unavailable", "[core][error]") {
  REQUIRE_THROWS_AS([] { LOOM_CUDA_CHECK(returns(cudaErrorInsufficientDriver)); }(), loom::device_unavailable);
  REQUIRE_THROWS_WITH([] { LOOM_CUDA_CHECK(returns(cudaErrorNoDevice)); }(), Contains("cudaErrorNoDevice"));
}

TEST_CASE("out_of_memory says what was asked and what the device has", "[core][error]") {
  const loom::out_of_memory e(1ull << 40, 123456, 7890123, 2);
  const std::string msg = e.what();
  CHECK_THAT(msg, Contains("requested 1099511627776 bytes"));
  CHECK_THAT(msg, Contains("123456 bytes free of 7890123 total"));
  CHECK_THAT(msg, Contains("device 2"));
  CHECK(e.requested() == (1ull << 40));
  CHECK(e.free() == 123456);
  CHECK(e.total() == 7890123);
  CHECK(e.kind() == loom::memory_kind::device);
  CHECK(e.device() == 2);
}

TEST_CASE("out_of_memory of host memory says how much of which memory was asked", "[core][error]") {
  const loom::out_of_memory pageable(4611686018427387904ull, loom::memory_kind::pageable_host);
  CHECK(std::string(pageable.what()) == "loom: out of pageable host memory: requested 4611686018427387904 bytes");
  CHECK(pageable.kind() == loom::memory_kind::pageable_host);
  CHECK(pageable.requested() == 4611686018427387904ull);
  CHECK(pageable.free() == 0);
  CHECK(pageable.total() == 0);
  CHECK(pageable.device() == -1);
  const loom::out_of_memory pinned(77, loom::memory_kind::pinned_host);
  CHECK(std::string(pinned.what()) == "loom: out of pinned host memory: requested 77 bytes");
  CHECK(pinned.kind() == loom::memory_kind::pinned_host);
}

TEST_CASE("LOOM_CUDA_RELEASE counts and keeps a failure instead of throwing", "[core][error]") {
  const std::size_t before = loom::release_error_count();
  LOOM_CUDA_RELEASE(returns(cudaSuccess));
  LOOM_CUDA_RELEASE(returns(cudaErrorCudartUnloading));  // at exit, after the runtime's own teardown
  CHECK(loom::release_error_count() == before);

  const int line = __LINE__ + 1;
  LOOM_CUDA_RELEASE(returns(cudaErrorInvalidResourceHandle));
  CHECK(loom::release_error_count() == before + 1);
  const std::string msg = loom::last_release_error();
  CHECK_THAT(msg, StartsWith("loom: returns(cudaErrorInvalidResourceHandle) failed at "));
  CHECK_THAT(msg, Contains("test_errors.cpp:" + std::to_string(line)));
  CHECK_THAT(msg, Contains("cudaErrorInvalidResourceHandle"));
  STATIC_REQUIRE(noexcept(loom::detail::check_release(cudaSuccess, "", "", 0)));
}

TEST_CASE("a device free that CUDA refuses is counted, not dropped", "[core][error]") {
  if (loom::gpu::is_available()) {
    WARN("skipped: this case frees a pointer CUDA never gave, which only a machine without a usable GPU refuses "
         "before touching anything");
    return;
  }
  // Without a driver cudaFreeAsync fails at once; device_free (noexcept, a
  // tensor's destructor) must say so through the count, not swallow it.
  int not_device_memory = 0;
  loom::detail::note_alloc(0, sizeof not_device_memory);  // device_free returns these bytes to the counters
  const std::size_t before = loom::release_error_count();
  const auto in_use = loom::device_memory_stats(0).in_use;
  loom::detail::device_free(&not_device_memory, sizeof not_device_memory, loom::stream_ref(nullptr, 0));
  CHECK(loom::release_error_count() == before + 1);
  CHECK_THAT(loom::last_release_error(), Contains("cudaFreeAsync"));
  CHECK_THAT(loom::last_release_error(), Contains("memory.hpp"));
  CHECK(loom::device_memory_stats(0).in_use == in_use - sizeof not_device_memory);

  loom::detail::pinned_free(&not_device_memory);
  CHECK(loom::release_error_count() == before + 2);
  CHECK_THAT(loom::last_release_error(), Contains("cudaFreeHost"));
}

TEST_CASE("every loom exception derives from loom::error", "[core][error]") {
  STATIC_REQUIRE(std::is_base_of_v<loom::error, loom::shape_error>);
  STATIC_REQUIRE(std::is_base_of_v<loom::error, loom::index_error>);
  STATIC_REQUIRE(std::is_base_of_v<loom::error, loom::value_error>);
  STATIC_REQUIRE(std::is_base_of_v<loom::error, loom::dtype_error>);
  STATIC_REQUIRE(std::is_base_of_v<loom::error, loom::io_error>);
  STATIC_REQUIRE(std::is_base_of_v<loom::error, loom::aliasing_error>);
  STATIC_REQUIRE(std::is_base_of_v<loom::error, loom::device_unavailable>);
  STATIC_REQUIRE(std::is_base_of_v<loom::error, loom::cuda_error>);
  STATIC_REQUIRE(std::is_base_of_v<loom::error, loom::out_of_memory>);
  STATIC_REQUIRE(std::is_base_of_v<std::runtime_error, loom::error>);
}

TEST_CASE("shape checks reject negative extents and overflowing sizes", "[core][shape]") {
  REQUIRE_THROWS_WITH((loom::host_tensor<float, 2>({3, -1})), Contains("negative extent") && Contains("[3, -1]"));
  REQUIRE_THROWS_WITH((loom::host_tensor<float, 3>({1ll << 40, 1ll << 40, 16})), Contains("64-bit"));
  REQUIRE_THROWS_AS((loom::host_tensor<double, 2>({1ll << 31, 1ll << 31})), loom::shape_error);
  CHECK(loom::shape_string(loom::shape<3>{4, 1, 1024}) == "[4, 1, 1024]");
  CHECK(loom::shape_string(loom::shape<0>{}) == "[]");
  CHECK(loom::contiguous_strides(loom::shape<3>{2, 3, 4}) == loom::shape<3>{12, 4, 1});
}
