#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Host transcendentals, loom beside PyTorch eager, in one interleaved run.

Compiles bench/cpu/bench_vmath_cpu.cpp with the given compiler and default
flags (-O2 -fopenmp, no -march: loom picks the CPU's SIMD width at run time),
optionally a second time against another include directory (--before DIR,
e.g. an older checkout, to compare), then alternates: loom (each build, and
with LOOM_HOST_SIMD=baseline) and torch, `rounds` times, `reps` timed calls
each, and prints the median of the per-round medians as a Markdown table.
Run with the venv that scripts/test_torch.sh makes, e.g.
  OMP_NUM_THREADS=2 build/torch/venv/bin/python bench/cpu/vmath_vs_torch.py --threads 2
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = ["tanh", "exp", "gelu_tanh", "gelu", "silu", "sigmoid", "log1p", "sin", "pow"]


def build(cxx, include, out):
    cmd = [cxx, "-std=c++20", "-O2", "-fopenmp", "-I" + include, "-I/usr/local/cuda/include",
           "-I/usr/local/cuda/include/cccl", os.path.join(ROOT, "bench/cpu/bench_vmath_cpu.cpp"), "-o", out,
           "-L/usr/local/cuda/lib64", "-lcudart"]
    subprocess.run(cmd, check=True)
    return " ".join(cmd)


def run_loom(exe, case, reps, n, env):
    r = subprocess.run([exe, case, str(reps), str(n)], check=True, capture_output=True, text=True, env=env)
    return float(r.stdout.split()[1])


def torch_case(torch, case, x):
    import torch.nn.functional as F
    return {
        "tanh": lambda: torch.tanh(x),
        "exp": lambda: torch.exp(x),
        "gelu_tanh": lambda: F.gelu(x, approximate="tanh"),
        "gelu": lambda: F.gelu(x),
        "silu": lambda: F.silu(x),
        "sigmoid": lambda: torch.sigmoid(x),
        "log1p": lambda: torch.log1p(torch.abs(x)),
        "sin": lambda: torch.sin(x),
        "pow": lambda: torch.pow(torch.abs(x), 1.7),
    }[case]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cxx", default="g++")
    p.add_argument("--before", help="an include directory to build a second loom from (e.g. an older checkout)")
    p.add_argument("--cases", default="tanh,exp,gelu_tanh")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--n", type=int, default=4096)
    a = p.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    tmp = tempfile.mkdtemp()
    builds = {"loom": build(a.cxx, os.path.join(ROOT, "include"), os.path.join(tmp, "loom"))}
    if a.before:
        builds["loom before"] = build(a.cxx, a.before, os.path.join(tmp, "loom before"))
    cases = a.cases.split(",")
    x = torch.randn(a.n, a.n) * 2
    times = {}
    for _ in range(a.rounds):
        for case in cases:
            for name in builds:
                times.setdefault((name, case), []).append(run_loom(os.path.join(tmp, name), case, a.reps, a.n, env))
            times.setdefault(("loom baseline", case), []).append(
                run_loom(os.path.join(tmp, "loom"), case, a.reps, a.n, dict(env, LOOM_HOST_SIMD="baseline")))
            f = torch_case(torch, case, x)
            f()
            ts = []
            for _ in range(a.reps):
                t0 = time.perf_counter()
                f()
                ts.append((time.perf_counter() - t0) * 1e3)
            times.setdefault(("torch eager", case), []).append(statistics.median(ts))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    host_isa = subprocess.run([os.path.join(tmp, "loom"), "none", "1", "8"], capture_output=True, text=True, env=env).stderr.strip()
    print(f"{cpu}, {a.threads} threads, float32 {a.n} x {a.n}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    print(f"loom built with: {builds['loom']}  ({host_isa})")
    cols = [c for c in ["loom before", "loom baseline", "loom", "torch eager"] if any(k[0] == c for k in times)]
    print("| op | " + " | ".join(c + " (ms)" for c in cols) + " | torch / loom |")
    print("|---|" + "---|" * (len(cols) + 1))
    for case in cases:
        med = {c: statistics.median(times[(c, case)]) for c in cols}
        print(f"| {case} | " + " | ".join(f"{med[c]:.1f}" for c in cols) + f" | {med['torch eager'] / med['loom']:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
