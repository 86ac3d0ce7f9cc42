#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole GPU verification of loom in one command, for a machine with one
# NVIDIA GPU, the CUDA toolkit, PyTorch and 16 cores, without network; it is
# budgeted to finish in under 8 minutes (each stage prints its time and runs
# under a timeout; the first GPU run took 129 s with prebuilt programs):
#  1. configures and builds loom (tests, examples, benchmarks) for the GPU's
#     architecture (nvidia-smi's compute capability; 90 when unknown);
#  2. first, right after the GPU is found, the benchmark that decides the
#     reduction and scan targets (bench_reduce_gpu: loom vs CUB, sampled in
#     turn), so a run cut short still has them;
#  3. runs the whole ctest suite, [cuda] tests included: they must pass, and a
#     [cuda] test reported "Skipped" on a GPU machine is a failure; then
#     compute-sanitizer memcheck, racecheck and initcheck over a
#     representative subset of the [cuda] test cases;
#     (on a runtime where compute-sanitizer cannot reach the GPU, the check
#     says so and counts as not run, not as a memory error);
#  4. measures the device-to-device copy bandwidth (the ceiling) and runs the
#     other GPU benchmarks against their baselines: fused elementwise (op by
#     op, thrust::transform), row layers forward and backward, the
#     embedding's forward (vs a hand row-copy kernel) and backward, matmul vs
#     cuBLASLt (bench_matmul), fp8 quantization and the fp8 GEMM
#     (bench_lowp_gpu), conv2d through cuDNN (bench_conv_gpu) beside
#     PyTorch's calls (conv_torch.py), fused attention (bench_attention_gpu) beside
#     PyTorch's SDPA and FlexAttention (attention_torch.py), then loom inside PyTorch (scripts/test_torch.sh with
#     the machine's python3: the extension's CUDA kernels, its tests, DDP on
#     NCCL; not run, and said so, where python3 has no torch with CUDA), and
#     PyTorch eager / torch.compile (torch_layers.py, matmul_torch.py);
#  5. writes results.json, results.md, plot.png, gpu.jsonl and logs.tar.gz
#     (every log; five files, as a GPU loan brings back at most 8) to the
#     output folder, and prints a short table last, with a verdict on each
#     target: met, MISSED, or NOT MEASURED (a failure of the check).
# Without a GPU it says so at once, before building anything: it asks the
# CUDA runtime (CUDA_VISIBLE_DEVICES applies), prints NO GPU IS PRESENT with
# the runtime's reason and exits 3. `--build-only` asks for the build alone,
# with or without a GPU: configure and build (stage 1), then stop, exit 0
# when the build passed (1 when it failed), saying whether a GPU is present.
# Usage: bench/gpu_check.sh [--build-only] [OUT_DIR]   (or LOOM_GPU_CHECK_OUT;
#        default: gpu-check-results/ in the build directory)
# Settings: LOOM_BUILD_DIR (default build-gpu/), LOOM_JOBS (default: all
# cores), LOOM_CUDA_ARCH (default: detected), LOOM_GPU_CHECK_DEADLINE_S
# (default 420: no stage's time limit reaches past this many seconds from
# the start, so the report is written within 8 minutes; a stage cut short
# counts as a timeout). Exits 1 when a build, test, sanitizer run or
# benchmark check fails or a target was not measured, 2 when everything that
# ran passed but a check could not run on this machine (compute-sanitizer).
# A target MISSED is a verdict in the report, not a failure: read the
# `target` lines.
# LOOM_GPU_CHECK_PREBUILT=DIR or DIR.tar.xz: use the programs that
# bench/gpu_pack.sh built and packed into DIR (and its archive, which is
# what a GPU loan can carry) on another x86-64 machine (same CUDA toolkit) instead
# of building here, so a short GPU loan is spent running, not compiling; the
# [cuda] test programs then run directly (ctest's files name the paths of the
# machine that built them), and examples/ in DIR run too.
set -uo pipefail
build_only=0
positional=()
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    -*) echo "bench/gpu_check.sh: unknown option $arg (usage: bench/gpu_check.sh [--build-only] [OUT_DIR])" >&2; exit 1 ;;
    *) positional+=("$arg") ;;
  esac
