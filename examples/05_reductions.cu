// SPDX-License-Identifier: Apache-2.0
// Reductions, scans and sorting over expressions: sums and norms of fused
// expressions, axis reductions with keepdims, variance, logsumexp, argmax,
// cumulative sums, sort and top-k. Runs on the GPU when there is one and on
// the host executor otherwise, and checks a few results against plain loops.
#include <loom/loom.hpp>
#include <loom/reduce/reduce.hpp>
#include <loom/reduce/scan.hpp>
#include <loom/reduce/sort.hpp>

#include <cmath>
#include <cstdio>
#include <random>

// The host data in the space the example runs in.
template <class Space>
loom::tensor<float, 2, Space> in_space(const loom::host_tensor<float, 2>& h) {
  if constexpr (std::is_same_v<Space, loom::device>)
    return loom::to_device(h);
  else
    return h;
}

template <class Space>
int run() {
  using namespace loom;
  std::mt19937 g(7);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  host_tensor<float, 2> hx({64, 1000}), hy({64, 1000});
  for (index_t i = 0; i < hx.size(); ++i) hx.data()[i] = d(g), hy.data()[i] = d(g);
  const tensor<float, 2, Space> x = in_space<Space>(hx), y = in_space<Space>(hy);

  // Whole-tensor reductions return 0-d tensors; item() brings the value to the host.
  auto dot = sum(x * y);               // x * y is fused into the loads: no temporary
  float total = dot.item();            // waits for the result (one synchronization)
  float dist = l2_norm(x - y).item();  // sqrt(sum((x - y)^2)), one pass
  float worst = item(max(abs(x - y))); // the same as .item(); max(e) over everything, NaN propagates

  // Along axes: an int, or a braced list of ints; keepdims keeps them as extent 1.
  auto row_sums = sum(x, 1);                 // shape [64]
  auto col_max = amax(abs(x - y), 0);        // shape [1000]; amax/amin take axes
  auto centered = materialize(x - mean(x, 1, keepdims));  // mean has shape [64, 1]
  auto both = sum(x * y, {0, 1});            // a set of axes: here all of them

  // Statistics: var/stddev with PyTorch's correction (1 by default), logsumexp, argmax.
  auto v = var(x, 1);                        // unbiased, per row
  auto v0 = var(x, 1, correction{0});        // population variance
  auto lse = logsumexp(x, -1, keepdims);     // stable in one pass
  auto best = argmax(x, -1);                 // int64; ties give the first index

  // Result types: int64 sums of integers and bools, float means of integers.
  auto positives = sum(x > 0.0f);            // tensor<int64_t, 0>
  auto share = mean(x > 0.0f);               // tensor<float, 0>

  // Scans along any axis, inclusive or exclusive; running max with indices.
  auto c = cumsum(x * y, 1);
  auto starts = cumsum(x > 0.0f, 1, scan_kind::exclusive);
  auto running = cummax(x, 0);               // running.values, running.indices

  // Sort and top-k along the last axis: stable, values and int64 indices.
  auto sorted = sort(x, sort_order::descending);
  auto top = topk(x * y, 5);                 // the 5 largest of each row

  // Check a few of them against plain loops on the host.
  double want = 0, want_row0 = 0, want_max = 0;
  for (index_t i = 0; i < hx.size(); ++i) {
    want += static_cast<double>(hx.data()[i]) * hy.data()[i];
    want_max = std::fmax(want_max, std::fabs(static_cast<double>(hx.data()[i]) - hy.data()[i]));
  }
  for (index_t j = 0; j < 1000; ++j) want_row0 += hx(0, j);
  const auto hr = to_host(row_sums);
  const auto hc = to_host(c);
  const auto hs = to_host(sorted.values);
  const bool ok = std::fabs(total - want) < 1e-3 && std::fabs(hr(0) - want_row0) < 1e-3 &&
                  std::fabs(worst - want_max) < 1e-6 && std::fabs(item(both) - want) < 1e-3 &&
                  std::fabs(hc(0, 999) - item(sum(x.view().slice(0) * y.view().slice(0)))) < 1e-3 &&
                  hs(0, 0) >= hs(0, 1) && item(positives) + item(sum(x <= 0.0f)) == hx.size();
  std::printf("%s: sum(x*y) = %.4f, |x-y| = %.4f, max|x-y| = %.4f, share > 0 = %.3f, var[0] = %.4f/%.4f, "
              "lse[0] = %.3f, argmax[0] = %lld, top[0] = %.3f, cummax idx = %lld, starts = %lld: %s\n",
              Space::name, total, dist, worst, item(share), to_host(v)(0), to_host(v0)(0), to_host(lse)(0, 0),
              static_cast<long long>(to_host(best)(0)), to_host(top.values)(0, 0),
              static_cast<long long>(to_host(running.indices)(63, 0)), static_cast<long long>(to_host(starts)(0, 999)),
              ok ? "ok" : "MISMATCH");
  (void)col_max;
  (void)centered;
  return ok ? 0 : 1;
}

int main() {
  if (loom::gpu::is_available()) return run<loom::device>();
  std::printf("no GPU (%s): running on the host executor\n", loom::gpu::unavailable_reason().c_str());
  return run<loom::host>();
}
