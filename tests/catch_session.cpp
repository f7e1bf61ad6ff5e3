// The Catch2 session both test mains run (tests/catch_main.cpp, tests/catch_main_gpu.cpp). With v2 this
// file compiles the Catch implementation, the heaviest translation unit of the suite: once per build.
//
// FC_SKIP_TAGS (a comma-separated list of tags, without brackets): a run whose selected test cases
// carry one of them exits 77, which ctest reports as skipped (SKIP_RETURN_CODE). CI's sanitizer build
// sets FC_SKIP_TAGS=volume (CMakePresets.json): a test tagged [volume] costs its time in repetitions
// (seeds, thread counts, every law) of code that the build's other tests already run, so its verdict
// is the main build's (docs/DECISIONS.md). Listing (--list-*) is never skipped: discovery still works.
#define CATCH_CONFIG_RUNNER
#include "tests/catch.hpp"

#if FC_CATCH2_MAJOR >= 3
#include <catch2/catch_session.hpp>
#include <catch2/catch_test_case_info.hpp>
#include <catch2/catch_test_spec.hpp>
#include <catch2/internal/catch_test_case_registry_impl.hpp>
#endif

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <string>

#include "tests/catch_session.hpp"

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The lower-case tags of FC_SKIP_TAGS; empty when it is unset.
std::set<std::string> skip_tags() {
  std::set<std::string> tags;
  const char* env = std::getenv("FC_SKIP_TAGS");
  std::istringstream in(env ? env : "");
  for (std::string t; std::getline(in, t, ',');)
    if (!t.empty()) tags.insert(lower(t));
  return tags;
}

// The first tag of `skip` that a selected test case carries ("" when none does).
std::string skipped_tag(Catch::Session& session, const std::set<std::string>& skip) {
  const Catch::Config& config = session.config();
  for (const auto& test : Catch::getAllTestCasesSorted(config)) {
#if FC_CATCH2_MAJOR >= 3
    const Catch::TestCaseInfo& info = test.getTestCaseInfo();
    if (!config.testSpec().matches(info)) continue;
    for (const Catch::Tag& tag : info.tags) {
      const std::string t(tag.original.data(), tag.original.size());
#else
    if (!Catch::matchTest(test, config.testSpec(), config)) continue;
    for (const std::string& t : test.tags) {
#endif
      if (const std::string l = lower(t); skip.count(l)) return l;
    }
  }
  return "";
}

}  // namespace

int fc_run_catch_session(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--list", 6) == 0;
  if (const std::set<std::string> skip = skip_tags(); !skip.empty() && !listing) {
    if (const std::string tag = skipped_tag(session, skip); !tag.empty()) {
      std::fprintf(stderr, "tag [%s] is in FC_SKIP_TAGS: skipped\n", tag.c_str());
      return 77;
    }
  }
  return session.run();
}
