// SPDX-License-Identifier: Apache-2.0
// The embedding on the GPU: the forward y = embedding(ids, table) for a
// 50000 x 4096 bf16 table and 16384 int64 ids, as a share of the
// device-to-device copy bandwidth measured in the same run (bytes of the
// selected rows read and of y written; target: at least 90%), against a
// hand-written kernel that copies each row with 16-byte loads; and the
// backward embedding_backward(dtable, dy, ids) (the gradient read, the
// table written). Ids repeat (drawn from a quarter of the rows). The
// forward is checked bit for bit on a sample of rows, the backward against
// a double reference on a sample of rows, before timing. PyTorch's forward
// and embedding_dense_backward on the same shapes are timed by
// torch_layers.py (the report puts them side by side).
// Usage: bench_embedding_gpu [--quick] [--json FILE]; exits 77 without a GPU.
#include <cstring>
#include <random>

#include "gpu_bench.cuh"

namespace {
using loom::index_t;
using namespace loom_bench;

constexpr std::uint64_t seed_table = 21, seed_grad = 22;

// The baseline: one block per token, each thread copying 16-byte units of its row.
__global__ void copy_rows(const uint4* table, const std::int64_t* ids, uint4* out, index_t units) {
  const uint4* src = table + ids[blockIdx.x] * units;
  uint4* dst = out + static_cast<index_t>(blockIdx.x) * units;
  for (index_t u = threadIdx.x; u < units; u += blockDim.x) dst[u] = src[u];
}

struct bench_state : bench_common {
  template <class F, class Check>
  double measure(const std::string& op, const std::string& shape, const std::string& impl, double bytes, F&& f,
                 Check&& check) {
    record r{"gpu_embedding", op, shape, "bf16", impl};
    r.bytes = bytes;
    r.copy_gbps = copy.memcpy_gbps;
    f();
    r.check = check();
    if (r.check != "ok") failed = true;
    r.ms = time_rotated_ms(1, timing, [&](int) { f(); });
    print_row(r);
    emit_json(opt.json_path, r);
    return r.ms;
  }
};
}  // namespace

int main(int argc, char** argv) {
  bench_state st{{options::parse(argc, argv)}};
  if (!loom::gpu::is_available()) return no_gpu("bench_embedding_gpu");
  try {
    if (st.opt.quick) st.timing = {1, 3};
    const auto p = loom::gpu::properties();
    std::printf("bench_embedding_gpu on %s (%d SMs, L2 %d MiB); median of %d samples after %d warm-up\n",
                p.name.c_str(), p.sm_count, p.l2_cache_bytes >> 20, st.timing.runs, st.timing.warmup);
    print_header();
    st.copy = measure_copy("gpu_embedding", st.opt, st.timing);
    using T = loom::bf16;
    const index_t rows = st.opt.quick ? 5003 : 50000, dim = st.opt.quick ? 512 : 4096,
                  tokens = st.opt.quick ? 1024 : 16384;
    loom::device_tensor<T, 2> table({rows, dim}), y({tokens, dim}), hand({tokens, dim}), dy({tokens, dim}),
        dtable({rows, dim});
    hash_fill(table, seed_table);
    hash_fill(dy, seed_grad);
    loom::host_tensor<std::int64_t, 1> ids_h({tokens});
    std::mt19937_64 g(35);
    std::uniform_int_distribution<index_t> pick(0, rows / 4);
    for (index_t t = 0; t < tokens; ++t) ids_h(t) = pick(g);
    const auto ids = loom::to_device(ids_h);
    const std::string fwd_shape = std::to_string(tokens) + "x" + std::to_string(dim);
    const double fwd_bytes = 2.0 * static_cast<double>(tokens * dim) * sizeof(T);

    // Forward: every 97th row and the last, bit for bit.
    auto check_rows = [&](const loom::device_tensor<T, 2>& out) {
      auto row_ok = [&](index_t t) {
        const auto row = loom::to_host(out.slice(t));
        for (index_t c = 0; c < dim; ++c)
          if (static_cast<float>(row(c)) != hashed<T>(seed_table, static_cast<std::uint64_t>(ids_h(t) * dim + c)))
            return false;
        return true;
      };
      for (index_t t = 0; t < tokens; t += 97)
        if (!row_ok(t)) return std::string("FAIL (row ") + std::to_string(t) + ")";
      return row_ok(tokens - 1) ? std::string("ok") : std::string("FAIL (the last row)");
    };
    poison(y);
    const double fwd = st.measure("embedding", fwd_shape, "loom", fwd_bytes, [&] { y = loom::embedding(ids, table); },
                                  [&] { return check_rows(y); });
    if (loom::last_eval().path != loom::eval_path::contiguous || loom::last_eval().vector_width != 8)
      std::printf("  note: the forward took another path than the contiguous one with 8-wide loads\n");
    poison(hand);
    const double base = st.measure(
        "embedding", fwd_shape, "hand kernel (row copy)", fwd_bytes,
        [&] {
          const index_t units = dim * static_cast<index_t>(sizeof(T)) / 16;
          const auto* src = reinterpret_cast<const uint4*>(table.data());
          auto* dst = reinterpret_cast<uint4*>(hand.data());
          loom::detail::launch_kernel(copy_rows, dim3(static_cast<unsigned>(tokens)), 256, 0,
                                      loom::current_stream().get(), src, static_cast<const std::int64_t*>(ids.data()),
                                      dst, units);
        },
        [&] { return check_rows(hand); });

    // Backward: rows of the table gradient checked against a double sum.
    std::vector<std::vector<index_t>> at(static_cast<std::size_t>(rows));
    for (index_t t = 0; t < tokens; ++t) at[static_cast<std::size_t>(ids_h(t))].push_back(t);
    const double bwd_bytes = static_cast<double>((tokens + rows) * dim) * sizeof(T);
    const double bwd = st.measure(
        "embedding_backward", std::to_string(rows) + "x" + std::to_string(dim), "loom", bwd_bytes,
        [&] { loom::embedding_backward(dtable, dy, ids); },
        [&] {
          error_meter m{1e-2, 1e-2};
          for (index_t v = 0; v < rows; v += 37) {
            const auto row = loom::to_host(dtable.slice(v));
            for (index_t c = 0; c < dim; c += 7) {
              double s = 0;
              for (index_t t : at[static_cast<std::size_t>(v)])
                s += hashed<T>(seed_grad, static_cast<std::uint64_t>(t * dim + c));
              m.add(static_cast<float>(row(c)), s);
            }
          }
          return m.verdict();
        });
    std::printf("  forward: %.1f%% of copy (target >= 90%%), %.2fx the hand kernel's time; backward %.3f ms\n",
                100.0 * fwd_bytes / (fwd * 1e6) / st.copy.memcpy_gbps, fwd / base, bwd);
    if (st.failed) {
      std::printf("FAIL: a result differs from its reference\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_embedding_gpu: %s\n", e.what());
    return 1;
  }
}
