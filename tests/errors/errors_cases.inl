// SPDX-License-Identifier: Apache-2.0
// Bad input on both executors: each case throws a loom error whose message
// names the values involved, and leaves every output as it was (poisoned
// outputs stay poisoned). The including file defines LOOM_TEST_SPACE and
// LOOM_TEST_TAG. Cases already covered next to their feature (view slicing,
// reshape, permute, npy, matmul, reductions) are not repeated here.
#include <cmath>
#include <limits>
#include <string>

#include <loom/grad/grad.hpp>

#include "loom_test.hpp"

using Catch::Matchers::Contains;
using loom::index_t;
using loom::none;
using loom::range;
using loom::whole;

namespace {
using space_t = LOOM_TEST_SPACE;
constexpr bool on_device = std::is_same_v<space_t, loom::device>;

template <class T, std::size_t R>
loom::tensor<T, R, space_t> in_space(const loom::host_tensor<T, R>& h) {
  if constexpr (on_device)
    return loom::to_device(h);
  else
    return h;
}

template <std::size_t R>
loom::host_tensor<float, R> iota(const loom::shape<R>& s) {
  loom::host_tensor<float, R> h(s);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = static_cast<float>(i);
  return h;
}

template <std::size_t R>
loom::tensor<float, R, space_t> poisoned(const loom::shape<R>& s) {
  loom::host_tensor<float, R> h(s);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = std::numeric_limits<float>::quiet_NaN();
  return in_space(h);
}

template <class X>
bool all_nan(const X& x) {
  const auto h = loom::to_host(x);
  for (index_t i = 0; i < h.size(); ++i)
    if (!std::isnan(h.data()[i])) return false;
  return true;
}

template <class X, class Y>
bool same_contents(const X& x, const Y& y) {
  const auto a = loom::to_host(x);
  const auto b = loom::to_host(y);
  if (a.extents() != b.extents()) return false;
  for (index_t i = 0; i < a.size(); ++i)
    if (!loom_test::same_bits(a.data()[i], b.data()[i])) return false;
  return true;
}
}  // namespace

TEST_CASE("shapes that do not broadcast throw shape_error naming both and write nothing", "[errors]" LOOM_TEST_TAG) {
  auto a = in_space(iota<3>({2, 3, 4}));
  auto b = in_space(iota<2>({3, 5}));
  auto c = in_space(iota<1>({4}));
  auto y = poisoned<3>({2, 3, 4});
  // Right-aligned axes: [2, 3, 4] and [3, 5] disagree on the last axis.
  REQUIRE_THROWS_AS(y = a + b, loom::shape_error);
  REQUIRE_THROWS_WITH(y = a + b, Contains("[2, 3, 4]") && Contains("[3, 5]") && Contains("4 vs 5"));
  // Every operand of a ternary op is checked, the third included.
  REQUIRE_THROWS_WITH(y = loom::where(a > 0, a, b), Contains("[3, 5]"));
  REQUIRE_THROWS_WITH(y = loom::clamp(a, c, b), Contains("[3, 5]"));
  // An expression that broadcasts fine but not to the output's shape.
  auto small = poisoned<3>({2, 1, 4});
  REQUIRE_THROWS_WITH(small = a * c, Contains("shape [2, 3, 4]") && Contains("output of shape [2, 1, 4]"));
  // broadcast_to on an expression, and a row layer into an output of the wrong row length.
  REQUIRE_THROWS_WITH((void)loom::broadcast_to(a * 2, loom::shape<3>{2, 3, 5}),
                      Contains("[2, 3, 4]") && Contains("[2, 3, 5]"));
  auto rows = poisoned<2>({3, 5});
  auto x = in_space(iota<2>({3, 4}));
  REQUIRE_THROWS_AS(rows = loom::softmax(x), loom::shape_error);
  CHECK(all_nan(y));
  CHECK(all_nan(small));
  CHECK(all_nan(rows));
}

