#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/report.py judges the issues' targets from benchmark records: a met
target, each way of missing one (too slow against the baseline, too little
of the copy bandwidth, a failed result check), and no verdict without the
baseline; a baseline measured two ways is judged by its faster way that
passed its check; with --require-targets, a target measured on no shape is
NOT MEASURED and the exit status is 1. Usage: test_report.py PATH/TO/report.py"""
import json
import os
import subprocess
import sys
import tempfile


def rec(op, shape, impl, ms, pct, check="ok"):
    return {"bench": "gpu_reduce", "op": op, "shape": shape, "dtype": "f32", "impl": impl, "ms": ms,
            "bytes": 1e9, "gbps": 1e9 / (ms * 1e6), "copy_gbps": 4000.0, "pct_copy": pct, "check": check,
            "threads": 0}


def main():
    report = sys.argv[1]
    recs = [
        {"bench": "gpu_reduce", "op": "copy", "shape": "1", "dtype": "f32", "impl": "cudaMemcpyAsync D2D",
         "ms": 1.0, "bytes": 4e9, "gbps": 4000.0, "copy_gbps": 0, "pct_copy": 0, "check": "ok", "threads": 0},
        rec("sum(x)", "268435456", "cub::DeviceReduce::Sum", 0.250, 104.0),
        rec("sum(x)", "268435456", "loom", 0.2570, 101.2),  # 1.028x: met
        rec("max(x)", "268435456", "cub::DeviceReduce::Max", 0.250, 104.0),
        rec("max(x)", "268435456", "loom", 0.2590, 100.4),  # 1.036x: too slow
        rec("sum(x)", "1048579", "cub::DeviceReduce::Sum", 0.010, 95.0),
        rec("sum(x)", "1048579", "loom", 0.0100, 89.5),  # as fast, under 90% of copy
        rec("max(x)", "1048579", "cub::DeviceReduce::Max", 0.010, 95.0),
        rec("max(x)", "1048579", "loom", 0.0100, 95.0, check="FAIL (got 1, want 2)"),
        rec("cumsum(x, 0)", "67108864", "cub::DeviceScan", 0.100, 50.0),
        # Another way of calling the baseline, faster but wrong: not the one judged against.
        rec("cumsum(x, 0)", "67108864", "cub::DeviceScan (int items)", 0.090, 55.0, check="FAIL (x)"),
        rec("cumsum(x, 0)", "1048579", "cub::DeviceScan", 0.0100, 50.0),
        rec("cumsum(x, 0)", "1048579", "cub::DeviceScan (int items)", 0.0098, 51.0),  # faster: judged against
        rec("cumsum(x, 0)", "1048579", "loom", 0.0100, 50.0),  # 1.020x the faster way (1.000x the other)
        rec("cumsum(x, 0)", "67108864", "loom", 0.1020, 49.0),  # no copy bound for scans: met
        rec("cumsum(x, 0)", "8192x8192", "loom", 0.1, 80.0),  # no baseline: no verdict
        rec("scaled_matmul e4m3 -> bf16", "8192x8192x8192", "cuBLASLt direct", 1.000, 0.0),
        rec("scaled_matmul e4m3 -> bf16", "8192x8192x8192", "loom", 1.025, 0.0),  # within 3%: met
    ]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "in.jsonl")
        with open(path, "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
        out = subprocess.run([sys.executable, report, "--jsonl", path, "--out", d], check=True, capture_output=True,
                             text=True).stdout
        with open(os.path.join(d, "results.md")) as f:
            md = f.read()
    lines = [l for l in out.splitlines() if l.startswith("target ")]
    want = [  # in the order of report.TARGETS, then of the records
        ("target met    sum(x) 268435456", "1.028x cub::DeviceReduce::Sum's time"),
        ("target MISSED sum(x) 1048579", "(89.5% of copy, at least 90% wanted)"),
        ("target MISSED max(x) 268435456", "(time 1.036x the baseline's, at most 1.03x allowed)"),
        ("target MISSED max(x) 1048579", "(a result check failed)"),
        ("target met    cumsum(x, 0) 67108864", "1.020x cub::DeviceScan's time"),
        ("target met    cumsum(x, 0) 1048579", "1.020x cub::DeviceScan (int items)'s time"),
        ("target met    scaled_matmul e4m3 -> bf16 8192x8192x8192", "1.025x cuBLASLt direct's time"),
    ]
    failures = []
    if len(lines) != len(want):
        failures.append(f"expected {len(want)} verdicts, got {len(lines)}: {lines}")
    for (head, why), line in zip(want, lines):
        if not line.startswith(head) or why not in line:
            failures.append(f"expected '{head}' with '{why}', got '{line}'")
    if "## Targets" not in md or md.count("MISSED") != 3:
        failures.append("results.md lacks the targets table or its three misses")
    # Only sum measured, with targets required: max and cumsum are NOT MEASURED, exit 1.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "in.jsonl")
        with open(path, "w") as f:
            for r in recs[:3]:
                f.write(json.dumps(r) + "\n")
        run = subprocess.run([sys.executable, report, "--jsonl", path, "--out", d, "--require-targets"],
                             capture_output=True, text=True)
        got = [l for l in run.stdout.splitlines() if l.startswith("target ")]
        if run.returncode != 1:
            failures.append(f"--require-targets with targets unmeasured exited {run.returncode}, not 1")
        if [l.split(":")[0] for l in got] != ["target met    sum(x) 268435456 f32", "target NOT MEASURED max(x) - -",
                                              "target NOT MEASURED cumsum(x, 0) - -",
                                              "target NOT MEASURED scaled_matmul e4m3 -> bf16 - -"]:
            failures.append(f"--require-targets verdicts: {got}")
        with open(os.path.join(d, "results.md")) as f:
            if f.read().count("NOT MEASURED") != 3:
                failures.append("results.md lacks the three NOT MEASURED rows")
    # Everything measured, with targets required: exit 0 (a MISSED target is a verdict, not an error).
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "in.jsonl")
        with open(path, "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
        run = subprocess.run([sys.executable, report, "--jsonl", path, "--out", d, "--require-targets"],
                             capture_output=True, text=True)
        if run.returncode != 0 or "NOT MEASURED" in run.stdout:
            failures.append(f"--require-targets with every target measured: exit {run.returncode}")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(want)} verdicts, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
