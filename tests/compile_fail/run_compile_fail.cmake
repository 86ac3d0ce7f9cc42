# SPDX-License-Identifier: Apache-2.0
# Compile-fail check, run by ctest as `cmake -DCXX=... -DFLAGS=... -DSRC=... [-DEXPECT_SUCCESS=ON] -P this`:
# compiles SRC with -fsyntax-only and passes when the compiler REJECTS it and
# its output contains the text of SRC's "// expect: " line (the start of loom's
# static_assert message, so the message stays readable). With EXPECT_SUCCESS
# the file must compile instead (the control).
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
if(NOT text MATCHES "\n// expect: ([^\n]+)\n")
  message(FATAL_ERROR "${SRC} needs a '// expect: <message>' line")
endif()
set(expect "${CMAKE_MATCH_1}")
if(rc EQUAL 0)
  message(FATAL_ERROR "${SRC} compiled, but it must not (expected: ${expect})")
endif()
string(FIND "${out}" "${expect}" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "${SRC} failed to compile, but without the expected message\n  ${expect}\ncompiler output:\n${out}")
endif()
message(STATUS "rejected with: ${expect}")
