// SPDX-License-Identifier: Apache-2.0
// Printing of host tensors and views. The expected texts of the larger cases
// are NumPy's own output (np.array2string with floatmode='fixed', precision=4,
// separator=', ', prefix='tensor('), so the layout rules are checked against
// an independent implementation.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include <loom/tensor/print.hpp>

using Catch::Matchers::Contains;
using loom::host_tensor;
using loom::index_t;
using loom::shape;

namespace {
// A host tensor whose row-major element i holds f(i).
template <class T, std::size_t R, class F>
host_tensor<T, R> make(const shape<R>& s, F f) {
  host_tensor<T, R> t(s);
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = f(i);
  return t;
}
}  // namespace

TEST_CASE("to_string prints a float matrix like NumPy with shape, dtype and space", "[tensor][io]") {
  const host_tensor<float, 2> t({2, 2}, {1.5f, 2.f, 3.f, 4.f});
  CHECK(loom::to_string(t) ==
        "tensor([[1.5000, 2.0000],\n"
        "        [3.0000, 4.0000]], shape=[2, 2], dtype=float32, space=host)");
}

TEMPLATE_TEST_CASE("to_string prints integers plainly and right-aligned for every integer dtype", "[tensor][io]",
                   std::int8_t, std::uint8_t, std::int32_t, std::int64_t) {
  const host_tensor<TestType, 1> t({3}, {TestType(1), TestType(20), TestType(100)});
  const std::string name(loom::dtype_name(loom::dtype_of<TestType>));
  CHECK(loom::to_string(t) == "tensor([  1,  20, 100], shape=[3], dtype=" + name + ", space=host)");
}

TEST_CASE("to_string prints int8 extremes as numbers, not characters", "[tensor][io]") {
  const host_tensor<std::int8_t, 1> t({2}, {std::int8_t(-128), std::int8_t(127)});
  CHECK(loom::to_string(t) == "tensor([-128,  127], shape=[2], dtype=int8, space=host)");
}

TEMPLATE_TEST_CASE("to_string prints every float dtype with four decimals, half and bf16 via float", "[tensor][io]",
                   loom::half, loom::bf16, float, double) {
  const host_tensor<TestType, 1> t({2}, {TestType(1.5f), TestType(-0.25f)});
  const std::string name(loom::dtype_name(loom::dtype_of<TestType>));
  CHECK(loom::to_string(t) == "tensor([ 1.5000, -0.2500], shape=[2], dtype=" + name + ", space=host)");
}

TEST_CASE("to_string prints bools as True and False aligned", "[tensor][io]") {
  const host_tensor<bool, 1> t({2}, {true, false});
  CHECK(loom::to_string(t) == "tensor([ True, False], shape=[2], dtype=bool, space=host)");
}

TEST_CASE("to_string prints a rank-0 tensor as its value", "[tensor][io]") {
  host_tensor<float, 0> t(shape<0>{});
  t() = 3.5f;
  CHECK(loom::to_string(t) == "tensor(3.5000, shape=[], dtype=float32, space=host)");
}

TEST_CASE("to_string prints empty brackets when a tensor has no elements", "[tensor][io]") {
  CHECK(loom::to_string(host_tensor<float, 2>({0, 3})) == "tensor([], shape=[0, 3], dtype=float32, space=host)");
  CHECK(loom::to_string(host_tensor<float, 0>()) == "tensor([], shape=[], dtype=float32, space=host)");
}

TEST_CASE("to_string spells nan and inf and aligns them with the numbers", "[tensor][io]") {
  const float inf = std::numeric_limits<float>::infinity();
  const host_tensor<float, 1> t({4}, {std::numeric_limits<float>::quiet_NaN(), inf, -inf, 1.f});
  CHECK(loom::to_string(t) == "tensor([   nan,    inf,   -inf, 1.0000], shape=[4], dtype=float32, space=host)");
  const host_tensor<loom::half, 1> h({2}, {loom::half(-inf), loom::half(std::nanf(""))});
  CHECK(loom::to_string(h) == "tensor([-inf,  nan], shape=[2], dtype=float16, space=host)");
}

TEST_CASE("to_string switches to scientific notation when magnitudes are extreme", "[tensor][io]") {
  CHECK(loom::to_string(host_tensor<float, 1>({2}, {1e-5f, 1.f})) ==
        "tensor([1.0000e-05, 1.0000e+00], shape=[2], dtype=float32, space=host)");
  CHECK(loom::to_string(host_tensor<float, 1>({2}, {1e8f, -2.f})) ==
        "tensor([ 1.0000e+08, -2.0000e+00], shape=[2], dtype=float32, space=host)");
  // NumPy pads every exponent to the longest one.
  CHECK(loom::to_string(host_tensor<double, 1>({2}, {1e100, 1e8})) ==
        "tensor([1.0000e+100, 1.0000e+008], shape=[2], dtype=float64, space=host)");
  CHECK(loom::to_string(host_tensor<float, 1>({2}, {0.f, 0.f})) ==
        "tensor([0.0000, 0.0000], shape=[2], dtype=float32, space=host)");
}

