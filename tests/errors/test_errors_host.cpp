// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#include "errors_cases.inl"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

// Host-only bad input: no GPU or driver, 64-bit sizes, failed host
// allocations, unreadable files.

#if defined(__SANITIZE_ADDRESS__)  // g++
#define LOOM_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang
#define LOOM_TEST_ASAN 1
#endif
#endif
#if defined(LOOM_TEST_ASAN)
// Under AddressSanitizer an allocation that cannot be served aborts the
// program unless the allocator may return null, as malloc does without it;
// loom's own answer to a failed allocation is what these tests check.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

TEST_CASE("a host allocation that cannot be served throws out_of_memory naming the bytes and the memory",
          "[errors][memory]") {
  // 2^60 floats: 2^62 bytes, more than any machine's address space serves.
  const std::size_t huge_bytes = std::size_t{1} << 62;
  try {
    loom::host_tensor<float, 1> t({index_t{1} << 60});
    FAIL("allocated " << huge_bytes << " bytes of host memory");
  } catch (const loom::out_of_memory& e) {
    CHECK(e.requested() == huge_bytes);
    CHECK(e.kind() == loom::memory_kind::pageable_host);
    CHECK_THAT(std::string(e.what()), Contains("pageable host memory") && Contains("requested 4611686018427387904 bytes"));
  }
  // 2^62 - 1 floats: 2^64 - 4 bytes, which cannot even be rounded up to the alignment.
  try {
    loom::host_tensor<float, 1> t({(index_t{1} << 62) - 1}, loom::host_memory::pageable);
    FAIL("allocated 2^64 - 4 bytes of host memory");
  } catch (const loom::out_of_memory& e) {
    CHECK(e.requested() == std::numeric_limits<std::size_t>::max() - 3);
    CHECK(e.kind() == loom::memory_kind::pageable_host);
  }
  REQUIRE_THROWS_AS((loom::zeros<double, 1, loom::host>({index_t{1} << 59})), loom::out_of_memory);
  // The heap still serves.
  loom::host_tensor<float, 1> small({7});
  small = 1.5f;
  CHECK(small(6) == 1.5f);
}

TEST_CASE("without a GPU every device entry point throws device_unavailable saying why", "[errors][device]") {
  if (loom::gpu::is_available()) {
    SUCCEED("a GPU is present: the [cuda] programs cover the device");
    return;
  }
  const std::string reason = loom::gpu::unavailable_reason();
  REQUIRE_FALSE(reason.empty());
  REQUIRE_THROWS_WITH((loom::zeros<float, 2, loom::device>({2, 3})), Contains("needs a GPU") && Contains(reason));
  REQUIRE_THROWS_AS(loom::device_memory_stats(), loom::device_unavailable);
  REQUIRE_THROWS_AS(loom::reset_peak_memory(), loom::device_unavailable);
  REQUIRE_THROWS_AS(loom::gpu::set_device(0), loom::device_unavailable);
  REQUIRE_THROWS_AS(loom::gpu::device_synchronize(), loom::device_unavailable);
  REQUIRE_THROWS_AS(loom::stream_guard(loom::stream_ref{}), loom::device_unavailable);
  REQUIRE_THROWS_AS(loom::stream_ref{}.synchronize(), loom::device_unavailable);
  loom::host_tensor<float, 2> h({2, 3});
  REQUIRE_THROWS_AS(loom::copy(h, loom::device_view<float, 2>(nullptr, loom::shape<2>{2, 3})),
                    loom::device_unavailable);
  // A failed device allocation leaves the host data alone and nothing allocated.
  for (index_t i = 0; i < 6; ++i) h.data()[i] = static_cast<float>(i);
  REQUIRE_THROWS_AS(loom::to_device(h), loom::device_unavailable);
  for (index_t i = 0; i < 6; ++i) CHECK(h.data()[i] == static_cast<float>(i));
  CHECK(loom::device_memory_stats(0).in_use == 0);
}

