#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""float32 matmul on the CPU: loom (BLAS backend and loom's own kernel, through
bench_matmul_cpu) beside PyTorch (torch.matmul / addmm + gelu) and NumPy, in
one run, interleaved: each round times every implementation `--runs` times
after a warm-up; the figures are the median of all those times and the
fastest (on a machine that others load, the fastest shows the code's speed
and the median what a user sees). All run
on the same number of threads (--threads: OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS for loom and NumPy, torch.set_num_threads). Prints the
machine, a Markdown table and, with --json, one JSON line per figure.

Usage: matmul_vs_torch.py --bench build/bench/bench_matmul_cpu [--threads N]
       [--rounds R] [--runs N] [--cases a,b] [--quick] [--json FILE]
Run it with a Python that has torch and numpy (scripts/test_torch.sh's venv);
without torch, or numpy, those columns are left out.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

# name: (m, k, n, epilogue) as in bench_matmul_cpu.cpp; --quick divides extents by 16.
CASES = {
    "square_4096": (4096, 4096, 4096, None),
    "square_4096_bias_gelu": (4096, 4096, 4096, "bias_gelu"),
    "square_1024": (1024, 1024, 1024, None),
    "mlp_784_512_bias_gelu": (256, 784, 512, "bias_gelu"),
    "mlp_512_10_bias": (256, 512, 10, "bias"),
}


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"


def times_ms(f, runs):
    f()
    t = []
    for _ in range(runs):
        a = time.perf_counter()
        f()
        t.append((time.perf_counter() - a) * 1e3)
    return t


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", required=True, help="path of bench_matmul_cpu")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--quick", action="store_true", help="extents / 16, one round of one run (a smoke test)")
    p.add_argument("--json", default="")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.runs = 1, 1
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)  # NumPy's OpenBLAS reads it at import
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    try:
        import numpy as np
    except ImportError:
        np = None
    try:
        import torch
        import torch.nn.functional as F

        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None

    backends = subprocess.run([args.bench, "--quick"], capture_output=True, text=True, env=env).stdout
    have_blas = any(" blas " in line for line in backends.splitlines())
    print(f"machine: {cpu_model()}, {os.cpu_count()} logical cores, {args.threads} threads; "
          f"{datetime.date.today().isoformat()}")
    print(next((l for l in backends.splitlines() if l.startswith("host matmul:")), "host matmul: ?"))
    if torch is not None:
        print(f"torch {torch.__version__} ({'MKL' if torch.backends.mkl.is_available() else 'no MKL'}), "
              f"{torch.get_num_threads()} threads")
    if np is not None:
        print(f"numpy {np.__version__}")

    impls = (["loom_blas"] if have_blas else []) + ["loom_kernel"]
    impls += ["torch"] if torch is not None else []
    impls += ["numpy"] if np is not None else []
    results = {}
    for name in args.cases.split(","):
        m, k, n, epi = CASES[name]
        if args.quick:
            m, k, n = max(1, m // 16), max(1, k // 16), max(1, n // 16)
        if np is not None:
            rng = np.random.default_rng(42)
            x = rng.uniform(-1, 1, (m, k)).astype(np.float32)
            w = (rng.uniform(-1, 1, (k, n)) / 32).astype(np.float32)
            b = rng.uniform(-1, 1, (n,)).astype(np.float32)

        def numpy_run():
            y = x @ w
            if epi:
                y += b
            if epi == "bias_gelu":
                y = 0.5 * y * (1 + np.tanh(np.float32(0.7978845608) * (y + np.float32(0.044715) * y * y * y)))
            return y

        if torch is not None:
            tx, tw, tb = (torch.from_numpy(v) for v in (x, w, b)) if np is not None else (
                torch.rand(m, k), torch.rand(k, n), torch.rand(n))

        def torch_run():
            if epi == "bias_gelu":
                return F.gelu(torch.addmm(tb, tx, tw), approximate="tanh")
            if epi == "bias":
                return torch.addmm(tb, tx, tw)
            return torch.matmul(tx, tw)

        times = {i: [] for i in impls}
        for _ in range(args.rounds):
            for impl in impls:
                if impl.startswith("loom"):
                    cmd = [args.bench, "--case", name, "--backend", "blas" if impl == "loom_blas" else "loom",
                           "--runs", str(args.runs)] + (["--quick"] if args.quick else [])
                    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
                    if out.returncode != 0:
                        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")
                    median, fastest = (float(v) for v in out.stdout.split()[-2:])
                    times[impl] += [median, fastest]  # the median stands for this round's other runs
                elif impl == "torch":
                    with torch.no_grad():
                        times[impl] += times_ms(torch_run, args.runs)
                else:
                    times[impl] += times_ms(numpy_run, args.runs)
        results[name] = ((m, k, n), {i: (statistics.median(t), min(t)) for i, t in times.items()})

    ref = "torch" if torch is not None else None
    print()
    print("ms: median / fastest (GFLOP/s of the fastest); vs torch: torch's time / loom's (above 1: loom is faster)")
    print()
    print("| case | m x k x n | " + " | ".join(f"{i} ms" for i in impls) +
          (" | loom_blas vs torch | loom_kernel vs torch |" if ref else " |"))
    print("|---" * (len(impls) + 2 + (2 if ref else 0)) + "|")
    for name, ((m, k, n), ms) in results.items():
        flop = 2.0 * m * k * n
        cells = [f"{ms[i][0]:.1f} / {ms[i][1]:.1f} ({flop / ms[i][1] / 1e6:.0f})" for i in impls]
        ratios = []
        if ref:
            ratios = [f"{ms[ref][0] / ms[i][0]:.2f}x / {ms[ref][1] / ms[i][1]:.2f}x" if i in ms else "-"
                      for i in ("loom_blas", "loom_kernel")]
        print(f"| {name} | {m} x {k} x {n} | " + " | ".join(cells + ratios) + " |")
        if args.json:
            with open(args.json, "a") as f:
                for i in impls:
                    f.write(json.dumps({"bench": "matmul_vs_torch", "op": name, "shape": f"{m}x{k}x{n}",
                                        "dtype": "float32", "impl": i, "ms": ms[i][0], "fastest_ms": ms[i][1],
                                        "threads": args.threads}) + "\n")


if __name__ == "__main__":
    main()
