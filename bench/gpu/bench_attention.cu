// SPDX-License-Identifier: Apache-2.0
// loom's fused attention on the GPU, bf16, at the FlashAttention-3 paper's
// protocol (batch x sequence = 16k tokens, heads x head size = 2048):
// forward dense, causal and soft-capped, forward + backward, head sizes 64
// and 128; TFLOP/s printed beside each time (the forward counts 4 B H S² D
// flops, halved under a causal mask; the backward 2.5 times the forward).
// bench/gpu/attention_torch.py times PyTorch's SDPA and FlexAttention on the
// same shapes in the same GPU check. Before timing, a small case on the GPU
// is checked against the host executor; every record carries the verdict.
// Usage: bench_attention_gpu [--quick] [--json FILE]; exits 77 without a GPU.
#include <cstdio>
#include <string>

#include "gpu_bench.cuh"

namespace {
using loom::index_t;
using namespace loom_bench;
using T = loom::bf16;

// Soft-capping at 30 (a functor: a score_mod on the GPU has a LOOM_HD call operator).
struct softcap_fn {
  template <class S, class... I>
  LOOM_HD auto operator()(S s, I...) const {
    return 30.f * loom::math::tanh(s / 30.f);
  }
};

// The forward on the GPU against the host executor at a small odd size: "ok" or why not.
std::string check_small() {
  const index_t b = 1, h = 2, s = 301, d = 128;
  loom::host_tensor<T, 4> q({b, h, s, d}), k({b, h, s, d}), v({b, h, s, d});
  hash_fill(q, 1);
  hash_fill(k, 2);
  hash_fill(v, 3);
  const auto attn = loom::attention(loom::score_mod(softcap_fn{}), loom::causal);
  auto want = attn(q, k, v);
  auto got = attn(loom::to_device(q), loom::to_device(k), loom::to_device(v));
  const auto o = loom::to_host(got.o);
  error_meter e{2e-2, 2e-2};
  for (index_t i = 0; i < o.size(); ++i)
    e.add(loom::detail::convert<double>(o.data()[i]), loom::detail::convert<double>(want.o.data()[i]));
  return e.verdict();
}

template <class Attn>
void run_case(bench_common& st, const std::string& check, const char* name, const Attn& attn, index_t batch,
              index_t heads, index_t seq, index_t dim, bool causal, bool backward) {
  loom::device_tensor<T, 4> q({batch, heads, seq, dim}), k({batch, heads, seq, dim}), v({batch, heads, seq, dim}),
      dout({batch, heads, seq, dim});
  hash_fill(q, 11);
  hash_fill(k, 12);
  hash_fill(v, 13);
  hash_fill(dout, 14);
  double flops = 4.0 * static_cast<double>(batch * heads * dim) * static_cast<double>(seq) * static_cast<double>(seq);
  if (causal) flops /= 2;
  const std::string shape = "B" + std::to_string(batch) + " H" + std::to_string(heads) + " S" + std::to_string(seq) +
                            " D" + std::to_string(dim);
  record r{"gpu_attention", name, shape, "bf16", "loom"};
  r.bytes = 4.0 * static_cast<double>(q.size()) * sizeof(T);
  r.check = check;
  if (!backward) {
    r.ms = time_rotated_ms(1, st.timing, [&](int) { (void)attn(q, k, v); });
  } else {
    auto fwd = attn(q, k, v);
    r.ms = time_rotated_ms(1, st.timing, [&](int) { (void)loom::grad(attn)(q, k, v, fwd.o, fwd.lse, dout); });
    flops *= 2.5;
  }
  print_row(r);
  std::printf("  %s %s: %.1f TFLOP/s\n", name, shape.c_str(), flops / (r.ms * 1e9));
  emit_json(st.opt.json_path, r);
}
}  // namespace

int main(int argc, char** argv) {
  bench_common st{options::parse(argc, argv)};
  if (!loom::gpu::is_available()) return no_gpu("bench_attention_gpu");
  try {
    st.timing = st.opt.quick ? gpu_timing{1, 2} : gpu_timing{2, 5};
    const auto p = loom::gpu::properties();
    std::printf("bench_attention_gpu on %s (%d SMs); median of %d samples after %d warm-up\n", p.name.c_str(),
                p.sm_count, st.timing.runs, st.timing.warmup);
    const std::string check = check_small();
    std::printf("check against the host executor (B 1, H 2, S 301, D 128, causal, soft-capped): %s\n", check.c_str());
    if (check != "ok") st.failed = true;
    print_header();
    const index_t seq = st.opt.quick ? 1024 : 4096, batch = 16384 / seq;
    const auto dense = loom::attention(loom::no_mask);
    const auto causal = loom::attention(loom::causal);
    const auto capped = loom::attention(loom::score_mod(softcap_fn{}), loom::no_mask);
    run_case(st, check, "attention forward", dense, batch, 16, seq, 128, false, false);
    run_case(st, check, "attention forward causal", causal, batch, 16, seq, 128, true, false);
    run_case(st, check, "attention forward softcap", capped, batch, 16, seq, 128, false, false);
    run_case(st, check, "attention forward", dense, batch, 32, seq, 64, false, false);
    run_case(st, check, "attention backward", dense, batch, 16, seq, 128, false, true);
    run_case(st, check, "attention backward causal", causal, batch, 16, seq, 128, true, true);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention_gpu: %s\n", e.what());
    return 1;
  }
  return st.failed ? 1 : 0;
}
