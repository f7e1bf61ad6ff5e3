# fc_warnings: the warnings of our own targets (host code, and nvcc's host compiler through -Xcompiler);
# FLASHCHECK_WERROR makes them errors (CI). FLASHCHECK_SANITIZE instruments every host object.
add_library(fc_warnings INTERFACE)
target_compile_options(fc_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
if(FLASHCHECK_WERROR)
  target_compile_options(fc_warnings INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror --Werror=all-warnings>)
  # GCC 12 warns -Wrestrict inside libstdc++ for `"literal" + std::string&&` and Boost's mpfr str() at
  # -O2 and above (GCC bug 105329: a false positive in basic_string::insert); no code of ours can avoid
  # it, so with -Werror that one warning stays a warning.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(fc_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-error=restrict>)
  endif()
endif()

if(FLASHCHECK_SANITIZE)
  # Every finding stops the test that meets it (no recovery), with a frame-pointer stack.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${FLASHCHECK_SANITIZE};-fno-sanitize-recover=all;-fno-omit-frame-pointer>")
  add_link_options(-fsanitize=${FLASHCHECK_SANITIZE})
endif()
if(FLASHCHECK_FUZZ AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "flashcheck: FLASHCHECK_FUZZ needs clang (libFuzzer); configure with the asan-ubsan preset")
endif()
