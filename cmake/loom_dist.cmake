# SPDX-License-Identifier: Apache-2.0
# MPI and NCCL for loom's collectives (include/loom/dist), shared by loom's
# CMakeLists.txt (the target `loom_dist`, for add_subdirectory) and the
# installed loomConfig.cmake (the imported target loom::dist).
#
# loom_bring_dist(<target> <BUILD|INSTALLED>) gives <target> (an INTERFACE
# target that links loom::loom) what is found of:
#   MPI (FindMPI, C++ component; Debian: libopenmpi-dev): MPI::MPI_CXX and
#     LOOM_HAS_MPI=1: communicators made by mpirun, collectives on host tensors;
#   NCCL (nccl.h and libnccl beside the CUDA toolkit, or NCCL_ROOT): the
#     library and LOOM_HAS_NCCL=1: collectives on device tensors.
# Neither is an error: a status line says what is missing, and the
# headers then leave the missing backend out (docs/17_distributed.md).
# Sets LOOM_DIST_MPI_FOUND and LOOM_DIST_NCCL_FOUND (TRUE/FALSE) in the caller's scope.
function(loom_bring_dist _loom_target _loom_mode)
  set(LOOM_DIST_MPI_FOUND FALSE PARENT_SCOPE)
  set(LOOM_DIST_NCCL_FOUND FALSE PARENT_SCOPE)
  set(_loom_libs "")
  set(_loom_defs "")
  if(CMAKE_CXX_COMPILER_LOADED)
    # The C API only: Open MPI's deprecated C++ bindings stay out.
    set(MPI_CXX_SKIP_MPICXX ON)
    find_package(MPI QUIET COMPONENTS CXX)
  endif()
  if(MPI_CXX_FOUND)
    message(STATUS "loom: loom::dist has MPI ${MPI_CXX_VERSION} (host collectives, mpirun)")
    list(APPEND _loom_libs MPI::MPI_CXX)
    list(APPEND _loom_defs LOOM_HAS_MPI=1)
    set(LOOM_DIST_MPI_FOUND TRUE PARENT_SCOPE)
  else()
    message(STATUS "loom: no MPI found: loom::dist has no MPI communicator (Debian: apt-get install libopenmpi-dev openmpi-bin)")
  endif()
  find_package(CUDAToolkit QUIET)
  find_path(LOOM_NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
  find_library(LOOM_NCCL_LIBRARY nccl HINTS ${NCCL_ROOT}/lib ${NCCL_ROOT}/lib64 ${CUDAToolkit_LIBRARY_DIR})
  if(LOOM_NCCL_INCLUDE_DIR AND LOOM_NCCL_LIBRARY)
    message(STATUS "loom: loom::dist has NCCL (${LOOM_NCCL_LIBRARY}) for device collectives")
    list(APPEND _loom_libs ${LOOM_NCCL_LIBRARY})
    list(APPEND _loom_defs LOOM_HAS_NCCL=1)
    set(LOOM_DIST_NCCL_FOUND TRUE PARENT_SCOPE)
  else()
    message(STATUS "loom: no NCCL found (nccl.h, libnccl; set NCCL_ROOT): loom::dist has no device collectives")
  endif()
  if("${_loom_mode}" STREQUAL "BUILD")
    # Not exported: the installed config decides again on the consumer's machine.
    foreach(_loom_lib IN LISTS _loom_libs)
      target_link_libraries(${_loom_target} INTERFACE "$<BUILD_INTERFACE:${_loom_lib}>")
    endforeach()
    if(LOOM_NCCL_INCLUDE_DIR AND LOOM_NCCL_LIBRARY)
      target_include_directories(${_loom_target} SYSTEM INTERFACE "$<BUILD_INTERFACE:${LOOM_NCCL_INCLUDE_DIR}>")
    endif()
    foreach(_loom_def IN LISTS _loom_defs)
      target_compile_definitions(${_loom_target} INTERFACE "$<BUILD_INTERFACE:${_loom_def}>")
    endforeach()
  else()
    target_link_libraries(${_loom_target} INTERFACE ${_loom_libs})
    if(LOOM_NCCL_INCLUDE_DIR AND LOOM_NCCL_LIBRARY)
      target_include_directories(${_loom_target} SYSTEM INTERFACE ${LOOM_NCCL_INCLUDE_DIR})
    endif()
    target_compile_definitions(${_loom_target} INTERFACE ${_loom_defs})
  endif()
endfunction()