TEST_CASE("a layer's arguments that do not broadcast are named by their position", "[errors]" LOOM_TEST_TAG) {
  auto x = in_space(iota<2>({4, 8}));
  auto w = in_space(iota<1>({7}));
  auto y = poisoned<2>({4, 8});
  constexpr auto lay = loom::layer([](auto v, auto k, auto s) { return (v + s) * k; });
  const auto s = in_space(iota<0>({}));
  // Both operands of the op that fails are the layer's arguments.
  constexpr auto direct = loom::layer([](auto v, auto k) { return v * k + 1.0f; });
  REQUIRE_THROWS_WITH(y = direct(x, w), Contains("[4, 8] and [7]") &&
                                            Contains("[4, 8] is argument 0 of the layer, counting from 0") &&
                                            Contains("[7] is argument 1 of the layer, counting from 0"));
  // A subexpression of one argument is named as computed from it.
  constexpr auto gated = loom::layer([](auto v, auto k) { return loom::silu(v) * k; });
  REQUIRE_THROWS_WITH(y = gated(x, w), Contains("[4, 8] is computed from argument 0 of the layer") &&
                                           Contains("[7] is argument 1 of the layer"));
  // Under a subexpression of two arguments only the one that does not fit is named.
  REQUIRE_THROWS_WITH(y = lay(x, w, s), Contains("[7] is argument 1 of the layer") && !Contains("argument 0"));
  // Under loom::grad the inputs asked for are named.
  auto dw = poisoned<1>({7});
  REQUIRE_THROWS_WITH(dw = loom::grad<1>(direct)(x, w, y), Contains("[7] is argument 1 of the layer"));
  CHECK(all_nan(dw));
  // Plain tensors outside a layer have no position to name.
  REQUIRE_THROWS_WITH(y = x * w, Contains("[4, 8] and [7]") && !Contains("argument"));
  CHECK(all_nan(y));
}

TEST_CASE("empty slices are valid and an assignment through them writes nothing", "[errors]" LOOM_TEST_TAG) {
  auto x = in_space(iota<2>({4, 5}));
  auto y = poisoned<2>({4, 5});
  const auto before = loom::launches();
  for (const range r : {range(2, 2), range(5, 5), range(-5, 0), range(0, 0, -1), range(3, 1), range(1, 3, -1)}) {
    auto v = y.slice(whole, r);
    INFO("slice " << r.start << ":" << r.stop << ":" << r.step);
    CHECK(v.extent(1) == 0);
    CHECK(v.size() == 0);
    v = x.slice(whole, r) * 2;
    CHECK(loom::last_eval().path == loom::eval_path::empty);
  }
  const auto after = loom::launches();
  CHECK(after.host == before.host);
  CHECK(after.device == before.device);
  CHECK(all_nan(y));
  // Zero-size axes anywhere broadcast with extent 1 only.
  auto z = in_space(loom::host_tensor<float, 3>({2, 0, 4}));
  auto one = in_space(iota<3>({2, 1, 4}));
  auto out = poisoned<3>({2, 0, 4});
  out = z * one + 1;
  CHECK(loom::last_eval().path == loom::eval_path::empty);
  auto two = in_space(iota<3>({2, 2, 4}));
  REQUIRE_THROWS_WITH(out = z + two, Contains("[2, 0, 4]") && Contains("[2, 2, 4]"));
}

