# SPDX-License-Identifier: Apache-2.0
# Finds the CCCL headers (Thrust, CUB, libcu++) that ship with the CUDA toolkit
# and sets LOOM_CCCL_INCLUDE_DIR, so that host compilers find them as nvcc does.
if(NOT TARGET CUDA::cudart)
  find_package(CUDAToolkit REQUIRED)
endif()
set(LOOM_CCCL_INCLUDE_DIR "")
foreach(_loom_inc IN LISTS CUDAToolkit_INCLUDE_DIRS)
  if(EXISTS "${_loom_inc}/cccl/cuda/version")
    set(LOOM_CCCL_INCLUDE_DIR "${_loom_inc}/cccl")
  endif()
endforeach()
