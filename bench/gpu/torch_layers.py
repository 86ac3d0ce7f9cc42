#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch baselines for bench_layers.cu, bench_elementwise.cu and
bench_embedding.cu (forward and embedding_dense_backward): the same
layers, shapes and dtypes, in eager mode and under torch.compile, timed the
same way (CUDA events after warm-up, median of many samples, each sample one
call per rotating buffer set so the working set exceeds twice the L2 cache).
Random never-zero inputs; each output is checked against a float64 reference
on a few rows before timing. Prints a table and appends one JSON object per
measurement to --json. Exits 0 with a note when torch or a GPU is missing.

Usage: torch_layers.py [--quick] [--json FILE] [--compile-budget-s 180]
"""
import argparse
import json
import math
import statistics
import sys
import time

LN_EPS, RMS_EPS = 1e-5, 1e-6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--compile-budget-s", type=float, default=180.0,
                    help="stop adding torch.compile measurements after this much time spent compiling")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("torch_layers: PyTorch is not installed; nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("torch_layers: no GPU is present (torch.cuda.is_available() is False); nothing measured")
        return 0

    warmup, runs = (1, 3) if args.quick else (3, 25)
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    dev = "cuda"
    json_out = open(args.json, "a") if args.json else None
    failed = []
    compile_spent = [0.0]
    saved = {}  # what eager forward passes saved for backward, per buffer set
    torch._dynamo.config.cache_size_limit = 256

    def rnd(shape, dtype):
        v = torch.rand(shape, device=dev, dtype=torch.float32) * 1.75 + 0.25
        sign = torch.where(torch.rand(shape, device=dev) < 0.5, -1.0, 1.0)
        return (v * sign).to(dtype)

    def time_ms(f, sets):
        for _ in range(warmup):
            for s in range(sets):
                f(s)
        times = []
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(runs):
            start.record()
            for s in range(sets):
                f(s)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / sets)
        return statistics.median(times)

    def n_sets(set_bytes):
        free, _ = torch.cuda.mem_get_info()
        return max(1, min(math.ceil(2 * l2 / set_bytes), int(0.4 * free / set_bytes)))

    def emit(bench, op, shape, dtype, impl, ms, nbytes, copy_gbps, check):
        gbps = nbytes / (ms * 1e6)
        rec = {"bench": bench, "op": op, "shape": shape, "dtype": dtype, "impl": impl, "ms": ms, "bytes": nbytes,
               "gbps": gbps, "copy_gbps": copy_gbps, "pct_copy": 100 * gbps / copy_gbps, "check": check}
        print(f"{op:26s} {shape:12s} {dtype:5s} {impl:22s} {ms:10.4f} {gbps:9.2f} {100 * gbps / copy_gbps:7.1f}  {check}",
              flush=True)
        if json_out:
            json_out.write(json.dumps(rec) + "\n")
            json_out.flush()

    def check(got, ref, tol):
        got, ref = got.double(), ref.double()
        scale = ref.abs().max().item()
        err = ((got - ref).abs() / (tol * scale + tol * ref.abs())).max().item()
        return "ok" if err <= 1 else f"FAIL (error {err:.3g} x tolerance)"

    def compiled(fn):
        return torch.compile(fn, dynamic=False)

    def measure(bench, op, shape, dtype, impls, make_inputs, set_bytes, nbytes, ref_fn, copy_gbps, judge=None):
        """impls: [(name, fn(*inputs)->out, is_compiled)]; ref_fn(*inputs)->float64 reference of rows [:4];
        judge(out, tol, *inputs) -> verdict, instead of comparing with ref_fn's, when given."""
        sets = n_sets(set_bytes)
        inputs = [make_inputs() for _ in range(sets)]
        tol = 1e-4 if dtype == "f32" else 2e-2
        ref = ref_fn(*inputs[0]) if judge is None else None
        for name, fn, is_compiled in impls:
            if is_compiled:
                if args.no_compile or compile_spent[0] > args.compile_budget_s:
                    print(f"{op:26s} {shape:12s} {dtype:5s} {name:22s} skipped (torch.compile budget spent)")
                    continue
                t0 = time.monotonic()
                try:
                    fn(*inputs[0])
                    torch.cuda.synchronize()
                except Exception as e:  # no compiler or triton on this machine: no torch.compile baseline
                    compile_spent[0] += time.monotonic() - t0
                    args.no_compile = True
                    print(f"{op:26s} {shape:12s} {dtype:5s} {name:22s} skipped (torch.compile failed: "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); no torch.compile "
                          f"baselines from here on")
                    continue
                compile_spent[0] += time.monotonic() - t0
            out = fn(*inputs[0])
            verdict = check(out[:4], ref, tol) if judge is None else judge(out, tol, *inputs[0])
            if verdict != "ok":
                failed.append(f"{op} {shape} {dtype} {name}: {verdict}")
            emit(bench, op, shape, dtype, name, time_ms(lambda s: fn(*inputs[s]), sets), nbytes, copy_gbps, verdict)
        del inputs
        saved.clear()

    # The ceiling, measured the same way: a device-to-device copy of 1 GiB.
    n = (1 << 22) if args.quick else (1 << 28)
    src, dst = torch.empty(n, device=dev), torch.empty(n, device=dev)
    copy_ms = time_ms(lambda s: dst.copy_(src), 1)
    copy_gbps = 2 * n * 4 / (copy_ms * 1e6)
    print(f"torch_layers on {torch.cuda.get_device_name()}, torch {torch.__version__}; median of {runs} samples "
          f"after {warmup} warm-up")
    print(f"{'op':26s} {'shape':12s} {'dtype':5s} {'impl':22s} {'ms':>10s} {'GB/s':>9s} {'%copy':>7s}  check")
    emit("torch", "copy", str(n), "f32", "torch copy_", copy_ms, 2 * n * 4, copy_gbps, "ok")
    del src, dst

    dtypes = [("bf16", torch.bfloat16), ("f32", torch.float32)]

    # Fused elementwise expressions (bench_elementwise.cu).
    er, ec = (257, 1023) if args.quick else (8192, 8192)
    shape = f"{er}x{ec}"
    for dname, dt in dtypes:
        es = torch.finfo(dt).bits // 8
        def bgr(x, w, b, r):
            return F.gelu(x * w + b) + r
        measure("torch", "gelu(x*w+b)+r", shape, dname, [("torch eager", bgr, False), ("torch.compile", compiled(bgr), True)],
                lambda: (rnd((er, ec), dt), rnd((ec,), dt), rnd((ec,), dt), rnd((er, ec), dt)),
                3 * er * ec * es, 3 * er * ec * es + 2 * ec * es,
                lambda x, w, b, r: F.gelu(x[:4].double() * w.double() + b.double()) + r[:4].double(), copy_gbps)
        def six(a, b, c):
            return (a * b + c) * 0.5 - torch.sigmoid(a) * c
        measure("torch", "(a*b+c)*0.5-sigmoid(a)*c", shape, dname,
                [("torch eager", six, False), ("torch.compile", compiled(six), True)],
                lambda: (rnd((er, ec), dt), rnd((er, ec), dt), rnd((er, ec), dt)), 4 * er * ec * es, 4 * er * ec * es,
                lambda a, b, c: six(a[:4].double(), b[:4].double(), c[:4].double()), copy_gbps)

        # Bias + dropout + residual: PyTorch draws its own mask, so each output
        # element of rows [:4] must be the kept value (x + b) / (1 - p) + r or
        # the dropped one r, and about p of them dropped.
        p = 0.1
        def bdr(x, b, r):
            return F.dropout(x + b, p, training=True) + r
        def dropout_judge(out, tol, x, b, r):
            o, r4 = out[:4].double(), r[:4].double()
            kept = (x[:4].double() + b.double()) / (1 - p) + r4
            def near(a, c):
                return (a - c).abs() <= tol * (a.abs() + c.abs()) + tol
            dropped = near(o, r4) & ~near(o, kept)
            frac = dropped.double().mean().item()
            if not bool((near(o, kept) | near(o, r4)).all()):
                return "FAIL (an element is neither kept nor dropped)"
            return "ok" if abs(frac - p) < 0.02 else f"FAIL (dropped fraction {frac:.4f}, p {p})"
        measure("torch", "dropout(x+b,0.1)+r", shape, dname,
                [("torch eager", bdr, False), ("torch.compile", compiled(bdr), True)],
                lambda: (rnd((er, ec), dt), rnd((ec,), dt), rnd((er, ec), dt)), 3 * er * ec * es,
                3 * er * ec * es + ec * es, None, copy_gbps, judge=dropout_judge)

    # The embedding (bench_embedding.cu): forward, and the table's gradient
    # as autograd computes it (aten's embedding_dense_backward); ids repeat
    # (drawn from a quarter of the rows).
    vocab, dim, tokens = (5003, 512, 1024) if args.quick else (50000, 4096, 16384)
    es = 2
    def emb_inputs():
        ids = torch.randint(0, vocab // 4 + 1, (tokens,), device=dev)
        ids[:4] = torch.arange(4, device=dev)  # the checked rows 0..3 of the gradient occur
        return rnd((vocab, dim), torch.bfloat16), ids, rnd((tokens, dim), torch.bfloat16)
    def emb_bwd(table, ids, dy):
        return torch.ops.aten.embedding_dense_backward(dy, ids, vocab, -1, False)
    def emb_bwd_ref(table, ids, dy):
        low = ids < 4
        return torch.zeros((4, dim), dtype=torch.float64, device=dev).index_add_(0, ids[low], dy[low].double())
    measure("torch", "embedding", f"{tokens}x{dim}", "bf16",
            [("torch eager", lambda table, ids, dy: F.embedding(ids, table), False)], emb_inputs,
            (vocab + 2 * tokens) * dim * es, 2 * tokens * dim * es,
            lambda table, ids, dy: table[ids[:4]].double(), copy_gbps)
    measure("torch", "embedding_backward", f"{vocab}x{dim}", "bf16", [("torch eager", emb_bwd, False)], emb_inputs,
            (vocab + 2 * tokens) * dim * es, (tokens + vocab) * dim * es, emb_bwd_ref, copy_gbps)

    # Row layers (bench_layers.cu). Eager backward is the kernel autograd runs
    # for the layer (the gradient with respect to x only; softmax's takes x as
    # the forward output, as bench_layers.cu does); torch.compile gets the
    # same formula loom evaluates.
    def sm_bwd(y, dy):
        return y * (dy - (dy * y).sum(-1, keepdim=True))

    def lsm_bwd(y, dy):
        return dy - torch.exp(y) * dy.sum(-1, keepdim=True)

    def up(t):
        """half and bf16 compute in float, as loom does; float64 references stay float64."""
        return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t

    def ln_bwd(x, w, dy):
        mean = up(x).mean(-1, keepdim=True)
        c = up(x) - mean
        rstd = torch.rsqrt((c * c).mean(-1, keepdim=True) + LN_EPS)
        xhat = c * rstd
        g = up(dy) * up(w)
        return (rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))).to(x.dtype)

    def rms(x, w):
        xf = up(x)
        return (xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + RMS_EPS) * up(w)).to(x.dtype)

    def rms_bwd(x, w, dy):
        xf = up(x)
        r = torch.rsqrt((xf * xf).mean(-1, keepdim=True) + RMS_EPS)
        g = up(dy) * up(w)
        return (r * (g - xf * r * r * (g * xf).mean(-1, keepdim=True))).to(x.dtype)

    # Eager backward: the kernels autograd runs, with what the forward saved
    # computed once per buffer set outside the timing (cached by address).
    def once(key, make):
        if key not in saved:
            saved[key] = make()
        return saved[key]

    def ln_eager_bwd(x, w, dy):
        n = x.shape[-1]
        _, mean, rstd = once(("ln", x.data_ptr()), lambda: torch.ops.aten.native_layer_norm(x, [n], w, None, LN_EPS))
        return torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, None, [True, False, False])[0]

    def rms_eager_bwd(x, w, dy):
        def graph():
            xr = x.detach().requires_grad_(True)
            return xr, rms_eager(xr, w)
        xr, y = once(("rms", x.data_ptr()), graph)
        return torch.autograd.grad(y, xr, dy, retain_graph=True)[0]

    rms_eager = (lambda x, w: F.rms_norm(x, (x.shape[-1],), w, RMS_EPS)) if hasattr(F, "rms_norm") else rms
    layers = [
        ("softmax", 1, lambda x, w, b, dy: torch.softmax(x, -1), lambda x, w, b, dy: torch.softmax(x, -1)),
        ("log_softmax", 1, lambda x, w, b, dy: torch.log_softmax(x, -1), lambda x, w, b, dy: torch.log_softmax(x, -1)),
        ("layer_norm", 1, lambda x, w, b, dy: F.layer_norm(x, (x.shape[-1],), w, b, LN_EPS),
         lambda x, w, b, dy: F.layer_norm(x, (x.shape[-1],), w, b, LN_EPS)),
        ("rms_norm", 1, lambda x, w, b, dy: rms_eager(x, w), lambda x, w, b, dy: rms(x, w)),
        ("softmax_backward", 2, lambda x, w, b, dy: torch._softmax_backward_data(dy, x, -1, x.dtype),
         lambda x, w, b, dy: sm_bwd(x, dy)),
        ("log_softmax_backward", 2, lambda x, w, b, dy: torch._log_softmax_backward_data(dy, x, -1, x.dtype),
         lambda x, w, b, dy: lsm_bwd(x, dy)),
        ("layer_norm_backward_input", 2, lambda x, w, b, dy: ln_eager_bwd(x, w, dy),
         lambda x, w, b, dy: ln_bwd(x, w, dy)),
        ("rms_norm_backward_input", 2, lambda x, w, b, dy: rms_eager_bwd(x, w, dy),
         lambda x, w, b, dy: rms_bwd(x, w, dy)),
    ]
    # float64 references of rows [:4]. softmax_backward takes x as the forward
    # output y, as bench_layers.cu does.
    refs = {
        "softmax": lambda x, w, b, dy: torch.softmax(x[:4].double(), -1),
        "log_softmax": lambda x, w, b, dy: torch.log_softmax(x[:4].double(), -1),
        "layer_norm": lambda x, w, b, dy: F.layer_norm(x[:4].double(), (x.shape[-1],), w.double(), b.double(), LN_EPS),
        "rms_norm": lambda x, w, b, dy: rms(x[:4].double(), w.double()),
        "softmax_backward": lambda x, w, b, dy: sm_bwd(x[:4].double(), dy[:4].double()),
        "log_softmax_backward": lambda x, w, b, dy: lsm_bwd(x[:4].double(), dy[:4].double()),
        "layer_norm_backward_input": lambda x, w, b, dy: ln_bwd(x[:4].double(), w.double(), dy[:4].double()),
        "rms_norm_backward_input": lambda x, w, b, dy: rms_bwd(x[:4].double(), w.double(), dy[:4].double()),
    }
    rows = 64 if args.quick else 4096
    widths = [1023, 4097] if args.quick else [1024, 4096, 16384, 65536]
    for cols in widths:
        for dname, dt in dtypes:
            es = torch.finfo(dt).bits // 8
            for op, n_in, eager, formula in layers:
                uses_grad = op.endswith("backward") or op.endswith("backward_input")
                measure("torch", op, f"{rows}x{cols}", dname,
                        [("torch eager", eager, False), ("torch.compile", compiled(formula), True)],
                        lambda: (rnd((rows, cols), dt), rnd((cols,), dt), rnd((cols,), dt),
                                 rnd((rows, cols), dt) if uses_grad else None),
                        3 * rows * cols * es, (n_in + 1) * rows * cols * es + 2 * cols * es, refs[op], copy_gbps)
    print(f"torch_layers: {compile_spent[0]:.0f} s spent in torch.compile")
    for f in failed:
        print("FAIL:", f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
