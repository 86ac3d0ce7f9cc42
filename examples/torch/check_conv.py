#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks loom's convolution, pooling and batch norm against PyTorch in float64.

Runs examples/08_cnn with --torch-check into a temporary folder, which
writes (examples/torch/conv_cases.hpp) a seeded random sweep of cases of
conv2d (NCHW and NHWC), conv1d, conv3d, conv_transpose2d, max_pool2d, avg_pool2d,
adaptive_avg_pool2d and batch_norm: their inputs, and loom's outputs and
gradients computed in float on the host executor; and the small CNN's
inputs, parameters, step-0 loss, gradients and running statistics. Each
case is recomputed here with torch.nn.functional in float64 (the inputs are
float values, exact in float64), its gradients by autograd for the same
output gradient dy, and compared:
max |loom - torch| <= tol * max(1, max |torch|), with tol a few hundred float
roundings; max pooling's indices must be equal.

    check_conv.py PATH/TO/08_cnn

Exits 0 when everything agrees, 1 when something does not (each failure
named with its case and options), 77 when torch cannot be imported.
"""
import json
import pathlib
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"torch cannot be imported ({e}): the convolution check is skipped")
    sys.exit(77)

# Bounds on max |loom - torch| / max(1, max |torch|): loom computes in float
# (epsilon 6e-8) with sums of at most a few hundred terms here; batch norm's
# gradients are scaled by 1 / sqrt(variance + eps) of small batches.
TOL = {"batch_norm": 5e-5, "cnn": 5e-5}
DEFAULT_TOL = 2e-5


def grads(f, inputs, dy):
    """f(*inputs) and the gradients of <f(*inputs), dy> with respect to each input."""
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    y = f(*leaves)
    y.backward(dy)
    return y.detach(), [t.grad for t in leaves]


def reference(op, o, a):
    """PyTorch's outputs for one case: a dict of the arrays loom wrote besides its inputs."""
    x, dy = a["x"], a["dy"]
    if op in ("conv2d", "conv1d", "conv3d", "conv_transpose2d"):
        kw = dict(stride=o["stride"], padding=o["padding"], dilation=o["dilation"], groups=int(o["groups"]))
        if op == "conv1d":
            kw = {k: int(v) if k != "groups" else v for k, v in kw.items()}
            f = lambda x, w, b: F.conv1d(x, w, b, **kw)  # noqa: E731
        elif op == "conv2d":
            f = lambda x, w, b: F.conv2d(x, w, b, **kw)  # noqa: E731
        elif op == "conv3d":
            f = lambda x, w, b: F.conv3d(x, w, b, **kw)  # noqa: E731
        else:
            f = lambda x, w, b: F.conv_transpose2d(x, w, b, output_padding=o["output_padding"], **kw)  # noqa: E731
        if o.get("nhwc"):  # channels last: x, y and their gradients [N, H, W, C]
            y, (dx, dw, db) = grads(f, [x.permute(0, 3, 1, 2), a["w"], a["b"]], dy.permute(0, 3, 1, 2))
            return {"y": y.permute(0, 2, 3, 1), "dx": dx.permute(0, 2, 3, 1), "dw": dw, "db": db}
        y, (dx, dw, db) = grads(f, [x, a["w"], a["b"]], dy)
        return {"y": y, "dx": dx, "dw": dw, "db": db}
    if op == "max_pool2d":
        pool = lambda x: F.max_pool2d(x, o["kernel"], o["stride"], o["padding"], o["dilation"],  # noqa: E731
                                      bool(o["ceil_mode"]), return_indices=True)
        y, idx = pool(x)
        # A window wholly in the padding: -infinity in both; loom's index is
        # -1 and its backward skips it, where torch's index names a position
        # outside the window. Compared: the -infinity, and the rest with
        # those windows' dy set to 0.
        empty = a["indices"] == -1
        if not (torch.isneginf(y[empty]).all() and torch.isneginf(a["y"][empty]).all()):
            raise AssertionError("a window wholly in the padding is not -infinity in both")
        y, idx = y.masked_fill(empty, 0), idx.masked_fill(empty, -1)
        a["y"].masked_fill_(empty, 0)
        _, (dx,) = grads(lambda x: pool(x)[0], [x], dy.masked_fill(empty, 0))
        return {"y": y, "indices": idx.to(torch.float64), "dx": dx}
    if op == "avg_pool2d":
        y, (dx,) = grads(lambda x: F.avg_pool2d(x, o["kernel"], o["stride"], o["padding"], bool(o["ceil_mode"]),
                                                bool(o["count_include_pad"])), [x], dy)
        return {"y": y, "dx": dx}
    if op == "adaptive_avg_pool2d":
        y, (dx,) = grads(lambda x: F.adaptive_avg_pool2d(x, o["output_size"]), [x], dy)
        return {"y": y, "dx": dx}
    if op == "batch_norm":
        rm, rv = a["running_mean"].clone(), a["running_var"].clone()
        y, (dx, dw, db) = grads(lambda x, w, b: F.batch_norm(x, rm, rv, w, b, True, o["momentum"], o["eps"]),
                                [x, a["w"], a["b"]], dy)
        return {"y": y, "new_running_mean": rm, "new_running_var": rv, "dx": dx, "dw": dw, "db": db}
    raise ValueError(f"unknown op {op}")


