#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds loom's GPU programs (the [cuda] test programs, the GPU benchmarks and
# the examples) on this machine, which needs no GPU, and packs the executables
# (stripped) into one folder, and that folder into DIR.tar.xz, for
# bench/gpu_check.sh to run on a GPU machine of the same architecture
# (x86-64) and CUDA toolkit:
#   bench/gpu_pack.sh [DIR]        (default: .gpu-prebuilt/ in the repository)
#   LOOM_GPU_CHECK_PREBUILT=DIR.tar.xz bench/gpu_check.sh OUT   (or =DIR)
# A GPU loan is short; this moves the compile (tens of CPU minutes) off it.
# A GPU run carries the working tree and the programs in at most 64 MiB: the
# folder was 99 MiB on 2026-12-02 (sm_90 SASS and PTX), so the archive is
# what travels, and it must stay under LOOM_GPU_PACK_LIMIT_MIB (60).
# Settings: LOOM_BUILD_DIR (default build-gpu/), LOOM_CUDA_ARCH (default
# 90-real: SASS only, which an sm_90 GPU runs; the PTX copy would only
# serve newer GPUs), LOOM_JOBS (default: all cores).
set -euo pipefail
user_build_dir="${LOOM_BUILD_DIR:-}"
LOOM_CUDA_ARCH="${LOOM_CUDA_ARCH:-90-real}"
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
LOOM_BUILD_DIR="${user_build_dir:-$LOOM_ROOT/build-gpu}"
dest="${1:-$LOOM_ROOT/.gpu-prebuilt}"
loom_find_cuda
loom_configure -DLOOM_CHECK_ONLY_ARCHITECTURES= >/dev/null
targets=(bench_elementwise bench_layers bench_reduce_gpu bench_matmul bench_embedding_gpu bench_lowp_gpu
         bench_attention_gpu bench_conv_gpu)
mapfile -t tests < <(ninja -C "$LOOM_BUILD_DIR" -t targets all | sed -n 's/^\(test_[a-z_0-9]*_cuda\): .*/\1/p')
mapfile -t examples < <(ninja -C "$LOOM_BUILD_DIR" -t targets all | sed -n 's/^\(examples\/[0-9][a-z_0-9]*\): .*/\1/p')
ninja -C "$LOOM_BUILD_DIR" -j "$LOOM_JOBS" "${targets[@]}" "${tests[@]}" "${examples[@]}"
rm -rf "$dest"
mkdir -p "$dest/bench" "$dest/examples"
for t in "${targets[@]}"; do install -s -m 755 "$LOOM_BUILD_DIR/bench/$t" "$dest/bench/$t"; done
for e in "${examples[@]}"; do install -s -m 755 "$LOOM_BUILD_DIR/$e" "$dest/$e"; done
for t in "${tests[@]}"; do
  src="$(find "$LOOM_BUILD_DIR/tests" -type f -name "$t" -perm -u+x | head -n 1)"
  rel="${src#"$LOOM_BUILD_DIR"/}"
  mkdir -p "$dest/$(dirname "$rel")"
  install -s -m 755 "$src" "$dest/$rel"
done
{
  echo "packed by bench/gpu_pack.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), loom $(git -C "$LOOM_ROOT" rev-parse --short HEAD)$(git -C "$LOOM_ROOT" diff --quiet HEAD || echo ' (with uncommitted changes)'), nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), sm_$LOOM_CUDA_ARCH"
} >"$dest/PACKED"
cat "$dest/PACKED"
du -sh "$dest"
archive="$dest.tar.xz"
rm -f "$archive"
tar -C "$dest" -cf - . | xz -T "$LOOM_JOBS" -6 >"$archive"
# A GPU loan carries the working tree and the archive in at most 64 MiB.
limit_mib="${LOOM_GPU_PACK_LIMIT_MIB:-60}"
size_mib=$(($(stat -c %s "$archive") / 1048576))
echo "$archive: $size_mib MiB"
if ((size_mib > limit_mib)); then
  echo "bench/gpu_pack.sh: $archive is $size_mib MiB, over the $limit_mib MiB that a GPU run can carry (pack fewer programs)" >&2
  exit 1
fi
