// SPDX-License-Identifier: Apache-2.0
// loom::dist on host tensors over MPI, run by ctest as `mpirun -np 2`: every
// collective against a computation of all ranks' inputs in this process
// (each rank generates every rank's seeded data), odd sizes, uneven counts
// per rank (the v-variants), strided views,
// half/bf16/float/double; the metadata check's errors on every rank; ZeRO-1
// against unsharded AdamW; GPT-2 (examples/gpt2) trained on the ranks, each
// half the batch, against one process on the whole batch; and, as its own
// ctest entry ([kill]), a rank that dies.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <csignal>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <loom/dist/buckets.hpp>
#include <loom/dist/communicator.hpp>
#include <loom/dist/zero.hpp>
#include <loom/memory/memory.hpp>
#include <loom/tensor/tensor.hpp>

#include "../../examples/gpt2/model.hpp"
#include "../../examples/gpt2/train.hpp"

namespace {
using loom::index_t;
using loom::none;
using loom::range;
using loom::dist::reduce_op;
template <class T, std::size_t R>
using host_tensor = loom::tensor<T, R, loom::host>;

loom::dist::communicator* the_comm = nullptr;
loom::dist::communicator& comm() { return *the_comm; }

// Rank r's i-th value of a case: the same on every rank, so each rank can
// compute what all ranks hold.
template <class T>
std::vector<T> rank_values(std::uint64_t seed, int r, index_t n) {
  std::mt19937_64 g(seed * 1000003u + static_cast<std::uint64_t>(r));
  std::uniform_real_distribution<double> d(-4.0, 4.0);
  std::vector<T> v;
  for (index_t i = 0; i < n; ++i) v.push_back(T(static_cast<float>(d(g))));
  return v;
}
template <class T, class V>
void fill_from(const V& v, const std::vector<T>& values) {
  for (index_t i = 0; i < v.size(); ++i) v.data()[v.offset_of(i)] = values[static_cast<std::size_t>(i)];
}
template <class T, class V>
void fill_value(const V& v, double x) {
  for (index_t i = 0; i < v.size(); ++i) v.data()[v.offset_of(i)] = T(static_cast<float>(x));
}
template <class T>
double as_double(T v) {
  return static_cast<double>(static_cast<float>(v));
}
template <>
double as_double<double>(double v) {
  return v;
}
// The rounding of a correct result to T, with room for the roundings of a
// reduction over more than two ranks (relative to the inputs' magnitudes:
// a sum may cancel). With two ranks every result is one rounding of the
// exact value.
template <class T>
double tolerance(const std::vector<double>& xs) {
  const double eps = std::is_same_v<T, loom::bf16> ? 0x1p-8 : std::is_same_v<T, loom::half> ? 0x1p-11
                     : std::is_same_v<T, float>    ? 0x1p-23
                                                   : 0x1p-52;
  double scale = 0;
  for (double x : xs) scale += std::fabs(x);
  return eps * static_cast<double>(xs.size()) * scale;
}
double combine(const std::vector<double>& xs, reduce_op op) {
  double acc = op == reduce_op::max ? -std::numeric_limits<double>::infinity() : 0.0;
  for (double x : xs) acc = op == reduce_op::max ? std::max(acc, x) : acc + x;
  return op == reduce_op::average ? acc / static_cast<double>(xs.size()) : acc;
}
template <class T>
std::vector<std::vector<T>> all_ranks(std::uint64_t seed, index_t n) {
  std::vector<std::vector<T>> v;
  for (int r = 0; r < comm().size(); ++r) v.push_back(rank_values<T>(seed, r, n));
  return v;
}
template <class T>
double poison() {
  return std::numeric_limits<double>::quiet_NaN();
}
}  // namespace

