#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# loom's CPU benchmarks behind one command, on any machine (no GPU needed):
#  1. builds the CPU benchmark programs (configuring a build directory first
#     when it has none);
#  2. runs them: two fused elementwise expressions (memory-bound a*b+c and
#     exp-bound) vs op by op vs hand OpenMP loops (with and without simd),
#     row layers vs hand loops, fused bias + dropout + residual vs a hand
#     loop and op by op, derived backward passes (loom::grad) vs the
#     built-in ones, the embedding's forward and backward vs hand loops,
#     per-row fp8 quantization of bf16 vs a hand loop, float32 matmul on
#     the BLAS and on loom's own kernel, loom beside PyTorch
#     (bench/cpu/vs_torch.py: with --quick on python3, where the torch side
#     is skipped unless it imports torch, and without torch.compile; else on
#     the venv of scripts/test_torch.sh when there is one, --no-compile --runs 3),
#     and the reduction bench when it is there; the
#     machine (CPU model, cores, ISA extensions) and compiler flags are
#     recorded with them;
#  3. the compile-time benchmark (nvcc and g++, 1/10/50 distinct expressions);
#  4. the static evidence report (tests/ptx/check_ptx.py: kernels per
#     expression, vector loads/stores, registers, spills);
#  5. writes results.json, results.md and plot.png to the output folder and
#     prints a short table last.
# Usage: bench/run_cpu.sh [--quick] [OUT_DIR]
#   --quick   tiny sizes and one run (the CI smoke run; the figures mean
#             nothing), compile-time bench with g++ only, no pip install
#   OUT_DIR   or LOOM_BENCH_OUT; default: bench-results/ in the build directory
# Settings: LOOM_BUILD_DIR, LOOM_CUDA_ARCH, LOOM_JOBS (see scripts/common.sh);
#   LOOM_TORCH_DIR (the torch venv's folder, default <build dir>/torch).
# Exits non-zero when a benchmark's check or the static report fails.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

quick=0
out="${LOOM_BENCH_OUT:-}"
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '3,31p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) die "unknown option $arg (usage: bench/run_cpu.sh [--quick] [OUT_DIR])" ;;
    *) out="$arg" ;;
  esac