done
set -- "${positional[@]+"${positional[@]}"}"
user_build_dir="${LOOM_BUILD_DIR:-}"
prebuilt="${LOOM_GPU_CHECK_PREBUILT:-}"
user_arch="${LOOM_CUDA_ARCH:-}"
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
LOOM_BUILD_DIR="${user_build_dir:-$LOOM_ROOT/build-gpu}"
out="${1:-${LOOM_GPU_CHECK_OUT:-}}"
if [[ -n "$prebuilt" ]]; then
  ((build_only)) && die "--build-only builds, LOOM_GPU_CHECK_PREBUILT=$prebuilt says not to: choose one"
  if [[ -f "$prebuilt" && "$prebuilt" == *.tar.xz ]]; then
    # The archive bench/gpu_pack.sh writes: unpacked into a fresh folder.
    unpacked="$(mktemp -d "${TMPDIR:-/tmp}/loom-prebuilt.XXXXXX")"
    # The default output folder must outlive the unpacked programs.
    out="${out:-$LOOM_BUILD_DIR/gpu-check-results}"
    tar -C "$unpacked" -xJf "$prebuilt" || die "LOOM_GPU_CHECK_PREBUILT=$prebuilt could not be unpacked"
    prebuilt="$unpacked"
  fi
  [[ -d "$prebuilt" ]] ||
    die "LOOM_GPU_CHECK_PREBUILT=$prebuilt is neither a folder nor a .tar.xz archive (bench/gpu_pack.sh makes both)"
  LOOM_BUILD_DIR="$(cd "$prebuilt" && pwd)"