TEMPLATE_TEST_CASE("dist all_reduce combines every rank's tensor and strided view", "[dist]", loom::half, loom::bf16,
                   float, double) {
  using T = TestType;
  for (reduce_op op : {reduce_op::sum, reduce_op::average, reduce_op::max}) {
    INFO("op " << loom::dist::reduce_op_name(op));
    {  // a whole tensor of an odd size
      const index_t n = 257 * 3;
      const auto data = all_ranks<T>(11 + static_cast<int>(op), n);
      host_tensor<T, 2> x({257, 3});
      fill_from(x.view(), data[static_cast<std::size_t>(comm().rank())]);
      comm().all_reduce(x, op);
      for (index_t i = 0; i < n; ++i) {
        std::vector<double> xs;
        for (const auto& d : data) xs.push_back(as_double(d[static_cast<std::size_t>(i)]));
        const double ref = combine(xs, op);
        INFO("element " << i);
        REQUIRE(std::fabs(as_double(x.data()[i]) - ref) <= tolerance<T>(xs));
      }
    }
    {  // a strided view: elements outside it stay as they were
      host_tensor<T, 2> parent({9, 13});
      fill_value<T>(parent.view(), 96.5);
      auto v = parent.slice(range(1, none, 2), range(0, none, 3));  // [4, 5]
      const auto data = all_ranks<T>(21 + static_cast<int>(op), v.size());
      fill_from(v, data[static_cast<std::size_t>(comm().rank())]);
      comm().all_reduce(v, op);
      for (index_t i = 0; i < 9; ++i)
        for (index_t j = 0; j < 13; ++j) {
          INFO("element " << i << ", " << j);
          if (i % 2 == 1 && j % 3 == 0) {
            const auto k = static_cast<std::size_t>((i / 2) * 5 + j / 3);
            std::vector<double> xs;
            for (const auto& d : data) xs.push_back(as_double(d[k]));
            const double ref = combine(xs, op);
            REQUIRE(std::fabs(as_double(parent(i, j)) - ref) <= tolerance<T>(xs));
          } else {
            REQUIRE(as_double(parent(i, j)) == 96.5);
          }
        }
    }
  }
}

TEMPLATE_TEST_CASE("dist all_gather stacks the ranks' inputs along axis 0", "[dist]", loom::half, loom::bf16, float,
                   double) {
  using T = TestType;
  const int p = comm().size(), me = comm().rank();
  const auto data = all_ranks<T>(31, 5 * 3);
  const auto expect = [&](const auto& out) {  // out: [5p, 3] view
    for (int r = 0; r < p; ++r)
      for (index_t i = 0; i < 5; ++i)
        for (index_t j = 0; j < 3; ++j) {
          INFO("rank " << r << " element " << i << ", " << j);
          const auto want = data[static_cast<std::size_t>(r)][static_cast<std::size_t>(i * 3 + j)];
          REQUIRE(as_double(out(r * 5 + i, j)) == as_double(want));
        }
  };
  SECTION("contiguous") {
    host_tensor<T, 2> in({5, 3}), out({5 * p, 3});
    fill_from(in.view(), data[static_cast<std::size_t>(me)]);
    fill_value<T>(out.view(), poison<T>());
    comm().all_gather(in, out);
    expect(out.view());
  }
  SECTION("strided input, transposed output") {
    host_tensor<T, 2> in_parent({10, 7}), out_parent({3, 5 * p});
    auto in = in_parent.slice(range(0, none, 2), range(1, 4));  // [5, 3]
    fill_from(in, data[static_cast<std::size_t>(me)]);
    fill_value<T>(out_parent.view(), poison<T>());
    comm().all_gather(in, out_parent.t());
    expect(out_parent.t());
  }
  SECTION("in place: the input is this rank's part of the output") {
    host_tensor<T, 2> out({5 * p, 3});
    fill_value<T>(out.view(), poison<T>());
    auto mine = out.slice(range(5 * me, 5 * me + 5));
    fill_from(mine, data[static_cast<std::size_t>(me)]);
    comm().all_gather(mine, out);
    expect(out.view());
  }
}

TEMPLATE_TEST_CASE("dist reduce_scatter leaves each rank its part of the combined input", "[dist]", loom::half,
                   loom::bf16, float, double) {
  using T = TestType;
  const int p = comm().size(), me = comm().rank();
  for (reduce_op op : {reduce_op::sum, reduce_op::average, reduce_op::max}) {
    INFO("op " << loom::dist::reduce_op_name(op));
    const auto data = all_ranks<T>(41 + static_cast<int>(op), 7 * p * 3);
    const auto expect = [&](const auto& out) {  // out: [7, 3] view
      for (index_t i = 0; i < 7; ++i)
        for (index_t j = 0; j < 3; ++j) {
          std::vector<double> xs;
          for (const auto& d : data) xs.push_back(as_double(d[static_cast<std::size_t>((me * 7 + i) * 3 + j)]));
          const double ref = combine(xs, op);
          INFO("element " << i << ", " << j);
          REQUIRE(std::fabs(as_double(out(i, j)) - ref) <= tolerance<T>(xs));
        }
    };
    {
      host_tensor<T, 2> in({7 * p, 3}), out({7, 3});
      fill_from(in.view(), data[static_cast<std::size_t>(me)]);
      fill_value<T>(out.view(), poison<T>());
      comm().reduce_scatter(in, out, op);
      expect(out.view());
    }
    {  // a strided input, a transposed output
      host_tensor<T, 2> in_parent({7 * p, 8}), out_parent({3, 7});
      auto in = in_parent.slice(range(0, none), range(2, 8, 2));  // [7p, 3]
      fill_from(in, data[static_cast<std::size_t>(me)]);
      fill_value<T>(out_parent.view(), poison<T>());
      comm().reduce_scatter(in, out_parent.t(), op);
      expect(out_parent.t());
    }
    {  // in place: the output is this rank's part of the input
      host_tensor<T, 2> in({7 * p, 3});
      fill_from(in.view(), data[static_cast<std::size_t>(me)]);
      comm().reduce_scatter(in, in.slice(range(7 * me, 7 * me + 7)), op);
      expect(in.slice(range(7 * me, 7 * me + 7)));
    }
  }
}

