#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks loom inside PyTorch (examples/torch, docs/11_pytorch.md): installs
# torch and NumPy from PyPI into a virtual environment (reused when it already
# imports them), builds the extension once (torch.utils.cpp_extension; cached
# while its sources are unchanged), runs its tests, compiles the recipe of
# docs/11_pytorch.md as written, compares loom's convolution, pooling and
# batch norm with torch's in float64 (examples/torch/check_conv.py, run on
# $LOOM_BUILD_DIR/examples/08_cnn when it is built), runs the data-parallel
# check (2 processes, gloo, on loopback), and prints the time of each step.
# With a GPU the extension also gets its CUDA kernels, the tests their CUDA
# cases, and the data-parallel check also runs on NCCL (one process per GPU,
# at most 2; with one GPU a one-process group, which still runs the loom op
# under DDP with NCCL's collectives).
# Exits non-zero when anything fails.
# Settings (environment variables), besides scripts/common.sh's:
#   LOOM_TORCH_DIR   where the venv and the extension's build go (default build-torch/ in the repository)
#   LOOM_TORCH_SPEC  what pip installs (default: torch, the newest release on PyPI)
#   LOOM_TORCH_PYTHON  an interpreter that already imports torch and numpy:
#                    used as it is, no venv and nothing installed (a machine
#                    without network, as bench/gpu_check.sh's)
#   MAX_JOBS         compile jobs of the extension build (default LOOM_JOBS)
# --install-only: only make the venv (scripts/test.sh runs this in the
# background while loom builds, then this script in full).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
LOOM_TORCH_DIR="${LOOM_TORCH_DIR:-$LOOM_ROOT/build-torch}"
LOOM_TORCH_SPEC="${LOOM_TORCH_SPEC:-torch}"
export MAX_JOBS="${MAX_JOBS:-$LOOM_JOBS}"
export LOOM_TORCH_BUILD_DIR="$LOOM_TORCH_DIR/extension"
venv="$LOOM_TORCH_DIR/venv"
python="${LOOM_TORCH_PYTHON:-$venv/bin/python}"
timings=()

# Runs "$@" as the step named $1's description, recording its wall time.
step() {
  local name="$1" t0=$SECONDS
  shift
  section "$name"
  "$@"
  timings+=("$(printf '%-58s %5d s' "$name" $((SECONDS - t0)))")
}

install_torch() {
  if [[ -n "${LOOM_TORCH_PYTHON:-}" ]]; then
    "$python" -c 'import torch, numpy' >/dev/null 2>&1 ||
      die "LOOM_TORCH_PYTHON=$python does not import torch and numpy"
    echo "using $python: $("$python" -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)')"
    return
  fi
  if [[ -x "$python" ]] && "$python" -c 'import torch, numpy' >/dev/null 2>&1; then
    echo "reusing $venv: $("$python" -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)')"
    return
  fi
  python3 -m venv "$venv"
  # The PyPI wheel of torch for Linux x86-64 is a CUDA build: it brings the
  # CUDA libraries as nvidia-* wheels (about 3 GB to download, 5.4 GB
  # installed) and imports without a GPU.
  # --no-compile: no bytecode for the 6,300 modules up front (an estimated 15 s of
  # CPU while loom builds); Python compiles the ones imported.
  "$python" -m pip install --quiet --disable-pip-version-check --progress-bar off --no-compile "$LOOM_TORCH_SPEC" numpy
  "$python" -c 'import torch, numpy; print("installed torch", torch.__version__, "numpy", numpy.__version__)'
  du -sh "$venv"
}

build_extension() {
  # Under nvcc too when torch sees a GPU (loom_torch.py); one job per MAX_JOBS.
  (cd "$LOOM_ROOT/examples/torch" && "$python" -c 'import loom_torch; loom_torch.load(verbose=True)')
}

if [[ "${1:-}" == "--install-only" ]]; then
  install_torch
  exit 0
fi

section "dependencies"
loom_find_cuda  # loom's headers and libcudart come from the CUDA toolkit, also for the CPU kernels
step "torch and numpy (${LOOM_TORCH_PYTHON:-venv $venv})" install_torch
step "build the extension ($MAX_JOBS jobs)" build_extension
step "tests (examples/torch/test_torch_ext.py)" "$python" "$LOOM_ROOT/examples/torch/test_torch_ext.py"
step "docs/11's recipe compiles as written (examples/torch/check_recipe.py)" \
  "$python" "$LOOM_ROOT/examples/torch/check_recipe.py"
cnn="$LOOM_BUILD_DIR/examples/08_cnn"
if [[ -x "$cnn" ]]; then
  step "convolution, pooling, batch norm, the CNN vs torch float64 (examples/torch/check_conv.py)" \
    "$python" "$LOOM_ROOT/examples/torch/check_conv.py" "$cnn"
else
  echo "$cnn is not built: the convolution check against torch does not run"
fi
gpt2="$LOOM_BUILD_DIR/examples/gpt2"
if [[ -x "$gpt2" ]]; then
  step "GPT-2's loss, gradients and AdamW steps vs torch float64 (examples/gpt2/reference.py)" \
    "$python" "$LOOM_ROOT/examples/gpt2/reference.py" "$gpt2"
else
  echo "$gpt2 is not built: the GPT-2 check against torch does not run"
fi
# Both dtypes in one pair of processes (one start-up and torch import for both).
step "data-parallel check: gloo, 2 processes, float32 and float64" "$python" "$LOOM_ROOT/examples/torch/ddp_train.py" \
  --dtype float32 float64
gpus="$("$python" -c 'import torch; print(torch.cuda.device_count())')"
if ((gpus >= 1)); then
  world=$((gpus >= 2 ? 2 : 1))
  step "data-parallel check: nccl, $world process(es), one GPU each" \
    "$python" "$LOOM_ROOT/examples/torch/ddp_train.py" --backend nccl --world "$world"
else
  echo "no GPU: the NCCL data-parallel check does not run"
fi

section "timings"
printf '%s\n' "${timings[@]}"
echo "all torch checks passed in $SECONDS s"