TEST_CASE("to_string separates the blocks of a rank-3 tensor by a blank line", "[tensor][io]") {
  const auto t = make<std::int64_t>(shape<3>{2, 2, 2}, [](index_t i) { return i; });
  CHECK(loom::to_string(t) ==
        "tensor([[[0, 1],\n"
        "         [2, 3]],\n"
        "\n"
        "        [[4, 5],\n"
        "         [6, 7]]], shape=[2, 2, 2], dtype=int64, space=host)");
}

TEST_CASE("to_string wraps long rows at 75 characters as NumPy does", "[tensor][io]") {
  const auto t = make<float>(shape<1>{30}, [](index_t i) { return 1.5f * static_cast<float>(i); });
  CHECK(loom::to_string(t) ==
        "tensor([ 0.0000,  1.5000,  3.0000,  4.5000,  6.0000,  7.5000,  9.0000,\n"
        "        10.5000, 12.0000, 13.5000, 15.0000, 16.5000, 18.0000, 19.5000,\n"
        "        21.0000, 22.5000, 24.0000, 25.5000, 27.0000, 28.5000, 30.0000,\n"
        "        31.5000, 33.0000, 34.5000, 36.0000, 37.5000, 39.0000, 40.5000,\n"
        "        42.0000, 43.5000], shape=[30], dtype=float32, space=host)");
}

TEST_CASE("to_string summarizes each long axis when there are more elements than the threshold", "[tensor][io]") {
  const auto t = make<std::int32_t>(shape<2>{20, 100}, [](index_t i) { return static_cast<std::int32_t>(i); });
  CHECK(loom::to_string(t) ==
        "tensor([[   0,    1,    2, ...,   97,   98,   99],\n"
        "        [ 100,  101,  102, ...,  197,  198,  199],\n"
        "        [ 200,  201,  202, ...,  297,  298,  299],\n"
        "        ...,\n"
        "        [1700, 1701, 1702, ..., 1797, 1798, 1799],\n"
        "        [1800, 1801, 1802, ..., 1897, 1898, 1899],\n"
        "        [1900, 1901, 1902, ..., 1997, 1998, 1999]], shape=[20, 100], dtype=int32, space=host)");
}

TEST_CASE("to_string of a 2000-element float tensor shows the first and last values around ...", "[tensor][io]") {
  const auto t = make<float>(shape<1>{2000}, [](index_t i) { return static_cast<float>(i) + 0.5f; });
  const std::string s = loom::to_string(t);
  CHECK(s == "tensor([5.0000e-01, 1.5000e+00, 2.5000e+00, ..., 1.9975e+03, 1.9985e+03,\n"
             "        1.9995e+03], shape=[2000], dtype=float32, space=host)");
  CHECK_THAT(s, Contains("..."));
  CHECK_THAT(s, Contains("5.0000e-01"));
  CHECK_THAT(s, Contains("1.9995e+03"));
}

TEST_CASE("to_string follows print_options for edge items, threshold and precision", "[tensor][io]") {
  const auto t = make<double>(shape<1>{10}, [](index_t i) { return static_cast<double>(i) / 4; });
  loom::print_options o;
  o.edge_items = 2;
  o.threshold = 5;
  o.precision = 2;
  CHECK(loom::to_string(t, o) == "tensor([0.00, 0.25, ..., 2.00, 2.25], shape=[10], dtype=float64, space=host)");
  o.precision = -1;
  CHECK_THROWS_AS(loom::to_string(t, o), loom::value_error);
}

TEST_CASE("to_string of a transposed view prints the transposed values", "[tensor][io]") {
  auto t = make<std::int32_t>(shape<2>{2, 3}, [](index_t i) { return static_cast<std::int32_t>(i); });
  CHECK(loom::to_string(t.t()) ==
        "tensor([[0, 3],\n"
        "        [1, 4],\n"
        "        [2, 5]], shape=[3, 2], dtype=int32, space=host)");
}

TEST_CASE("to_string walks negative-stride and broadcast views by coordinates", "[tensor][io]") {
  auto t = make<std::int32_t>(shape<1>{4}, [](index_t i) { return static_cast<std::int32_t>(i); });
  const auto reversed = t.slice(loom::range(loom::none, loom::none, -1));
  CHECK(loom::to_string(reversed) == "tensor([3, 2, 1, 0], shape=[4], dtype=int32, space=host)");
  CHECK(loom::to_string(t.broadcast_to(shape<2>{2, 4})) ==
        "tensor([[0, 1, 2, 3],\n"
        "        [0, 1, 2, 3]], shape=[2, 4], dtype=int32, space=host)");
}

TEST_CASE("operator<< writes the same text as to_string for tensors and views", "[tensor][io]") {
  host_tensor<float, 2> t({1, 2}, {1.f, 2.f});
  std::ostringstream a, b, c;
  a << t;
  b << t.view();
  c << loom::host_view<const float, 2>(t.view());
  CHECK(a.str() == loom::to_string(t));
  CHECK(b.str() == a.str());
  CHECK(c.str() == a.str());
}