// Uneven parts: rank r's rows of the stacked side are counts[r] (one count
// 0 in the second set), each case against the ranks' data combined here.
std::vector<std::vector<index_t>> uneven_counts(int p) {
  std::vector<index_t> a, b;
  for (int r = 0; r < p; ++r) a.push_back(r % 2 == 0 ? 5 + r : 2), b.push_back(r == 0 ? 0 : 4 + r);
  return {a, b};
}

// bf16 and float take the two paths of the host code (16-bit words reduced
// in float; MPI's own type): half and double share them.
TEMPLATE_TEST_CASE("dist all_gather_v stacks the ranks' inputs of their own row counts", "[dist]", loom::bf16,
                   float) {
  using T = TestType;
  const int p = comm().size(), me = comm().rank();
  for (const auto& counts : uneven_counts(p)) {
    std::vector<index_t> first{0};
    for (index_t n : counts) first.push_back(first.back() + n);
    const index_t total = first.back(), mine = counts[static_cast<std::size_t>(me)];
    INFO("rows of rank 0: " << counts[0] << ", in all " << total);
    const auto data = all_ranks<T>(33 + static_cast<std::uint64_t>(counts[0]), total * 3);  // rank r's rows: data[r]
    const auto expect = [&](const auto& out) {  // out: [total, 3] view
      for (int r = 0; r < p; ++r)
        for (index_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i)
          for (index_t j = 0; j < 3; ++j) {
            INFO("rank " << r << " row " << i << ", column " << j);
            const auto want = data[static_cast<std::size_t>(r)][static_cast<std::size_t>(i * 3 + j)];
            REQUIRE(as_double(out(first[static_cast<std::size_t>(r)] + i, j)) == as_double(want));
          }
    };
    {  // contiguous
      host_tensor<T, 2> in({mine, 3}), out({total, 3});
      fill_from(in.view(), data[static_cast<std::size_t>(me)]);
      fill_value<T>(out.view(), poison<T>());
      comm().all_gather_v(in, out, counts);
      expect(out.view());
    }
    {  // a strided input, a transposed output
      host_tensor<T, 2> in_parent({2 * mine + 1, 7}), out_parent({3, total});
      auto in = in_parent.slice(range(0, 2 * mine, 2), range(1, 4));  // [mine, 3]
      fill_from(in, data[static_cast<std::size_t>(me)]);
      fill_value<T>(out_parent.view(), poison<T>());
      comm().all_gather_v(in, out_parent.t(), counts);
      expect(out_parent.t());
    }
    {  // in place: the input is this rank's rows of the output
      host_tensor<T, 2> out({total, 3});
      fill_value<T>(out.view(), poison<T>());
      auto rows = out.slice(range(first[static_cast<std::size_t>(me)], first[static_cast<std::size_t>(me)] + mine));
      fill_from(rows, data[static_cast<std::size_t>(me)]);
      comm().all_gather_v(rows, out, counts);
      expect(out.view());
    }
  }
}