TEST_CASE("slice bounds at the edges: allowed up to the extent, one past throws", "[errors]" LOOM_TEST_TAG) {
  auto x = in_space(iota<1>({6}));
  CHECK(x.slice(range(6, 6)).extent(0) == 0);
  CHECK(x.slice(range(-6, 6)).extent(0) == 6);
  CHECK(x.slice(range(5, none, -1)).extent(0) == 6);
  CHECK(x.slice(range(none, none, -4)).extent(0) == 2);
  REQUIRE_THROWS_WITH(x.slice(range(7, none)), Contains("start 7") && Contains("extent 6"));
  REQUIRE_THROWS_WITH(x.slice(range(0, -7)), Contains("stop -7") && Contains("allowed: -6 to 6"));
  // With a negative step the start must name an element: 6 is one past the end.
  REQUIRE_THROWS_WITH(x.slice(range(6, none, -1)), Contains("start 6"));
  REQUIRE_THROWS_AS(x.slice(range(none, none, 0)), loom::value_error);
  // On an empty axis every explicit bound but 0 is out of range.
  auto e = in_space(loom::host_tensor<float, 1>({0}));
  CHECK(e.slice(range(0, 0)).extent(0) == 0);
  CHECK(e.slice(range(none, none, -1)).extent(0) == 0);
  REQUIRE_THROWS_AS(e.slice(0), loom::index_error);
  REQUIRE_THROWS_AS(e.slice(range(1, none)), loom::index_error);
}

TEST_CASE("an output that aliases an input under another index map throws and stays as it was",
          "[errors]" LOOM_TEST_TAG) {
  auto x = in_space(iota<2>({5, 5}));
  const auto snapshot = loom::contiguous(x);
  // Reversed, shifted, transposed and broadcast reads of the memory being written.
  REQUIRE_THROWS_AS(x = x.slice(range(none, none, -1)) + 0, loom::aliasing_error);
  REQUIRE_THROWS_AS(x.slice(range(0, 4)) = x.slice(range(1, 5)) * 2, loom::aliasing_error);
  REQUIRE_THROWS_WITH(x = loom::exp(x.t()), Contains("overlaps an input") && Contains("loom::materialize"));
  REQUIRE_THROWS_AS(x = x.slice(range(0, 1)) * 2, loom::aliasing_error);
  // A 1-D shift by one element.
  auto flat = x.reshape(loom::shape<1>{25});
  REQUIRE_THROWS_AS(flat.slice(range(1, 25)) = flat.slice(range(0, 24)) + flat.slice(range(0, 24)),
                    loom::aliasing_error);
  // A row layer that reads rows the output overwrites under another map.
  REQUIRE_THROWS_AS(x.slice(range(0, 3)) = loom::softmax(x.slice(range(2, 5))), loom::aliasing_error);
  CHECK(same_contents(x, snapshot));
  // The same index map is fine: an in-place update, also through a strided view.
  x.slice(whole, range(none, none, 2)) = x.slice(whole, range(none, none, 2)) * 2;
  const auto h = loom::to_host(x);
  const auto s = loom::to_host(snapshot);
  for (index_t i = 0; i < 25; ++i) CHECK(h.data()[i] == s.data()[i] * ((i % 5) % 2 == 0 ? 2 : 1));
}

TEST_CASE("axes out of range throw index_error naming the axis and the rank", "[errors]" LOOM_TEST_TAG) {
  auto x = in_space(iota<2>({3, 4}));
  REQUIRE_THROWS_WITH(x.transpose(0, 2), Contains("axis 2 is out of range for rank 2"));
  REQUIRE_THROWS_WITH(x.transpose(-3, 0), Contains("axis -3"));
  REQUIRE_THROWS_WITH(x.unsqueeze(3), Contains("axis 3 is out of range for rank 3"));
  REQUIRE_THROWS_AS(x.squeeze(-3), loom::index_error);
  REQUIRE_THROWS_AS(x.permute({1, 1}), loom::index_error);
}

