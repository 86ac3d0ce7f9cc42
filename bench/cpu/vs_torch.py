#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""loom's host executor beside PyTorch (eager and torch.compile) on the CPU,
side by side in one run.

loom's side is bench_vs_torch_cpu (bench/cpu/bench_vs_torch_cpu.cpp), started
once and driven over a pipe; PyTorch runs in this process. Both get the same
thread count (--threads: OMP_NUM_THREADS for loom, torch.set_num_threads), the
same sizes (the program reports its extents) and the same seeded data (both
compute splitmix64 of the element index; see the program's header). For each
case: loom runs once (warm-up and check), eager PyTorch once, torch.compile
compiles (its time is reported) and runs once more; the sums of |v| of every
output are compared with PyTorch eager's (`check`). Then the repetitions
alternate, one call each of loom, eager and compiled per round, --runs
rounds, each implementation's calls after a pause (--settle, 0.3 s: the
other side's idle OpenMP threads spin for up to 200 ms after its call, and
on a 2-core machine they would take the cores from this side's threads);
the figure is the median of the rounds (the fastest is kept too).
A STREAM-like copy (bench_vs_torch_cpu's parallel copy of a full-size
tensor, bytes read + written / time) is timed before and after the cases;
each figure is also given as its effective bandwidth (the bytes its case
must move / time) in % of that copy.

Writes vs_torch.json, vs_torch.md and, with --plot, vs_torch.png to --out,
and prints the Markdown. Without torch (or NumPy) only loom's side runs, and
the report says so.

Run with the venv that scripts/test_torch.sh makes, e.g.
  build/torch/venv/bin/python bench/cpu/vs_torch.py --bench build/bench/bench_vs_torch_cpu \\
      --threads 2 --out /tmp/vs-torch --plot
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RMS_EPS, LN_EPS, SGD_LR = 1e-6, 1e-5, 0.01
CHECK_RTOL = 2e-3

# What each case is, as the report prints it, and the target (kind).
DESCRIPTION = {
    "block_fwd": "`y = rms_norm(gelu_tanh(x + b) + r) * w`, forward",
    "block_fwd_bwd": "the same, forward + backward (gradients of x, b, r, w)",
    "gelu_affine_fwd": "`gelu(x * w + b) + r` (w, b broadcast rows)",
    "silu_gate_fwd": "`silu(a) * g`",
    "silu_gate_fwd_bwd": "`silu(a) * g`, forward + backward",
    "softmax_fwd": "softmax",
    "softmax_fwd_bwd": "softmax, forward + backward",
    "log_softmax_fwd": "log_softmax",
    "log_softmax_fwd_bwd": "log_softmax, forward + backward",
    "layer_norm_fwd": "layer_norm",
    "layer_norm_fwd_bwd": "layer_norm, forward + backward (x, w, b)",
    "rms_norm_fwd": "rms_norm",
    "rms_norm_fwd_bwd": "rms_norm, forward + backward (x, w)",
    "cross_entropy_fwd": "cross_entropy (mean)",
    "cross_entropy_fwd_bwd": "cross_entropy, forward + backward",
    "user_layer_fwd": "user layer `swish(x) * rms-normalized x * w` (user op with its derivative)",
    "user_layer_fwd_bwd": "user layer, forward + derived backward (x, w)",
    "matmul": "matmul, square",
    "matmul_bias_gelu": "`gelu_tanh(matmul(a, b) + bias)`",
    "mlp_step": "MLP step 784 -> 512 -> 10 (bias, gelu_tanh, cross_entropy, SGD)",
}

# The targets of issue 56 (this machine, idle): loom's speed over eager's
# and over torch.compile's (torch's time / loom's).
TARGETS = {"fwd": (1.5, 1.0), "fwd_bwd": (1.2, 0.8), "matmul": (0.9, None), "mlp": (1.0, None)}


def target_kind(name):
    if name.startswith("matmul"):
        return "matmul"
    if name == "mlp_step":
        return "mlp"
    return "fwd_bwd" if name.endswith("_fwd_bwd") else "fwd"


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit():
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + (" (working tree modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


class Loom:
    """bench_vs_torch_cpu, driven line by line."""

    def __init__(self, exe, threads, quick):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        self.p = subprocess.Popen([exe] + (["--quick"] if quick else []), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env, bufsize=1)
        self.machine = json.loads(self.p.stdout.readline())["machine"]

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        reply = self.p.stdout.readline().strip()
        if not reply:
            sys.exit(f"bench_vs_torch_cpu stopped answering (after '{line}')")
        if reply.startswith("error "):
            raise RuntimeError(reply[6:])
        return reply

    def cases(self):
        self.p.stdin.write("list\n")
        self.p.stdin.flush()
        names = []
        for line in iter(self.p.stdout.readline, ""):
            if line.strip() == "end":
                return names
            names.append(line.split()[1])
        sys.exit("bench_vs_torch_cpu: no case list")

    def copy_ms(self, runs):
        f = self.ask(f"copy {runs}").split()
        return float(f[1]), [float(v) for v in f[2:]]

    def run_ms(self):
        """The second of two calls in a row (see timed_ms)."""
        return float(self.ask("run 2").split()[2])

    def close(self):
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        self.p.wait(timeout=60)


def seeded(np, shape, seed, lo, hi):
    """The values bench_vs_torch_cpu makes: lo + (hi - lo) * top 24 bits of splitmix64((seed << 40) + i)."""
    n = 1
    for e in shape:
        n *= e
    u = (splitmix64(np, seed, n) >> np.uint64(40)).astype(np.float64) * 2.0 ** -24
    return (lo + (hi - lo) * u).astype(np.float32).reshape(shape)


def seeded_labels(np, n, classes, seed):
    return ((splitmix64(np, seed, n) >> np.uint64(40)) % np.uint64(classes)).astype(np.int64)


def splitmix64(np, seed, n):
    z = (np.uint64(seed) << np.uint64(40)) + np.arange(n, dtype=np.uint64)
    z += np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def torch_case(torch, np, name, dims, compiled):
    """(call, outputs): call() runs the case once; outputs(result) lists the
    tensors whose sums of |v| the check compares, in bench_vs_torch_cpu's order."""
    F = torch.nn.functional
    wrap = (lambda f: torch.compile(f)) if compiled else (lambda f: f)
    t = lambda a, grad=False: torch.from_numpy(a).requires_grad_(grad)
    if name == "mlp_step":
        b, i, h, k = dims["batch"], dims["in"], dims["hidden"], dims["classes"]
        x, labels = t(seeded(np, (b, i), 21, -1, 1)), torch.from_numpy(seeded_labels(np, b, k, 26))
        params = [t(seeded(np, (i, h), 22, -0.05, 0.05), True), t(seeded(np, (h,), 24, -0.1, 0.1), True),
                  t(seeded(np, (h, k), 23, -0.05, 0.05), True), t(seeded(np, (k,), 25, -0.1, 0.1), True)]

        def loss_of(x, labels, w1, b1, w2, b2):
            hid = F.gelu(torch.addmm(b1, x, w1), approximate="tanh")
            return F.cross_entropy(torch.addmm(b2, hid, w2), labels)

        f = wrap(loss_of)

        def step():
            loss = f(x, labels, *params)
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.sub_(SGD_LR * g)
            return [loss.detach()] + [p.detach() for p in params]

        return step
    if name.startswith("matmul"):
        n = dims["n"]
        a, w, bias = t(seeded(np, (n, n), 11, -1, 1)), t(seeded(np, (n, n), 12, -0.03, 0.03)), t(
            seeded(np, (n,), 13, -1, 1))
        if name == "matmul":
            f = wrap(lambda a, w: torch.mm(a, w))
            return lambda: [f(a, w)]
        f = wrap(lambda a, w, bias: F.gelu(torch.addmm(bias, a, w), approximate="tanh"))
        return lambda: [f(a, w, bias)]

    rows, cols = dims["rows"], dims["cols"]
    backward = name.endswith("_fwd_bwd")
    x = seeded(np, (rows, cols), 1, -2, 2)
    r = seeded(np, (rows, cols), 3, -1, 1)
    dy = t(seeded(np, (rows, cols), 5, -1, 1))
    w, b = seeded(np, (cols,), 4, 0.5, 1.5), seeded(np, (cols,), 2, -1, 1)
    base = name[:-len("_fwd_bwd")] if backward else name[:-len("_fwd")]
    if base == "block":
        inputs = [x, b, r, w]
        fn = lambda x, b, r, w: F.rms_norm(F.gelu(x + b, approximate="tanh") + r, (cols,), w, RMS_EPS)
    elif base == "gelu_affine":
        inputs = [x, w, b, r]
        fn = lambda x, w, b, r: F.gelu(x * w + b) + r
    elif base == "silu_gate":
        inputs = [x, r]
        fn = lambda a, g: F.silu(a) * g
    elif base == "softmax":
        inputs = [x]
        fn = lambda x: torch.softmax(x, -1)
    elif base == "log_softmax":
        inputs = [x]
        fn = lambda x: torch.log_softmax(x, -1)
    elif base == "layer_norm":
        inputs = [x, w, b]
        fn = lambda x, w, b: F.layer_norm(x, (cols,), w, b, LN_EPS)
    elif base == "rms_norm":
        inputs = [x, w]
        fn = lambda x, w: F.rms_norm(x, (cols,), w, RMS_EPS)
    elif base == "cross_entropy":
        labels = torch.from_numpy(seeded_labels(np, rows, cols, 6))
        inputs = [x]
        fn = lambda z: F.cross_entropy(z, labels)
        dy = None  # the loss is a scalar: its gradient is 1
    elif base == "user_layer":
        inputs = [x, w]
        fn = lambda x, w: x * torch.sigmoid(1.5 * x) * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + RMS_EPS) * w)
    else:
        raise KeyError(name)
    inputs = [t(v, backward) for v in inputs]
    f = wrap(fn)
    if not backward:
        def forward():
            with torch.no_grad():
                return [f(*inputs)]

        return forward

    def forward_backward():
        y = f(*inputs)
        return [y.detach()] + list(torch.autograd.grad(y, inputs, dy))

    return forward_backward


