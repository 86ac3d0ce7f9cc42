#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Data-parallel training of a tiny model containing loom's op, checked against one process.

The model is Linear -> loom RMSNorm + SwiGLU (torch.ops.loom.rms_swiglu, with a
learnable weight) -> Linear. torch.distributed's DistributedDataParallel trains
it in WORLD processes, each on its share of a fixed, seeded batch, for STEPS
steps of SGD; the same model trained in one process on the whole batch must end
with the same weights, within a bound derived from float rounding (see
`rounding_bound`). loom supplies the kernels; torch.distributed averages the
gradients.

    ddp_train.py                      # gloo, 2 processes on the CPU (loopback only)
    ddp_train.py --backend nccl       # NCCL, one process per GPU (needs 2 GPUs)

Exits 0 when the weights agree, 1 when they do not, 77 when torch cannot be
imported or the backend's devices are missing.
"""
import argparse
import os
import pathlib
import sys
import tempfile
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel
except ImportError as e:
    print(f"torch cannot be imported ({e}): the data-parallel check is skipped")
    sys.exit(77)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import loom_torch  # noqa: E402

IN, HIDDEN, OUT = 12, 32, 5


class Block(torch.nn.Module):
    """Linear -> loom's RMSNorm + SwiGLU -> Linear."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(IN, 2 * HIDDEN)
        self.norm_weight = torch.nn.Parameter(torch.ones(HIDDEN))
        self.down = torch.nn.Linear(HIDDEN, OUT)

    def forward(self, inputs):
        x, gate = self.up(inputs).chunk(2, dim=-1)  # two strided views of one buffer: no copy into loom
        return self.down(loom_torch.rms_swiglu(x, self.norm_weight, gate))


def make_model(dtype, device):
    torch.manual_seed(1234)  # every process starts from the same weights
    return Block().to(dtype=dtype, device=device)


def make_data(batch, dtype, device):
    g = torch.Generator().manual_seed(99)
    inputs = torch.randn(batch, IN, generator=g, dtype=dtype)
    targets = torch.randn(batch, OUT, generator=g, dtype=dtype)
    return inputs.to(device), targets.to(device)


def train(model, inputs, targets, steps, lr, on_step=None):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        if on_step:
            on_step()
        opt.step()


def device_for(backend, rank):
    return torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")


def worker(rank, args, rendezvous, result_path):
    if args.backend == "gloo":
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # keep gloo's traffic on the loopback interface
    else:
        torch.cuda.set_device(rank)
    loom_torch.load()
    # The processes meet through a file (a FileStore): no TCP port to pick
    # and hold between choosing it and the store binding it.
    dist.init_process_group(args.backend, init_method="file://" + rendezvous, rank=rank, world_size=args.world)
    try:
        for name in args.dtype:  # one process group for every dtype asked for
            dtype, device = getattr(torch, name), device_for(args.backend, rank)
            model = DistributedDataParallel(make_model(dtype, device), device_ids=[rank] if args.backend == "nccl" else None)
            inputs, targets = make_data(args.batch, dtype, device)
            share = args.batch // args.world  # this rank's rows of the batch
            rows = slice(rank * share, (rank + 1) * share)
            train(model, inputs[rows], targets[rows], args.steps, args.lr)
            if rank == 0:
                torch.save({k: v.cpu() for k, v in model.module.state_dict().items()}, f"{result_path}.{name}")
    finally:
        dist.destroy_process_group()


