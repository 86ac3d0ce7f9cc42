#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch's convolution on the GPU at the shapes bench_conv_gpu times
(ResNet-50's 3x3 convolutions, one per stage, bf16, channels last, batch 32;
8 with --quick): F.conv2d (cuDNN), F.conv2d with a bias followed by relu
(eager: what a user writes, the bias and the ReLU as PyTorch runs them),
and the data and weight gradients (torch.ops.aten.convolution_backward, the
call autograd makes). Deterministic algorithms, as loom's
(torch.backends.cudnn.deterministic = True, benchmark = False). Timed as
matmul_torch.py times (median_ms: CUDA events, median of many runs after
warm-up). Writes JSON lines
(bench "gpu_conv", the op and shape names of bench_conv_gpu, impl
"torch") for bench/report.py. Usage: conv_torch.py [--json FILE] [--quick]"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from matmul_torch import median_ms  # noqa: E402 (beside this file)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"conv_torch.py: not run: {e}")
        return 0
    if not torch.cuda.is_available():
        print("conv_torch.py: not run: torch has no CUDA device here")
        return 0
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    batch = 8 if args.quick else 32
    print(f"conv_torch.py on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}")

    def timed(fn):
        return median_ms(torch, fn)

    def emit(op, shape, ms, flops):
        print(f"{op:28s} {shape:22s} torch {ms:9.3f} ms {flops / (ms * 1e9):7.1f} TFLOP/s")
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps({"bench": "gpu_conv", "op": op, "shape": shape, "dtype": "bf16", "impl": "torch",
                                    "ms": ms, "bytes": 0, "gbps": 0, "copy_gbps": 0, "pct_copy": 0,
                                    "check": "ok", "threads": 0}) + "\n")

    dev = torch.device("cuda")
    for channels, size in [(64, 56), (128, 28), (256, 14), (512, 7)]:
        cl = torch.channels_last
        x = torch.randn(batch, channels, size, size, device=dev, dtype=torch.bfloat16).to(memory_format=cl)
        w = torch.randn(channels, channels, 3, 3, device=dev, dtype=torch.bfloat16).to(memory_format=cl)
        b = torch.randn(channels, device=dev, dtype=torch.bfloat16)
        dy = torch.randn_like(x).contiguous(memory_format=cl)
        flops = 2.0 * batch * size * size * channels * channels * 9
        shape = f"N{batch} C{channels} {size}x{size} k3"
        aten = torch.ops.aten.convolution_backward
        emit("conv2d 3x3 forward", shape, timed(lambda: F.conv2d(x, w, padding=1)), flops)
        emit("conv2d 3x3 + bias + relu", shape, timed(lambda: F.relu(F.conv2d(x, w, b, padding=1))), flops)
        emit("conv2d 3x3 data gradient", shape,
             timed(lambda: aten(dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, False, False])),
             flops)
        emit("conv2d 3x3 weight gradient", shape,
             timed(lambda: aten(dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])),
             flops)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