def error(got, want):
    return (got - want).abs().max().item() / max(1.0, want.abs().max().item()) if want.numel() else 0.0


def check_sweep(folder):
    cases = json.loads((folder / "conv_cases.json").read_text())
    blob = torch.from_numpy(np.fromfile(folder / "conv_cases.bin", dtype=np.float64))
    failures, worst, counts = [], {}, {}
    for i, case in enumerate(cases):
        op, o = case["op"], case["options"]
        a = {name: blob[off:off + int(np.prod(ext))].reshape(ext) for name, (off, ext) in case["arrays"].items()}
        want = reference(op, o, a)
        counts[op] = counts.get(op, 0) + 1
        for name, w in want.items():
            got = a[name]
            if got.shape != w.shape:
                failures.append(f"case {i} {op} {o}: {name} has shape {list(got.shape)}, torch's {list(w.shape)}")
                continue
            if name == "indices":
                if not torch.equal(got, w):
                    failures.append(f"case {i} {op} {o}: indices differ from torch's")
                continue
            e = error(got, w)
            worst[op] = max(worst.get(op, 0.0), e)
            if not e <= TOL.get(op, DEFAULT_TOL):
                failures.append(f"case {i} {op} {o} x {list(a['x'].shape)}: {name} off by {e:.3g}")
    for op in counts:
        print(f"  {op:20s} {counts[op]:4d} cases, worst relative error {worst.get(op, 0.0):.2e}")
    return len(cases), failures


def check_cnn(folder):
    """The CNN of examples/08_cnn.cu at step 0: loss, parameter gradients, running statistics."""
    load = lambda name: torch.from_numpy(np.load(folder / f"cnn_{name}.npy")).to(torch.float64)  # noqa: E731
    x, labels = load("x"), torch.from_numpy(np.load(folder / "cnn_labels.npy"))
    names = [f"conv{i}_{p}" for i in range(3) for p in ("w", "gamma", "beta")] + ["head_w", "head_b"]
    p = {n: load(f"param_{n}").requires_grad_(True) for n in names}
    running = {i: (torch.zeros(p[f"conv{i}_gamma"].shape, dtype=torch.float64),
                   torch.ones(p[f"conv{i}_gamma"].shape, dtype=torch.float64)) for i in range(3)}

    def conv_bn(i, inp):
        c = F.conv2d(inp, p[f"conv{i}_w"], padding=1)
        return F.batch_norm(c, *running[i], p[f"conv{i}_gamma"], p[f"conv{i}_beta"], True, 0.1, 1e-5)

    a = F.relu(conv_bn(0, x))
    h = F.relu(conv_bn(1, a))
    r = F.relu(conv_bn(2, h) + a)
    q = F.adaptive_avg_pool2d(F.max_pool2d(r, 2), 2)
    loss = F.cross_entropy(q.reshape(x.shape[0], -1) @ p["head_w"] + p["head_b"], labels)
    loss.backward()
    failures, worst = [], 0.0
    loom_loss = float((folder / "cnn_loss.txt").read_text())
    if abs(loom_loss - loss.item()) > TOL["cnn"] * max(1.0, abs(loss.item())):
        failures.append(f"CNN: loss {loom_loss} vs torch's {loss.item()}")
    compared = [(f"gradient of {n}", load(f"grad_{n}"), p[n].grad) for n in names]
    compared += [(f"running {s} of conv{i}", load(f"running_conv{i}_{s}"), running[i][k])
                 for i in range(3) for k, s in enumerate(("mean", "var"))]
    for what, got, want in compared:
        e = error(got, want)
        worst = max(worst, e)
        if not e <= TOL["cnn"]:
            failures.append(f"CNN: {what} off by {e:.3g}")
    print(f"  CNN at step 0: loss {loss.item():.6f}, {len(compared)} gradients and running statistics, "
          f"worst relative error {worst:.2e}")
    return failures


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        run = subprocess.run([sys.argv[1], "--torch-check", tmp], capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{sys.argv[1]} --torch-check failed ({run.returncode}):\n{run.stdout}{run.stderr}")
            return 1
        t1 = time.time()
        folder = pathlib.Path(tmp)
        count, failures = check_sweep(folder)
        failures += check_cnn(folder)
        t2 = time.time()
    print(f"{count} cases and the CNN compared with torch {torch.__version__} in float64 "
          f"(loom {t1 - t0:.1f} s, torch {t2 - t1:.1f} s)")
    for f in failures[:40]:
        print("FAIL", f)
    if failures:
        print(f"{len(failures)} failures")
        return 1
    print("all agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
