# SPDX-License-Identifier: Apache-2.0
"""GPT-2 in PyTorch float64, the reference for examples/gpt2 (docs/18_gpt2.md).

Usage: reference.py path/to/gpt2

Reads llm.c's checkpoint and token-shard formats with NumPy (written here,
independently of loom's reader) and checks, in a temporary folder:
1. `gpt2 --init random` writes llm.c's header and GPT-2's initialization
   (N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 L)), layer-norm
   weights 1, biases 0, padded wte rows 0);
2. the loss loom computes (float32) on a seeded batch equals this model's in
   float64 within 1e-5 relative, for loom's own initialization and for a
   checkpoint written here with larger random weights, biases and layer-norm
   parameters (so the loss is far from ln V and every parameter matters);
   for the latter, every parameter's gradient (loom's --grad-out, which
   poisons the gradients and activations with NaN first) equals
   torch.autograd's within 2e-5 of the tensor's largest, and 3 steps of
   AdamW (loom's --steps) give torch.optim.AdamW's losses within 1e-5 relative;
3. files with a wrong magic or version, or truncated, are refused with a
   `loom:` message and a non-zero exit.
Exits non-zero when anything fails.
"""
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

CHECKPOINT_MAGIC, CHECKPOINT_VERSION = 20240326, 3
SHARD_MAGIC, SHARD_VERSION = 20240520, 1
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


def shapes(maxT, V, L, NH, C, Vp):
    return [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C),
            (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]


def read_checkpoint(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        data = np.frombuffer(f.read(), dtype="<f4")
    assert header[0] == CHECKPOINT_MAGIC and header[1] == CHECKPOINT_VERSION, header[:2]
    cfg = dict(zip(["maxT", "V", "L", "NH", "C", "Vp"], (int(x) for x in header[2:8])))
    params, at = {}, 0
    for name, shape in zip(NAMES, shapes(**cfg)):
        n = math.prod(shape)
        params[name] = data[at:at + n].reshape(shape)
        at += n
    assert at == data.size, (at, data.size)
    return cfg, params


def write_checkpoint(path, cfg, params):
    header = np.zeros(256, dtype="<i4")
    header[:8] = [CHECKPOINT_MAGIC, CHECKPOINT_VERSION, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], cfg["Vp"]]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for name in NAMES:
            f.write(np.ascontiguousarray(params[name], dtype="<f4").tobytes())


def write_tokens(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [SHARD_MAGIC, SHARD_VERSION, tokens.size]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())


def as_torch(params):
    return {k: torch.from_numpy(np.array(v, dtype=np.float64)) for k, v in params.items()}


def gpt2_loss(cfg, params, inputs, targets):
    """The mean next-token cross-entropy of GPT-2 in float64, written out."""
    return gpt2_loss_tensor(cfg, as_torch(params), inputs, targets).item()


