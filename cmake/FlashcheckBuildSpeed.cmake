# Build time on CI's two cores (docs/DECISIONS.md, "CI's two builds divide the work"). Neither option
# changes what is compiled, only how fast:
# - FLASHCHECK_CCACHE (AUTO: when ccache is found): every compile, nvcc's included, goes through ccache.
#   Paths under the source tree are hashed relative to it, so a fresh clone in another folder hits the
#   objects an earlier build left in the cache (~/.cache/ccache), as a CI runner's cache would.
# - FLASHCHECK_LLD (AUTO: when the compiler links with it): C and C++ targets link with lld, about a
#   third of GNU ld's time on a test executable; the ~100 test executables link every library.
set(FLASHCHECK_CCACHE AUTO CACHE STRING "Compile through ccache: AUTO (when found), ON (required), OFF")
set_property(CACHE FLASHCHECK_CCACHE PROPERTY STRINGS AUTO ON OFF)
set(FLASHCHECK_LLD AUTO CACHE STRING "Link C and C++ targets with lld: AUTO (when the compiler can), ON (required), OFF")
set_property(CACHE FLASHCHECK_LLD PROPERTY STRINGS AUTO ON OFF)

if(NOT FLASHCHECK_CCACHE STREQUAL "OFF")
  find_program(FLASHCHECK_CCACHE_PROGRAM ccache)
  if(FLASHCHECK_CCACHE_PROGRAM)
    # base_dir: absolute paths below the source tree are hashed (and passed) relative to the build
    # folder; hash_dir off: the build folder's own path is not hashed into objects with debug lines
    # (the sanitizer build's -g1), whose paths are then relative.
    set(launcher ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1
                 ${FLASHCHECK_CCACHE_PROGRAM})
    foreach(lang C CXX CUDA)
      set(CMAKE_${lang}_COMPILER_LAUNCHER ${launcher})
    endforeach()
    message(STATUS "flashcheck: compiling through ${FLASHCHECK_CCACHE_PROGRAM}")
  elseif(FLASHCHECK_CCACHE STREQUAL "ON")
    message(FATAL_ERROR "FLASHCHECK_CCACHE=ON and ccache is not found")
  endif()
endif()

if(NOT FLASHCHECK_LLD STREQUAL "OFF")
  include(CheckLinkerFlag)
  check_linker_flag(CXX -fuse-ld=lld FLASHCHECK_LINKS_WITH_LLD)
  if(FLASHCHECK_LINKS_WITH_LLD)
    # nvcc drives the link of targets whose link language is CUDA and takes no -fuse-ld: those keep ld.
    add_link_options($<$<LINK_LANGUAGE:C,CXX>:-fuse-ld=lld>)
  elseif(FLASHCHECK_LLD STREQUAL "ON")
    message(FATAL_ERROR "FLASHCHECK_LLD=ON and ${CMAKE_CXX_COMPILER} cannot link with lld")
  endif()
endif()
