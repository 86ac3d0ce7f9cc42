#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Turns the JSON lines written by loom's benchmark programs (and by
torch_layers.py and compile_time.py) into the reports of bench/run_cpu.sh and
bench/gpu_check.sh: results.json (every measurement), results.md (tables, and
the text logs given with --log), plot.png (GB/s per op against the copy line;
skipped with a note when matplotlib is missing), and a short table printed
last: op, shape, dtype, loom's GB/s, % of the copy bandwidth, and loom's
speed against each baseline (baseline time / loom time: > 1 means loom is
faster), then a verdict on each target the issues set (TARGETS: sum and
max within 3% of CUB's time and at >= 90% of copy, the long cumsum within 3%
of cub::DeviceScan's), for every shape whose report holds both sides. A
baseline may be measured in several ways ("cub::DeviceReduce::Sum" and
"cub::DeviceReduce::Sum (int items)"): loom is judged against the fastest
that passed its check. With --require-targets (bench/gpu_check.sh) a target
with no measurement of both sides is printed as NOT MEASURED and the exit
status is 1.

Usage: report.py --jsonl FILE --out DIR [--title T] [--log NAME=PATH ...] [--require-targets]
"""
import argparse
import json
import os
import sys
from collections import OrderedDict

LOOM_IMPLS = ("loom fused", "loom")
# Records that are not timings of an op: compile times and machine descriptions.
NOT_MEASUREMENTS = ("compile", "machine")

# The targets loom's issues set, judged in every report that holds both sides:
# (op, baseline impl, the most loom's time may be as a multiple of the
# baseline's, the least % of the copy bandwidth or None).
TARGETS = [
    ("sum(x)", "cub::DeviceReduce::Sum", 1.03, 90.0),
    ("max(x)", "cub::DeviceReduce::Max", 1.03, 90.0),
    ("cumsum(x, 0)", "cub::DeviceScan", 1.03, None),
    ("scaled_matmul e4m3 -> bf16", "cuBLASLt direct", 1.03, None),
]


def load(path):
    recs = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    recs.append(json.loads(line))
    return recs


def groups(recs):
    """(op, shape, dtype) -> {impl: record}, in first-seen order; copies excluded."""
    g = OrderedDict()
    for r in recs:
        if r.get("bench") in NOT_MEASUREMENTS or r.get("op") == "copy":
            continue
        g.setdefault((r["op"], r["shape"], r["dtype"]), OrderedDict())[r["impl"]] = r
    return g


def summary_rows(recs):
    rows = []
    for (op, shape, dtype), impls in groups(recs).items():
        loom = next((impls[i] for i in LOOM_IMPLS if i in impls), None)
        if loom is None:
            continue
        vs = [(name, r["ms"] / loom["ms"]) for name, r in impls.items() if r is not loom and loom["ms"] > 0]
        pct = f"{loom['pct_copy']:.0f}%" if loom.get("copy_gbps") else "-"
        failed = [name for name, r in impls.items() if r.get("check", "ok") != "ok"]
        rows.append({"op": op, "shape": shape, "dtype": dtype, "gbps": loom["gbps"], "pct": pct, "vs": vs,
                     "check": "ok" if not failed else "FAIL: " + ", ".join(failed)})
    return rows


def baseline(impls, base):
    """The fastest record of the baseline `base` (its name, or its name and a
    space and more: another way of calling it) among those whose check passed;
    the first one when none passed; None when there is none."""
    found = [r for name, r in impls.items() if name == base or name.startswith(base + " ")]
    ok = [r for r in found if r.get("check", "ok") == "ok"]
    if ok:
        return min(ok, key=lambda r: r["ms"])
    return found[0] if found else None


def target_rows(recs, require=False):
    """One verdict per measured target: met only when both sides were measured,
    both checks passed, and every bound holds. With `require`, a target with no
    shape measured on both sides gets a NOT MEASURED row."""
    rows = []
    g = groups(recs)
    for op, base, most, least in TARGETS:
        seen = False
        for (gop, shape, dtype), impls in g.items():
            loom = next((impls[i] for i in LOOM_IMPLS if i in impls), None)
            b = baseline(impls, base) if gop == op else None
            if loom is None or b is None:
                continue
            seen = True
            ratio = loom["ms"] / b["ms"] if b["ms"] > 0 else float("inf")
            pct = loom.get("pct_copy") if loom.get("copy_gbps") else None
            why = []
            if loom.get("check", "ok") != "ok" or b.get("check", "ok") != "ok":
                why.append("a result check failed")
            if ratio > most:
                why.append(f"time {ratio:.3f}x the baseline's, at most {most:.2f}x allowed")
            if least is not None and (pct is None or pct < least):
                why.append("no copy bandwidth measured" if pct is None else
                           f"{pct:.1f}% of copy, at least {least:.0f}% wanted")
            text = f"{ratio:.3f}x {b['impl']}'s time (at most {most:.2f}x)"
            if least is not None:
                text += f", {pct:.1f}% of copy (at least {least:.0f}%)" if pct is not None else ", copy not measured"
            rows.append({"op": op, "shape": shape, "dtype": dtype, "met": not why, "text": text,
                         "why": "; ".join(why)})
        if require and not seen:
            rows.append({"op": op, "shape": "-", "dtype": "-", "met": False, "measured": False,
                         "text": f"no shape with both loom and {base} measured", "why": "not measured"})
    return rows


def verdict(t):
    if t.get("measured", True) is False:
        return "NOT MEASURED"
    return "met   " if t["met"] else "MISSED"


def fmt_vs(vs):
    return ", ".join(f"{v:.2f}x vs {name}" for name, v in vs) or "-"


def copies(recs):
    return [r for r in recs if r.get("op") == "copy"]


def machines(recs):
    return [r for r in recs if r.get("bench") == "machine"]


def machine_line(r):
    return (f"{r.get('cpu', '?')}, {r.get('cores', '?')} logical cores, {r.get('threads', '?')} threads; "
            f"CPU ISA extensions: {r.get('isa') or '-'}; compiled for: {r.get('compiled_for', '?')}; "
            f"{r.get('compiler', '?')}, flags `{r.get('flags', '?')}`")


def markdown(recs, title, logs, require=False):
    out = [f"# {title}", ""]
    ms = machines(recs)
    if ms:
        out += ["## Machine and build", ""]
        out += [f"- {machine_line(r)}" for r in ms]
        out.append("")
    cps = copies(recs)
    if cps:
        out += ["## Copy bandwidth (the ceiling)", "", "| program | impl | GB/s |", "|---|---|---|"]
        out += [f"| {r['bench']} | {r['impl']} | {r['gbps']:.1f} |" for r in cps]
        out.append("")
    rows = summary_rows(recs)
    if rows:
        out += ["## Summary (loom, and its speed against each baseline: baseline time / loom time)", "",
                "| op | shape | dtype | GB/s | % of copy | vs baselines | check |", "|---|---|---|---|---|---|---|"]
        out += [f"| `{r['op']}` | {r['shape']} | {r['dtype']} | {r['gbps']:.2f} | {r['pct']} | {fmt_vs(r['vs'])} | "
                f"{r['check']} |" for r in rows]
        out.append("")
    targets = target_rows(recs, require)
    if targets:
        out += ["## Targets", "", "| op | shape | dtype | verdict | measured |", "|---|---|---|---|---|"]
        out += [f"| `{t['op']}` | {t['shape']} | {t['dtype']} | "
                f"{'met' if t['met'] else verdict(t) if t.get('measured', True) is False else 'MISSED: ' + t['why']} | "
                f"{t['text']} |" for t in targets]
        out.append("")
    meas = [r for r in recs if r.get("bench") not in NOT_MEASUREMENTS]
    if meas:
        out += ["## All measurements", "", "| program | op | shape | dtype | impl | ms | GB/s | % of copy | check |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in meas:
            pct = f"{r['pct_copy']:.1f}" if r.get("copy_gbps") else "-"
            out.append(f"| {r['bench']} | `{r['op']}` | {r['shape']} | {r['dtype']} | {r['impl']} | {r['ms']:.4f} | "
                       f"{r['gbps']:.2f} | {pct} | {r.get('check', 'ok')} |")
        out.append("")
    comp = [r for r in recs if r.get("bench") == "compile"]
    if comp:
        out += ["## Compile time (one translation unit with N distinct fused expressions)", "",
                "| compiler | expressions | wall s | CPU s | wall s per extra expression | CPU s per extra expression |",
                "|---|---|---|---|---|---|"]
        for r in comp:
            out.append(f"| {r['compiler']} | {r['exprs']} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | "
                       f"{r.get('wall_s_per_extra', '-')} | {r.get('cpu_s_per_extra', '-')} |")
        out.append("")
    for name, path in logs:
        if os.path.exists(path):
            with open(path, errors="replace") as f:
                text = f.read().rstrip()
            out += [f"## {name}", "", "```", text, "```", ""]
    return "\n".join(out) + "\n"


def plot(recs, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    g = [(k, v) for k, v in groups(recs).items()]
    if not g:
        return "nothing to plot"
    impls = list(OrderedDict.fromkeys(i for _, v in g for i in v))
    height = 0.8 / len(impls)
    fig, ax = plt.subplots(figsize=(11, max(3.0, 0.32 * len(g) * max(1, len(impls)) ** 0.5 + 1.5)))
    for j, impl in enumerate(impls):
        ys = [i + j * height for i, (_, v) in enumerate(g) if impl in v]
        xs = [v[impl]["gbps"] for _, v in g if impl in v]
        ax.barh(ys, xs, height=height, label=impl)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(g))])
    ax.set_yticklabels([f"{op} {shape} {dtype}" for (op, shape, dtype), _ in g], fontsize=7)
    ax.invert_yaxis()
    for r in copies(recs):
        if r["impl"] in ("cudaMemcpyAsync D2D", "hand copy (OpenMP)"):
            ax.axvline(r["gbps"], color="black", linestyle="--", linewidth=1)
            ax.text(r["gbps"], -0.6, f" copy {r['gbps']:.0f} GB/s", fontsize=7, va="bottom")
            break
    ax.set_xlabel("GB/s (bytes that must move / time)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return f"plot: {path}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jsonl", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="loom benchmarks")
    ap.add_argument("--log", action="append", default=[], help="NAME=PATH: a text log to include in results.md")
    ap.add_argument("--require-targets", action="store_true",
                    help="print NOT MEASURED for a target without both sides measured, and exit 1 if any")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    recs = load(args.jsonl)
    logs = [tuple(x.split("=", 1)) for x in args.log]
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(recs, f, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown(recs, args.title, logs, args.require_targets))
    note = plot(recs, os.path.join(args.out, "plot.png"), args.title)

    print(f"\n=== {args.title}: summary ===")
    for r in machines(recs):
        print(f"machine: {machine_line(r)}")
    for r in copies(recs):
        print(f"copy ceiling ({r['bench']}, {r['impl']}): {r['gbps']:.1f} GB/s")
    print(f"{'op':26s} {'shape':12s} {'dtype':5s} {'GB/s':>9s} {'%copy':>6s}  vs baselines (baseline time / loom time)")
    for r in summary_rows(recs):
        print(f"{r['op']:26s} {r['shape']:12s} {r['dtype']:5s} {r['gbps']:9.2f} {r['pct']:>6s}  {fmt_vs(r['vs'])}"
              + ("" if r["check"] == "ok" else f"  {r['check']}"))
    targets = target_rows(recs, args.require_targets)
    for t in targets:
        print(f"target {verdict(t)} {t['op']} {t['shape']} {t['dtype']}: {t['text']}"
              + ("" if t["met"] else f" ({t['why']})"))
    for r in (r for r in recs if r.get("bench") == "compile" and "wall_s_per_extra" in r):
        print(f"compile: {r['compiler']} {r['exprs']} expressions {r['wall_s']:.1f} s wall; "
              f"{r['wall_s_per_extra']:.3f} s wall ({r['cpu_s_per_extra']:.3f} s CPU) per extra expression")
    print(f"written: {args.out}/results.json, results.md; {note}")
    unmeasured = [t["op"] for t in targets if t.get("measured", True) is False]
    if unmeasured:
        print(f"report.py: targets NOT MEASURED: {', '.join(unmeasured)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
