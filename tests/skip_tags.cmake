# ctest skip_tags: FC_SKIP_TAGS (tests/catch_session.cpp) skips, with exit 77, a run whose selected
# case carries a listed tag (any case, any of a comma-separated list), runs every other case, and
# without it the tagged case runs. -D EXE=catch_compat_test.
set(tagged "a case with the volume tag runs unless FC_SKIP_TAGS names it")
set(plain "Approx compares within its epsilon")
foreach(run "volume|${tagged}|77" "other,VOLUME|${tagged}|77" "volume|${plain}|0" "other|${tagged}|0" "-|${tagged}|0")
  string(REPLACE "|" ";" run "${run}")
  list(GET run 0 tags)
  list(GET run 1 name)
  list(GET run 2 want)
  if(tags STREQUAL "-")  # unset
    set(env --unset=FC_SKIP_TAGS)
  else()
    set(env FC_SKIP_TAGS=${tags})
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ${env} ${EXE} "${name}" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL want)
    message(FATAL_ERROR "FC_SKIP_TAGS=\"${tags}\" on \"${name}\": exit ${rc}, expected ${want}")
  endif()
endforeach()