def abs_sums(outs):
    return [float(o.detach().double().abs().sum()) for o in outs]


def timed_ms(call):
    """The time of the second of two calls in a row: the first wakes the
    threads (on a loaded machine a thread woken after a pause can wait
    milliseconds for a core, and the other side ran in between)."""
    call()
    a = time.perf_counter()
    call()
    return (time.perf_counter() - a) * 1e3


def compare(loom_sums, torch_sums):
    if len(loom_sums) != len(torch_sums):
        return f"MISMATCH ({len(loom_sums)} outputs against {len(torch_sums)})"
    worst = max((abs(a - b) / max(abs(b), 1e-30) for a, b in zip(loom_sums, torch_sums)), default=0.0)
    return "ok" if worst <= CHECK_RTOL else f"MISMATCH (sums differ by {worst:.2g} relative)"


def ensure_matplotlib(allow_install):
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        pass
    if not allow_install:
        return False
    print(f"matplotlib is not installed: installing it into {sys.prefix} with pip")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "matplotlib"], timeout=300)
    if r.returncode != 0:
        return False
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        return False


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default=os.path.join(os.environ.get("LOOM_BUILD_DIR", os.path.join(ROOT, "build")),
                                                   "bench", "bench_vs_torch_cpu"),
                   help="path of bench_vs_torch_cpu (default: $LOOM_BUILD_DIR/bench/bench_vs_torch_cpu)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=7, help="interleaved repetitions (the figure is their median)")
    p.add_argument("--settle", type=float, default=0.3,
                   help="seconds of pause before each implementation's calls, so the other one's idle OpenMP threads "
                   "(LLVM's libomp spins 200 ms after a parallel region, GNU's libgomp too) have gone to sleep")
    p.add_argument("--cases", default="", help="comma-separated names (default: all; see the program's list)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, one repetition, no torch.compile (a smoke run)")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out (it compiles for 14-34 s a case)")
    p.add_argument("--no-torch", action="store_true", help="loom's side only")
    p.add_argument("--commit", default="", help="the commit the loom program was built from, as the report records it "
                   "(default: this checkout's HEAD, marked when its tracked files are modified)")
    p.add_argument("--note", default="", help="a note on the run recorded in the report (e.g. 'machine busy')")
    p.add_argument("--out", default="", help="folder for vs_torch.json, vs_torch.md and vs_torch.png")
    p.add_argument("--plot", action="store_true", help="also draw vs_torch.png (installs matplotlib with pip if needed)")
    a = p.parse_args()
    if a.quick:
        a.runs, a.no_compile, a.settle = 1, True, 0.0
    if not os.path.exists(a.bench):
        sys.exit(f"{a.bench} not found: build the target bench_vs_torch_cpu (or pass --bench)")

    torch = np = None
    torch_note = ""
    if a.no_torch:
        torch_note = "torch side left out (--no-torch)"
    else:
        try:
            import numpy as np
            import torch

            torch.set_num_threads(a.threads)
        except ImportError as e:
            torch = np = None
            torch_note = f"no torch in {sys.executable} ({e}): skipping the torch side, loom only"
    if torch_note:
        print(torch_note)
    impls = ["loom"] + (["torch eager"] if torch else []) + (["torch.compile"] if torch and not a.no_compile else [])

    started = time.time()
    load_before = os.getloadavg()
    loom = Loom(a.bench, a.threads, a.quick)
    names = loom.cases()
    if a.cases:
        unknown = [c for c in a.cases.split(",") if c not in names]
        if unknown:
            sys.exit(f"unknown cases {unknown}; there are: {', '.join(names)}")
        names = a.cases.split(",")
    copy_bytes, copy_before = loom.copy_ms(max(3, 2 * a.runs))
    print(f"machine: {cpu_model()}, {os.cpu_count()} logical cores, {a.threads} threads; load average "
          f"{load_before[0]:.2f}; {loom.machine['compiler']} {loom.machine['flags']}; host SIMD "
          f"{loom.machine['host_simd']}; torch {torch.__version__ if torch else '-'}")

    results = []
    for name in names:
        res = {"case": name, "description": DESCRIPTION.get(name, name), "ms": {}, "fastest_ms": {}, "samples": {}}
        try:
            info = json.loads(loom.ask(f"case {name}"))
        except RuntimeError as e:
            res["not_expressible"] = str(e)
            results.append(res)
            print(f"{name}: not expressible with loom's API here: {e}")
            continue
        res.update(dims=info["dims"], bytes=info["bytes"], flop=info["flop"], loom_kernels=info["kernels"])
        calls = {"loom": loom.run_ms}
        res["check"] = "not checked (no torch)" if not torch else ""
        for impl in impls[1:]:
            try:
                call = torch_case(torch, np, name, info["dims"], impl == "torch.compile")
                t0 = time.perf_counter()
                outs = call()  # warm-up (and the compile); checked: the MLP step's weights change with each call
                if impl == "torch.compile":
                    res["compile_s"] = round(time.perf_counter() - t0, 1)
                verdict = compare(info["sums"], abs_sums(outs))
                call()
                res["check" if impl == "torch eager" else "check_compile"] = verdict
                calls[impl] = lambda c=call: timed_ms(c)
            except Exception as e:  # torch.compile may fail on this machine: say so, go on
                res[f"{impl} error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                print(f"{name}: {impl} failed: {res[f'{impl} error']}")
        for _ in range(a.runs):
            for impl, c in calls.items():
                time.sleep(a.settle)
                res["samples"].setdefault(impl, []).append(c())
        for impl, s in res["samples"].items():
            res["ms"][impl], res["fastest_ms"][impl] = statistics.median(s), min(s)
        results.append(res)
        print(f"{name}: " + ", ".join(f"{i} {m:.3f} ms" for i, m in res["ms"].items()) + f"; check {res['check']}")
        sys.stdout.flush()
    copy_bytes, copy_after = loom.copy_ms(max(3, 2 * a.runs))
    loom.close()
    copy_ms = statistics.median(copy_before + copy_after)
    copy_gbps = copy_bytes / copy_ms / 1e6
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": a.commit or git_commit(),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "machine": dict(loom.machine, cpu_model=cpu_model(), logical_cores=os.cpu_count()),
        "threads": a.threads, "runs": a.runs, "settle_s": a.settle, "quick": a.quick, "note": a.note, "torch_note": torch_note,
        "torch": torch.__version__ if torch else None,
        "load_average": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)},
        "wall_s": round(time.time() - started, 1),
        "copy": {"bytes": copy_bytes, "ms_before": copy_before, "ms_after": copy_after, "gbps": copy_gbps},
        "cases": results,
    }
    for r in results:
        r["gbps"] = {i: r["bytes"] / m / 1e6 for i, m in r.get("ms", {}).items()} if "bytes" in r else {}
        r["pct_copy"] = {i: 100 * g / copy_gbps for i, g in r["gbps"].items()}
        if r.get("flop"):
            r["gflops"] = {i: r["flop"] / m / 1e6 for i, m in r["ms"].items()}
    md = markdown(report, impls)
    print()
    print(md)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "vs_torch.json"), "w") as f:
            json.dump(report, f, indent=1)
        with open(os.path.join(a.out, "vs_torch.md"), "w") as f:
            f.write(md + "\n")
    if a.plot:
        if not a.out:
            print("--plot needs --out: no plot")
        elif not torch:
            print("no torch: nothing to plot beside loom, no plot")
        elif ensure_matplotlib(not a.quick):
            plot(report, impls, os.path.join(a.out, "vs_torch.png"))
        else:
            print("matplotlib is not available (pip could not install it): no plot; everything else is written")
    bad = [r["case"] for r in results if r.get("check", "ok").startswith("MISMATCH")
           or r.get("check_compile", "ok").startswith("MISMATCH")]
    if bad:
        print(f"vs_torch.py: results differ from PyTorch's in {', '.join(bad)}")
        return 1
    return 0


