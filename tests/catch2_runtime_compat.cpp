// Linked into the tests of a Catch2 v3 build. A prebuilt Catch2 library can come from a newer
// toolchain than the one building the tests: Debian 13's libCatch2.a (GCC 14, glibc 2.41), unpacked
// on Debian 12 (GCC 12, glibc 2.36) for CI's second build (scripts/setup.sh). Such a library refers to
// runtime symbols the older runtime lacks, and relies on the newer libstdc++ constructing std::cout
// itself. This file supplies exactly what tests/CMakeLists.txt found missing, with the same meaning:
//   __cxa_call_terminate (GCC 14's C++ ABI: an exception escaped a noexcept cleanup): terminate with
//     the exception caught, as the newer runtime does;
//   __isoc23_strtoull (glibc 2.38's C23 strtoull, which also accepts "0b" when base is 0 or 2):
//     Catch parses decimal numbers only, where both are the same function.
// With a Catch2 built by the same toolchain (Debian 12's v2, Ubuntu 24.04's v3) nothing is defined.
#include <cstdlib>
#include <exception>
#include <iostream>  // constructs std::cout and friends on a libstdc++ older than GCC 13's

#if defined(FC_DEFINE_CXA_CALL_TERMINATE)
#include <cxxabi.h>

extern "C" [[noreturn]] void __cxa_call_terminate(void* exception) noexcept {
  if (exception) __cxxabiv1::__cxa_begin_catch(exception);
  std::terminate();
}
#endif

#if defined(FC_DEFINE_ISOC23_STRTOULL)
extern "C" unsigned long long __isoc23_strtoull(const char* s, char** end, int base) {
  return std::strtoull(s, end, base);
}
#endif
