#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks loom's RMSNorm + SwiGLU torch op: on the CPU (loom's host executor), and on the GPU where torch sees one.

Forward against the same layer composed of torch's ops (float32, float64,
and bfloat16 and float16 against the composition in float64); backward by
torch.autograd.gradcheck in double and against torch's autograd of the
composition; strided and non-contiguous inputs; zero copy (the data pointers
the C++ side ran on are the Python tensors'); one kernel forward; DLPack
between loom and Python: loom's LoomTensor read by torch.from_dlpack and
numpy.from_dlpack (versioned and legacy, each deleter called once, a capsule
consumed once), torch's capsules read by loom, fp8 both ways; loom's errors as Python exceptions; torch's own
custom-op checks (torch.library.opcheck); loom::optim's SGD and AdamW against torch.optim (Lion against its
formula), 3 steps in float64; loom::model's derived gradients of an MLP against torch.autograd in float64.

Usage: test_torch_ext.py. Exits 0 when all pass, 1 when one fails, 77 when
torch or NumPy cannot be imported (ctest: Skipped). Builds the extension first
(loom_torch.load: cached in build-torch/extension).
"""
import gc
import pathlib
import sys
import time

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"torch or NumPy cannot be imported ({e}): the torch extension tests are skipped")
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
            before = ext.launches()
            y = loom_torch.rms_swiglu(x, w, gate)
            kernels = ext.launches() - before
            ref = loom_torch.reference(*(t.to(reference_dtype(dtype)) for t in (x, w, gate)))
            err = ((y.to(ref.dtype) - ref).abs() / ref.abs().clamp_min(torch.finfo(dtype).tiny)).max().item()
            check(y.dtype == dtype and y.shape == x.shape and close(y, ref, dtype, width),
                  f"{device} forward {dtype} [{rows}, {width}] matches torch's composition in {ref.dtype} "
                  f"(worst relative {err:.2g}, bound {tolerance(dtype, width):.2g})")
            check(kernels == 1, f"{device} forward {dtype} [{rows}, {width}] is one loom kernel")


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
            fwd = ext.last_views("forward")
            ref_inputs = [t.detach().to(reference_dtype(dtype)).clone().requires_grad_() for t in (x, w, gate)]
            ref = loom_torch.reference(*ref_inputs)
            width = x.shape[1]
            check(close(y, ref, dtype, width), f"{name}: forward matches torch")
            check(fwd == [x.data_ptr(), w.data_ptr(), gate.data_ptr(), y.data_ptr()],
                  f"{name}: loom read the inputs in place and wrote the output torch got")
            dy = torch.randn(y.shape, dtype=dtype, device=device).t().contiguous().t()  # a non-contiguous output gradient
            before = ext.launches()
            grads = torch.autograd.grad(y, (xs, ws, gs), dy)
            kernels = ext.launches() - before
            bwd = ext.last_views("backward")
            ref_grads = torch.autograd.grad(ref, ref_inputs, dy.to(ref.dtype))
            # The gradients are sums over a row (dx, dgate) or a column (dweight) of
            # products like the forward's, so the same bound with the longer sum.
            length = max(width, x.shape[0])
            ok = all(torch.allclose(a.to(b.dtype), b, rtol=tolerance(dtype, length),
                                    atol=tolerance(dtype, length) * b.abs().max())
                     for a, b in zip(grads, ref_grads))
            check(ok, f"{name}: dx, dweight, dgate match torch's autograd")
            check(kernels == 2, f"{name}: the backward is 2 loom kernels (got {kernels})")
            check(bwd[:4] == [x.data_ptr(), w.data_ptr(), gate.data_ptr(), dy.data_ptr()],
                  f"{name}: the backward read x, weight, gate and dy in place")
            check(bwd[4:] == [g.data_ptr() for g in grads],
                  f"{name}: autograd returned the gradients loom wrote (no copy)")


def test_errors():
    x, w, gate = inputs(4, 8, torch.float32, seed=5)
    raises(TypeError, "loom: rms_swiglu: x holds int64; this op takes float32, float64, bfloat16 or float16",
           lambda: loom_torch.rms_swiglu(x.long(), w, gate), "int64 x")
    raises(TypeError, "loom: from_dlpack<const float32, 1, host> of input weight: the DLPack tensor holds float64",
           lambda: loom_torch.rms_swiglu(x, w.double(), gate), "float64 weight with float32 x")
    raises(ValueError, "of input x: the DLPack tensor has rank 3 (shape [2, 2, 8]); expected rank 2",
           lambda: loom_torch.rms_swiglu(x.reshape(2, 2, 8), w, gate), "rank-3 x")
    raises(ValueError, "[4, 7] is computed from argument 2 of the layer",
           lambda: loom_torch.rms_swiglu(x, w, gate[:, :7]), "gate narrower than x")
    raises(ValueError, "[7] is argument 1 of the layer",
           lambda: loom_torch.rms_swiglu(x, w[:7], gate), "weight shorter than a row")
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


def capsule_name(capsule):
    """The name a PyCapsule has now (its repr: <capsule object "NAME" at 0x...>)."""
    return repr(capsule).split('"')[1]


class LegacyConsumer:
    """Forwards a producer's __dlpack__ without max_version, as a consumer of DLPack 0.x calls it."""

    def __init__(self, producer):
        self.producer = producer

    def __dlpack__(self, stream=None):
        return self.producer.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.producer.__dlpack_device__()


