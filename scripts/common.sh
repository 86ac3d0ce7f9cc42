# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
# Shared by scripts/test.sh and scripts/run_example.sh (sourced, not run).
# Settings (environment variables):
#   LOOM_CUDA_ARCH   CUDA architectures to compile for (default 90: H100/H200)
#   LOOM_BUILD_DIR   build directory (default build/ in the repository)
#   LOOM_JOBS        parallel compile jobs (default: all cores)
#   LOOM_CHECK_ONLY_ARCH  (scripts/test.sh) CUDA architectures of the programs
#                    that are only compiled: default 90-virtual (PTX) without
#                    a GPU, empty (= LOOM_CUDA_ARCH) with one
#   LOOM_TEST_CXX    (scripts/test.sh) C++ compiler of the .cpp files (the
#                    host test programs, the CPU benchmarks): default clang++;
#                    nvcc's host compiler stays g++ (see loom_install_test_cxx)

LOOM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOOM_CUDA_ARCH="${LOOM_CUDA_ARCH:-90}"
LOOM_BUILD_DIR="${LOOM_BUILD_DIR:-$LOOM_ROOT/build}"
LOOM_JOBS="${LOOM_JOBS:-$(nproc)}"

section() { printf '\n=== %s [at %d s] ===\n' "$*" "$SECONDS"; }
die() { printf 'loom: %s\n' "$*" >&2; exit 1; }

# Installs the given Debian packages (as root, or through sudo).
loom_apt_install() {
  echo "installing from Debian: $*"
  local sudo=()
  if [[ $(id -u) != 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to install: $*"
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -q
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "$@"
}

# Installs cmake, ninja, Catch2, Random123 (tests/rng's oracle for Philox;
# loom itself does not use it), OpenBLAS (the host matmul's BLAS), Open MPI
# (loom::dist; not with LOOM_MPI=OFF), ccache
# (not with CCACHE_DISABLE set, as CI sets it) and python3 (for the PTX check; standard library only) from Debian
# when one is missing: a prepared machine does not touch apt at all.
loom_install_deps() {
  local missing=()
  command -v cmake >/dev/null 2>&1 || missing+=(cmake)
  command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
  [[ -n "${CCACHE_DISABLE:-}" ]] || command -v ccache >/dev/null 2>&1 || missing+=(ccache)
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  dpkg -s catch2 >/dev/null 2>&1 || missing+=(catch2)
  dpkg -s librandom123-dev >/dev/null 2>&1 || missing+=(librandom123-dev)  # a test-only oracle (tests/rng)
  dpkg -s libopenblas-dev >/dev/null 2>&1 || missing+=(libopenblas-dev)    # cblas_sgemm under the host matmul
  # Open MPI for loom::dist's host collectives and its mpirun tests (tests/dist;
  # about 23 s from Debian, apt-get update included); LOOM_MPI=OFF does not
  # install it (CMake then leaves those tests out unless MPI is there already).
  if [[ "${LOOM_MPI:-ON}" != "OFF" ]]; then
    command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
    dpkg -s libopenmpi-dev >/dev/null 2>&1 || missing+=(libopenmpi-dev)
  fi
  if ((${#missing[@]} == 0)); then
    echo "cmake, ninja, python3, Catch2, Random123, OpenBLAS, Open MPI (unless LOOM_MPI=OFF) and ccache (unless disabled) are installed"
    return
  fi
  loom_apt_install "${missing[@]}"
}

# Installs Debian's clang, its sanitizer runtimes and LLVM's OpenMP runtime
# when LOOM_TEST_CXX is clang++ and one is missing. scripts/test.sh builds
# the .cpp files with clang++ and the .cu files with nvcc on g++, so both
# compilers check loom's host code, and the sanitized -O0 host tests compile
# in about 0.65x the time g++ takes (tests/grad/test_grad_host_1.cpp: 110 s
# against 167 s, 2026-12-05, this 2-core machine, both compiling at once).
loom_install_test_cxx() {
  [[ "${LOOM_TEST_CXX:-}" == "clang++" ]] || return 0
  local missing=()
  command -v clang++ >/dev/null 2>&1 || missing+=(clang)
  dpkg -s libclang-rt-dev >/dev/null 2>&1 || missing+=(libclang-rt-dev)
  dpkg -s libomp-dev >/dev/null 2>&1 || missing+=(libomp-dev)
  if ((${#missing[@]} == 0)); then
    echo "clang++ $(clang++ -dumpversion), its sanitizer runtimes and libomp are installed"
    return
  fi
  loom_apt_install "${missing[@]}"
}

# Installs NumPy from PyPI into the python3 on PATH (the one CMake finds)
# when it is missing: tests/interop checks DLPack round trips with
# numpy.from_dlpack (a few seconds; that test reports Skipped without NumPy).
loom_install_numpy() {
  if python3 -c 'import numpy' >/dev/null 2>&1; then
    echo "numpy $(python3 -c 'import numpy; print(numpy.__version__)') is installed"
    return
  fi
  echo "installing numpy from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore numpy ||
    echo "loom: numpy could not be installed; the NumPy DLPack test will report Skipped"
}

# Puts the CUDA toolkit's nvcc on PATH when it is installed but not there yet.
loom_find_cuda() {
  if ! command -v nvcc >/dev/null 2>&1; then
    local cuda_home="${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}"
    [[ -x "$cuda_home/bin/nvcc" ]] || die "no CUDA toolkit: nvcc is neither on PATH nor in $cuda_home/bin (set CUDA_HOME)"
    export PATH="$cuda_home/bin:$PATH"
  fi
  echo "nvcc: $(command -v nvcc) ($(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
}

# Configures the build directory (Ninja, Release, tests and examples on);
# extra arguments go to cmake.
loom_configure() {
  cmake -S "$LOOM_ROOT" -B "$LOOM_BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$LOOM_CUDA_ARCH" \
    -DLOOM_BUILD_TESTS=ON -DLOOM_BUILD_EXAMPLES=ON -DLOOM_BUILD_BENCH=ON "$@"
}