TEST_CASE("a host tensor of more than 2^31 elements evaluates with 64-bit indexing", "[errors][big]") {
  // 2^31 + 7 int8 elements (2 GiB each for x and y): every index past 2^31 is
  // reached on the contiguous path, and views whose offsets exceed 2^31 on the
  // general path.
  constexpr index_t n = (index_t{1} << 31) + 7;
  loom::host_tensor<std::int8_t, 1> x({n});
  loom::detail::host_for_each(n, [&](index_t i) { x.data()[i] = static_cast<std::int8_t>(i % 101); });
  loom::host_tensor<std::int8_t, 1> y({n});
  y = x + x;  // int8 wraps
  CHECK(loom::last_eval().path == loom::eval_path::contiguous);
  for (index_t i : {index_t{0}, index_t{100}, (index_t{1} << 31) - 1, index_t{1} << 31, n - 1}) {
    INFO("element " << i);
    CHECK(y(i) == static_cast<std::int8_t>(2 * (i % 101)));
  }
  // A strided view starting below 2^31 and crossing it, written into a small tensor.
  loom::host_tensor<std::int32_t, 1> z({5});
  z = loom::cast<std::int32_t>(x.slice(range((index_t{1} << 31) - 8, none, 3))) * 1000;
  CHECK(loom::last_eval().path == loom::eval_path::general);
  for (index_t k = 0; k < 5; ++k) CHECK(z(k) == ((((index_t{1} << 31) - 8 + 3 * k) % 101) * 1000));
  // A 2-D view reaching offsets above 2^31 (the ends of the rows of a [2, 2^30 + 3] reshape, reversed).
  auto rows = x.slice(range(0, n - 1)).reshape(loom::shape<2>{2, (n - 1) / 2});
  loom::host_tensor<std::int8_t, 2> last({2, 3});
  last = rows.slice(range(none, none, -1), range(-3, none)) - 1;
  for (index_t r = 0; r < 2; ++r)
    for (index_t c = 0; c < 3; ++c) {
      const index_t src = (1 - r) * ((n - 1) / 2) + (n - 1) / 2 - 3 + c;
      CHECK(last(r, c) == static_cast<std::int8_t>(src % 101 - 1));
    }
  // The general path over all 2^31 + 6 elements: a transposed read into the same memory as y.
  auto yt = y.slice(range(0, n - 1)).reshape(loom::shape<2>{(n - 1) / 2, 2});
  loom::assign(yt, rows.t());  // (`yt = rows.t()` would rebind the view, as std::span does)
  CHECK(loom::last_eval().path == loom::eval_path::general);
  for (index_t i : {index_t{0}, index_t{1}, (index_t{1} << 31) + 1, n - 3, n - 2}) {
    INFO("element " << i);
    const index_t row = i / 2, col = i % 2;
    CHECK(y(i) == static_cast<std::int8_t>((col * ((n - 1) / 2) + row) % 101));
  }
}

namespace {
struct temp_dir {
  std::filesystem::path p = std::filesystem::temp_directory_path() / ("loom_errors_" + std::to_string(::getpid()));
  temp_dir() { std::filesystem::create_directories(p); }
  ~temp_dir() { std::filesystem::remove_all(p); }
};
}  // namespace

TEST_CASE("load_npy of an empty file or a directory throws io_error naming the path", "[errors][io]") {
  temp_dir d;
  const std::string empty = (d.p / "empty.npy").string();
  { std::ofstream f(empty, std::ios::binary); }
  REQUIRE_THROWS_AS((loom::load_npy<float, 1>(empty)), loom::io_error);
  REQUIRE_THROWS_WITH((loom::load_npy<float, 1>(empty)), Contains(empty));
  const std::string dir = d.p.string();
  REQUIRE_THROWS_AS((loom::load_npy<float, 1>(dir)), loom::io_error);
  REQUIRE_THROWS_WITH((loom::load_npy<float, 1>(dir)), Contains(dir));
}
