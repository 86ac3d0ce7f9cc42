#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compiler launcher for the sources of programs that a machine without a GPU
# only compiles (LOOM_CHECK_ONLY_ARCHITECTURES; loom_gpu_program in
# CMakeLists.txt). nvcc compiles the device side only: `-c` becomes
# `-fatbin`, so nvcc's front end parses the whole file and instantiates every
# template, host and device (an error in host code shows as in a full
# compile), and NVVM writes the device code as LTO IR into a fat binary that
# is thrown away; cudafe++'s host pass and the host compiler do not run
# (they took about half of these files' compile time: tests/optim/
# test_optim_cuda.cu 24.1 CPU-s with the host compiler's -fsyntax-only pass,
# 11.7 s without). The empty object file the build expects is then created,
# so the next build sees it up to date. The dependency file (-MD -MF) is
# written as in a full compile.
set -u
out=""
fatbin="$(mktemp --suffix=.fatbin)"
trap 'rm -f "$fatbin"' EXIT
args=()
prev=""
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then
    out="$arg"
    args+=("$fatbin")
  else
    case "$arg" in
      -c) args+=(-fatbin) ;;
      *) args+=("$arg") ;;
    esac
  fi
  prev="$arg"
done
"${args[@]}" || exit $?
if [ -n "$out" ] && [ ! -e "$out" ]; then : > "$out"; fi