done
out="${out:-$LOOM_BUILD_DIR/bench-results}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
rm -f "$out"/cpu.jsonl "$out"/*.log
quick_flag=()
((quick)) && quick_flag=(--quick)
start=$SECONDS
failures=()
stage_start=$SECONDS
stage() { printf '\n=== %s [at %d s, previous stage %d s] ===\n' "$*" "$((SECONDS - start))" "$((SECONDS - stage_start))"; stage_start=$SECONDS; }

stage "build the CPU benchmarks in $LOOM_BUILD_DIR"
loom_find_cuda
if [[ ! -f "$LOOM_BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S "$LOOM_ROOT" -B "$LOOM_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$LOOM_CUDA_ARCH" \
    -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_EXAMPLES=OFF -DLOOM_BUILD_BENCH=ON
fi
targets=(bench_fused_cpu bench_dropout_cpu bench_grad_cpu bench_embedding_cpu bench_quantize_cpu bench_matmul_cpu
         bench_vs_torch_cpu)
# The reductions bench (another issue's) joins in when it exists.
[[ -f "$LOOM_ROOT/bench/cpu/bench_reduce_cpu.cpp" ]] && targets+=(bench_reduce_cpu)
cmake --build "$LOOM_BUILD_DIR" -j "$LOOM_JOBS" --target "${targets[@]}"

stage "fused elementwise and row layers on the host executor"
"$LOOM_BUILD_DIR/bench/bench_fused_cpu" "${quick_flag[@]}" --json "$out/cpu.jsonl" | tee "$out/bench_fused_cpu.log" ||
  failures+=("bench_fused_cpu")

stage "fused bias + dropout + residual on the host executor (bench_dropout_cpu)"
"$LOOM_BUILD_DIR/bench/bench_dropout_cpu" "${quick_flag[@]}" --json "$out/cpu.jsonl" | tee "$out/bench_dropout_cpu.log" ||
  failures+=("bench_dropout_cpu")

stage "derived backward passes (loom::grad) against the built-in ones (bench_grad_cpu)"
"$LOOM_BUILD_DIR/bench/bench_grad_cpu" "${quick_flag[@]}" --json "$out/cpu.jsonl" | tee "$out/bench_grad_cpu.log" ||
  failures+=("bench_grad_cpu")

stage "the embedding's forward and backward against hand loops (bench_embedding_cpu)"
"$LOOM_BUILD_DIR/bench/bench_embedding_cpu" "${quick_flag[@]}" --json "$out/cpu.jsonl" |
  tee "$out/bench_embedding_cpu.log" || failures+=("bench_embedding_cpu")

stage "per-row fp8 quantization of bf16 against a hand loop (bench_quantize_cpu)"
"$LOOM_BUILD_DIR/bench/bench_quantize_cpu" "${quick_flag[@]}" --json "$out/cpu.jsonl" | tee "$out/bench_quantize_cpu.log" ||
  failures+=("bench_quantize_cpu")

stage "float32 matmul on the BLAS and on loom's own kernel (bench_matmul_cpu; beside PyTorch: bench/cpu/matmul_vs_torch.py)"
"$LOOM_BUILD_DIR/bench/bench_matmul_cpu" "${quick_flag[@]}" --json "$out/cpu.jsonl" | tee "$out/bench_matmul_cpu.log" ||
  failures+=("bench_matmul_cpu")

logs=()
stage "loom beside PyTorch eager (bench/cpu/vs_torch.py; torch.compile: run it alone, docs/performance.md)"
vs_python=python3
vs_args=(--quick)
if ! ((quick)); then
  vs_args=(--no-compile --runs 3 --plot)
  [[ -x "${LOOM_TORCH_DIR:-$LOOM_BUILD_DIR/torch}/venv/bin/python" ]] && vs_python="${LOOM_TORCH_DIR:-$LOOM_BUILD_DIR/torch}/venv/bin/python"
fi
"$vs_python" "$LOOM_ROOT/bench/cpu/vs_torch.py" --bench "$LOOM_BUILD_DIR/bench/bench_vs_torch_cpu" --threads "$(nproc)" \
  "${vs_args[@]}" --out "$out" | tee "$out/vs_torch.log" || failures+=("vs_torch")
logs+=(--log "loom beside PyTorch (bench/cpu/vs_torch.py)=$out/vs_torch.md")

if [[ " ${targets[*]} " == *" bench_reduce_cpu "* ]]; then
  stage "reductions on the host executor (bench_reduce_cpu)"
  reduce_args=()
  ((quick)) && reduce_args=(65537)
  "$LOOM_BUILD_DIR/bench/bench_reduce_cpu" "${reduce_args[@]}" | tee "$out/bench_reduce_cpu.log" ||
    failures+=("bench_reduce_cpu")
  logs+=(--log "Reductions on the host executor (bench_reduce_cpu)=$out/bench_reduce_cpu.log")
fi

stage "compile time: one translation unit with N distinct fused expressions"
if ((quick)); then
  compile_args=(--compilers g++ --counts "1,2" --repeat 1)
elif command -v nvcc >/dev/null 2>&1; then
  compile_args=(--compilers "nvcc,g++" --counts "1,10,50" --nvcc "$(command -v nvcc)" --arch "${LOOM_CUDA_ARCH%%[;,]*}")
else
  echo "no nvcc: timing g++ only"
  compile_args=(--compilers g++ --counts "1,10,50")
fi
python3 "$LOOM_ROOT/bench/cpu/compile_time.py" --include "$LOOM_ROOT/include" "${compile_args[@]}" \
  --json "$out/cpu.jsonl" | tee "$out/compile_time.log" || failures+=("compile_time")

stage "static evidence: PTX and ptxas -v of representative expressions (tests/ptx/check_ptx.py)"
if ((quick)); then
  # The same script runs as the ptx_fusion_check test (ctest), which CI runs
  # just before this smoke run.
  echo "skipped in --quick mode (ctest's ptx_fusion_check runs tests/ptx/check_ptx.py)" | tee "$out/static_report.log"
elif command -v nvcc >/dev/null 2>&1; then
  python3 "$LOOM_ROOT/tests/ptx/check_ptx.py" --nvcc "$(command -v nvcc)" \
    --source "$LOOM_ROOT/tests/ptx/ptx_cases.cu" --include "$LOOM_ROOT/include" \
    --arch "${LOOM_CUDA_ARCH%%[;,]*}" --workdir "$out/ptx" | tee "$out/static_report.log" || failures+=("static report")
  logs+=(--log "Static evidence (tests/ptx/check_ptx.py)=$out/static_report.log")
else
  echo "no nvcc: the static report needs it; skipped" | tee "$out/static_report.log"
  failures+=("static report (no nvcc)")
fi

stage "report"
if ! python3 -c 'import matplotlib' 2>/dev/null; then
  if ((quick)); then
    echo "matplotlib is not installed (not installing it in --quick mode): no plot"
  else
    echo "matplotlib is not installed; trying pip"
    timeout 180 python3 -m pip install --quiet --disable-pip-version-check matplotlib ||
      echo "pip could not install matplotlib: no plot (everything else is written)"
  fi
fi
((quick)) && echo "(--quick: tiny sizes, one run; these figures are a smoke test, not measurements)"
python3 "$LOOM_ROOT/bench/report.py" --jsonl "$out/cpu.jsonl" --out "$out" \
  --title "loom CPU benchmarks ($(nproc) cores$( ((quick)) && echo ', --quick smoke run'))" "${logs[@]}"

echo
if ((${#failures[@]})); then
  echo "bench/run_cpu.sh: FAILED: ${failures[*]} (after $((SECONDS - start)) s)"
  exit 1
fi
echo "bench/run_cpu.sh: done in $((SECONDS - start)) s; results in $out"
