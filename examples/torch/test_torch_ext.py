#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks loom's RMSNorm + SwiGLU torch op: on the CPU (loom's host executor), and on the GPU where torch sees one.

Forward against the same layer composed of torch's ops (float32, float64,
and bfloat16 and float16 against the composition in float64); backward by
torch.autograd.gradcheck in double and against torch's autograd of the
composition; strided and non-contiguous inputs; zero copy (the data pointers
the C++ side ran on are the Python tensors'); one kernel forward; DLPack round
trips between loom and torch (legacy and versioned capsules, the deleter
called once, refusals); loom's errors as Python exceptions; torch's own
custom-op checks (torch.library.opcheck).

Usage: test_torch_ext.py. Exits 0 when all pass, 1 when one fails, 77 when
torch cannot be imported (ctest: Skipped). Builds the extension first
(loom_torch.load: cached in build-torch/extension).
"""
import gc
import pathlib
import sys
import time

try:
    import torch
except ImportError as e:
    print(f"torch cannot be imported ({e}): the torch extension tests are skipped")
    sys.exit(77)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import loom_torch  # noqa: E402

failures = []
passed = 0


def check(condition, what):
    global passed
    print(("ok    " if condition else "FAIL  ") + what)
    if condition:
        passed += 1
    else:
        failures.append(what)


def raises(exc_type, needle, f, what):
    try:
        f()
    except exc_type as e:
        ok = needle in str(e)
        check(ok, f"{what}: {exc_type.__name__} carrying '{needle}'" + ("" if ok else f", got: {e}"))
        return
    except Exception as e:  # noqa: BLE001 - the wrong kind of exception is a failure to report
        check(False, f"{what}: expected {exc_type.__name__}, got {type(e).__name__}: {e}")
        return
    check(False, f"{what}: expected {exc_type.__name__}, nothing was raised")


LOW_PRECISION = (torch.bfloat16, torch.float16)
DTYPES = (torch.float32, torch.float64) + LOW_PRECISION


def tolerance(dtype, width):
    """A bound on the relative difference of loom's layer from the reference.

    float32, float64: the reference is torch's composition in the same type.
    Each evaluates about 8 rounded operations per element (silu's exp, add and
    divide, rsqrt, three products, the eps add), each within u = eps/2 of the
    exact result, and the mean of `width` positive squares, within
    (width - 1) u relative (its square root halves that); the two evaluations
    may err in opposite directions, hence twice (8 + width / 2) u.
    bfloat16, float16: loom computes in float and rounds the result once, so
    the reference is the composition in float64 (torch's composition in the
    type itself rounds after every op); the bound is one rounding to the type
    plus float32's bound.
    """
    if dtype in LOW_PRECISION:
        return torch.finfo(dtype).eps / 2 + tolerance(torch.float32, width)
    return (8 + width / 2) * torch.finfo(dtype).eps


def reference_dtype(dtype):
    return torch.float64 if dtype in LOW_PRECISION else dtype


def close(a, ref, dtype, width):
    return torch.allclose(a.to(ref.dtype), ref, rtol=tolerance(dtype, width), atol=torch.finfo(dtype).tiny)


def inputs(rows, width, dtype, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=g, dtype=dtype) * 2
    w = 1 + 0.25 * torch.randn(width, generator=g, dtype=dtype)
    gate = torch.randn(rows, width, generator=g, dtype=dtype) * 3
    return x.to(device), w.to(device), gate.to(device)


def test_forward(ext, device):
    for dtype in DTYPES:
        for rows, width in ((1, 1), (7, 33), (257, 33), (16, 1000)):
            x, w, gate = inputs(rows, width, dtype, seed=rows * 1000 + width, device=device)
            y = loom_torch.rms_swiglu(x, w, gate)
            ref = loom_torch.reference(*(t.to(reference_dtype(dtype)) for t in (x, w, gate)))
            err = ((y.to(ref.dtype) - ref).abs() / ref.abs().clamp_min(torch.finfo(dtype).tiny)).max().item()
            check(y.dtype == dtype and y.shape == x.shape and close(y, ref, dtype, width),
                  f"{device} forward {dtype} [{rows}, {width}] matches torch's composition in {ref.dtype} "
                  f"(worst relative {err:.2g}, bound {tolerance(dtype, width):.2g})")
            check(ext.last_forward()["kernels"] == 1, f"{device} forward {dtype} [{rows}, {width}] is one loom kernel")


def test_gradcheck():
    for rows, width in ((3, 5), (4, 17)):
        x, w, gate = (t.requires_grad_() for t in inputs(rows, width, torch.float64, seed=7))
        check(torch.autograd.gradcheck(lambda a, b, c: loom_torch.rms_swiglu(a, b, c), (x, w, gate)),
              f"gradcheck in double, [{rows}, {width}]")
    # Non-contiguous inputs: a transposed x, a strided slice of gate, every third weight.
    xb, wb, gb = inputs(9, 16, torch.float64, seed=8)
    x = xb.t().contiguous().t()[::2].detach().requires_grad_()  # [5, 16], column-major, every other row
    gate = gb[::2, :].detach().requires_grad_()
    w = wb.repeat_interleave(3)[::3].detach().requires_grad_()  # stride 3
    check(not x.is_contiguous() and not gate.is_contiguous() and w.stride() == (3,),
          "the strided gradcheck's inputs are non-contiguous")
    check(torch.autograd.gradcheck(lambda a, b, c: loom_torch.rms_swiglu(a, b, c), (x, w, gate)),
          "gradcheck in double, transposed and sliced inputs")


def strided_cases(dtype, device):
    """(name, x, w, gate) with the layouts a model produces: transposes, slices, offsets, a stride-0 weight."""
    x, w, gate = inputs(40, 24, dtype, seed=3, device=device)
    big_x, big_w, big_g = inputs(64, 64, dtype, seed=4, device=device)
    yield "contiguous", x, w, gate
    yield "transposed x (column-major)", x.t().contiguous().t(), w, gate
    yield "sliced rows and columns", big_x[3:43:1, 5:29], big_w[::2][:24], big_g[10:50, 40:64]
    yield "every other row, transposed gate", big_x[::2, :24], w, big_g.t()[:32, 7:31]
    yield "a broadcast weight (stride 0)", x, big_w[:1].expand(24), gate


def test_strided_and_zero_copy(ext, device):
    for dtype in DTYPES:
        for name, x, w, gate in strided_cases(dtype, device):
            name = f"{device} {dtype} {name}"
            xs, ws, gs = (t.detach().requires_grad_() for t in (x, w, gate))
            y = loom_torch.rms_swiglu(xs, ws, gs)
            fwd = ext.last_forward()["data_pointers"]
            ref_inputs = [t.detach().to(reference_dtype(dtype)).clone().requires_grad_() for t in (x, w, gate)]
            ref = loom_torch.reference(*ref_inputs)
            width = x.shape[1]
            check(close(y, ref, dtype, width), f"{name}: forward matches torch")
            check(fwd == [x.data_ptr(), w.data_ptr(), gate.data_ptr(), y.data_ptr()],
                  f"{name}: loom read the inputs in place and wrote the output torch got")
            dy = torch.randn(y.shape, dtype=dtype, device=device).t().contiguous().t()  # a non-contiguous output gradient
            grads = torch.autograd.grad(y, (xs, ws, gs), dy)
            bwd = ext.last_backward()
            ref_grads = torch.autograd.grad(ref, ref_inputs, dy.to(ref.dtype))
            # The gradients are sums over a row (dx, dgate) or a column (dweight) of
            # products like the forward's, so the same bound with the longer sum.
            length = max(width, x.shape[0])
            ok = all(torch.allclose(a.to(b.dtype), b, rtol=tolerance(dtype, length),
                                    atol=tolerance(dtype, length) * b.abs().max())
                     for a, b in zip(grads, ref_grads))
            check(ok, f"{name}: dx, dweight, dgate match torch's autograd")
            check(bwd["data_pointers"][:4] == [x.data_ptr(), w.data_ptr(), gate.data_ptr(), dy.data_ptr()],
                  f"{name}: the backward read x, weight, gate and dy in place")
            check(bwd["data_pointers"][4:] == [g.data_ptr() for g in grads],
                  f"{name}: autograd returned the gradients loom wrote (no copy)")
    print(f"      (backward kernels: {ext.last_backward()['kernels']})")


def test_errors():
    x, w, gate = inputs(4, 8, torch.float32, seed=5)
    raises(TypeError, "loom: rms_swiglu: x holds int64; this op takes float32, float64, bfloat16 or float16",
           lambda: loom_torch.rms_swiglu(x.long(), w, gate), "int64 x")
    raises(TypeError, "loom: from_dlpack<const float32, 1, host>: the DLPack tensor holds float64",
           lambda: loom_torch.rms_swiglu(x, w.double(), gate), "float64 weight with float32 x")
    raises(ValueError, "the DLPack tensor has rank 3 (shape [2, 2, 8]); expected rank 2",
           lambda: loom_torch.rms_swiglu(x.reshape(2, 2, 8), w, gate), "rank-3 x")
    raises(ValueError, "loom:", lambda: loom_torch.rms_swiglu(x, w, gate[:, :7]), "gate narrower than x")
    raises(ValueError, "loom:", lambda: loom_torch.rms_swiglu(x, w[:7], gate), "weight shorter than a row")
    raises(TypeError, "loom: rms_swiglu: x holds int32",
           lambda: torch.ops.loom.rms_swiglu_backward(x.int(), w, gate, x, 1e-6), "int32 x in the backward")


def test_opcheck():
    x, w, gate = (t.requires_grad_() for t in inputs(5, 12, torch.float32, seed=6))
    try:
        torch.library.opcheck(torch.ops.loom.rms_swiglu.default, (x, w, gate, 1e-6),
                              test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
        check(True, "torch.library.opcheck: schema, autograd registration, fake tensor")
    except Exception as e:  # noqa: BLE001
        check(False, f"torch.library.opcheck: {e}")


def test_cuda_stream(ext):
    """The CUDA kernel runs on torch's current stream: it sees what that stream wrote just before."""
    x, w, gate = inputs(64, 256, torch.float32, seed=9, device="cuda")
    fresh = torch.randn_like(x)
    ref = loom_torch.reference(fresh, w, gate)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # keeps the side stream busy for tens of milliseconds
        x.copy_(fresh)  # ordered after the sleep, on the side stream
        y = loom_torch.rms_swiglu(x, w, gate)  # loom must run after the copy: same stream
    side.synchronize()
    check(close(y, ref, torch.float32, 256), "cuda: the op ran on torch's current stream, after its earlier work")
    raises(ValueError, "which a device view cannot read",
           lambda: loom_torch.rms_swiglu(x, w.cpu(), gate), "cuda x with a CPU weight")


class LoomTensor:
    """A loom tensor behind DLPack's Python protocol (a CPU tensor: stream must be None)."""

    def __init__(self, ext, rows, cols, transposed):
        self.ext, self.args = ext, (rows, cols, transposed)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if stream is not None:
            raise BufferError("a CPU tensor takes no stream")
        versioned = max_version is not None and max_version[0] >= 1
        return self.ext.export_tensor(*self.args, versioned=versioned)


def test_dlpack(ext):
    rows, cols = 5, 7
    expected = torch.tensor([[1000.0 * i + j for j in range(cols)] for i in range(rows)])
    # loom -> torch: a versioned export through __dlpack__, a legacy capsule, transposed ones.
    for versioned in (True, False):
        for transposed in (False, True):
            kind = f"{'versioned' if versioned else 'legacy'}{', transposed' if transposed else ''}"
            if versioned:
                t = torch.from_dlpack(LoomTensor(ext, rows, cols, transposed))
            else:
                t = torch.from_dlpack(ext.export_tensor(rows, cols, transposed, versioned=False))
            want = expected.t() if transposed else expected
            check(torch.equal(t, want) and t.stride() == ((1, cols) if transposed else (cols, 1)),
                  f"loom -> torch ({kind}): values and strides in elements")
            check(ext.live_exports() == 1, f"loom -> torch ({kind}): loom's tensor lives while torch's does")
            del t
            gc.collect()
            check(ext.live_exports() == 0, f"loom -> torch ({kind}): the deleter ran once when torch let go")
    capsule = ext.export_tensor(2, 3)
    del capsule
    gc.collect()
    check(ext.live_exports() == 0, "loom -> nobody: an unconsumed capsule calls the deleter once")

    # torch -> loom: legacy and versioned capsules of a non-contiguous tensor; loom writes through.
    for versioned in (True, False):
        kind = "versioned" if versioned else "legacy"
        base = torch.arange(40, dtype=torch.float32).reshape(5, 8)
        t = base.t()[1:6]  # [5, 5] with strides (1, 8), offset 5 elements
        before = t.clone()
        refs = t._use_count()
        capsule = t.__dlpack__(max_version=(1, 0)) if versioned else torch.utils.dlpack.to_dlpack(t)
        seen = ext.import_tensor(capsule)
        check(seen["data"] == t.data_ptr() and seen["shape"] == tuple(t.shape) and seen["strides"] == t.stride(),
              f"torch -> loom ({kind}): loom views torch's memory (same pointer, shape, strides)")
        check(torch.equal(t, before * 2), f"torch -> loom ({kind}): loom's assignment wrote through to torch's tensor")
        del capsule
        gc.collect()
        check(t._use_count() == refs + 1, f"torch -> loom ({kind}): loom holds one reference while it imports")
        ext.release_import()
        check(t._use_count() == refs, f"torch -> loom ({kind}): released once, torch's deleter ran once")
    t = torch.arange(6).reshape(2, 3)
    refs = t._use_count()
    raises(RuntimeError, "loom: from_dlpack<float32, 2, host>: the DLPack tensor holds int64",
           lambda: ext.import_tensor(torch.utils.dlpack.to_dlpack(t)), "torch -> loom: an int64 tensor is refused")
    gc.collect()
    check(t._use_count() == refs, "torch -> loom: a refused tensor's deleter ran once")


def main():
    start = time.perf_counter()
    ext = loom_torch.load()
    print(f"extension loaded in {time.perf_counter() - start:.1f} s (torch {torch.__version__})")
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and loom_torch.built_with_cuda() else [])
    if "cuda" not in devices:
        print("no GPU (or an extension built without CUDA): the CUDA cases do not run")
    for device in devices:
        test_forward(ext, device)
        test_strided_and_zero_copy(ext, device)
    if "cuda" in devices:
        test_cuda_stream(ext)
    test_gradcheck()
    test_errors()
    test_opcheck()
    test_dlpack(ext)
    print(f"{passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