TEMPLATE_TEST_CASE("dist reduce_scatter_v leaves each rank its own rows of the combined input", "[dist]", loom::bf16,
                   float) {
  using T = TestType;
  const int p = comm().size(), me = comm().rank();
  for (const auto& counts : uneven_counts(p))
    for (reduce_op op : {reduce_op::sum, reduce_op::average, reduce_op::max}) {
      index_t total = 0, begin = 0;
      for (int r = 0; r < p; ++r) (r < me ? begin : total) += counts[static_cast<std::size_t>(r)];
      total += begin;
      const index_t mine = counts[static_cast<std::size_t>(me)];
      INFO("op " << loom::dist::reduce_op_name(op) << ", rows of rank 0: " << counts[0] << ", in all " << total);
      const auto data = all_ranks<T>(43 + static_cast<std::uint64_t>(counts[0]) + static_cast<int>(op), total * 3);
      const auto expect = [&](const auto& out) {  // out: [mine, 3] view
        for (index_t i = 0; i < mine; ++i)
          for (index_t j = 0; j < 3; ++j) {
            std::vector<double> xs;
            for (const auto& d : data) xs.push_back(as_double(d[static_cast<std::size_t>((begin + i) * 3 + j)]));
            INFO("row " << i << ", column " << j);
            REQUIRE(std::fabs(as_double(out(i, j)) - combine(xs, op)) <= tolerance<T>(xs));
          }
      };
      {
        host_tensor<T, 2> in({total, 3}), out({mine, 3});
        fill_from(in.view(), data[static_cast<std::size_t>(me)]);
        fill_value<T>(out.view(), poison<T>());
        comm().reduce_scatter_v(in, out, counts, op);
        expect(out.view());
      }
      {  // a strided input, a transposed output
        host_tensor<T, 2> in_parent({total, 8}), out_parent({3, mine});
        auto in = in_parent.slice(range(0, none), range(2, 8, 2));  // [total, 3]
        fill_from(in, data[static_cast<std::size_t>(me)]);
        fill_value<T>(out_parent.view(), poison<T>());
        comm().reduce_scatter_v(in, out_parent.t(), counts, op);
        expect(out_parent.t());
      }
      {  // in place: the output is this rank's rows of the input
        host_tensor<T, 2> in({total, 3});
        fill_from(in.view(), data[static_cast<std::size_t>(me)]);
        comm().reduce_scatter_v(in, in.slice(range(begin, begin + mine)), counts, op);
        expect(in.slice(range(begin, begin + mine)));
      }
    }
}

TEST_CASE("dist the v-variants' counts that do not fit throw mismatch_error on every rank", "[dist]") {
  auto& c = comm();
  const int p = c.size(), me = c.rank();
  std::vector<index_t> counts;
  for (int r = 0; r < p; ++r) counts.push_back(r + 1);
  const index_t total = p * (p + 1) / 2;
  host_tensor<float, 2> in({me + 1, 3}), out({total, 3});
  fill_value<float>(in.view(), 1.0);
  SECTION("another number of counts than ranks") {
    const std::vector<index_t> fewer(counts.begin(), counts.end() - 1);
    REQUIRE_THROWS_WITH(c.all_gather_v(in, out, fewer), Catch::Contains("the counts must be " + std::to_string(p)));
  }
  SECTION("counts that differ across ranks") {
    auto other = counts;
    if (me == 0) other[0] += 1, other[1] -= 1;  // still summing to the rows
    REQUIRE_THROWS_AS(c.reduce_scatter_v(out, in, other), loom::dist::mismatch_error);
  }
  SECTION("an input without this rank's count of rows") {
    host_tensor<float, 2> wrong({me + 2, 3});
    REQUIRE_THROWS_WITH(c.all_gather_v(wrong, out, counts), Catch::Contains("must have this rank's count"));
  }
  c.barrier();
}

TEMPLATE_TEST_CASE("dist broadcast copies the root's tensor and view to every rank", "[dist]", loom::half, loom::bf16,
                   float, double) {
  using T = TestType;
  const int root = comm().size() - 1;
  const auto data = all_ranks<T>(51, 33 * 5);
  host_tensor<T, 2> x({33, 5});
  host_tensor<T, 2> parent({5, 66});
  auto v = parent.slice(loom::whole, range(0, none, 2)).t();  // [33, 5], strided
  if (comm().rank() == root) {
    fill_from(x.view(), data[0]);
    fill_from(v, data[1 % data.size()]);
  } else {
    fill_value<T>(x.view(), poison<T>());
    fill_value<T>(parent.view(), poison<T>());
  }
  comm().broadcast(x, root);
  comm().broadcast(v, root);
  for (index_t i = 0; i < 33 * 5; ++i) {
    REQUIRE(as_double(x.data()[i]) == as_double(data[0][static_cast<std::size_t>(i)]));
    REQUIRE(as_double(v.data()[v.offset_of(i)]) == as_double(data[1 % data.size()][static_cast<std::size_t>(i)]));
  }
}