def check_holders(ext, expected, what):
    """Checks how many hold the memory of the last export_tensor (CPython frees an object at its last `del`)."""
    holders = ext.export_holders()
    check(holders == expected, what + ("" if holders == expected else f" (holders: {holders}, expected {expected})"))


def test_dlpack_export(ext):
    """loom -> Python: LoomTensor's __dlpack__ (versioned and legacy) read by torch and NumPy, without copies."""
    g = torch.Generator().manual_seed(11)
    for rows, cols in ((1, 1), (5, 7), (257, 33)):
        expected = torch.tensor([[1000.0 * i + j for j in range(cols)] for i in range(rows)])
        for transposed in (False, True):
            kind = f"[{rows}, {cols}]{' transposed' if transposed else ''}"
            want = expected.t() if transposed else expected
            want_strides = (1, cols) if transposed else (cols, 1)
            obj = ext.export_tensor(rows, cols, transposed)
            check(obj.shape == tuple(want.shape) and obj.dtype == "float32" and obj.__dlpack_device__() == (1, 0),
                  f"LoomTensor {kind}: shape, dtype, __dlpack_device__ (kDLCPU, 0)")
            t = torch.from_dlpack(obj)  # torch asks for max_version (1, 0): a versioned capsule
            n = np.from_dlpack(obj)  # so does NumPy
            check(torch.equal(t, want) and t.stride() == want_strides,
                  f"LoomTensor {kind} -> torch.from_dlpack: values and strides in elements")
            check(np.array_equal(n, want.numpy()) and n.strides == tuple(4 * s for s in want_strides),
                  f"LoomTensor {kind} -> numpy.from_dlpack: values and strides")
            check_holders(ext, 3, f"LoomTensor {kind}: torch's and NumPy's exports hold loom's tensor")
            i, j = (int(k) for k in torch.randint(0, 1 << 20, (2,), generator=g))
            i, j = i % want.shape[0], j % want.shape[1]
            n[i, j] = -1.5
            check(t.data_ptr() == n.ctypes.data and t[i, j].item() == -1.5,
                  f"LoomTensor {kind}: torch and NumPy view the same memory (a write through NumPy shows in torch)")
            del obj
            check_holders(ext, 2, f"LoomTensor {kind}: the memory outlives the LoomTensor")
            del t
            check_holders(ext, 1, f"LoomTensor {kind}: torch's deleter ran when torch let go")
            del n
            check_holders(ext, 0, f"LoomTensor {kind}: NumPy's deleter ran when NumPy let go")

    obj = ext.export_tensor(3, 5)
    expected = torch.tensor([[1000.0 * i + j for j in range(5)] for i in range(3)])
    for max_version, name in ((None, "dltensor"), ((0, 8), "dltensor"), ((1, 0), "dltensor_versioned"),
                              ((1, 3), "dltensor_versioned")):
        capsule = obj.__dlpack__(max_version=max_version)
        check(capsule_name(capsule) == name, f"__dlpack__(max_version={max_version}) gives a '{name}' capsule")
        t = torch.from_dlpack(capsule)
        check(torch.equal(t, expected) and capsule_name(capsule) == "used_" + name,
              f"torch.from_dlpack of a '{name}' capsule: values; the capsule is renamed 'used_{name}'")
        raises(Exception, "", lambda: torch.from_dlpack(capsule), f"a used '{name}' capsule is not consumed twice")
        del capsule
        check_holders(ext, 2, f"'{name}': a used capsule leaves the tensor to its consumer")
        del t
        check_holders(ext, 1, f"'{name}': the consumer's deleter ran once")
        capsule = obj.__dlpack__(max_version=max_version)
        check_holders(ext, 2, f"'{name}': an unconsumed capsule holds the tensor")
        del capsule
        check_holders(ext, 1, f"'{name}': an unconsumed capsule's destructor called the deleter once")
    n = np.from_dlpack(LegacyConsumer(obj))  # NumPy retries without max_version: a legacy capsule
    check(np.array_equal(n, expected.numpy()) and ext.export_holders() == 2,
          "numpy.from_dlpack through the legacy protocol (no max_version): values, the tensor held")
    del n
    check_holders(ext, 1, "numpy.from_dlpack, legacy: the deleter ran once")
    for copied in (np.from_dlpack(obj, copy=True), torch.from_dlpack(obj, copy=True).numpy()):
        check(np.array_equal(copied, expected.numpy()) and ext.export_holders() == 1,
              "from_dlpack(copy=True): a copy with the values, which does not hold loom's tensor")
        copied[0, 0] = 7
        check(torch.equal(torch.from_dlpack(obj), expected), "from_dlpack(copy=True): writing the copy leaves loom's")
    gc.collect()
    raises(BufferError, "host data takes stream=None", lambda: obj.__dlpack__(stream=1), "a stream for host data")
    raises(BufferError, "loom does not copy it to device (2, 0)",
           lambda: obj.__dlpack__(max_version=(1, 0), dl_device=(2, 0)), "another device")
    raises(TypeError, "", lambda: obj.__dlpack__(None), "__dlpack__'s arguments are keyword-only")
    del obj
    check_holders(ext, 0, "LoomTensor: nothing held after the last holder went")


