#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch's attention on the GPU at the shapes bench_attention_gpu times
(bf16, batch x sequence = 16k tokens, heads x head size = 2048):
scaled_dot_product_attention with the flash and cuDNN backends, and
FlexAttention (torch.compile'd) with the same score_mod (soft-capping at 30)
and causal block mask. Forward, and backward alone (given the forward's
graph), timed with CUDA events: median of 5 after 2 warm-up calls. Writes
JSON lines (bench "gpu_attention", the op and shape names of
bench_attention_gpu, impl "torch sdpa flash", "torch sdpa cudnn", "torch
flex") for bench/report.py. A backend that is missing or fails is printed
and skipped. Usage: attention_torch.py [--json FILE] [--quick]
[--budget-s S] (FlexAttention's compilations stop after S seconds)."""
import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--budget-s", type=float, default=120.0)
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(f"attention_torch.py: not run: {e}")
        return 0
    if not torch.cuda.is_available():
        print("attention_torch.py: not run: torch has no CUDA device here")
        return 0
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention)
    except Exception as e:  # noqa: BLE001 (an older torch: no FlexAttention)
        print(f"attention_torch.py: FlexAttention not available: {e}")
        flex = None
    start = time.time()
    seq = 1024 if args.quick else 4096
    batch = 16384 // seq
    dev = torch.device("cuda")

    def timed(fn):
        for _ in range(2):
            fn()
        ms = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        return statistics.median(ms)

    def emit(op, shape, impl, ms, flops):
        print(f"{op:28s} {shape:22s} {impl:18s} {ms:9.3f} ms {flops / (ms * 1e9):7.1f} TFLOP/s")
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps({"bench": "gpu_attention", "op": op, "shape": shape, "dtype": "bf16", "impl": impl,
                                    "ms": ms, "bytes": 0, "gbps": 0, "copy_gbps": 0, "pct_copy": 0,
                                    "check": "ok", "threads": 0}) + "\n")

    def softcap(score, b, h, q, kv):
        return 30.0 * torch.tanh(score / 30.0)

    def causal_mask(b, h, q, kv):
        return q >= kv

    cases = [("attention forward", 16, 128, False, False, False),
             ("attention forward causal", 16, 128, True, False, False),
             ("attention forward softcap", 16, 128, False, True, False),
             ("attention forward", 32, 64, False, False, False),
             ("attention backward", 16, 128, False, False, True),
             ("attention backward causal", 16, 128, True, False, True)]
    for op, heads, dim, causal, capped, backward in cases:
        shape = f"B{batch} H{heads} S{seq} D{dim}"
        q, k, v, dout = (torch.randn(batch, heads, seq, dim, device=dev, dtype=torch.bfloat16, requires_grad=True)
                         for _ in range(4))
        flops = 4.0 * batch * heads * seq * seq * dim / (2 if causal else 1) * (2.5 if backward else 1)
        impls = []
        if not capped:
            for name, backend in (("torch sdpa flash", SDPBackend.FLASH_ATTENTION),
                                  ("torch sdpa cudnn", SDPBackend.CUDNN_ATTENTION)):
                def sdpa(backend=backend):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                impls.append((name, sdpa))
        if flex is not None and time.time() - start < args.budget_s:
            mask = create_block_mask(causal_mask, None, None, seq, seq, device=dev) if causal else None
            impls.append(("torch flex", lambda mask=mask: flex(q, k, v, score_mod=softcap if capped else None,
                                                                block_mask=mask)))
        for name, fn in impls:
            try:
                if backward:
                    out = fn()
                    ms = timed(lambda: out.backward(dout, retain_graph=True))
                else:
                    with torch.no_grad():
                        ms = timed(fn)
                emit(op, shape, name, ms, flops)
            except Exception as e:  # noqa: BLE001 (a backend this GPU or shape does not support)
                print(f"{op} {shape} {name}: not measured: {str(e).splitlines()[0][:200]}")
        del q, k, v, dout
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