TEST_CASE("dist arguments that differ across ranks throw mismatch_error on every rank, before any data moves",
          "[dist]") {
  auto& c = comm();
  REQUIRE(c.checks_metadata());
  const bool odd = c.rank() % 2 == 1;
  host_tensor<float, 2> a({3, odd ? 6 : 5});
  fill_value<float>(a.view(), 2.0);
  SECTION("shapes") {
    try {
      c.all_reduce(a);
      FAIL("no mismatch_error");
    } catch (const loom::dist::mismatch_error& e) {
      const std::string m = e.what();
      INFO(m);
      CHECK(m.rfind("loom: ", 0) == 0);
      CHECK(m.find("rank 0: all_reduce") != std::string::npos);
      CHECK(m.find("float32 [3, 5]") != std::string::npos);
      CHECK(m.find("float32 [3, 6]") != std::string::npos);
    }
    for (index_t i = 0; i < a.size(); ++i) REQUIRE(a.data()[i] == 2.0f);  // untouched
  }
  SECTION("dtypes") {
    host_tensor<float, 1> f({4});
    host_tensor<double, 1> d({4});
    fill_value<float>(f.view(), 1.0);
    fill_value<double>(d.view(), 1.0);
    REQUIRE_THROWS_AS(odd ? c.all_reduce(d) : c.all_reduce(f), loom::dist::mismatch_error);
  }
  SECTION("collectives and reduce ops") {
    host_tensor<float, 1> f({4});
    fill_value<float>(f.view(), 1.0);
    REQUIRE_THROWS_WITH(odd ? c.broadcast(f, 0) : c.all_reduce(f), Catch::Contains("broadcast (call"));
    REQUIRE_THROWS_WITH(c.all_reduce(f, odd ? reduce_op::max : reduce_op::sum), Catch::Contains("max"));
  }
  SECTION("an output of the wrong shape on one rank") {
    host_tensor<float, 2> in({2, 3}), out({2 * c.size() + (c.rank() == 0 ? 1 : 0), 3});
    fill_value<float>(in.view(), 1.0);
    REQUIRE_THROWS_WITH(c.all_gather(in, out), Catch::Contains("rank 0: the output must have the shape"));
  }
  // The communicator stays usable: the next collective agrees.
  host_tensor<float, 1> one({1});
  one(0) = 1.0f;
  c.all_reduce(one);
  REQUIRE(one(0) == static_cast<float>(c.size()));
  c.barrier();
}

TEST_CASE("dist communicator from the environment reads torchrun's variables and has no host collectives", "[dist]") {
  const auto set = [](const char* k, const char* v) { REQUIRE(setenv(k, v, 1) == 0); };
  const auto clear = [] {
    for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOOM_DIST_PORT",
                          "NCCL_COMM_ID"})
      unsetenv(k);
  };
  clear();
  REQUIRE_THROWS_AS(loom::dist::communicator::from_env(), loom::value_error);
  set("RANK", "1");
  set("WORLD_SIZE", "x");
  REQUIRE_THROWS_WITH(loom::dist::communicator::from_env(), Catch::Contains("WORLD_SIZE=x"));
  set("WORLD_SIZE", "2");
  REQUIRE_THROWS_WITH(loom::dist::communicator::from_env(), Catch::Contains("MASTER_ADDR"));
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", "29500");
  set("LOCAL_RANK", "1");
  {
    auto e = loom::dist::communicator::from_env();
    CHECK(e.rank() == 1);
    CHECK(e.size() == 2);
    CHECK(e.local_rank() == 1);
    CHECK(!e.has_mpi());
    CHECK(std::string(std::getenv("NCCL_COMM_ID")) == "127.0.0.1:29501");
    host_tensor<float, 1> f({3});
    REQUIRE_THROWS_WITH(e.all_reduce(f), Catch::Contains("needs MPI"));
  }
  clear();
}

