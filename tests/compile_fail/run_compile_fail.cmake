# SPDX-License-Identifier: Apache-2.0
# Compile-fail check, run by ctest as `cmake -DCXX=... -DFLAGS=... -DSRC=... [-DEXPECT_SUCCESS=ON] -P this`:
# compiles SRC with -fsyntax-only and passes when the compiler REJECTS it and
# its output contains the text of SRC's "// expect: " line (the start of loom's
# static_assert message, so the message stays readable); a file may give
# one such line per compiler's wording (a concept failure: g++ names
# `expression<E>`, clang says the type "does not satisfy 'expression'"), and
# one of them must appear. With EXPECT_SUCCESS the file must compile
# instead (the control).
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
execute_process(COMMAND ${CXX} ${flags} -fsyntax-only ${SRC}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(EXPECT_SUCCESS)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${SRC} should compile but did not:\n${out}")
  endif()
  return()
endif()
# Read as one string, not as a list: loom's messages contain semicolons.
file(READ ${SRC} text)
set(expects "")
set(rest "${text}")
while(rest MATCHES "\n// expect: ([^\n]+)\n")
  set(one "${CMAKE_MATCH_1}")
  string(FIND "${rest}" "\n// expect: ${one}\n" at)
  math(EXPR at "${at} + 1")
  string(SUBSTRING "${rest}" ${at} -1 rest)
  string(LENGTH "// expect: ${one}" skip)
  string(SUBSTRING "${rest}" ${skip} -1 rest)
  string(APPEND expects "  ${one}\n")
  if(rc EQUAL 0)
    continue()
  endif()
  string(FIND "${out}" "${one}" pos)
  if(NOT pos EQUAL -1)
    message(STATUS "rejected with: ${one}")
    return()
  endif()
endwhile()
if(expects STREQUAL "")
  message(FATAL_ERROR "${SRC} needs a '// expect: <message>' line")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "${SRC} compiled, but it must not (expected:\n${expects})")
endif()
message(FATAL_ERROR "${SRC} failed to compile, but without an expected message\n${expects}compiler output:\n${out}")
