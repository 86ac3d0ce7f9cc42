// SPDX-License-Identifier: Apache-2.0
// Device detection and the behaviour of device operations on a machine without
// a usable GPU (CI and developer machines). On a GPU machine the no-GPU cases
// are not applicable and the [cuda] programs cover the device.
#include "loom_test.hpp"

#if LOOM_HAS_OPENMP
#include <omp.h>
#endif

using Catch::Matchers::Contains;

TEST_CASE("device queries answer cleanly whatever the machine", "[core][device]") {
  const int n = loom::gpu::device_count();
  CHECK(n >= 0);
  CHECK(loom::gpu::is_available() == (n > 0));
  CHECK(loom::gpu::unavailable_reason().empty() == (n > 0));
  const std::string report = loom::env_report();
  CHECK_THAT(report, Contains("loom " LOOM_VERSION_STRING));
  CHECK_THAT(report, Contains("CUDA runtime 13."));
  CHECK_THAT(report, Contains("CCCL "));
  CHECK_THAT(report, Contains("cuBLAS "));
  CHECK_THAT(report, Contains("devices: "));
}

TEST_CASE("host_threads and env_report say how many threads the host executor runs on", "[core][device]") {
#if LOOM_HAS_OPENMP
  CHECK(loom::host_threads() == omp_get_max_threads());
  CHECK_THAT(loom::env_report(), Contains("OpenMP on, " + std::to_string(omp_get_max_threads()) + " host threads"));
#else
  CHECK(loom::host_threads() == 1);
  CHECK_THAT(loom::env_report(), Contains("OpenMP off"));
#endif
}

TEST_CASE("device operations throw device_unavailable saying why when there is no GPU", "[core][device]") {
  if (loom::gpu::is_available()) {
    SUCCEED("a GPU is present; the [cuda] programs test the device paths");
    return;
  }
  const std::string reason = loom::gpu::unavailable_reason();
  INFO(reason);
  CHECK((reason.find("driver") != std::string::npos || reason.find("no GPU") != std::string::npos));
  CHECK_THAT(loom::env_report(), Contains("devices: none (" + reason + ")"));
  REQUIRE_THROWS_AS(loom::gpu::require_device(), loom::device_unavailable);
  REQUIRE_THROWS_WITH(loom::gpu::current_device(), Contains("needs a GPU") && Contains(reason));
  REQUIRE_THROWS_AS(loom::gpu::properties(0), loom::device_unavailable);
  REQUIRE_THROWS_AS(loom::stream(), loom::device_unavailable);
  REQUIRE_THROWS_AS(loom::event(), loom::device_unavailable);
  REQUIRE_THROWS_AS(loom::current_stream(), loom::device_unavailable);
  REQUIRE_THROWS_WITH((loom::device_tensor<float, 2>({3, 4})),
                      Contains("allocating a device tensor needs a GPU") && Contains(reason));
  loom::host_tensor<float, 1> h({5});
  REQUIRE_THROWS_AS(loom::to_device(h), loom::device_unavailable);
  REQUIRE_THROWS_AS((loom::host_tensor<float, 1>({4}, loom::host_memory::pinned)), loom::device_unavailable);
  REQUIRE_THROWS_WITH(loom::release_pool_memory(0), Contains("release_pool_memory() needs a GPU") && Contains(reason));
  REQUIRE_THROWS_AS(loom::release_pool_memory(), loom::device_unavailable);
  // Errors derive from loom::error, so one handler catches them all.
  REQUIRE_THROWS_AS(loom::gpu::require_device(), loom::error);
  // Memory statistics of device 0 exist (all zero) without a GPU.
  const auto st = loom::device_memory_stats(0);
  CHECK(st.in_use == 0);
  CHECK(st.allocations == 0);
}

TEST_CASE("LOOM_KEEP_POOL_MEMORY is 0 or 1 and nothing else", "[core][device]") {
  using loom::detail::parse_keep_pool_memory;
  CHECK(parse_keep_pool_memory(nullptr));
  CHECK(parse_keep_pool_memory(""));
  CHECK(parse_keep_pool_memory("1"));
  CHECK_FALSE(parse_keep_pool_memory("0"));
  REQUIRE_THROWS_AS(parse_keep_pool_memory("yes"), loom::value_error);
  REQUIRE_THROWS_WITH(parse_keep_pool_memory("00"), Contains("LOOM_KEEP_POOL_MEMORY must be 0 or 1, got '00'"));
}

TEST_CASE("empty device tensors need no GPU", "[core][device]") {
  loom::device_tensor<float, 2> t({0, 7});
  CHECK(t.size() == 0);
  CHECK(t.data() == nullptr);
  CHECK(t.extent(1) == 7);
  loom::host_tensor<float, 2> h({0, 7});
  loom::copy(h, t);  // nothing to move: succeeds
  auto back = loom::to_host(t);
  CHECK(back.size() == 0);
}
