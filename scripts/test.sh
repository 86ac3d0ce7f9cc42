#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds loom and runs everything that checks it, on a machine with or without
# a GPU: the tests (ctest; [cuda] programs report "Skipped" without a GPU; the
# host test programs built with clang++, AddressSanitizer and UBSan), the
# examples, a benchmark smoke run, and a consumer project built against the
# installed package.
# Installs cmake, ninja, Catch2, Open MPI, ccache, clang and libomp from Debian, and
# NumPy from PyPI (for the DLPack round trips with NumPy), first when missing.
# Exits non-zero when anything fails. Settings: see scripts/common.sh.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
LOOM_SANITIZE="${LOOM_SANITIZE:-ON}"
LOOM_TEST_CXX="${LOOM_TEST_CXX:-clang++}"
start=$SECONDS

section "dependencies"
loom_install_deps
loom_install_test_cxx
loom_install_numpy
loom_find_cuda

# PyTorch from PyPI (about 3 GB of wheels) for the torch extension's checks
# (scripts/test_torch.sh, docs/11_pytorch.md): installed into the build folder
# in the background while loom builds; LOOM_TORCH=OFF leaves them out.
LOOM_TORCH="${LOOM_TORCH:-ON}"
export LOOM_TORCH_DIR="${LOOM_TORCH_DIR:-$LOOM_BUILD_DIR/torch}"
torch_pid=""
if [[ "$LOOM_TORCH" == "ON" ]]; then
  mkdir -p "$LOOM_TORCH_DIR"
  "$LOOM_ROOT/scripts/test_torch.sh" --install-only >"$LOOM_TORCH_DIR/install.log" 2>&1 &
  torch_pid=$!
fi

