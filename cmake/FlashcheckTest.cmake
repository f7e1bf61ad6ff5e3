# fc_add_test(NAME name SOURCES a.cpp ... LIBS lib ... LABELS cpu|gpu ... [PREFIX p] [COST seconds])
# A Catch2 test executable (v2 or v3: include "tests/catch.hpp"); each TEST_CASE becomes a ctest test
# carrying LABELS (which mirror the Catch tags of its TEST_CASEs). GPU tests skip cleanly without a
# GPU (exit code 77 = skipped). PREFIX (optional) prefixes every ctest name: one source compiled for
# two devices registers its TEST_CASEs twice, and tests that share a name collide in ctest (the second
# set of labels wins). COST (optional): about how many seconds its slowest test takes, so that a parallel
# ctest without timing history (a clean clone) starts it first instead of finishing on it alone.
# Label `long`: with FLASHCHECK_LONG_TESTS=OFF (the sanitizer build, whose tests leave `long` out)
# the executable is left out of `all` and registers no test.
#
# fc_test_code(target): test code compiles at -O0 in every build. It is glue around the libraries
# (which keep the build's -O3, or the sanitizer build's -O2), and optimising it costs CI compile time
# (twice as long under clang with ASan) for no speed that a test measures.
function(fc_test_code target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O0>)
endfunction()

function(fc_add_test)
  cmake_parse_arguments(T "" "NAME;PREFIX;COST" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  fc_test_code(${T_NAME})
  if("gpu" IN_LIST T_LABELS)
    target_link_libraries(${T_NAME} PRIVATE fc_catch_main_gpu)
  else()
    target_link_libraries(${T_NAME} PRIVATE fc_catch_main)
  endif()
  target_link_libraries(${T_NAME} PRIVATE fc_catch_session fc_warnings ${T_LIBS})
  if("long" IN_LIST T_LABELS AND NOT FLASHCHECK_LONG_TESTS)
    set_target_properties(${T_NAME} PROPERTIES EXCLUDE_FROM_ALL ON)
    return()
  endif()
  catch_discover_tests(${T_NAME} TEST_PREFIX "${T_PREFIX}")
  # Labels and the skip code are set on the discovered tests (${T_NAME}_TESTS, which Catch's own
  # include file defines) by a file ctest reads after it: through catch_discover_tests' PROPERTIES a
  # second label would be read as a property name, and Catch2 v3 appends its own SKIP_RETURN_CODE 4.
  if(NOT T_COST)
    set(T_COST 0)
  endif()
  set(props "${CMAKE_CURRENT_BINARY_DIR}/${T_NAME}_properties.cmake")
  file(WRITE "${props}" "if(DEFINED ${T_NAME}_TESTS)\n"
                        "  set_tests_properties(\${${T_NAME}_TESTS} PROPERTIES LABELS \"${T_LABELS}\" SKIP_RETURN_CODE 77 COST ${T_COST})\n"
                        "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${props}")
endfunction()