def markdown(rep, impls):
    m = rep["machine"]
    lines = [
        f"loom beside PyTorch on the CPU: {rep['date']}, commit {rep['commit']}",
        "",
        f"- machine: {m['cpu_model']}, {m['logical_cores']} logical cores; CPU ISA: {m['isa']}; loom's host SIMD: "
        f"{m['host_simd']}; {rep['threads']} threads for each side; load average {rep['load_average']['before']} "
        f"before, {rep['load_average']['after']} after" + (f"; {rep['note']}" if rep["note"] else ""),
        f"- loom: {m['compiler']}, flags `{m['flags']}` (compiled for {m['compiled_for']}); host matmul: "
        f"{m['host_matmul']}",
        f"- torch: {rep['torch'] or '-'}" + (f" ({rep['torch_note']})" if rep["torch_note"] else ""),
        f"- copy bandwidth (parallel copy of {rep['copy']['bytes'] / 2**21:.3g} MiB, read + write, same run): "
        f"{rep['copy']['gbps']:.3g} GB/s",
        f"- median of {rep['runs']} interleaved repetitions (each implementation's calls after a pause of "
        f"{rep.get('settle_s', 0)} s); `command`: {rep['command']}",
        "- ms: median (fastest); speed: torch's time / loom's (above 1: loom faster); % copy: the bytes the case "
        "must move / time, against the copy's (and GFLOP/s for products)",
        "",
    ]
    head = ["case", "shape"] + [f"{i} ms" for i in impls]
    if "torch eager" in impls:
        head += ["loom vs eager"]
    if "torch.compile" in impls:
        head += ["loom vs compile"]
    head += [f"{i} % copy" for i in impls] + ["target", "loom kernels", "check"]
    lines += ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in rep["cases"]:
        if "not_expressible" in r:
            lines.append(f"| {r['description']} | | not expressible: {r['not_expressible']} |")
            continue
        ms = r["ms"]
        shape = " x ".join(str(v) for v in r["dims"].values())
        row = [r["description"], shape]
        row += [f"{ms[i]:.2f} ({r['fastest_ms'][i]:.2f})" if i in ms else r.get(f"{i} error", "-") for i in impls]
        ratios = {}
        for i in ("torch eager", "torch.compile"):
            if i in impls:
                ratios[i] = ms[i] / ms["loom"] if i in ms else None
                row.append(f"**{ratios[i]:.2f}x**" if ratios[i] else "-")
        flops = r.get("gflops", {})
        row += [(f"{r['pct_copy'][i]:.0f}%" + (f" ({flops[i]:.0f} GFLOP/s)" if flops else "")) if i in ms else "-"
                for i in impls]
        row.append(verdict(r["case"], ratios))
        row.append(str(r["loom_kernels"]))
        check = r["check"] + (f"; compiled: {r['check_compile']}" if r.get("check_compile", "ok") != "ok" else "")
        row.append(check + (f"; compile {r['compile_s']} s" if "compile_s" in r else ""))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "target (issue 56, on an idle machine): forward >= 1.5x eager and >= 1.0x torch.compile; forward + "
              "backward >= 1.2x eager and >= 0.8x torch.compile; matmul >= 0.9x torch; the MLP step >= 1.0x eager."]
    return "\n".join(lines)