// ZeRO-1 against AdamW on the whole buffer with the ranks' average
// gradient, computed in this process (loom::optim, clipping over the whole
// buffer when on); the gradients averaged by zero1_adamw::step() or by
// gradient_buckets reduce-scattering bucket by bucket into the shards. A
// control that updates with this rank's own gradient only must differ (so
// the comparison can fail).
TEMPLATE_TEST_CASE("dist zero1_adamw equals unsharded AdamW on the average gradient, clipped or not, bucketed or not",
                   "[dist]", float, loom::bf16) {
  using T = TestType;
  const int p = comm().size(), me = comm().rank();
  for (index_t n : {index_t{1001}, index_t{256} * p})  // padded, and a multiple of the ranks
    for (double clip : {0.0, 5.0})
      for (bool bucketed : {false, true}) {
        INFO("n " << n << ", max_grad_norm " << clip << (bucketed ? ", buckets" : ""));
        const loom::optim::adamw_options o{0.1, 0.9, 0.999, 1e-8, 0.1};
        const loom::optim::update_options u{.max_grad_norm = clip};
        const auto start = rank_values<T>(61, 0, n);
        host_tensor<T, 1> w({n}), g({n}), w_ref({n}), g_ref({n}), w_own({n}), g_own({n});
        fill_from(w.view(), start);
        fill_from(w_ref.view(), start);
        fill_from(w_own.view(), start);
        loom::dist::zero1_adamw<T, loom::host> zero(comm(), w.view(), g.view(), o, u);
        loom::optim::adamw<loom::host> ref(o, u), own(o, u);
        ref.add(w_ref, g_ref);
        own.add(w_own, g_own);
        REQUIRE(zero.shard_size() == (n + p - 1) / p);
        // Parameters of 7, 130, 1 and the rest elements, the backward's order last first;
        // buckets of at least 100 elements, crossing the shards' borders.
        const std::vector<std::pair<index_t, index_t>> segments{{138, n - 138}, {137, 1}, {7, 130}, {0, 7}};
        loom::dist::gradient_buckets<T, loom::host> buckets(zero, segments, 100 * sizeof(T));
        REQUIRE(buckets.size() == 3);  // [138, n), [7, 138), [0, 7)
        for (int step = 0; step < 3; ++step) {
          const auto grads = all_ranks<T>(71 + static_cast<std::uint64_t>(step), n);
          fill_from(g.view(), grads[static_cast<std::size_t>(me)]);
          fill_from(g_own.view(), grads[static_cast<std::size_t>(me)]);
          for (index_t i = 0; i < n; ++i) {
            std::vector<double> xs;
            for (const auto& d : grads) xs.push_back(as_double(d[static_cast<std::size_t>(i)]));
            g_ref(i) = T(static_cast<float>(combine(xs, reduce_op::average)));
          }
          if (bucketed) {
            fill_value<T>(zero.gradient_shard().slice(range(0, std::min(zero.shard_size(), n - zero.begin()))),
                          poison<T>());
            for (std::size_t k = 0; k < segments.size(); ++k) buckets.ready(k);
            buckets.wait();
            zero.update();
          } else {
            zero.step();
          }
          ref.step();
          own.step();
          if (clip > 0) {  // the norm of all shards, as the unsharded optimizer's
            INFO("step " << step << ": norm " << zero.grad_norm().item() << ", unsharded " << ref.grad_norm().item());
            REQUIRE(ref.grad_norm().item() > 2 * clip);  // the clipping acts
            REQUIRE(std::fabs(zero.grad_norm().item() - ref.grad_norm().item()) <= 1e-12 * ref.grad_norm().item());
            host_tensor<double, 1> mine({1}), norms({p});  // and the same bits on every rank
            mine(0) = zero.grad_norm().item();
            comm().all_gather(mine, norms);
            for (index_t r = 0; r < p; ++r) REQUIRE(norms(r) == mine(0));
          }
        }
        double worst = 0, control = 0;
        for (index_t i = 0; i < n; ++i) {
          const double r = as_double(w_ref(i));
          worst = std::max(worst, std::fabs(as_double(w(i)) - r));
          control = std::max(control, std::fabs(as_double(w_own(i)) - r));
        }
        // With two ranks the shards' updates are bit-identical to the reference
        // (measured: 0); the tolerance is for the order of a sum over more ranks
        // and, in bf16, the clipped gradient rounded to bf16.
        const double tol = std::is_same_v<T, float> ? 1e-6 : 0x1p-6;  // one bf16 step near 4 is 2^-6
        INFO("worst " << worst << ", control " << control);
        CHECK(worst <= tol);
        CHECK(control > 10 * tol);
      }
}

