#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""float32 3x3 convolutions on the CPU (padding 1, stride 1, NCHW): loom's
host executor (through bench_conv_cpu) beside PyTorch's (oneDNN) in one run,
interleaved: each round runs every case and pass in loom, then in PyTorch,
`--runs` calls each after a warm-up call. The figures are the median of the
rounds' medians and the fastest call (on a machine that others load, the
fastest shows the code's speed and the median what a user sees). Both on
the same number of threads (--threads: OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS for loom, torch.set_num_threads).

The passes: fwd (F.conv2d), fwd_bias_relu (loom: bias and ReLU in the
GEMM's epilogue; PyTorch: F.relu(F.conv2d(x, w, b)), the sequence a user
writes), dx and dw (torch.ops.aten.convolution_backward with one output
mask each, the calls autograd makes). The cases: ResNet-18's 3x3
convolutions at batch 8, 64 channels at 56 x 56 and 256 at 14 x 14.

Usage: conv_vs_torch.py --bench build/bench/bench_conv_cpu [--threads N]
       [--rounds R] [--runs N] [--quick]
Run it with a Python that has torch (scripts/test_torch.sh's venv).
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import time

CASES = {"r18_56": (8, 64, 56, 56), "r18_14": (8, 256, 14, 14)}
PASSES = ("fwd", "fwd_bias_relu", "dx", "dw")


def torch_call(torch, F, shape, p):
    n, c, h, w = shape
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, c, h, w, generator=g) * 2 - 1
    wt = torch.rand(c, c, 3, 3, generator=g) * 2 - 1
    dy = torch.rand(n, c, h, w, generator=g) * 2 - 1
    b = torch.full((c,), 0.5)
    aten = torch.ops.aten.convolution_backward
    args = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    return {"fwd": lambda: F.conv2d(x, wt, padding=1),
            "fwd_bias_relu": lambda: F.relu(F.conv2d(x, wt, b, padding=1)),
            "dx": lambda: aten(dy, x, wt, None, *args, [True, False, False]),
            "dw": lambda: aten(dy, x, wt, None, *args, [False, True, False])}[p]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="batch 1 instead of 8")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
    cases = {k: ((1,) + v[1:] if args.quick else v) for k, v in CASES.items()}
    times = {}  # (case, pass, impl) -> [round medians], [minima]
    for _ in range(args.rounds):
        for case, shape in cases.items():
            for p in PASSES:
                out = subprocess.run([args.bench, *map(str, shape), p, str(args.runs)], env=env, check=True,
                                     capture_output=True, text=True).stdout
                r = json.loads(out)
                t = times.setdefault((case, p, "loom"), ([], []))
                t[0].append(r["median_ms"])
                t[1].append(r["min_ms"])
                f = torch_call(torch, F, shape, p)
                f()
                ms = []
                for _ in range(args.runs):
                    t0 = time.perf_counter()
                    f()
                    ms.append((time.perf_counter() - t0) * 1e3)
                t = times.setdefault((case, p, "torch"), ([], []))
                t[0].append(statistics.median(ms))
                t[1].append(min(ms))
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, torch {torch.__version__}, {args.threads} threads, "
          f"{args.rounds} rounds of {args.runs} calls")
    print("| case | pass | loom ms (median / fastest) | torch ms (median / fastest) | torch / loom (median / fastest) |")
    print("|---|---|---|---|---|")
    for case in cases:
        for p in PASSES:
            lm, lf = statistics.median(times[(case, p, "loom")][0]), min(times[(case, p, "loom")][1])
            tm, tf = statistics.median(times[(case, p, "torch")][0]), min(times[(case, p, "torch")][1])
            print(f"| {case} {list(cases[case])} | {p} | {lm:.1f} / {lf:.1f} | {tm:.1f} / {tf:.1f} | "
                  f"{tm / lm:.2f}x / {tf / lf:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
