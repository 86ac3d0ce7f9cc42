#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu_check.sh on a machine without a usable GPU (CUDA_VISIBLE_DEVICES=-1
# hides any there is): it must say NO GPU IS PRESENT at once and exit 3
# without starting the build; with --build-only it must go on to the build.
# A stand-in cmake on PATH records every call and fails at once, so any
# build shows and none takes time.
# Usage: test_gpu_check_no_gpu.sh PATH/TO/gpu_check.sh
set -uo pipefail
script="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
mkdir -p "$tmp/bin"
cat >"$tmp/bin/cmake" <<'STUB'
#!/bin/sh
echo "cmake $*" >>"$LOOM_TEST_CMAKE_CALLS"
echo "stand-in cmake: this test builds nothing"
exit 1
STUB
chmod +x "$tmp/bin/cmake"
export LOOM_TEST_CMAKE_CALLS="$tmp/cmake.calls"
# Runs the check with the stand-in and no visible GPU; prints its exit status.
run_check() {
  local log="$1"
  shift
  PATH="$tmp/bin:$PATH" CUDA_VISIBLE_DEVICES=-1 LOOM_BUILD_DIR="$tmp/build" \
    timeout --kill-after=10 120 bash "$script" "$@" >"$log" 2>&1
  echo $?
}

start=$SECONDS
rc="$(run_check "$tmp/no_gpu.log" "$tmp/results")"
elapsed=$((SECONDS - start))
[[ "$rc" == 3 ]] || fail "exit status $rc without a GPU, expected 3"
grep -q "NO GPU IS PRESENT: the CUDA runtime found none" "$tmp/no_gpu.log" ||
  fail "no 'NO GPU IS PRESENT' with the runtime's reason"
grep -q -- "--build-only" "$tmp/no_gpu.log" || fail "the message does not name --build-only"
[[ -e "$tmp/cmake.calls" ]] && fail "it started the build: $(cat "$tmp/cmake.calls")"
grep -q "configure and build" "$tmp/no_gpu.log" && fail "it entered the build stage"
((elapsed < 90)) || fail "it took $elapsed s to say that no GPU is present"
[[ -f "$tmp/results/logs.tar.gz" ]] || fail "no logs.tar.gz in the output folder"

rc="$(run_check "$tmp/build_only.log" --build-only "$tmp/results")"
[[ "$rc" == 1 ]] || fail "--build-only with a failing configure: exit status $rc, expected 1"
grep -q "^cmake -S " "$tmp/cmake.calls" 2>/dev/null || fail "--build-only did not configure the build"
grep -q "NO GPU IS PRESENT" "$tmp/build_only.log" && fail "--build-only stopped at the GPU probe"

rc="$(run_check "$tmp/bad_option.log" --no-such-option)"
[[ "$rc" == 1 ]] || fail "an unknown option: exit status $rc, expected 1"

if ((fails)); then
  for log in "$tmp"/*.log; do
    echo "--- $(basename "$log")"
    cat "$log"
  done
  exit 1
fi
echo "gpu_check without a GPU: all checks passed (the probe answered in $elapsed s)"
