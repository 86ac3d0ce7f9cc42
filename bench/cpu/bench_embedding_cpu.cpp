// SPDX-License-Identifier: Apache-2.0
// The embedding's forward and backward on the host executor:
//     y = embedding(ids, table)                   (8192 ids, a 32000 x 1024 float table)
//     dtable = embedding_backward(dy, ids, rows)  (the table's gradient)
// against hand loops: the forward an OpenMP loop copying each selected row,
// the backward the plain serial loop (zero the table, then add each
// gradient row to its id's row in position order), which adds in the same
// order as loom and so gives the same bits. Ids are drawn from a quarter of
// the rows, so ids repeat. Every result is checked (the forward bit for bit,
// the backward bit for bit against the serial loop and within float
// rounding of a double reference) before it is timed. Wall time, median of
// several runs after a warm-up run; GB/s = bytes that must move (forward:
// the selected rows read and written; backward: the gradient read and the
// table written).
// Usage: bench_embedding_cpu [--quick] [--json FILE]
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <loom/loom.hpp>

#include "../bench_util.hpp"

int main(int argc, char** argv) {
  using loom::index_t;
  const auto opt = loom_bench::options::parse(argc, argv);
  const index_t rows = opt.quick ? 1001 : 32000, dim = opt.quick ? 96 : 1024, tokens = opt.quick ? 513 : 8192;
  const int warmup = 1, runs = opt.quick ? 1 : 7;
  std::mt19937_64 g(35);
  loom::host_tensor<float, 2> table({rows, dim}), y({tokens, dim}), dy({tokens, dim}), dtable({rows, dim}),
      hand_table({rows, dim});
  loom::host_tensor<std::int64_t, 1> ids({tokens});
  for (index_t i = 0; i < table.size(); ++i) table.data()[i] = loom_bench::nonzero_value(g);
  for (index_t i = 0; i < dy.size(); ++i) dy.data()[i] = loom_bench::nonzero_value(g);
  std::uniform_int_distribution<index_t> pick(0, rows / 4);
  for (index_t t = 0; t < tokens; ++t) ids(t) = pick(g);
  const std::string fwd_shape = std::to_string(tokens) + "x" + std::to_string(dim);
  const std::string bwd_shape = std::to_string(rows) + "x" + std::to_string(dim);
  const double fwd_bytes = 2.0 * static_cast<double>(tokens * dim) * sizeof(float);
  const double bwd_bytes = static_cast<double>((tokens + rows) * dim) * sizeof(float);

  // The backward's reference: the serial loop in position order.
  auto hand_backward = [&] {
    std::memset(static_cast<void*>(hand_table.data()), 0, hand_table.nbytes());
    for (index_t t = 0; t < tokens; ++t) {
      float* out = hand_table.data() + ids(t) * dim;
      const float* in = dy.data() + t * dim;
      for (index_t c = 0; c < dim; ++c) out[c] += in[c];
    }
  };
  hand_backward();

  bool failed = false;
  auto check_forward = [&] {
    for (index_t t = 0; t < tokens; ++t)
      if (std::memcmp(y.data() + t * dim, table.data() + ids(t) * dim, static_cast<std::size_t>(dim) * 4) != 0)
        return std::string("FAIL (row ") + std::to_string(t) + ")";
    return std::string("ok");
  };
  auto check_backward = [&](const loom::host_tensor<float, 2>& got) {
    if (std::memcmp(got.data(), hand_table.data(), got.nbytes()) != 0) return std::string("FAIL (bits)");
    std::vector<double> exact(static_cast<std::size_t>(rows * dim), 0.0);
    for (index_t t = 0; t < tokens; ++t)
      for (index_t c = 0; c < dim; ++c) exact[static_cast<std::size_t>(ids(t) * dim + c)] += dy(t, c);
    loom_bench::error_meter m{1e-5, 1e-5};
    for (index_t i = 0; i < got.size(); ++i) m.add(got.data()[i], exact[static_cast<std::size_t>(i)]);
    return m.verdict();
  };
  auto measure = [&](const char* op, const std::string& shape, double bytes, const char* impl, auto&& run,
                     auto&& check) {
    run();
    loom_bench::record rec{"bench_embedding_cpu", op, shape, "f32", impl};
    rec.check = check();
    rec.bytes = bytes;
    rec.threads = loom::host_threads();
    return loom_bench::report_timed(rec, warmup, runs, run, opt.json_path, failed);
  };

  std::printf("bench_embedding_cpu: host executor, %d threads; median of %d runs after %d warm-up\n",
              loom::host_threads(), runs, warmup);
  loom_bench::print_header();
  const double fwd = measure("embedding", fwd_shape, fwd_bytes, "loom", [&] { y = loom::embedding(ids, table); },
                             check_forward);
  const double fwd_hand = measure(
      "embedding", fwd_shape, fwd_bytes, "hand loop (OpenMP)",
      [&] {
        const float* src = table.data();
        float* dst = y.data();
        const std::int64_t* id = ids.data();
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (index_t t = 0; t < tokens; ++t)
          std::memcpy(dst + t * dim, src + id[t] * dim, static_cast<std::size_t>(dim) * sizeof(float));
      },
      check_forward);
  const double bwd = measure(
      "embedding_backward", bwd_shape, bwd_bytes, "loom", [&] { loom::embedding_backward(dtable, dy, ids); },
      [&] { return check_backward(dtable); });
  const double bwd_hand = measure("embedding_backward", bwd_shape, bwd_bytes, "hand loop (serial)", hand_backward,
                                  [&] { return check_backward(hand_table); });
  std::printf("  forward: loom / hand loop speed %.2fx; backward: loom / serial loop speed %.2fx\n", fwd_hand / fwd,
              bwd_hand / bwd);
  if (failed) std::printf("FAIL: a result differs from its reference\n");
  return failed ? 1 : 0;
}