def rounding_bound(model, inputs, targets, steps, lr):
    """Trains `model` in one process and returns (final weights, an elementwise bound on |DDP - this|).

    Both runs compute each gradient element as the mean over the batch of
    per-sample terms, but not in the same order: DDP sums each rank's share
    (inside loom's column sums and torch's GEMMs), halves it and adds the two
    halves (gloo's all-reduce), where one process sums all rows at once. The
    per-sample terms themselves can also differ a little, as the GEMMs may
    block their inner products differently for a smaller batch. A sum of B
    terms evaluated in two orders, each term within K rounding steps, differs
    by at most 2 (B + K) u * sum(|term|) (u = eps / 2, the unit roundoff; K the
    largest inner dimension, also the row length of loom's mean). SGD turns a
    gradient difference into lr times it in the weights, so the weights after
    the last step differ by at most lr * 2 (B + K) u * sum over steps of
    sum(|term|), with sum(|term|) measured here sample by sample. A factor 4
    covers the later steps' gradients reacting to the earlier differences
    (lr * steps * curvature is well below 1 for this model and lr).
    """
    batch = inputs.shape[0]
    u = torch.finfo(inputs.dtype).eps / 2
    gamma = 2 * (batch + max(IN, 2 * HIDDEN)) * u
    abs_terms = {name: torch.zeros_like(p) for name, p in model.named_parameters()}

    def add_abs_terms():
        probe = make_model(inputs.dtype, inputs.device)
        probe.load_state_dict(model.state_dict())
        for i in range(batch):
            probe.zero_grad()
            loss = torch.nn.functional.mse_loss(probe(inputs[i:i + 1]), targets[i:i + 1]) / batch
            loss.backward()
            for name, p in probe.named_parameters():
                abs_terms[name] += p.grad.abs()

    train(model, inputs, targets, steps, lr, on_step=add_abs_terms)
    bound = {name: 4 * lr * gamma * a + torch.finfo(inputs.dtype).tiny for name, a in abs_terms.items()}
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}, {k: v.cpu() for k, v in bound.items()}


def check(args, dtype_name, ddp):
    """Compares DDP's weights for one dtype with one-process training; prints a line per tensor."""
    dtype, device = getattr(torch, dtype_name), device_for(args.backend, 0)
    inputs, targets = make_data(args.batch, dtype, device)
    single, bound = rounding_bound(make_model(dtype, device), inputs, targets, args.steps, args.lr)
    initial = make_model(dtype, "cpu").state_dict()
    # A check that can fail: training on one rank's share alone must be far
    # outside the bound (with one process its share is the whole batch: no
    # such control, and the run checks the loom op under DDP's hooks alone).
    share = args.batch // args.world
    half = make_model(dtype, device)
    train(half, inputs[:share], targets[:share], args.steps, args.lr)
    half = {k: v.detach().cpu() for k, v in half.state_dict().items()}

    ok = True
    print(f"{dtype_name}:")
    for name in single:
        diff = (ddp[name] - single[name]).abs()
        moved = (single[name] - initial[name]).abs().max().item()
        ratio = (diff / bound[name]).max().item()
        half_ratio = ((half[name] - single[name]).abs() / bound[name]).max().item()
        good = ratio <= 1 and (args.world == 1 or half_ratio > 1)
        ok &= good
        control = f"; one share alone: {half_ratio:.3g} of it" if args.world > 1 else ""
        print(f"{'ok  ' if good else 'FAIL'}  {name:18s} moved {moved:.3g}; |DDP - one process| max {diff.max().item():.3g}"
              f" = {ratio:.3g} of the rounding bound{control}")
    print(f"{dtype_name}: DDP weights equal one-process training within float rounding" if ok else
          f"{dtype_name}: DDP weights differ from one-process training beyond float rounding")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--world", type=int, default=2, help="processes (GPUs with nccl)")
    parser.add_argument("--dtype", choices=("float32", "float64"), nargs="+", default=["float32"],
                        help="one or more: each is trained and checked in turn by the same processes")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32, help="the whole batch, split evenly between processes")
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    if args.batch % args.world:
        parser.error("--batch must be a multiple of --world")
    if args.backend == "nccl" and torch.cuda.device_count() < args.world:
        print(f"nccl needs {args.world} GPUs, torch sees {torch.cuda.device_count()}: skipped")
        return 77

    start = time.perf_counter()
    loom_torch.load()  # build once here, before the processes load it
    with tempfile.TemporaryDirectory() as tmp:
        result_path = os.path.join(tmp, "ddp_weights.pt")
        rendezvous = os.path.join(tmp, "rendezvous")  # must not exist yet
        mp.spawn(worker, args=(args, rendezvous, result_path), nprocs=args.world, join=True)
        results = {name: torch.load(f"{result_path}.{name}") for name in args.dtype}
    ddp_seconds = time.perf_counter() - start
    print(f"{args.world} processes ({args.backend}; {', '.join(args.dtype)}), {args.steps} SGD steps, "
          f"batch {args.batch}: {ddp_seconds:.1f} s")
    ok = True
    for name in args.dtype:
        ok &= check(args, name, results[name])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