#if LOOM_CUDA_COMPILER
TEST_CASE("a device allocation larger than the device throws out_of_memory and leaks nothing", "[errors][cuda]") {
  const auto before = loom::device_memory_stats();
  const std::size_t total = loom::gpu::properties().total_memory;
  const index_t too_many = static_cast<index_t>(total / sizeof(float)) * 2;
  try {
    loom::device_tensor<float, 1> t({too_many});
    FAIL("allocated " << too_many << " floats on a device of " << total << " bytes");
  } catch (const loom::out_of_memory& e) {
    CHECK(e.requested() == static_cast<std::size_t>(too_many) * sizeof(float));
    CHECK(e.total() == total);
    CHECK(e.free() <= total);
    CHECK_THAT(std::string(e.what()), Contains("requested " + std::to_string(e.requested()) + " bytes") &&
                                          Contains("total"));
  }
  const auto after = loom::device_memory_stats();
  CHECK(after.in_use == before.in_use);
  CHECK(after.allocations == before.allocations);
  // The device still works.
  auto x = in_space(iota<1>({1000}));
  auto y = poisoned<1>({1000});
  y = x * 2;
  CHECK(loom::to_host(y)(999) == 1998.0f);
}

TEST_CASE("a pinned host allocation that cannot be served throws out_of_memory naming the bytes", "[errors][cuda]") {
  const std::size_t huge_bytes = std::size_t{1} << 62;
  try {
    loom::host_tensor<float, 1> t({index_t{1} << 60}, loom::host_memory::pinned);
    FAIL("allocated " << huge_bytes << " bytes of pinned host memory");
  } catch (const loom::out_of_memory& e) {
    CHECK(e.requested() == huge_bytes);
    CHECK(e.kind() == loom::memory_kind::pinned_host);
    CHECK_THAT(std::string(e.what()), Contains("pinned host memory") && Contains("requested 4611686018427387904 bytes"));
  }
  loom::host_tensor<float, 1> small({7}, loom::host_memory::pinned);  // pinned memory still comes
  CHECK(small.is_pinned());
}

TEST_CASE("running out of memory inside a multi-step copy frees its scratch and leaves the destination",
          "[errors][cuda]") {
  // A strided device -> host copy needs a device scratch buffer as large as the
  // data; fill the device so that the scratch cannot be had.
  constexpr index_t n = 64 << 20;  // 256 MiB of floats
  auto x = loom::zeros<float, 2, loom::device>({2, n / 2});
  loom::current_stream().synchronize();
  loom::release_pool_memory();  // what the pool keeps for reuse would count as used
  std::size_t free_b = 0, total_b = 0;
  LOOM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const index_t hog_bytes = static_cast<index_t>(free_b) - (128 << 20);
  REQUIRE(hog_bytes > 0);
  loom::device_tensor<std::uint8_t, 1> hog({hog_bytes});
  const auto before = loom::device_memory_stats();
  loom::host_tensor<float, 2> dst({n / 2, 2});
  for (index_t i = 0; i < dst.size(); i += 4096) dst.data()[i] = -1.0f;
  REQUIRE_THROWS_AS(loom::copy(x.t(), dst), loom::out_of_memory);
  const auto after = loom::device_memory_stats();
  CHECK(after.in_use == before.in_use);
  CHECK(after.allocations == before.allocations);
  for (index_t i = 0; i < dst.size(); i += 4096) REQUIRE(dst.data()[i] == -1.0f);
  hog = loom::device_tensor<std::uint8_t, 1>();
  loom::copy(x.t(), dst);  // with the memory back, the same copy works
  CHECK(dst(n / 2 - 1, 1) == 0.0f);
  // The pool would keep the hog's memory for this program's later tests.
  loom::current_stream().synchronize();
  loom::release_pool_memory();
}

