// `rc::prop`: a RapidCheck property checked inside a Catch2 SECTION, for v2 and v3. RapidCheck's own
// `rapidcheck/catch.h` includes the v2 header, so with v3 this header carries the same wrapper,
// written against v3's macros (SECTION, INFO, SUCCEED and FAIL keep their names).
#pragma once

#include <rapidcheck.h>

#include "tests/catch.hpp"

#if FC_CATCH2_MAJOR == 2
#include <rapidcheck/catch.h>
#else
#include <iostream>
#include <sstream>
#include <string>
#include <utility>

namespace rc {

// Checks `testable` as a property inside a SECTION named `description`: success is a SUCCEED (with
// RapidCheck's distribution printed when the property tags cases, or when `verbose`); failure is a
// FAIL carrying RapidCheck's report (the shrunk counterexample and its reproduce string).
template <typename Testable>
void prop(const std::string& description, Testable&& testable, bool verbose = false) {
  SECTION(description) {
    const auto result = detail::checkTestable(std::forward<Testable>(testable));
    if (result.template is<detail::SuccessResult>()) {
      const auto success = result.template get<detail::SuccessResult>();
      if (verbose || !success.distribution.empty()) {
        std::cout << "- " << description << std::endl;
        detail::printResultMessage(result, std::cout);
        std::cout << std::endl;
      }
      SUCCEED();
    } else {
      std::ostringstream report;
      detail::printResultMessage(result, report);
      INFO(report.str() << "\n");
      FAIL();
    }
  }
}

}  // namespace rc
#endif
