# fc_add_test(NAME name SOURCES a.cpp ... LIBS lib ... LABELS cpu|gpu ... [PREFIX p])
# A Catch2 test executable (v2 or v3: include "tests/catch.hpp"); each TEST_CASE becomes a ctest test
# carrying LABELS (which mirror the Catch tags of its TEST_CASEs). GPU tests skip cleanly without a
# GPU (exit code 77 = skipped). PREFIX (optional) prefixes every ctest name: one source compiled for
# two devices registers its TEST_CASEs twice, and tests that share a name collide in ctest (the second
# set of labels wins).
function(fc_add_test)
  cmake_parse_arguments(T "" "NAME;PREFIX" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  if("gpu" IN_LIST T_LABELS)
    target_link_libraries(${T_NAME} PRIVATE fc_catch_main_gpu)
  else()
    target_link_libraries(${T_NAME} PRIVATE fc_catch_main)
  endif()
  target_link_libraries(${T_NAME} PRIVATE fc_warnings ${T_LIBS})
  catch_discover_tests(${T_NAME} TEST_PREFIX "${T_PREFIX}")
  # Labels and the skip code are set on the discovered tests (${T_NAME}_TESTS, which Catch's own
  # include file defines) by a file ctest reads after it: through catch_discover_tests' PROPERTIES a
  # second label would be read as a property name, and Catch2 v3 appends its own SKIP_RETURN_CODE 4.
  set(props "${CMAKE_CURRENT_BINARY_DIR}/${T_NAME}_properties.cmake")
  file(WRITE "${props}" "if(DEFINED ${T_NAME}_TESTS)\n"
                        "  set_tests_properties(\${${T_NAME}_TESTS} PROPERTIES LABELS \"${T_LABELS}\" SKIP_RETURN_CODE 77)\n"
                        "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${props}")
endfunction()
