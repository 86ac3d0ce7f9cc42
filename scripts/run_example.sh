#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds and runs loom's flagship example. It runs on the GPU when one is
# present and otherwise on the host executor (the example itself checks with
# loom::gpu::is_available() and says which). Installs cmake, ninja, Catch2 and
# ccache from Debian first when missing. Settings: see scripts/common.sh.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
example="${LOOM_EXAMPLE:-03_custom_layer}"

section "dependencies"
loom_install_deps
loom_find_cuda

section "configure ($LOOM_BUILD_DIR, CUDA architectures $LOOM_CUDA_ARCH)"
loom_configure

section "build examples/$example.cu"
cmake --build "$LOOM_BUILD_DIR" -j "$LOOM_JOBS" --target "$example"

section "run $example"
"$LOOM_BUILD_DIR/examples/$example"