TEST_CASE("the device's pool keeps freed memory through a synchronization until release_pool_memory",
          "[errors][cuda]") {
  const int dev = loom::gpu::current_device();
  cudaMemPool_t pool = nullptr;
  LOOM_CUDA_CHECK(cudaDeviceGetMemPool(&pool, dev));
  auto attr = [&](cudaMemPoolAttr a) {
    std::uint64_t v = 0;
    LOOM_CUDA_CHECK(cudaMemPoolGetAttribute(pool, a, &v));
    return v;
  };
  constexpr std::uint64_t bytes = std::uint64_t{64} << 20;
  {
    loom::device_tensor<float, 1> t({static_cast<index_t>(bytes / sizeof(float))});
    loom::fill(t, 1.0f);
  }
  loom::current_stream().synchronize();  // with CUDA's threshold of 0 the pool would give the 64 MiB back here
  CHECK(attr(cudaMemPoolAttrReleaseThreshold) == std::numeric_limits<std::uint64_t>::max());
  const std::uint64_t reserved = attr(cudaMemPoolAttrReservedMemCurrent), used = attr(cudaMemPoolAttrUsedMemCurrent);
  INFO("reserved " << reserved << ", used " << used);
  CHECK(reserved >= used + bytes);
  loom::release_pool_memory();
  const std::uint64_t after = attr(cudaMemPoolAttrReservedMemCurrent);
  INFO("reserved after release_pool_memory " << after);
  CHECK(after + bytes <= reserved);
  REQUIRE_THROWS_WITH(loom::release_pool_memory(loom::gpu::device_count()), Contains("does not exist"));
}

TEST_CASE("unaligned device views never take the vector paths", "[errors][cuda]") {
  auto x = in_space(iota<2>({64, 257}));
  auto y = poisoned<2>({64, 256});
  y = x.slice(whole, range(0, 256)) * 2;  // rows of 257 floats: row starts are not 16-byte aligned
  CHECK(loom::last_eval().path == loom::eval_path::general);
  auto sq = in_space(iota<2>({64, 256}));
  y = loom::softmax(sq);
  CHECK(loom::last_eval().vector_width == 4);
  y = loom::softmax(x.slice(whole, range(1, 257)));
  CHECK(loom::last_eval().path == loom::eval_path::rows);
  CHECK(loom::last_eval().vector_width == 1);
  auto flat = in_space(iota<1>({1027}));
  auto z = poisoned<1>({1024});
  for (index_t off = 1; off < 4; ++off) {
    z = flat.slice(range(off, off + 1024)) + 1;
    CHECK(loom::last_eval().path == loom::eval_path::general);
    CHECK(loom::to_host(z)(1023) == static_cast<float>(off + 1024));
  }
}

TEST_CASE("a tensor allocated on another device is freed there and counted there", "[errors][cuda]") {
  if (loom::gpu::device_count() < 2) {
    SUCCEED("one device: nothing to check");
    return;
  }
  const auto before0 = loom::device_memory_stats(0), before1 = loom::device_memory_stats(1);
  {
    loom::gpu::set_device(1);
    loom::stream s1;
    loom::gpu::set_device(0);
    loom::device_tensor<float, 1> t({1024}, s1);
    CHECK(loom::device_memory_stats(1).in_use == before1.in_use + 4096);
    CHECK(loom::device_memory_stats(0).in_use == before0.in_use);
    CHECK(t.stream().device() == 1);
  }
  CHECK(loom::device_memory_stats(1).in_use == before1.in_use);
}

TEST_CASE("an input or a stream of another device is refused before anything runs", "[errors][cuda]") {
  if (loom::gpu::device_count() < 2) {
    WARN("one device: a tensor of another device cannot be made here; the check is not exercised");
    return;
  }
  loom::gpu::set_device(1);
  loom::stream s1;
  loom::gpu::set_device(0);
  loom::device_tensor<float, 1> other({1000}, s1);
  loom::fill(other, 1.0f);
  s1.synchronize();
  auto y = poisoned<1>({1000});
  const auto mine = in_space(iota<1>({1000}));
  REQUIRE_THROWS_WITH(loom::assign(y, mine + other),
                      Contains("an input tensor lives on device 1, but the assignment runs on device 0"));
  REQUIRE_THROWS_WITH(loom::assign(y, loom::softmax(other)), Contains("lives on device 1"));
  {
    loom::stream_guard g(s1);
    REQUIRE_THROWS_WITH(loom::assign(y, mine * 2), Contains("the current stream belongs to device 1"));
  }
  CHECK(std::isnan(loom::to_host(y)(0)));  // nothing was written
}
#endif
