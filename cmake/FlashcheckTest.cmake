# fc_add_test(NAME name SOURCES a.cpp ... LIBS lib ... LABELS cpu|gpu ...)
# A Catch2 (v2) test executable; each TEST_CASE becomes a ctest test carrying LABELS (which mirror
# the Catch tags of its TEST_CASEs). GPU tests skip cleanly without a GPU (exit code 77 = skipped).
# PREFIX (optional) prefixes every ctest name: one source compiled for two devices registers its
# TEST_CASEs twice, and tests that share a name collide in ctest (the second set of labels wins).
function(fc_add_test)
  cmake_parse_arguments(T "" "NAME;PREFIX" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT Catch2_FOUND)
    # Declared (so later target_* calls on it still configure) but never built nor registered.
    add_executable(${T_NAME} EXCLUDE_FROM_ALL ${T_SOURCES})
    return()
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  if("gpu" IN_LIST T_LABELS)
    target_link_libraries(${T_NAME} PRIVATE fc_catch_main_gpu)
  else()
    target_link_libraries(${T_NAME} PRIVATE fc_catch_main)
  endif()
  target_link_libraries(${T_NAME} PRIVATE fc_warnings ${T_LIBS})
  catch_discover_tests(${T_NAME} TEST_PREFIX "${T_PREFIX}" PROPERTIES SKIP_RETURN_CODE 77)
  # The labels are set by a file ctest reads after the discovered tests: catch_discover_tests's
  # PROPERTIES cannot carry a list value (a second label would be read as a property name).
  set(labels_file "${CMAKE_CURRENT_BINARY_DIR}/${T_NAME}_labels.cmake")
  file(WRITE "${labels_file}" "if(DEFINED ${T_NAME}_TESTS)\n"
                              "  set_tests_properties(\${${T_NAME}_TESTS} PROPERTIES LABELS \"${T_LABELS}\")\n"
                              "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${labels_file}")
endfunction()