def gpt2_loss_tensor(cfg, p, inputs, targets):
    V, L, NH, C = cfg["V"], cfg["L"], cfg["NH"], cfg["C"]
    B, T = inputs.shape
    hs = C // NH
    x = p["wte"][inputs] + p["wpe"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], 1e-5)
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = (t.reshape(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], 1e-5)
        h = F.gelu(h @ p["fcw"][l].T + p["fcb"][l], approximate="tanh")
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], 1e-5)
    logits = x @ p["wte"][:V].T  # the padded rows give no logits
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def run(binary, *args, expect_ok=True):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    if expect_ok and r.returncode != 0:
        sys.exit(f"FAILED: {binary} {' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r


def loom_loss(binary, model, tokens, B, T, *extra):
    out = run(binary, "--load", model, "--tokens", tokens, "--batch", str(B), "--seq", str(T), *extra).stdout
    m = re.search(r"^loss (\S+)$", out, re.M)
    if not m:
        sys.exit(f"FAILED: no loss in the output of gpt2:\n{out}")
    return float(m.group(1))


def main():
    binary = os.path.abspath(sys.argv[1])
    failures = []

    def check(ok, what):
        print(f"  {'ok' if ok else 'FAILED'}: {what}")
        if not ok:
            failures.append(what)

    L, NH, C, maxT, V = 2, 2, 64, 16, 500
    B, T = 3, 12  # T < maxT: the position embedding's first T rows
    rng = np.random.default_rng(59)
    with tempfile.TemporaryDirectory() as tmp:
        model, tokens_file = os.path.join(tmp, "model.bin"), os.path.join(tmp, "tokens.bin")
        run(binary, "--init", "random", "--out", model, "--layers", str(L), "--heads", str(NH),
            "--channels", str(C), "--max-seq", str(maxT), "--vocab", str(V), "--seed", "5")
        cfg, params = read_checkpoint(model)
        print(f"loom's --init random: {cfg}")
        check(cfg == dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=512), "the header (padded V 512)")
        std_res = 0.02 / math.sqrt(2 * L)
        for name in ["wpe", "qkvw", "fcw"]:
            s = params[name].std()
            check(abs(s - 0.02) < 0.1 * 0.02 and abs(params[name].mean()) < 0.003, f"{name}: std {s:.5f}, N(0, 0.02)")
        s = params["wte"][:V].std()
        check(abs(s - 0.02) < 0.1 * 0.02, f"wte's first V rows: std {s:.5f}, N(0, 0.02)")
        check(not params["wte"][V:].any(), "wte's padded rows are 0")
        for name in ["attprojw", "fcprojw"]:
            s = params[name].std()
            check(abs(s - std_res) < 0.1 * std_res, f"{name}: std {s:.5f}, N(0, {std_res:.5f})")
        check(all((params[n] == 1).all() for n in ["ln1w", "ln2w", "lnfw"]), "layer-norm weights are 1")
        check(all(not params[n].any() for n in NAMES if n.endswith("b")), "biases are 0")
        check(len({params[n].tobytes()[:64] for n in ["wte", "wpe", "qkvw", "fcw"]}) == 4,
              "each tensor draws its own stream")

        tokens = rng.integers(0, V, size=B * T + 1)
        write_tokens(tokens_file, tokens)
        inputs = torch.from_numpy(tokens[:-1].reshape(B, T))
        targets = torch.from_numpy(tokens[1:].reshape(B, T))

        # A checkpoint written here: weights 0.15, biases and layer-norm
        # parameters random, padded rows non-zero (never read).
        strong = {n: rng.normal(0.0, 0.15, size=v.shape).astype(np.float32) for n, v in params.items()}
        for n in ["ln1w", "ln2w", "lnfw"]:
            strong[n] = (1.0 + rng.normal(0.0, 0.3, size=params[n].shape)).astype(np.float32)
        strong_model = os.path.join(tmp, "strong.bin")
        write_checkpoint(strong_model, cfg, strong)

        print(f"loss on a seeded batch {B} x {T}, loom (float32) against PyTorch (float64):")
        for name, path, p in [("loom's init", model, params), ("random weights written here", strong_model, strong)]:
            ref = gpt2_loss(cfg, p, inputs, targets)
            got = loom_loss(binary, path, tokens_file, B, T)
            rel = abs(got - ref) / abs(ref)
            check(rel < 1e-5, f"{name}: loom {got:.9f}, torch {ref:.9f}, relative difference {rel:.2e}")
        check(abs(gpt2_loss(cfg, strong, inputs, targets) - math.log(V)) > 0.5,
              "the second checkpoint's loss is far from ln V")

        print("gradients of the second checkpoint's loss, loom (float32) against torch.autograd (float64):")
        grads_file = os.path.join(tmp, "grads.bin")
        loom_loss(binary, strong_model, tokens_file, B, T, "--grad-out", grads_file)
        _, got = read_checkpoint(grads_file)
        p = {k: v.requires_grad_() for k, v in as_torch(strong).items()}
        gpt2_loss_tensor(cfg, p, inputs, targets).backward()
        for name in NAMES:
            ref = p[name].grad.numpy()
            scale = np.abs(ref).max()
            err = np.abs(got[name] - ref).max() / scale
            check(scale > 0 and err < 2e-5, f"{name}: largest difference {err:.1e} of the largest gradient {scale:.2e}")

        steps, lr = 3, 1e-3
        print(f"{steps} steps of AdamW (lr {lr}), loom (float32) against torch.optim.AdamW (float64):")
        out = run(binary, "--load", strong_model, "--tokens", tokens_file, "--batch", str(B), "--seq", str(T),
                  "--steps", str(steps), "--lr", str(lr)).stdout
        got = [float(x) for x in re.findall(r"^step \d+ loss (\S+) ", out, re.M)]
        p = {k: v.requires_grad_() for k, v in as_torch(strong).items()}
        opt = torch.optim.AdamW(p.values(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
        ref = []
        for _ in range(steps):
            opt.zero_grad()
            loss = gpt2_loss_tensor(cfg, p, inputs, targets)
            loss.backward()
            opt.step()
            ref.append(loss.item())
        rel = max(abs(a - b) / abs(b) for a, b in zip(got, ref)) if len(got) == steps else float("inf")
        check(rel < 1e-5 and ref[-1] < ref[0],
              f"losses loom {[round(x, 6) for x in got]}, torch {[round(x, 6) for x in ref]}, "
              f"largest relative difference {rel:.1e}")

        print("bad files are refused:")
        good = open(strong_model, "rb").read()
        cases = [("wrong magic", np.array([1234], "<i4").tobytes() + good[4:], "magic 1234, expected 20240326"),
                 ("wrong version", good[:4] + np.array([2], "<i4").tobytes() + good[8:], "version 2 is not supported"),
                 ("truncated", good[:len(good) - 4], "truncated"),
                 ("empty", b"", "truncated")]
        bad = os.path.join(tmp, "bad.bin")
        for what, content, needle in cases:
            open(bad, "wb").write(content)
            r = run(binary, "--load", bad, "--tokens", tokens_file, expect_ok=False)
            check(r.returncode != 0 and "loom: gpt2:" in r.stderr and needle in r.stderr,
                  f"{what}: exit {r.returncode}, {r.stderr.strip()}")
        open(bad, "wb").write(open(tokens_file, "rb").read()[:1024 + 10])
        r = run(binary, "--load", model, "--tokens", bad, expect_ok=False)
        check(r.returncode != 0 and "ends inside its tokens" in r.stderr,
              f"truncated token shard: exit {r.returncode}, {r.stderr.strip()}")

    if failures:
        sys.exit(f"{len(failures)} check(s) FAILED")
    print("gpt2: all checks passed")


if __name__ == "__main__":
    main()