TEST_CASE("dist gradient_buckets average each bucket once its gradients are ready, in bucket order", "[dist]") {
  const int me = comm().rank();
  // Parameters laid out in forward order; the backward finishes them last first.
  const std::vector<index_t> sizes{5, 300, 17, 64, 1, 99, 40};
  std::vector<std::pair<index_t, index_t>> segments;
  index_t n = 0;
  for (index_t s : sizes) {
    segments.emplace_back(n, s);
    n += s;
  }
  std::reverse(segments.begin(), segments.end());
  host_tensor<float, 1> g({n});
  loom::dist::gradient_buckets<float, loom::host> buckets(comm(), g.view(), segments, 100 * sizeof(float));
  // At least 100 floats each, in the backward's order: {40, 99}, {1, 64, 17, 300}, {5}.
  REQUIRE(buckets.size() == 3);
  REQUIRE(buckets.bucket_range(0) == std::pair<index_t, index_t>{387, 526});
  REQUIRE(buckets.bucket_range(1) == std::pair<index_t, index_t>{5, 387});
  REQUIRE(buckets.bucket_range(2) == std::pair<index_t, index_t>{0, 5});
  const auto average_at = [&](const std::vector<std::vector<float>>& data, index_t i) {
    std::vector<double> xs;
    for (const auto& d : data) xs.push_back(d[static_cast<std::size_t>(i)]);
    return std::pair{combine(xs, reduce_op::average), tolerance<float>(xs)};
  };
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    const auto data = all_ranks<float>(81 + static_cast<std::uint64_t>(step), n);
    fill_from(g.view(), data[static_cast<std::size_t>(me)]);
    if (step == 0) {  // in order: the first bucket is averaged as soon as its last gradient is ready
      const auto [b0, e0] = buckets.bucket_range(0);
      buckets.ready(0);
      buckets.ready(1);
      for (index_t i = 0; i < n; ++i) {
        const auto [ref, tol] = average_at(data, i);
        const bool averaged = i >= b0 && i < e0;
        INFO("element " << i);
        REQUIRE((averaged ? std::fabs(g(i) - ref) <= tol : g(i) == data[static_cast<std::size_t>(me)][static_cast<std::size_t>(i)]));
      }
      for (std::size_t k = 2; k < segments.size(); ++k) buckets.ready(k);
    } else {  // each rank in another order: the buckets still go in the same order on every rank
      for (std::size_t k = 0; k < segments.size(); ++k) buckets.ready(me % 2 == 0 ? k : segments.size() - 1 - k);
    }
    buckets.wait();
    for (index_t i = 0; i < n; ++i) {
      const auto [ref, tol] = average_at(data, i);
      INFO("element " << i);
      REQUIRE(std::fabs(g(i) - ref) <= tol);
    }
  }
  // Misuse, the same on every rank (so that no rank waits in a collective).
  REQUIRE_THROWS_WITH(buckets.wait(), Catch::Contains("before segment 0 was marked ready"));
  buckets.ready(0);
  REQUIRE_THROWS_WITH(buckets.ready(0), Catch::Contains("marked ready twice"));
  std::swap(segments[0], segments[2]);
  using buckets_type = loom::dist::gradient_buckets<float, loom::host>;
  REQUIRE_THROWS_WITH((buckets_type(comm(), g.view(), segments, 100 * sizeof(float))), Catch::Contains("do not tile"));
}

// examples/gpt2's model at a tiny size trained 10 steps of AdamW: on every
// rank with its B / size() sequences of the batch, the gradients averaged by
// gradient_buckets, against the same training on the whole batch in this
// process (its mean loss is the mean of the ranks' losses, its gradient the
// average of theirs). The control trains on this rank's sequences alone
// (no averaging) and must end elsewhere, so the comparison can fail.
namespace {
struct gpt2_run {
  std::vector<float> losses;  // each step's mean loss over the sequences trained on, before the update
  std::vector<float> weights; // the parameters after the last step
};
// Trains from init_random(1337) on rows [row0, row0 + rows) of the batch;
// with `averaged`, the gradients are averaged across the ranks (in buckets)
// before each update.
gpt2_run train_gpt2(const gpt2::gpt2_config& c, const host_tensor<std::int32_t, 2>& inputs,
                    const host_tensor<std::int64_t, 2>& targets, index_t row0, index_t rows, bool averaged) {
  using loom::host;
  const index_t T = inputs.extent(1);
  host_tensor<std::int32_t, 2> in({rows, T});
  host_tensor<std::int64_t, 2> tg({rows, T});
  for (index_t b = 0; b < rows; ++b)
    for (index_t t = 0; t < T; ++t) in(b, t) = inputs(row0 + b, t), tg(b, t) = targets(row0 + b, t);
  gpt2::parameters<host> p(c);
  p.init_random(1337);
  gpt2::activations<host> a(c, rows, T);
  gpt2::gradients<host> g(c);
  // Each parameter's gradient in the order the backward finishes it (the
  // checkpoint's order reversed), in buckets of at least 8 KiB.
  std::vector<std::pair<index_t, index_t>> segments;
  index_t offset = 0;
  for (const auto size : c.tensor_sizes()) segments.emplace_back(offset, size), offset += size;
  std::reverse(segments.begin(), segments.end());
  loom::dist::gradient_buckets<float, host> buckets(comm(), g.storage.view(), segments, 8 << 10);
  if (averaged) REQUIRE(buckets.size() >= 4);
  loom::optim::adamw<host> opt({.lr = 1e-3, .weight_decay = 0.1});
  opt.add(p.storage, g.storage);
  gpt2_run run;
  for (int step = 0; step < 10; ++step) {
    loom::fill(g.storage, std::numeric_limits<float>::quiet_NaN());  // every gradient must be written
    run.losses.push_back(gpt2::forward(p, a, in, tg).item());
    gpt2::backward(p, a, g, in, tg);
    if (averaged) {
      for (std::size_t k = 0; k < segments.size(); ++k) buckets.ready(k);
      buckets.wait();
    }
    opt.step();
  }
  run.weights.assign(p.storage.data(), p.storage.data() + p.storage.size());
  return run;
}
}  // namespace