# Without a GPU the [cuda] test programs, the GPU benchmarks, the nvcc header
# checks and the examples (which then run on the host executor) cannot run
# device code: it is compiled for the first architecture only (e.g.
# 90-virtual), to NVVM IR and device side only where the program is not
# linked, else to PTX (see loom_gpu_program and loom_check_only_target in
# CMakeLists.txt). The whole front end and NVVM run, so every template and
# device-code error shows; ptxas runs in the ptx_fusion_check_* tests and the
# consumer build. With a GPU everything is built for real
# (LOOM_CHECK_ONLY_ARCH overrides).
if [[ -z "${LOOM_CHECK_ONLY_ARCH+x}" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    LOOM_CHECK_ONLY_ARCH=""
  else
    first_arch="${LOOM_CUDA_ARCH%%[;,]*}"
    LOOM_CHECK_ONLY_ARCH="${first_arch%%-*}-virtual"
  fi
fi

section "configure ($LOOM_BUILD_DIR, CUDA architectures $LOOM_CUDA_ARCH, compile-only programs: ${LOOM_CHECK_ONLY_ARCH:-the same}, host tests with sanitizers: $LOOM_SANITIZE, C++ files: $LOOM_TEST_CXX, .cu files: nvcc on its default host compiler)"
# The host test programs are built once, with g++ -fsanitize=address,undefined
# at -O0 (LOOM_SANITIZE=ON, the default here; LOOM_SANITIZE=OFF builds them
# plain at -O3): every host test runs under AddressSanitizer and
# UndefinedBehaviorSanitizer (tests/CMakeLists.txt says why -O0).
# The .cpp files with clang++ (LOOM_TEST_CXX), the .cu files that are linked
# with nvcc on g++: two compilers check loom's host code (see
# loom_install_test_cxx). The host test sources share one precompiled
# loom_test.hpp (LOOM_TEST_PCH, tests/CMakeLists.txt).
# Under clang++ the CPU benchmarks, which only make the smoke run here (the
# figures mean nothing), are built at -O0 (bench/CMakeLists.txt:
# LOOM_BENCH_CPU_OPT): a third of -O1's compile time (bench_grad_cpu.cpp
# 20 CPU-s against 68), the smoke run 16 s instead of 7. The optimized
# builds' host paths (core/simd dispatch, LOOM_HOST_INLINE) stay compiled and
# run in the torch extension (-O1, below) and the -O1 host tests.
bench_opt=""
[[ "$LOOM_TEST_CXX" == clang++* ]] && bench_opt="-O0"
loom_configure -DLOOM_SANITIZE="$LOOM_SANITIZE" -DLOOM_CHECK_ONLY_ARCHITECTURES="$LOOM_CHECK_ONLY_ARCH" \
  -DCMAKE_CXX_COMPILER="$LOOM_TEST_CXX" -DLOOM_BENCH_CPU_OPT="$bench_opt"

section "build ($LOOM_JOBS jobs)"
cmake --build "$LOOM_BUILD_DIR" -j "$LOOM_JOBS"

section "tests"
# protect_shadow_gap=0: the CUDA runtime maps memory where ASan keeps its
# shadow gap (matters on a machine with a GPU). OMP_WAIT_POLICY=passive:
# ctest runs a test per core and each test's host executor an OpenMP team
# per core, so an idle team member that spins (libomp's default, 200 ms
# after each parallel loop) takes a core from the other test; measured on
# 2 cores: test_reduce alone 118 CPU-s spinning, 68 passive, and faster.
OMP_WAIT_POLICY=passive \
ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$LOOM_BUILD_DIR" --output-on-failure --timeout 900 -j "$LOOM_JOBS"

section "examples (each runs on the host executor when there is no GPU)"
for source in "$LOOM_ROOT"/examples/[0-9][0-9]_*.cu; do
  example="$(basename "$source" .cu)"
  echo "--- $example"
  "$LOOM_BUILD_DIR/examples/$example"
done
echo "--- gpt2 (examples/gpt2: llm.c's formats, the loader, the fused classifier, sampling and training steps of a tiny model, checked by its self-check)"
"$LOOM_BUILD_DIR/examples/gpt2"

section "benchmark smoke run: CPU benchmarks and the static PTX report, tiny sizes (bench/run_cpu.sh --quick)"
LOOM_BUILD_DIR="$LOOM_BUILD_DIR" "$LOOM_ROOT/bench/run_cpu.sh" --quick "$LOOM_BUILD_DIR/bench-results"

section "loom inside PyTorch: the torch extension, its tests, data-parallel training (scripts/test_torch.sh)"
if [[ -z "$torch_pid" ]]; then
  echo "LOOM_TORCH=OFF: not run"
elif ! wait "$torch_pid"; then
  cat "$LOOM_TORCH_DIR/install.log"
  die "PyTorch could not be installed from PyPI into $LOOM_TORCH_DIR (log above); LOOM_TORCH=OFF leaves these checks out"
else
  cat "$LOOM_TORCH_DIR/install.log"
  # The extension's host code at -O1 here: 43 s to build instead of 53 s at
  # -O3, and the checks are the same.
  LOOM_BUILD_DIR="$LOOM_BUILD_DIR" LOOM_TORCH_HOST_OPT=-O1 "$LOOM_ROOT/scripts/test_torch.sh"
fi

section "install, then build examples/consumer with find_package(loom)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$LOOM_BUILD_DIR" --prefix "$tmp/prefix"
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$LOOM_ROOT/examples/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_CUDA_ARCHITECTURES="$LOOM_CUDA_ARCH" "${launcher[@]}"
cmake --build "$tmp/consumer" -j "$LOOM_JOBS"
"$tmp/consumer/app" | tee "$tmp/consumer.out"
# The installed loom::loom brings OpenMP wherever loom's own build (its examples) has it.
if "$LOOM_BUILD_DIR/examples/00_env_report" | grep -q "OpenMP on"; then
  grep -q "OpenMP on" "$tmp/consumer.out" || die "the consumer of the installed package runs without OpenMP"
fi
# The installed loom::loom brings cuDNN wherever loom's own build found it.
if grep -q "^LOOM_CUDNN:BOOL=ON" "$LOOM_BUILD_DIR/CMakeCache.txt" &&
  grep -q "^LOOM_CUDNN_LIBRARY:FILEPATH=/" "$LOOM_BUILD_DIR/CMakeCache.txt"; then
  grep -q "consumer: cuDNN" "$tmp/consumer.out" || die "the consumer of the installed package runs without cuDNN"
fi

section "build examples/subproject with add_subdirectory (host compiler only), OpenMP opted out (-DLOOM_OPENMP=OFF)"
cmake -S "$LOOM_ROOT/examples/subproject" -B "$tmp/subproject" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_OPENMP=OFF \
  "${launcher[@]}"
cmake --build "$tmp/subproject" -j "$LOOM_JOBS"
"$tmp/subproject/app" | tee "$tmp/subproject.out"
grep -q "OpenMP off" "$tmp/subproject.out" || die "-DLOOM_OPENMP=OFF left OpenMP in loom::loom"

section "all passed in $((SECONDS - start)) s"
