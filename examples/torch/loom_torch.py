# SPDX-License-Identifier: Apache-2.0
"""loom's RMSNorm + SwiGLU as a PyTorch op with autograd.

    import loom_torch                      # examples/torch on sys.path
    loom_torch.load()                      # builds once, then loads from the cache
    y = loom_torch.rms_swiglu(x, weight, gate)
    y.sum().backward()                     # x.grad, weight.grad, gate.grad from loom's kernels

loom_torch.load() returns the extension's Python module; rms_swiglu calls
torch.ops.loom.rms_swiglu, which autograd differentiates.

y = silu(gate) * x * rsqrt(mean(x^2, last axis) + eps) * weight, for x and
gate [rows, width] and weight [width], float32, float64, bfloat16 or float16
(computed in float), any strides. The forward is one loom kernel and the
backward (dx, dweight, dgate, derived by loom::grad) two, on torch's buffers
without copies: loom's host executor for CPU tensors, its CUDA executor on
torch's current stream for CUDA tensors (those kernels are built only when
torch sees a GPU, or with LOOM_TORCH_CUDA=1).

The extension is compiled by torch.utils.cpp_extension.load into
LOOM_TORCH_BUILD_DIR (default: build-torch/extension in the repository) and
reused while its sources and flags are unchanged; MAX_JOBS limits its jobs.
"""
import os
import pathlib

import torch
from torch.utils import cpp_extension

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent

_ext = None


def _with_cuda():
    """Build the CUDA kernels? LOOM_TORCH_CUDA=1/0 decides; else when torch sees a GPU and a toolkit."""
    forced = os.environ.get("LOOM_TORCH_CUDA")
    if forced is not None:
        return forced == "1"
    return torch.cuda.is_available() and cpp_extension.CUDA_HOME is not None


def _cuda_home():
    home = cpp_extension.CUDA_HOME or os.environ.get("CUDA_HOME", "/usr/local/cuda")
    if not os.path.isfile(os.path.join(home, "include", "cuda_runtime_api.h")):
        raise RuntimeError(f"loom needs the CUDA toolkit's headers and libcudart (looked in {home}; set CUDA_HOME)")
    return home


# The host compiler's optimization level: -O3 unless LOOM_TORCH_HOST_OPT says
# otherwise (CI's checks build at -O1, which compiles faster).
_HOST_OPT = os.environ.get("LOOM_TORCH_HOST_OPT", "-O3")


def extension_flags(cuda_home):
    """The flags an extension that uses loom adds to torch.utils.cpp_extension's (cuda_home: the CUDA toolkit)."""
    # loom's headers declare the CUDA runtime's API, also in host-only code:
    # the toolkit's include directory, and its cccl/ where CUDA 13 keeps
    # Thrust, CUB and libcu++ (nvcc finds them, g++ needs the path).
    includes = [str(ROOT / "include"), os.path.join(cuda_home, "include")]
    cccl = os.path.join(cuda_home, "include", "cccl")
    if os.path.isdir(cccl):
        includes.append(cccl)
    # C++20 (recent torch compiles extensions as C++20 already; the flag keeps
    # older ones right). -fopenmp: loom's host executor runs rows in parallel
    # with OpenMP; libgomp.so.1 resolves to the one torch loaded. -lcudart:
    # loom's host code calls the CUDA runtime; at import it resolves to the
    # libcudart that torch loaded (docs/11_pytorch.md).
    return dict(
        extra_include_paths=includes,
        extra_cflags=["-std=c++20", _HOST_OPT, "-fopenmp", "-Wall", "-Wextra"],
        extra_cuda_cflags=["-std=c++20", "--expt-relaxed-constexpr", "--extended-lambda", "-O3"],
        extra_ldflags=[f"-L{os.path.join(cuda_home, 'lib64')}", "-lcudart", "-fopenmp"],
    )


def load(build_dir=None, verbose=False):
    """Builds (first time) and loads the extension; returns its Python module.

    After this, torch.ops.loom.rms_swiglu and torch.ops.loom.rms_swiglu_backward
    exist and rms_swiglu below is differentiable.
    """
    global _ext
    if _ext is not None:
        return _ext
    cuda = _with_cuda()
    home = _cuda_home()
    build = pathlib.Path(build_dir or os.environ.get("LOOM_TORCH_BUILD_DIR", ROOT / "build-torch" / "extension"))
    name = "loom_torch_cuda" if cuda else "loom_torch_cpu"
    (build / name).mkdir(parents=True, exist_ok=True)
    sources = [HERE / "rms_swiglu_ops.cpp", HERE / "module.cpp"]
    if cuda:
        sources.append(HERE / "rms_swiglu_cuda.cu")
    _ext = cpp_extension.load(
        name=name,
        sources=[str(s) for s in sources],
        build_directory=str(build / name),
        with_cuda=cuda,
        verbose=verbose,
        **extension_flags(home),
    )
    _register_autograd()
    return _ext


def built_with_cuda():
    """Whether the loaded extension has the CUDA kernels."""
    return _ext is not None and _ext.__name__ == "loom_torch_cuda"


def _setup_context(ctx, inputs, output):
    x, weight, gate, eps = inputs
    ctx.save_for_backward(x, weight, gate)
    ctx.eps = eps


def _backward(ctx, dy):
    x, weight, gate = ctx.saved_tensors
    dx, dweight, dgate = torch.ops.loom.rms_swiglu_backward(x, weight, gate, dy, ctx.eps)
    return dx, dweight, dgate, None


def _register_autograd():
    # The shapes of the outputs, for torch.compile and meta tensors.
    torch.library.register_fake("loom::rms_swiglu")(lambda x, weight, gate, eps: torch.empty_like(x))
    torch.library.register_fake("loom::rms_swiglu_backward")(
        lambda x, weight, gate, dy, eps: (torch.empty_like(x), torch.empty_like(weight), torch.empty_like(gate)))
    torch.library.register_autograd("loom::rms_swiglu", _backward, setup_context=_setup_context)


def rms_swiglu(x, weight, gate, eps=1e-6):
    """silu(gate) * x * rsqrt(mean(x^2, -1) + eps) * weight with loom's kernels (call load() first)."""
    return torch.ops.loom.rms_swiglu(x, weight, gate, eps)


def reference(x, weight, gate, eps=1e-6):
    """The same layer composed of torch's own ops."""
    return torch.nn.functional.silu(gate) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)
