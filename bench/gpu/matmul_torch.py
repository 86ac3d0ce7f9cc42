# SPDX-License-Identifier: Apache-2.0
"""PyTorch timings for the shapes of bench_matmul.cu: torch.matmul, and
F.linear followed by gelu(approximate='tanh') (eager, two kernels). CUDA events
after warm-up, median of many runs. Prints a note and exits 0 without a GPU or
without torch."""
import statistics
import sys

WARMUP, RUNS = 10, 50


def median_ms(torch, f):
    for _ in range(WARMUP):
        f()
    times = []
    for _ in range(RUNS):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        f()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("matmul_torch: PyTorch is not installed; nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("matmul_torch: no GPU; nothing to measure")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"matmul_torch on {torch.cuda.get_device_name()}; median of {RUNS} runs after {WARMUP} warm-up runs")
    for m, k, n in [(4096, 4096, 4096), (8192, 4096, 14336)]:
        for name, dtype in [("bf16", torch.bfloat16), ("half", torch.float16), ("tf32", torch.float32)]:
            a = torch.full((m, k), 0.01, device="cuda", dtype=dtype)
            w = torch.full((n, k), 0.02, device="cuda", dtype=dtype)  # F.linear takes [out, in]
            b = torch.zeros(n, device="cuda", dtype=dtype)
            t_mm = median_ms(torch, lambda: torch.matmul(a, w.t()))
            t_lin = median_ms(torch, lambda: F.gelu(F.linear(a, w, b), approximate="tanh"))
            flops = 2.0 * m * n * k
            print(f"{name:6s} {m:5d}x{k:5d}x{n:5d}  torch.matmul {t_mm:8.3f} ms ({flops / t_mm * 1e-9:6.1f} TFLOP/s)"
                  f"  F.linear+gelu {t_lin:8.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