fi
out="${out:-$LOOM_BUILD_DIR/gpu-check-results}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
# Every log goes to $log_dir, packed into logs.tar.gz at the end.
log_dir="$out/logs"
rm -rf "$log_dir" "$out/logs.tar.gz" "$out"/gpu.jsonl "$out"/*.log "$out"/*.rc "$out"/sanitizer-*
mkdir -p "$log_dir"
start=$SECONDS
stage_start=$SECONDS
deadline_s="${LOOM_GPU_CHECK_DEADLINE_S:-420}"
# `want` seconds, or the time left before the deadline if less (at least 5 s).
capped() {
  local left=$((start + deadline_s - SECONDS))
  ((left < 5)) && left=5
  echo $(($1 < left ? $1 : left))
}
failures=()
not_run=()
stage() {
  printf '\n=== %s [at %d s; previous stage %d s] ===\n' "$*" "$((SECONDS - start))" "$((SECONDS - stage_start))"
  stage_start=$SECONDS
}
# Runs a command under a timeout, its output to the terminal and to a log;
# records a failure under `name` when it fails or times out.
run_logged() {
  local name="$1" limit log="$3"
  limit="$(capped "$2")"
  shift 3
  if ((start + deadline_s - SECONDS <= 0)); then
    echo "SKIPPED: $name (the ${deadline_s} s deadline has passed)" | tee "$log"
    failures+=("$name (skipped: deadline)")
    return 125
  fi
  # In the background, waited for: bash runs a TERM trap during `wait`, not
  # while a foreground command runs (on_exit then stops it).
  (
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log"
    exit "${PIPESTATUS[0]}"
  ) &
  running=$!
  local rc=0
  wait "$running" || rc=$?
  running=""
  if ((rc == 124 || rc == 137)); then
    echo "TIMEOUT: $name ran past $limit s"
    failures+=("$name (timeout after $limit s)")
  elif ((rc != 0)); then
    failures+=("$name (exit $rc)")
  fi
  return "$rc"
}
logs_where="every log in $out/logs.tar.gz"
pack_logs() {
  [[ -d "$log_dir" ]] || return 0
  if tar -C "$out" -czf "$out/logs.tar.gz" logs 2>/dev/null; then
    rm -rf "$log_dir"
  else
    logs_where="the logs could not be packed: they are in $log_dir"
    echo "$logs_where"
  fi
}
# However the script ends (a stage's failure, the loan's time limit sending
# TERM), the logs are packed and the unpacked programs removed; killed
# before its report, it writes one from what was measured.
reported=0
running=""
# shellcheck disable=SC2317  # invoked by the EXIT trap
on_exit() {
  if ((!reported)) && [[ -s "$out/gpu.jsonl" ]]; then
    echo "bench/gpu_check.sh: stopped before its report; the report of what was measured:"
    timeout 60 python3 "$LOOM_ROOT/bench/report.py" --jsonl "$out/gpu.jsonl" --out "$out" --require-targets \
      --title "loom GPU check (stopped early)" || true
  fi
  # timeout passes the TERM on to the program it runs.
  [[ -n "${running:-}" ]] && pkill -TERM -P "$running" 2>/dev/null
  pack_logs
  [[ -n "${unpacked:-}" ]] && rm -rf "$unpacked"
}
trap on_exit EXIT
trap 'echo "bench/gpu_check.sh: terminated"; exit 143' TERM INT
finish() {
  echo
  pack_logs
  echo "bench/gpu_check.sh: total $((SECONDS - start)) s; results in $out, $logs_where"
  if ((${#not_run[@]})); then
    echo "bench/gpu_check.sh: NOT RUN on this machine:"
    printf '  - %s\n' "${not_run[@]}"
  fi
  if ((${#failures[@]})); then
    echo "bench/gpu_check.sh: FAILED:"
    printf '  - %s\n' "${failures[@]}"
    exit 1
  fi
  if ((${#not_run[@]})); then
    echo "bench/gpu_check.sh: INCOMPLETE: everything that ran passed, but the checks above did not run"
    exit 2
  fi
  echo "bench/gpu_check.sh: all tests passed, all benchmark outputs matched their references"
  exit 0
}

stage "machine"
loom_find_cuda
# The programs link the toolkit's shared libraries (cudart, cuBLASLt): make
# them findable even where the loader's cache does not list the toolkit.
cuda_lib="$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)/lib64"
[[ -d "$cuda_lib" ]] && export LD_LIBRARY_PATH="$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
gpu_cc=""
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv 2>&1 | tee "$log_dir/machine.log"
  gpu_cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')"
else
  echo "nvidia-smi is not installed (no NVIDIA driver)" | tee "$log_dir/machine.log"
fi
arch="${user_arch:-${gpu_cc:-90}}"
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "nvcc: $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'); CUDA architecture built: $arch"
  echo "loom: $(git -C "$LOOM_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$LOOM_ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "torch: $(timeout 60 python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null || echo 'not installed')"
} | tee -a "$log_dir/machine.log"

# Asks the toolkit's CUDA runtime, as loom's programs load it, how many GPUs
# it can use (a second; nothing to build). Prints what it found; exit status
# 0: a GPU is present, 1: none (the runtime's error says why), 2: the probe
# itself could not run (no python3 or no libcudart).
probe_gpu() {
  timeout --kill-after=10 60 python3 - "$cuda_lib" <<'PY'
import ctypes, glob, os, sys
names = sorted(glob.glob(os.path.join(sys.argv[1], "libcudart.so*"))) + ["libcudart.so"]
for name in names:
    try:
        rt = ctypes.CDLL(name)
        break
    except OSError:
        rt = None
if rt is None:
    print("the CUDA runtime (libcudart) could not be loaded")
    sys.exit(2)
rt.cudaGetErrorName.restype = ctypes.c_char_p
rt.cudaGetErrorString.restype = ctypes.c_char_p
count = ctypes.c_int(0)
code = rt.cudaGetDeviceCount(ctypes.byref(count))
if code != 0:
    why = "%s (%s)" % (rt.cudaGetErrorName(code).decode(), rt.cudaGetErrorString(code).decode())
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        why = "no CUDA driver is installed (libcuda.so.1 could not be loaded; the runtime says " + why + ")"
    print("the CUDA runtime found none: " + why)
    sys.exit(1)
if count.value == 0:
    print("the CUDA runtime found none: 0 devices")
    sys.exit(1)
print("the CUDA runtime found %d GPU(s)" % count.value)
PY
}
gpu_probe_out="$(probe_gpu 2>&1)"
gpu_probe_rc=$?
echo "GPU probe: $gpu_probe_out" | tee -a "$log_dir/machine.log"
if ((gpu_probe_rc == 1 && !build_only)); then
  echo "bench/gpu_check.sh: NO GPU IS PRESENT: $gpu_probe_out"
  echo "Nothing was built or run: everything this check does needs a GPU. Run it on a GPU machine, or"
  echo "bench/gpu_check.sh --build-only to build alone here (bench/gpu_pack.sh builds and packs the programs for a GPU loan)."
  pack_logs
  exit 3
fi

if [[ -n "$prebuilt" ]]; then
  stage "prebuilt programs in $LOOM_BUILD_DIR (no build here)"
  tee -a "$log_dir/machine.log" 2>/dev/null <"$LOOM_BUILD_DIR/PACKED"
  head_now="$(git -C "$LOOM_ROOT" rev-parse --short HEAD 2>/dev/null || true)"
  if [[ -n "$head_now" ]] && ! grep -q "loom $head_now" "$LOOM_BUILD_DIR/PACKED" 2>/dev/null; then
    echo "NOTE: the programs were packed from another commit than this tree's ($head_now); the results are theirs" |
      tee -a "$log_dir/machine.log"
  fi
else
stage "configure and build ($LOOM_BUILD_DIR, sm_$arch, $LOOM_JOBS jobs)"
cmake -S "$LOOM_ROOT" -B "$LOOM_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DLOOM_CHECK_ONLY_ARCHITECTURES= -DLOOM_BUILD_TESTS=ON -DLOOM_BUILD_EXAMPLES=ON -DLOOM_BUILD_BENCH=ON >"$log_dir/configure.log" 2>&1 ||
  { cat "$log_dir/configure.log"; failures+=("configure"); finish; }
if ! run_logged build "${LOOM_GPU_CHECK_BUILD_TIMEOUT:-330}" "$log_dir/build.log" \
  cmake --build "$LOOM_BUILD_DIR" -j "$LOOM_JOBS" >/dev/null; then
  tail -n 40 "$log_dir/build.log"
  finish
fi
tail -n 2 "$log_dir/build.log"
if ((build_only)); then
  pack_logs
  echo "bench/gpu_check.sh: the build passed (sm_$arch, $((SECONDS - start)) s; --build-only: nothing run). GPU probe: $gpu_probe_out"
  echo "bench/gpu_check.sh: $logs_where"
  exit 0
fi
fi

stage "is a GPU present?"
# loom's own probe says why no GPU can be used (no driver, old driver, no device);
# with a GPU this is a quick smoke run of the benchmark.
probe_out="$(timeout --kill-after=10 60 "$LOOM_BUILD_DIR/bench/bench_elementwise" --quick 2>&1)"
probe="${probe_out%%$'\n'*}"
if [[ "$probe_out" == *"error while loading shared libraries"* ]]; then
  echo "bench/gpu_check.sh: the programs cannot start: $probe_out"
  failures+=("the programs cannot load their shared libraries (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-})")
  finish
fi
if [[ "$probe" == *"no GPU is present"* ]]; then
  echo "bench/gpu_check.sh: NO GPU IS PRESENT: $probe"
  if [[ -n "$prebuilt" ]]; then
    echo "The prebuilt programs are in place ($LOOM_BUILD_DIR). Everything from here on (the [cuda] test programs,"
    echo "the examples, compute-sanitizer, the benchmarks) needs a GPU; run bench/gpu_check.sh on a GPU machine."
  else
    echo "The build passed (sm_$arch, $((SECONDS - start)) s). Everything from here on (the ctest suite with its"
    echo "[cuda] tests, compute-sanitizer, the benchmarks) needs a GPU; run bench/gpu_check.sh on a GPU machine."
  fi
  pack_logs
  exit 3
fi
gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)"
echo "GPU: ${gpu_name:-unknown (no nvidia-smi; built for sm_$arch)}"

stage "benchmark: reductions and scans vs CUB (the targets), first"
b="$LOOM_BUILD_DIR/bench"
if [[ -x "$b/bench_reduce_gpu" ]]; then
  run_logged bench_reduce_gpu 90 "$log_dir/bench_reduce_gpu.log" "$b/bench_reduce_gpu" --json "$out/gpu.jsonl"
else
  echo "bench_reduce_gpu was not built ($b): the targets cannot be measured"
  failures+=("bench_reduce_gpu missing")
fi

if [[ -n "$prebuilt" ]]; then
stage "[cuda] test programs (prebuilt; run directly, all at once but test_errors_cuda)"
# Each program's exit status: 0 passed, 77 skipped (a failure on a GPU machine).
: >"$log_dir/ctest.log"
cuda_tests=0
run_test_program() {
  local prog="$1" name
  name="$(basename "$prog")"
  timeout --kill-after=10 "$(capped "${LOOM_GPU_CHECK_CTEST_TIMEOUT:-150}")" "$prog" >"$log_dir/test-$name.log" 2>&1
  echo $? >"$log_dir/test-$name.rc"
}
# All at once, except test_errors_cuda: it fills the device on purpose (an
# out-of-memory test), so it runs alone afterwards.
for prog in "$LOOM_BUILD_DIR"/tests/*/test_*_cuda; do
  [[ -x "$prog" ]] || continue
  cuda_tests=$((cuda_tests + 1))
  [[ "$(basename "$prog")" == test_errors_cuda ]] || run_test_program "$prog" &