def test_dlpack_cuda_export(ext):
    """loom's device memory to torch: __dlpack_device__ (2, id), torch's stream ordered after loom's copy."""
    rows, cols = 257, 33
    expected = torch.tensor([[1000.0 * i + j for j in range(cols)] for i in range(rows)])
    obj = ext.export_tensor(rows, cols, transposed=True, on_device=True)
    check(obj.__dlpack_device__() == (2, torch.cuda.current_device()), "cuda LoomTensor: __dlpack_device__ (2, id)")
    t = torch.from_dlpack(obj)
    check(t.is_cuda and t.stride() == (1, cols) and torch.equal(t.cpu(), expected.t()),
          "cuda LoomTensor -> torch.from_dlpack: a CUDA tensor with loom's values and strides")
    contiguous = ext.export_tensor(rows, cols, on_device=True)
    copied = torch.from_dlpack(contiguous, copy=True)
    check(copied.data_ptr() != torch.from_dlpack(contiguous).data_ptr() and torch.equal(copied.cpu(), expected),
          "cuda LoomTensor -> torch.from_dlpack(copy=True): a copy on the device with the values")


def test_dlpack_import(ext):
    """torch -> loom: legacy and versioned capsules of a non-contiguous tensor; loom writes through."""
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
        check(capsule_name(capsule).startswith("used_"), f"torch -> loom ({kind}): loom renamed the capsule 'used_...'")
        raises(ValueError, "expected an unused DLPack capsule", lambda: ext.import_tensor(capsule),
               f"torch -> loom ({kind}): a used capsule is refused")
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


