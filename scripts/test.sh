#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds loom and runs everything that checks it, on a machine with or without
# a GPU: the tests (ctest; [cuda] programs report "Skipped" without a GPU), the
# examples, and a consumer project built against the installed package.
# Installs cmake, ninja, Catch2 and ccache from Debian first when missing.
# Exits non-zero when anything fails. Settings: see scripts/common.sh.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
start=$SECONDS

section "dependencies"
loom_install_deps
loom_find_cuda

section "configure ($LOOM_BUILD_DIR, CUDA architectures $LOOM_CUDA_ARCH)"
loom_configure

section "build ($LOOM_JOBS jobs)"
cmake --build "$LOOM_BUILD_DIR" -j "$LOOM_JOBS"

section "tests"
ctest --test-dir "$LOOM_BUILD_DIR" --output-on-failure --timeout 600 -j "$LOOM_JOBS"

section "examples (each runs on the host executor when there is no GPU)"
for source in "$LOOM_ROOT"/examples/[0-9][0-9]_*.cu; do
  example="$(basename "$source" .cu)"
  echo "--- $example"
  "$LOOM_BUILD_DIR/examples/$example"
done

section "benchmark smoke run: CPU benchmarks and the static PTX report, tiny sizes (bench/run_cpu.sh --quick)"
LOOM_BUILD_DIR="$LOOM_BUILD_DIR" "$LOOM_ROOT/bench/run_cpu.sh" --quick "$LOOM_BUILD_DIR/bench-results"

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
"$tmp/consumer/app"

section "build examples/subproject with add_subdirectory (host compiler only)"
cmake -S "$LOOM_ROOT/examples/subproject" -B "$tmp/subproject" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}"
cmake --build "$tmp/subproject" -j "$LOOM_JOBS"
"$tmp/subproject/app"

section "all passed in $((SECONDS - start)) s"