TEST_CASE("dist GPT-2 trained on the ranks, each its part of the batch, equals one process on the whole batch",
          "[dist][gpt2]") {
  const int p = comm().size(), me = comm().rank();
  gpt2::gpt2_config c{8, 67, 2, 2, 16, gpt2::gpt2_config::pad_vocab(67)};
  const index_t per_rank = 2, B = per_rank * p, T = 7;
  host_tensor<std::int32_t, 2> inputs({B, T});
  host_tensor<std::int64_t, 2> targets({B, T});
  std::mt19937 gen(2024);
  std::uniform_int_distribution<int> token(0, static_cast<int>(c.vocab) - 1);
  for (index_t i = 0; i < B * T; ++i) inputs.data()[i] = token(gen), targets.data()[i] = token(gen);

  const auto whole = train_gpt2(c, inputs, targets, 0, B, false);
  const auto ranks = train_gpt2(c, inputs, targets, per_rank * me, per_rank, true);
  const auto alone = train_gpt2(c, inputs, targets, per_rank * me, per_rank, false);

  // The mean loss over the whole batch is the ranks' mean loss at every step.
  host_tensor<float, 1> loss({10});
  for (index_t s = 0; s < 10; ++s) loss(s) = ranks.losses[static_cast<std::size_t>(s)];
  comm().all_reduce(loss, reduce_op::average);
  for (index_t s = 0; s < 10; ++s) {
    INFO("step " << s);
    REQUIRE(std::isfinite(whole.losses[static_cast<std::size_t>(s)]));
    REQUIRE(std::fabs(loss(s) - whole.losses[static_cast<std::size_t>(s)]) <= 1e-5);
  }
  REQUIRE(whole.losses.back() < whole.losses.front() - 0.1f);  // it trains
  double worst = 0, control = 0;
  for (std::size_t i = 0; i < whole.weights.size(); ++i) {
    REQUIRE(std::isfinite(ranks.weights[i]));
    worst = std::max(worst, std::fabs(double(ranks.weights[i]) - whole.weights[i]));
    control = std::max(control, std::fabs(double(alone.weights[i]) - whole.weights[i]));
  }
  // The parameters move by about lr = 1e-3 per step; a float gradient
  // summed in another order moves them by rounding only.
  INFO("largest difference from the whole batch: ranks " << worst << ", this rank's part alone " << control);
  CHECK(worst <= 2e-5);
  CHECK(control >= 1e-3);
}

// Run alone (ctest entry dist_killed_rank): the last rank dies; the others'
// next collective fails with timeout_error once the timeout has passed.
TEST_CASE("dist a rank that dies makes the others' collective fail within the timeout", "[.][kill]") {
  loom::dist::options o;
  o.timeout = std::chrono::seconds(3);
  auto c = loom::dist::communicator::from_mpi(o);
  host_tensor<float, 1> x({1000});
  fill_value<float>(x.view(), 1.0);
  c.all_reduce(x);
  if (c.rank() == c.size() - 1) std::raise(SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_THROWS_AS(c.all_reduce(x), loom::dist::timeout_error);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(waited >= 3.0);
  REQUIRE(waited < 30.0);
  REQUIRE_THROWS_WITH(c.barrier(), Catch::Contains("cannot be used again"));
  std::cout << "loom-dist: rank " << c.rank() << " got timeout_error after " << waited << " s" << std::endl;
}

int main(int argc, char* argv[]) {
  loom::dist::mpi_environment mpi(argc, argv);
  loom::set_fill_uninitialized(true);
  loom::dist::options o;
  o.timeout = std::chrono::seconds(60);
  o.check_metadata = true;
  auto c = loom::dist::communicator::from_mpi(o);
  the_comm = &c;
  const int failed = Catch::Session().run(argc, argv);
  the_comm = nullptr;
  return failed;
}