FP8 = ((torch.float8_e4m3fn, "e4m3"), (torch.float8_e5m2, "e5m2"), (torch.float8_e8m0fnu, "e8m0"))


def test_dlpack_fp8(ext):
    """torch's float8 tensors through loom and back (DLPack 1.1's codes 10, 12, 14), and loom's fp8 into torch."""
    g = torch.Generator().manual_seed(12)
    for dtype, fmt in FP8:
        # Every code once, in a random order, and one more: 257 elements.
        codes = torch.cat([torch.randperm(256, generator=g), torch.randint(0, 256, (1,), generator=g)]).to(torch.uint8)
        x = codes.view(dtype)
        for versioned in (True, False):
            kind = f"{dtype} ({'versioned' if versioned else 'legacy'})"
            capsule = x.__dlpack__(max_version=(1, 0)) if versioned else torch.utils.dlpack.to_dlpack(x)
            same, decoded = ext.fp8_round_trip(capsule, fmt)
            y = torch.from_dlpack(same)
            check(y.dtype == dtype and y.data_ptr() == x.data_ptr() and torch.equal(y.view(torch.uint8), codes),
                  f"{kind}: torch -> loom -> torch keeps the dtype, the memory and every code")
            d = torch.from_dlpack(decoded)
            want = x.float()  # torch's own decoding
            check(torch.equal(d.isnan(), want.isnan()) and torch.equal(d[~d.isnan()], want[~want.isnan()]),
                  f"{kind}: loom's decoding of all 256 codes is torch's")
        if fmt == "e8m0":
            values = torch.pow(2.0, torch.randint(-127, 128, (101,), generator=g).float())  # exact in e8m0
        else:
            values = torch.randn(101, generator=g) * (50 if fmt == "e4m3" else 5000)  # finite after rounding
        rounded = torch.from_dlpack(ext.fp8_rounded(values.__dlpack__(max_version=(1, 0)), fmt))
        check(rounded.dtype == dtype and torch.equal(rounded.view(torch.uint8), values.to(dtype).view(torch.uint8)),
              f"{dtype}: a loom fp8 tensor reaches torch as {dtype}, with torch's rounding of the same values")
    x = torch.zeros(7, dtype=torch.float8_e5m2)
    raises(RuntimeError, "the DLPack tensor holds float8_e5m2 (code 12 = kDLFloat8_e5m2, 8 bits, 1 lane); "
           "expected float8_e4m3fn (code 10 = kDLFloat8_e4m3fn, 8 bits, 1 lane)",
           lambda: ext.fp8_round_trip(x.__dlpack__(max_version=(1, 0)), "e4m3"), "an e5m2 tensor imported as e4m3")


def lion_reference(w, grads, lr, beta1, beta2, weight_decay):
    """Lion (Chen et al. 2023, Algorithm 2) in float64; torch.optim has no Lion."""
    w = w.clone()
    m = torch.zeros_like(w)
    for g in grads:
        c = beta1 * m + (1 - beta1) * g
        w = w * (1 - lr * weight_decay) - lr * torch.sign(c)
        m = beta2 * m + (1 - beta2) * g
    return w


