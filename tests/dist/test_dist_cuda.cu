// SPDX-License-Identifier: Apache-2.0
// loom::dist on device tensors over NCCL ([cuda]; skipped without a GPU):
// one rank made from the environment, so the whole device path runs on a
// machine with one GPU: the NCCL communicator's creation, every collective
// on tensors and strided views of each dtype (the v-variants too), the metadata check over NCCL,
// synchronize, ZeRO-1 (clipped, fed by buckets), gradient buckets. With one rank every result equals its input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <loom/dist/buckets.hpp>
#include <loom/dist/communicator.hpp>
#include <loom/dist/zero.hpp>
#include <loom/tensor/tensor.hpp>

namespace {
using loom::index_t;
using loom::none;
using loom::range;
using loom::dist::reduce_op;

loom::dist::communicator& one_rank() {
  static loom::dist::communicator c = [] {
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("NCCL_COMM_ID", "127.0.0.1:29731", 1);
    loom::dist::options o;
    o.timeout = std::chrono::seconds(60);
    o.check_metadata = true;
    return loom::dist::communicator::from_env(o);
  }();
  return c;
}

template <class T>
loom::tensor<T, 2, loom::host> random_host(index_t rows, index_t cols, std::uint64_t seed) {
  loom::tensor<T, 2, loom::host> h({rows, cols});
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(-4.0f, 4.0f);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = T(d(g));
  return h;
}
template <class T>
bool same(const loom::tensor<T, 2, loom::host>& a, const loom::tensor<T, 2, loom::host>& b) {
  for (index_t i = 0; i < a.size(); ++i)
    if (static_cast<float>(a.data()[i]) != static_cast<float>(b.data()[i])) return false;
  return true;
}
}  // namespace

TEMPLATE_TEST_CASE("dist device collectives on one rank leave tensors and views as they were", "[cuda][dist]",
                   loom::half, loom::bf16, float, double) {
  using T = TestType;
  auto& c = one_rank();
  const auto h = random_host<T>(257, 3, 7);
  for (reduce_op op : {reduce_op::sum, reduce_op::average, reduce_op::max}) {
    auto x = loom::to_device(h);
    c.all_reduce(x, op);
    c.synchronize();
    REQUIRE(same(loom::to_host(x), h));
  }
  {  // a strided view: the parent's other elements untouched
    const auto hp = random_host<T>(9, 13, 8);
    auto parent = loom::to_device(hp);
    c.all_reduce(parent.slice(range(1, none, 2), range(0, none, 3)), reduce_op::sum);
    REQUIRE(same(loom::to_host(parent), hp));
  }
  {
    auto in = loom::to_device(h);
    auto out = loom::to_device(random_host<T>(3, 257, 9));
    c.all_gather(in, out.t());
    REQUIRE(same(loom::to_host(out.t()), h));
    auto back = loom::to_device(random_host<T>(257, 3, 10));
    c.reduce_scatter(out.t(), back, reduce_op::average);
    REQUIRE(same(loom::to_host(back), h));
    c.broadcast(back, 0);
    c.barrier();
    REQUIRE(same(loom::to_host(back), h));
  }
  {  // the v-variants: one rank's count is every row
    const std::vector<index_t> counts{257};
    auto in = loom::to_device(h);
    auto out = loom::to_device(random_host<T>(3, 257, 15));
    c.all_gather_v(in, out.t(), counts);
    REQUIRE(same(loom::to_host(out.t()), h));
    auto back = loom::to_device(random_host<T>(257, 3, 16));
    c.reduce_scatter_v(out.t(), back, counts, reduce_op::sum);
    REQUIRE(same(loom::to_host(back), h));
    REQUIRE_THROWS_AS(c.all_gather_v(in, out.t(), std::vector<index_t>{256}), loom::dist::mismatch_error);
  }
  {
    auto in = loom::to_device(h);
    auto wrong = loom::to_device(random_host<T>(256, 3, 11));
    REQUIRE_THROWS_AS(c.all_gather(in, wrong), loom::dist::mismatch_error);
  }
}

TEST_CASE("dist zero1_adamw on one rank equals AdamW on the device", "[cuda][dist]") {
  auto& c = one_rank();
  const auto h = random_host<float>(1, 333, 12);
  const auto hg = random_host<float>(1, 333, 13);
  auto w = loom::to_device(h), g = loom::to_device(hg), w_ref = loom::to_device(h), g_ref = loom::to_device(hg);
  loom::dist::zero1_adamw<float, loom::device> zero(c, w.slice(0), g.slice(0), {0.1, 0.9, 0.999, 1e-8, 0.1});
  loom::optim::adamw<loom::device> ref({0.1, 0.9, 0.999, 1e-8, 0.1});
  ref.add(w_ref.slice(0), g_ref.slice(0));
  for (int step = 0; step < 2; ++step) {
    zero.step();
    ref.step();
  }
  c.synchronize();
  REQUIRE(same(loom::to_host(w), loom::to_host(w_ref)));
}

TEST_CASE("dist zero1_adamw with clipping and buckets on one rank equals clipped AdamW on the device", "[cuda][dist]") {
  auto& c = one_rank();
  const auto h = random_host<float>(1, 333, 17);
  const auto hg = random_host<float>(1, 333, 18);
  auto w = loom::to_device(h), g = loom::to_device(hg), w_ref = loom::to_device(h), g_ref = loom::to_device(hg);
  const loom::optim::adamw_options o{0.1, 0.9, 0.999, 1e-8, 0.1};
  const loom::optim::update_options u{.max_grad_norm = 5.0};
  loom::dist::zero1_adamw<float, loom::device> zero(c, w.slice(0), g.slice(0), o, u);
  loom::dist::gradient_buckets<float, loom::device> buckets(zero, {{300, 33}, {0, 300}}, 100 * sizeof(float));
  loom::optim::adamw<loom::device> ref(o, u);
  ref.add(w_ref.slice(0), g_ref.slice(0));
  for (int step = 0; step < 2; ++step) {
    buckets.ready(0);
    buckets.ready(1);
    buckets.wait();
    zero.update();
    ref.step();
  }
  c.synchronize();
  REQUIRE(ref.grad_norm().item() > 10.0);
  REQUIRE(zero.grad_norm().item() == Approx(ref.grad_norm().item()).epsilon(1e-12));
  // The two norms are sums in other orders: the factors may differ in the last bit.
  const auto a = loom::to_host(w), b = loom::to_host(w_ref);
  for (index_t i = 0; i < a.size(); ++i) REQUIRE(std::fabs(a.data()[i] - b.data()[i]) <= 1e-6f);
}

TEST_CASE("dist gradient_buckets on one rank leave the gradients as they were on the device", "[cuda][dist]") {
  auto& c = one_rank();
  const auto h = random_host<float>(1, 333, 14);
  auto g = loom::to_device(h);
  loom::dist::gradient_buckets<float, loom::device> buckets(c, g.slice(0), {{300, 33}, {0, 300}}, 100 * sizeof(float));
  REQUIRE(buckets.size() == 2);
  buckets.ready(0);
  buckets.ready(1);
  buckets.wait();
  c.synchronize();
  REQUIRE(same(loom::to_host(g), h));
}
