// SPDX-License-Identifier: Apache-2.0
// Part 0 of the host grad tests (two files compile side by side).
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#define LOOM_GRAD_PART 0
#include "grad_cases.inl"

// Each value once: a derived backward evaluates every forward value it
// needs once per element, counted through a user op whose value and
// derivative count their calls (host only: the counters are host atomics).
namespace {
std::atomic<long> counted_values{0}, counted_derivatives{0};
// tanh, counting its calls.
struct counted_tanh {
  static constexpr bool floating = true;
  template <class T>
  T operator()(T x) const {
    counted_values.fetch_add(1, std::memory_order_relaxed);
    return std::tanh(x);
  }
  template <int, class T>
  T derivative(T x) const {
    counted_derivatives.fetch_add(1, std::memory_order_relaxed);
    const T t = std::tanh(x);
    return T(1) - t * t;
  }
};
void reset_counts() {
  counted_values = 0;
  counted_derivatives = 0;
}

// Runs the derived backward of `lay` over (x, b, rest..., dy) into poisoned
// gradients of x and b, checks it against finite differences in double and
// returns how many times the forward's op and its derivative ran.
template <class L, class... Rest>
std::pair<long, long> counted_backward(const L& lay, const loom::host_tensor<double, 2>& x,
                                       const loom::host_tensor<double, 1>& b, const loom::host_tensor<double, 2>& dy,
                                       const Rest&... rest) {
  auto dx = poisoned<double, 2>(x.extents());
  auto db = poisoned<double, 1>(b.extents());
  reset_counts();
  const auto info = loom::grad<0, 1>(lay)(x, b, rest..., dy).into(dx, db);
  const std::pair<long, long> counts{counted_values.load(), counted_derivatives.load()};
  CHECK(info.kernels == 2);  // one row kernel with the column sums of db, and their sum
  check_close(dx, finite_differences<0>(lay, dy, x, b, rest...), 1e-6);
  check_close(db, finite_differences<1>(lay, dy, x, b, rest...), 1e-6);
  return counts;
}
}  // namespace

TEST_CASE("grad: the derived backward evaluates each forward value once per element", "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad each value once"));
  const index_t n = 5, c = 37;  // one step of 32 columns and 5 columns one at a time
  const long elements = n * c;
  const auto x = random_host<double, 2>(loom::shape<2>{n, c}, g, -2, 2);
  const auto r = random_host<double, 2>(loom::shape<2>{n, c}, g, -1, 1);
  const auto dy = random_host<double, 2>(loom::shape<2>{n, c}, g, -1, 1);
  const auto b = random_host<double, 1>(loom::shape<1>{c}, g, -1, 1);
  const auto w = random_host<double, 1>(loom::shape<1>{c}, g, 0.5, 1.5);

  // The block rms_norm(f(x + b) + r) * w: f(x + b) + r occurs in both sums
  // of the norm's backward, in the output and in the gradient of w;
  // f'(x + b) in the gradients of x and b.
  constexpr auto block = loom::layer([](auto v, auto bias, auto res, auto wt) {
    return loom::rms_norm(loom::map(counted_tanh{}, v + bias) + res, wt, 1e-6);
  });
  auto y = poisoned<double, 2>(x.extents());
  reset_counts();
  y = block(x, b, r, w);
  CHECK(counted_values == elements);  // the forward: f once per element for the sum and the output
  const auto blk = counted_backward(block, x, b, dy, r, w);
  CHECK(blk.first == elements);
  CHECK(blk.second == elements);

  // A softmax over f(x + b).
  constexpr auto soft =
      loom::layer([](auto v, auto bias) { return loom::softmax(loom::map(counted_tanh{}, v + bias)); });
  const auto sm = counted_backward(soft, x, b, dy);
  CHECK(sm.first == elements);
  CHECK(sm.second == elements);
}
