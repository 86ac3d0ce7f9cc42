# SPDX-License-Identifier: Apache-2.0
# The BLAS under the host executor's matmul, shared by loom's CMakeLists.txt
# (the target `loom`, for add_subdirectory) and the installed loomConfig.cmake
# (the imported target loom::loom).
#
# loom_bring_blas(<target> <BUILD|INSTALLED>) looks for a CBLAS of vendor
# LOOM_BLAS_VENDOR (CMake's FindBLAS names; default OpenBLAS, Debian's
# libopenblas-dev) and, when found, gives <target> its libraries and the
# definition LOOM_HAS_BLAS=1, which makes include/loom/linalg/host_gemm.hpp
# call cblas_sgemm/cblas_dgemm. A missing BLAS is not an error: the host
# matmul then runs loom's own kernel, which a status line here says and
# loom::host_gemm_backend_name() reports at run time.
# Sets LOOM_BLAS_FOUND (TRUE/FALSE) in the caller's scope.
function(loom_bring_blas _loom_target _loom_mode)
  set(LOOM_BLAS_FOUND FALSE PARENT_SCOPE)
  if(NOT DEFINED LOOM_BLAS_VENDOR OR LOOM_BLAS_VENDOR STREQUAL "")
    set(LOOM_BLAS_VENDOR OpenBLAS)
  endif()
  if(NOT (CMAKE_CXX_COMPILER_LOADED OR CMAKE_C_COMPILER_LOADED))
    message(STATUS "loom: no C or C++ language enabled to look for a BLAS: the host matmul runs loom's own kernel")
    return()
  endif()
  set(BLA_VENDOR "${LOOM_BLAS_VENDOR}")
  find_package(BLAS QUIET)
  if(NOT BLAS_FOUND)
    message(STATUS "loom: no ${LOOM_BLAS_VENDOR} BLAS found: the host matmul runs loom's own kernel "
                   "(Debian: apt-get install libopenblas-dev)")
    return()
  endif()
  message(STATUS "loom: the host matmul calls ${LOOM_BLAS_VENDOR} (${BLAS_LIBRARIES})")
  # Paths, not the imported target BLAS::BLAS, which a parent directory
  # (add_subdirectory) would not see.
  set(_loom_libs ${BLAS_LIBRARIES} ${BLAS_LINKER_FLAGS})
  if("${_loom_mode}" STREQUAL "BUILD")
    # Not exported: the installed config decides again on the consumer's machine.
    foreach(_loom_lib IN LISTS _loom_libs)
      target_link_libraries(${_loom_target} INTERFACE "$<BUILD_INTERFACE:${_loom_lib}>")
    endforeach()
    target_compile_definitions(${_loom_target} INTERFACE $<BUILD_INTERFACE:LOOM_HAS_BLAS=1>)
  else()
    get_target_property(_loom_defs ${_loom_target} INTERFACE_COMPILE_DEFINITIONS)
    if(NOT "LOOM_HAS_BLAS=1" IN_LIST _loom_defs)
      target_link_libraries(${_loom_target} INTERFACE ${_loom_libs})
      target_compile_definitions(${_loom_target} INTERFACE LOOM_HAS_BLAS=1)
    endif()
  endif()
  set(LOOM_BLAS_FOUND TRUE PARENT_SCOPE)
endfunction()
