#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compiler launcher for the sources of programs that a machine without a GPU
# only compiles (LOOM_CHECK_ONLY_ARCHITECTURES; loom_gpu_program in
# CMakeLists.txt): nvcc's host compiler only checks the host code
# (-fsyntax-only: parsed and every template instantiated, no code generated),
# so nvcc writes no object file. This runs the command, then creates the empty
# object file that the build expects, so the next build sees it up to date.
#
# With -rdc, nvcc's host stub names every kernel instantiation by the names
# its front end kept; a name that holds a host lambda's closure type does not
# compile there. A file whose only errors are in that stub is checked again
# in whole-program mode (device code to PTX instead of LTO IR), and the build
# log says so. Any other error fails.
set -u
errors="$(mktemp)"
trap 'rm -f "$errors"' EXIT
if ! "$@" 2>"$errors"; then
  # Diagnostics are "file:line:col: error: ..." (host compiler) or
  # "file(line): error: ..." (nvcc's front end).
  diagnostics="$(grep -E '(:[0-9]+(:[0-9]+)?|\([0-9]+\)): (fatal )?error' "$errors" || true)"
  if [ -n "$diagnostics" ] && ! printf '%s\n' "$diagnostics" | grep -qv 'cudafe1\.stub\.c:'; then
    whole=()
    for arg in "$@"; do
      case "$arg" in
        -rdc=true) ;;
        *code=\[lto_*\]) whole+=("${arg/code=\[lto_/code=[compute_}") ;;
        *) whole+=("$arg") ;;
      esac
    done
    src="${*: -3:1}"
    echo "loom_compile_only.sh: nvcc's -rdc host stub for $src does not compile: checked in whole-program mode (PTX) instead" >&2
    "${whole[@]}" || exit $?
  else
    cat "$errors" >&2
    exit 1
  fi
else
  cat "$errors" >&2
fi
out=""
prev=""
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then out="$arg"; fi
  prev="$arg"
done
if [ -n "$out" ] && [ ! -e "$out" ]; then : > "$out"; fi
