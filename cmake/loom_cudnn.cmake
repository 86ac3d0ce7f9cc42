# SPDX-License-Identifier: Apache-2.0
# cuDNN for convolution on device tensors (include/loom/conv/cudnn.hpp),
# shared by loom's CMakeLists.txt (the target `loom`, for add_subdirectory)
# and the installed loomConfig.cmake (the imported target loom::loom).
#
# loom_bring_cudnn(<target> <BUILD|INSTALLED>) looks for cudnn.h and libcudnn
# (version 9) beside the CUDA toolkit or under CUDNN_ROOT and, when found,
# gives <target> the library, its include directory and the definition
# LOOM_HAS_CUDNN=1, which builds the device path of conv2d and conv1d. A
# missing cuDNN is not an error: convolution then runs on host tensors only
# (a device tensor is a compile-time error saying why), and a status line
# here says so. Sets LOOM_CUDNN_FOUND (TRUE/FALSE) in the caller's scope.
function(loom_bring_cudnn _loom_target _loom_mode)
  set(LOOM_CUDNN_FOUND FALSE PARENT_SCOPE)
  find_package(CUDAToolkit QUIET)
  find_path(LOOM_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDNN_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
  find_library(LOOM_CUDNN_LIBRARY cudnn HINTS ${CUDNN_ROOT}/lib ${CUDNN_ROOT}/lib64 ${CUDAToolkit_LIBRARY_DIR})
  set(_loom_major "")
  if(LOOM_CUDNN_INCLUDE_DIR AND EXISTS "${LOOM_CUDNN_INCLUDE_DIR}/cudnn_version.h")
    file(STRINGS "${LOOM_CUDNN_INCLUDE_DIR}/cudnn_version.h" _loom_line REGEX "^#define CUDNN_MAJOR [0-9]+")
    string(REGEX MATCH "[0-9]+" _loom_major "${_loom_line}")
  endif()
  if(NOT (LOOM_CUDNN_INCLUDE_DIR AND LOOM_CUDNN_LIBRARY) OR NOT "${_loom_major}" STREQUAL "9")
    message(STATUS "loom: no cuDNN 9 found (cudnn.h, libcudnn; set CUDNN_ROOT): convolution runs on host tensors only")
    return()
  endif()
  message(STATUS "loom: convolution on device tensors calls cuDNN (${LOOM_CUDNN_LIBRARY})")
  if("${_loom_mode}" STREQUAL "BUILD")
    # Not exported: the installed config decides again on the consumer's machine.
    target_link_libraries(${_loom_target} INTERFACE "$<BUILD_INTERFACE:${LOOM_CUDNN_LIBRARY}>")
    target_include_directories(${_loom_target} SYSTEM INTERFACE "$<BUILD_INTERFACE:${LOOM_CUDNN_INCLUDE_DIR}>")
    target_compile_definitions(${_loom_target} INTERFACE $<BUILD_INTERFACE:LOOM_HAS_CUDNN=1>)
  else()
    get_target_property(_loom_defs ${_loom_target} INTERFACE_COMPILE_DEFINITIONS)
    if(NOT "LOOM_HAS_CUDNN=1" IN_LIST _loom_defs)
      target_link_libraries(${_loom_target} INTERFACE ${LOOM_CUDNN_LIBRARY})
      target_include_directories(${_loom_target} SYSTEM INTERFACE ${LOOM_CUDNN_INCLUDE_DIR})
      target_compile_definitions(${_loom_target} INTERFACE LOOM_HAS_CUDNN=1)
    endif()
  endif()
  set(LOOM_CUDNN_FOUND TRUE PARENT_SCOPE)
endfunction()