def verdict(name, ratios):
    want_eager, want_compile = TARGETS[target_kind(name)]
    parts = []
    for i, want in (("torch eager", want_eager), ("torch.compile", want_compile)):
        if want is None or ratios.get(i) is None:
            continue
        parts.append(f"{'met' if ratios[i] >= want else 'missed'} ({'eager' if i == 'torch eager' else 'compile'} "
                     f">= {want})")
    return "; ".join(parts) or "-"


def plot(rep, impls, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [r for r in rep["cases"] if r.get("ms", {}).get("torch eager")]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(cases) + 1.5))
    height = 0.8 / len(impls)
    for k, impl in enumerate(impls):
        ys = [j + k * height for j in range(len(cases))]
        speed = [r["ms"]["torch eager"] / r["ms"][impl] if impl in r["ms"] else 0 for r in cases]
        ax.barh(ys, speed, height=height, label=impl)
    ax.set_yticks([j + 0.4 - height / 2 for j in range(len(cases))])
    ax.set_yticklabels([r["case"] for r in cases])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("speed relative to torch eager (torch eager's time / this one's; log scale)")
    ax.set_title(f"loom beside PyTorch, {rep['machine']['cpu_model']}, {rep['threads']} threads, {rep['date']}",
                 fontsize=9)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())