def test_optimizers(ext):
    """loom::optim against torch.optim (SGD, AdamW; Lion against its formula): 3 steps in float64, 1e-10 relative."""
    gen = torch.Generator().manual_seed(57)
    cases = [
        ("sgd", dict(lr=0.1, weight_decay=0.01), None),
        ("sgd", dict(lr=0.1, momentum=0.9, dampening=0.1), None),
        ("sgd", dict(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True), 1.0),
        ("adamw", dict(lr=0.01, weight_decay=0.05), None),
        ("adamw", dict(lr=0.02, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.1), 2.0),
        ("lion", dict(lr=0.01, beta1=0.95, beta2=0.98, weight_decay=0.1), None),
    ]
    for name, opts, max_norm in cases:
        w0 = torch.rand(257, dtype=torch.float64, generator=gen) * 2 - 1
        grads = torch.randn(3, 257, dtype=torch.float64, generator=gen)
        if name == "lion":
            ref = lion_reference(w0, grads, opts["lr"], opts["beta1"], opts["beta2"], opts["weight_decay"])
        else:
            p = torch.nn.Parameter(w0.clone())
            if name == "sgd":
                opt = torch.optim.SGD([p], **opts)
            else:
                opt = torch.optim.AdamW([p], lr=opts["lr"], betas=(opts.get("beta1", 0.9), opts.get("beta2", 0.999)),
                                        eps=opts.get("eps", 1e-8), weight_decay=opts["weight_decay"])
            for g in grads:
                p.grad = g.clone()
                if max_norm is not None:
                    torch.nn.utils.clip_grad_norm_([p], max_norm)
                opt.step()
            ref = p.detach()
        w = w0.clone()
        d = dict(opts)
        if max_norm is not None:
            d["max_grad_norm"] = max_norm
        kernels = ext.optimizer_steps(name, torch.utils.dlpack.to_dlpack(w), torch.utils.dlpack.to_dlpack(grads), d)
        err = ((w - ref).abs() / ref.abs().clamp_min(1e-3)).max().item()
        what = f"loom::optim::{name} {opts}{' clipped to ' + str(max_norm) if max_norm else ''}"
        against = "its formula" if name == "lion" else "torch.optim"
        check(err <= 1e-10, f"{what}: 3 steps match {against} (max relative error {err:.1e})")
        # The update is one kernel; clipping adds 3 (the squares, their sum, the factor).
        want = 4 if max_norm is not None else 1
        check(kernels == want, f"{what}: {want} kernel(s) in a step ({kernels})")


