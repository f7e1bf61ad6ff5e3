# The libraries flashcheck builds on, all distribution packages (scripts/setup.sh lists them).
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(Boost 1.74 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(dlpack REQUIRED)  # the plugin ABI's tensors (<flashcheck/plugin.h>)
find_package(rapidcheck REQUIRED)
find_package(Python3 COMPONENTS Interpreter REQUIRED)

# Catch2 drives the tests: v2 (Debian 12) or v3 (Ubuntu 24.04, Debian 13); tests/catch.hpp hides which.
find_package(Catch2 REQUIRED)
if(NOT Catch2_VERSION_MAJOR MATCHES "^[23]$")
  message(FATAL_ERROR "flashcheck: Catch2 ${Catch2_VERSION} found; the tests need v2 or v3")
endif()
message(STATUS "flashcheck: Catch2 ${Catch2_VERSION} (${Catch2_DIR})")
list(APPEND CMAKE_MODULE_PATH ${Catch2_DIR})
include(Catch)

# MPFR and GMP (Boost.Multiprecision's mpfr backend) ship no CMake package.
find_path(MPFR_INCLUDE_DIR mpfr.h REQUIRED)
find_library(MPFR_LIBRARY mpfr REQUIRED)
find_library(GMP_LIBRARY gmp REQUIRED)
add_library(mpfr_gmp INTERFACE)
target_include_directories(mpfr_gmp INTERFACE ${MPFR_INCLUDE_DIR})
target_link_libraries(mpfr_gmp INTERFACE ${MPFR_LIBRARY} ${GMP_LIBRARY})