done
wait
for prog in "$LOOM_BUILD_DIR"/tests/*/test_errors_cuda; do
  [[ -x "$prog" ]] && run_test_program "$prog"
done
for rcf in "$log_dir"/test-*.rc; do
  [[ -e "$rcf" ]] || continue
  name="$(basename "$rcf" .rc)"
  rc="$(cat "$rcf")"
  summary="$(grep -E '^(All tests passed|test cases:)' "$log_dir/$name.log" | tail -n 1)"
  case "$rc" in
    0) echo "passed  ${name#test-}: $summary" ;;
    77) echo "SKIPPED ${name#test-} on a GPU machine: $(head -n 1 "$log_dir/$name.log")" ;;
    124|137) echo "TIMEOUT ${name#test-}" ;;
    *) echo "FAILED  ${name#test-} (exit $rc): $summary"; tail -n 30 "$log_dir/$name.log" ;;
  esac
done | tee "$log_dir/ctest.log"
echo "[cuda] test programs: $cuda_tests"
((cuda_tests > 0)) || failures+=("no [cuda] test programs in $LOOM_BUILD_DIR/tests")
# the loop above ran in a pipeline (a subshell): its failures are read back from the log
while read -r line; do
  case "$line" in SKIPPED*|TIMEOUT*|FAILED*) failures+=("$line") ;; esac
done <"$log_dir/ctest.log"

stage "examples (prebuilt; each checks its own results)"
for ex in "$LOOM_BUILD_DIR"/examples/[0-9]*; do
  [[ -x "$ex" ]] || continue
  if run_logged "example $(basename "$ex")" 60 "$log_dir/example-$(basename "$ex").log" "$ex" >/dev/null; then
    echo "ok    $(basename "$ex"): $(tail -n 1 "$log_dir/example-$(basename "$ex").log")"
  else
    echo "FAIL  $(basename "$ex")"; tail -n 20 "$log_dir/example-$(basename "$ex").log"
  fi
done
else
stage "ctest: the whole suite, [cuda] tests included"
run_logged ctest "${LOOM_GPU_CHECK_CTEST_TIMEOUT:-150}" "$log_dir/ctest.log" \
  ctest --test-dir "$LOOM_BUILD_DIR" --output-on-failure -j "$LOOM_JOBS" >/dev/null
grep -E 'tests passed|Total Test time' "$log_dir/ctest.log"
if grep -qE '\*\*\*Skipped|\(Skipped\)' "$log_dir/ctest.log"; then
  grep -E '\*\*\*Skipped|\(Skipped\)' "$log_dir/ctest.log"
  failures+=("ctest: a test was skipped on a machine with a GPU")
fi
cuda_tests="$(ctest --test-dir "$LOOM_BUILD_DIR" -N -L cuda | sed -n 's/^Total Tests: //p')"
echo "[cuda] test programs: ${cuda_tests:-0}"
[[ "${cuda_tests:-0}" -gt 0 ]] || failures+=("ctest: no [cuda] test programs were built")
fi

stage "compute-sanitizer: memcheck, racecheck, initcheck over a subset of the [cuda] tests"
# Every `step`-th test case of a program, at most `most` of them, and every
# case whose name starts with one of the `also` prefixes: pick_cases and
# sanitize, in gpu_check_cases.sh (tested on the host by ctest).
# shellcheck source=bench/gpu_check_cases.sh
source "$LOOM_ROOT/bench/gpu_check_cases.sh"
sanitizer="$(command -v compute-sanitizer || echo "$(dirname "$(command -v nvcc)")/compute-sanitizer")"
if [[ -x "$sanitizer" ]]; then
  PATH="$(dirname "$sanitizer"):$PATH"
  export PATH
  t="$LOOM_BUILD_DIR/tests"
  runs=(
    "memcheck $t/expr/test_expr_cuda 7 6"
    "memcheck $t/nn/test_nn_cuda 5 6"
    "memcheck $t/reduce/test_reduce_cuda 5 5"
    # The scans' newest kernels (the look-back across rows of few long lines,
    # with its shared memory and tile states) always.
    # The device sort has never run under the tool: its small test cases always.
    "memcheck $t/reduce/test_scan_cuda 4 4 scans_across_rows_of_a_few_long_lines,scans_of_many_rows_longer_than_a_tile,sort_is_stable,topk_gives"
    "memcheck $t/tensor/test_tensor_cuda 6 5"
    "memcheck $t/linalg/test_matmul_cuda 5 3"
    # Every indexing case: out-of-range indices must be read clamped, never out of bounds.
    "memcheck $t/indexing/test_indexing_cuda 1 16"
    "racecheck $t/nn/test_nn_cuda 6 4"
    # Attention's kernels share tiles between phases of a block: the float case, both tools.
    "memcheck $t/nn/test_attention_cuda 3 1"
    "racecheck $t/nn/test_attention_cuda 3 1"
    "racecheck $t/reduce/test_reduce_cuda 6 4"
    "racecheck $t/reduce/test_scan_cuda 6 3 scans_across_rows_of_a_few_long_lines"
    "initcheck $t/expr/test_expr_cuda 9 4"
    "initcheck $t/nn/test_nn_cuda 9 4"
  )
  LOOM_GPU_CHECK_SANITIZER_TIMEOUT="$(capped "${LOOM_GPU_CHECK_SANITIZER_TIMEOUT:-120}")"
  export LOOM_GPU_CHECK_SANITIZER_TIMEOUT
  pids=()
  for r in "${runs[@]}"; do
    # shellcheck disable=SC2086
    sanitize $r &
    pids+=("$!")
  done
  : >"$log_dir/sanitizers.log"
  for i in "${!runs[@]}"; do
    read -r tool prog _ <<<"${runs[$i]}"
    name="$tool-$(basename "$prog")"
    rc=0
    wait "${pids[$i]}" || rc=$?
    if grep -qE 'Device not supported|device is not supported' "$log_dir/sanitizer-$name.log" 2>/dev/null; then
      # The runtime (gVisor, for one) keeps the tool from the GPU: not a
      # memory error, and not a check either, whatever the exit status.
      echo "NOT RUN $name: compute-sanitizer cannot reach the GPU on this machine: $(grep -m1 -E 'not supported' \
        "$log_dir/sanitizer-$name.log")" | tee -a "$log_dir/sanitizers.log"
      not_run+=("compute-sanitizer $name (the tool cannot reach the GPU here)")
    elif ((rc == 0)); then
      echo "ok    $name ($(wc -l <"$log_dir/sanitizer-$name.cases") test cases): $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log_dir/sanitizer-$name.log")" |
        tee -a "$log_dir/sanitizers.log"
    else
      echo "FAIL  $name: see logs/sanitizer-$name.log" | tee -a "$log_dir/sanitizers.log"
      tail -n 15 "$log_dir/sanitizer-$name.log"
      failures+=("compute-sanitizer $name")
    fi
  done
else
  echo "compute-sanitizer not found next to nvcc" | tee "$log_dir/sanitizers.log"
  failures+=("compute-sanitizer missing")
fi

stage "benchmarks: copy bandwidth, fused elementwise, row layers"
run_logged bench_elementwise 120 "$log_dir/bench_elementwise.log" "$b/bench_elementwise" --json "$out/gpu.jsonl"
run_logged bench_layers 150 "$log_dir/bench_layers.log" "$b/bench_layers" --json "$out/gpu.jsonl"

stage "benchmark: the embedding's forward (vs copy and a hand kernel) and backward"
run_logged bench_embedding_gpu 90 "$log_dir/bench_embedding_gpu.log" "$b/bench_embedding_gpu" --json "$out/gpu.jsonl"

stage "benchmark: matmul vs cuBLASLt"
logs=()
run_logged bench_matmul 120 "$log_dir/bench_matmul.log" "$b/bench_matmul"
logs+=(--log "Matmul vs cuBLASLt (bench_matmul)=$log_dir/bench_matmul.log")

stage "benchmark: fp8 quantization and the fp8 GEMM (bench_lowp_gpu)"
run_logged bench_lowp_gpu 120 "$log_dir/bench_lowp_gpu.log" "$b/bench_lowp_gpu" --json "$out/gpu.jsonl"

stage "benchmark: fused attention (bench_attention_gpu) beside PyTorch's SDPA and FlexAttention"
run_logged bench_attention_gpu 90 "$log_dir/bench_attention_gpu.log" "$b/bench_attention_gpu" --json "$out/gpu.jsonl"
run_logged attention_torch 100 "$log_dir/attention_torch.log" python3 "$LOOM_ROOT/bench/gpu/attention_torch.py" \
  --json "$out/gpu.jsonl" --budget-s 60

stage "benchmark: conv2d through cuDNN (bench_conv_gpu) beside PyTorch's calls (conv_torch.py)"
if [[ -x "$b/bench_conv_gpu" ]]; then
  run_logged bench_conv_gpu 90 "$log_dir/bench_conv_gpu.log" "$b/bench_conv_gpu" --json "$out/gpu.jsonl"
  run_logged conv_torch 90 "$log_dir/conv_torch.log" python3 "$LOOM_ROOT/bench/gpu/conv_torch.py" --json "$out/gpu.jsonl"
else
  echo "not run: bench_conv_gpu was not built (no cuDNN found)" | tee "$log_dir/bench_conv_gpu.log"
  not_run+=("conv2d benchmark (bench_conv_gpu: no cuDNN)")
fi

stage "loom inside PyTorch on the GPU: the extension's CUDA kernels, its tests, DDP on NCCL (scripts/test_torch.sh)"
# Needs a python3 that imports torch (with CUDA) and numpy: this machine has
# no network to install them.
if timeout 60 python3 -c 'import torch, numpy, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  run_logged torch_extension 240 "$log_dir/torch_extension.log" \
    env LOOM_TORCH_PYTHON=python3 LOOM_TORCH_DIR="$out/torch" LOOM_JOBS="$LOOM_JOBS" "$LOOM_ROOT/scripts/test_torch.sh"
else
  echo "not run: python3 here does not import torch with CUDA and numpy" | tee "$log_dir/torch_extension.log"
  not_run+=("loom inside PyTorch on the GPU (python3 has no torch with CUDA here)")
fi

stage "PyTorch baselines: matmul, layers and elementwise (eager and torch.compile)"
run_logged matmul_torch 90 "$log_dir/matmul_torch.log" python3 "$LOOM_ROOT/bench/gpu/matmul_torch.py"
logs+=(--log "Matmul in PyTorch (matmul_torch.py)=$log_dir/matmul_torch.log")
# torch.compile gets what is left before the deadline, less a minute for the
# rest of the run and 30 s for the report (compiling dominates).
budget=$((deadline_s - (SECONDS - start) - 90))
((budget < 20)) && budget=20
run_logged torch_layers $((budget + 60)) "$log_dir/torch_layers.log" python3 "$LOOM_ROOT/bench/gpu/torch_layers.py" \
  --json "$out/gpu.jsonl" --compile-budget-s "$budget"

stage "report"
python3 -c 'import matplotlib' 2>/dev/null ||
  timeout 30 python3 -m pip install --quiet --disable-pip-version-check --retries 0 --timeout 5 matplotlib >/dev/null 2>&1 ||
  echo "matplotlib is not installed and pip could not install it (no network?): no plot"
logs=(--log "Machine=$log_dir/machine.log" --log "Sanitizers=$log_dir/sanitizers.log" "${logs[@]}")
reported=1
python3 "$LOOM_ROOT/bench/report.py" --jsonl "$out/gpu.jsonl" --out "$out" --require-targets \
  --title "loom GPU check: ${gpu_name:-GPU}, $(date -u +%Y-%m-%d)" "${logs[@]}" ||
  failures+=("report (or a target NOT MEASURED: see its last lines)")
finish
