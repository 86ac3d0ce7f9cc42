# SPDX-License-Identifier: Apache-2.0
# OpenMP for loom's host executor, shared by loom's CMakeLists.txt (the
# target `loom`, for add_subdirectory) and the installed loomConfig.cmake (the
# imported target loom::loom).
#
# loom_bring_openmp(<target> <BUILD|INSTALLED>) gives <target> OpenMP for the
# host compiler when that compiler has it: OpenMP::OpenMP_CXX (compile flag
# for C++ files, runtime library at link time) and the same flag for the
# host code of .cu files (-Xcompiler; nvcc passes no OpenMP flag by itself).
# nvcc's host compiler may differ from the project's C++ compiler (clang++
# for C++ files, nvcc's default g++ for .cu files): see the flag below.
# OpenMP missing is not an error: the host executor then runs on one thread.
# Sets LOOM_OPENMP_FOUND (TRUE/FALSE) in the caller's scope.
macro(loom_bring_openmp _loom_target _loom_mode)
  set(LOOM_OPENMP_FOUND FALSE)
  if(CMAKE_CXX_COMPILER_LOADED)
    find_package(OpenMP QUIET COMPONENTS CXX)
  endif()
  if(OpenMP_CXX_FOUND)
    set(LOOM_OPENMP_FOUND TRUE)
    set(_loom_openmp_cuda_flags "")
    foreach(_loom_flag IN LISTS OpenMP_CXX_FLAGS)
      # clang's flag names its runtime (-fopenmp=libomp), which g++, nvcc's
      # default host compiler, rejects; plain -fopenmp means OpenMP to both.
      # Code that g++ compiles with it calls the GOMP entry points, which
      # LLVM's libomp (what a clang build links) exports as well as libgomp.
      string(REGEX REPLACE "^-fopenmp=.*" "-fopenmp" _loom_flag "${_loom_flag}")
      list(APPEND _loom_openmp_cuda_flags "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${_loom_flag}>")
    endforeach()
    if("${_loom_mode}" STREQUAL "BUILD")
      # Not exported: the installed config decides again on the consumer's machine.
      target_link_libraries(${_loom_target} INTERFACE $<BUILD_INTERFACE:OpenMP::OpenMP_CXX>)
      target_compile_options(${_loom_target} INTERFACE "$<BUILD_INTERFACE:${_loom_openmp_cuda_flags}>")
    else()
      get_target_property(_loom_links ${_loom_target} INTERFACE_LINK_LIBRARIES)
      if(NOT "OpenMP::OpenMP_CXX" IN_LIST _loom_links)
        target_link_libraries(${_loom_target} INTERFACE OpenMP::OpenMP_CXX)
        target_compile_options(${_loom_target} INTERFACE ${_loom_openmp_cuda_flags})
      endif()
      unset(_loom_links)
    endif()
    unset(_loom_flag)
    unset(_loom_openmp_cuda_flags)
  endif()
endmacro()