def test_models(ext):
    """loom::model's gradients of every parameter against torch.autograd in float64, 1e-10 relative; a transformer
    block's output, gradients (of its input too) and 3 AdamW steps."""
    gen = torch.Generator().manual_seed(57)

    def rand(*shape, scale=0.5):
        return (torch.rand(*shape, dtype=torch.float64, generator=gen) * 2 - 1) * scale

    def compare(name, tensors, params, loss):
        loss.backward()
        grads = [torch.full_like(p, float("nan")) for p in params]
        cap = torch.utils.dlpack.to_dlpack
        value = ext.model_gradients(name, [cap(t.detach()) for t in tensors], [cap(g) for g in grads])
        for i, (p, g) in enumerate(zip(params, grads)):
            err = ((g - p.grad).abs() / p.grad.abs().clamp_min(1e-3)).max().item()
            check(err <= 1e-10, f"loom::model {name}: the gradient of parameter {i} matches torch.autograd "
                                f"(max relative error {err:.1e})")
        return value

    n, d_in, hidden, classes = 7, 5, 9, 3
    x, labels = rand(n, d_in, scale=1.0), torch.randint(0, classes, (n,), generator=gen)
    w1, b1, w2, b2 = (t.requires_grad_() for t in (rand(d_in, hidden), rand(hidden), rand(hidden, classes), rand(classes)))
    loss = torch.nn.functional.cross_entropy(torch.relu(x @ w1 + b1) @ w2 + b2, labels)
    value = compare("mlp", [x, labels, w1, b1, w2, b2], [w1, b1, w2, b2], loss)
    check(abs(value - loss.item()) <= 1e-12, f"loom::model mlp: the loss matches torch ({value} vs {loss.item()})")

    # A transformer block (x an input with a gradient): its output, every
    # gradient, then 3 AdamW steps against torch.optim.AdamW.
    batch, seq, c, heads = 2, 5, 6, 3
    f, n, hs = 4 * c, batch * seq, c // heads
    x = rand(n, c, scale=1.0).requires_grad_()
    params = [1 + rand(c), rand(c), rand(3 * c, c, scale=1.0), rand(3 * c), rand(c, c), rand(c), 1 + rand(c), rand(c),
              rand(f, c), rand(f), rand(c, f), rand(c)]
    params = [p.requires_grad_() for p in params]
    dy = rand(n, c, scale=1.0)
    nn = torch.nn.functional

    def block(x):
        g1, be1, wqkv, bqkv, wp, bp, g2, be2, wfc, bfc, wfp, bfp = params
        qkv = nn.layer_norm(x, (c,), g1, be1, 1e-5) @ wqkv.T + bqkv
        q, k, v = (t.transpose(1, 2) for t in qkv.view(batch, seq, 3, heads, hs).unbind(2))
        a = nn.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(n, c)
        mid = a @ wp.T + bp + x
        fc = nn.gelu(nn.layer_norm(mid, (c,), g2, be2, 1e-5) @ wfc.T + bfc, approximate="tanh")
        return fc @ wfp.T + bfp + mid

    y = block(x)
    (y * dy).sum().backward()
    start = [p.detach().clone() for p in params]
    out = [torch.full_like(y, float("nan")), torch.full_like(x, float("nan"))] + [torch.full_like(p, float("nan"))
                                                                                for p in params]
    cap = torch.utils.dlpack.to_dlpack
    lr, wd, eps = 1e-2, 0.1, 1e-8
    kernels = ext.block_training([cap(x.detach())] + [cap(p) for p in start] + [cap(dy)], [cap(o) for o in out],
                                 batch, heads, 3, lr, wd, eps)
    want = [y.detach(), x.grad] + [p.grad for p in params]
    names = ["y", "dx"] + [f"the gradient of parameter {i}" for i in range(len(params))]
    for name, got, ref in zip(names, out, want):
        err = ((got - ref).abs() / ref.abs().clamp_min(1e-3)).max().item()
        check(err <= 1e-10, f"loom::model transformer block: {name} matches torch.autograd (max relative error "
                            f"{err:.1e})")
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=wd, eps=eps)
    for step in range(3):
        if step > 0:
            opt.zero_grad()
            (block(x.detach()) * dy).sum().backward()
        opt.step()
    # The key bias's gradient is 0 up to rounding (softmax does not see it),
    # which AdamW scales by about lr / eps: that part is compared within 3
    # such updates of a gradient of 1e-13, every other element within 1e-10.
    key = torch.zeros(3 * c, dtype=torch.bool)
    key[c:2 * c] = True
    noise = out[5][key].abs().max().item()
    check(noise <= 1e-13, f"loom::model transformer block: the key bias's gradient is 0 up to rounding ({noise:.1e})")
    err, key_err = 0.0, 0.0
    for i, (got, p) in enumerate(zip(start, params)):
        rel = (got - p.detach()).abs() / p.detach().abs().clamp_min(1e-3)
        if i == 3:
            key_err = (got - p.detach())[key].abs().max().item()
            rel = rel[~key]
        err = max(err, rel.max().item())
    check(err <= 1e-10, f"loom::model transformer block: 3 loom::optim::adamw steps match torch.optim.AdamW "
                        f"(max relative error of the parameters {err:.1e}; {kernels} kernels in the backward)")
    check(key_err <= 3 * lr * 1e-13 / eps, f"loom::model transformer block: the key bias after 3 AdamW steps "
                                           f"matches torch.optim.AdamW within 3 lr 1e-13 / eps ({key_err:.1e})")


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
    test_dlpack_export(ext)
    if torch.cuda.is_available():
        test_dlpack_cuda_export(ext)
    test_dlpack_import(ext)
    test_dlpack_fp8(ext)
    test_optimizers(ext)
    test_models(ext)
    print(f"{passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
