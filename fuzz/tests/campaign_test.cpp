// The campaign: packed batches judge exactly as cases one by one would, shards merge into the
// unsharded report, and a failing case is saved as a regression case whose replay fails the same way.
#include "tests/catch.hpp"
#include <cmath>
#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "fuzz/big_fill.hpp"
#include "fuzz/campaign.hpp"
#include "properties/laws.hpp"
#include "reports/merge.hpp"
#include "reports/report.hpp"

using namespace fc;
using nlohmann::json;

namespace {

fuzz::CampaignOptions small(uint64_t cases) {
  fuzz::CampaignOptions o;
  o.seed = 11;
  o.cases = cases;
  o.batch = 16;
  o.threads = 2;
  o.limits.max_n = 10, o.limits.max_d = 5;
  return o;
}

// The shards' reports joined by `flashcheck merge`'s own code.
json merged(const std::vector<json>& shards) {
  std::vector<std::string> names;
  for (size_t i = 0; i < shards.size(); ++i) names.push_back("shard" + std::to_string(i));
  return report::merge_reports(shards, names);
}

}  // namespace

TEST_CASE("fuzz shards merge into exactly the unsharded campaign's report", "[cpu]") {
  const Kernel& k = *find_kernel("mutant_no_o_rescale");  // failures too, so that they merge as well
  std::ostringstream log;
  const json whole = fuzz::run_campaign(k, small(96), log);
  std::vector<json> shards;
  for (int i = 0; i < 3; ++i) {
    fuzz::CampaignOptions o = small(96);
    o.shard_index = i, o.shard_count = 3, o.threads = 1 + i;  // thread count changes nothing
    shards.push_back(fuzz::run_campaign(k, o, log));
    CHECK(shards.back()["shard"]["index"] == i);
  }
  CHECK(whole["summary"]["cases"] == 96);
  CHECK(whole["summary"]["failures"].get<int64_t>() > 0);
  CHECK(report::dump(merged(shards)) == report::dump(whole));  // byte for byte, as the files are
}

TEST_CASE("fuzz with batches in flight gives the one-batch-at-a-time report byte for byte", "[cpu]") {
  // cpu_tiled's calls run side by side; a mutant's take one lock (one_call_at_a_time). 12 batches
  // over 5 threads: the report must list every batch, in order, with the same verdicts.
  for (const char* name : {"cpu_tiled", "mutant_no_o_rescale"}) {
    CAPTURE(name);
    const Kernel& k = *find_kernel(name);
    std::ostringstream log;
    fuzz::CampaignOptions one = small(192), many = small(192);
    one.threads = 1, many.threads = 5;
    const json a = fuzz::run_campaign(k, one, log), b = fuzz::run_campaign(k, many, log);
    CHECK(a["batches"].size() == 12);
    CHECK(report::dump(a) == report::dump(b));
  }
}

TEST_CASE("fuzz passes cpu_tiled and saves a mutant's failures as replayable regression cases", "[cpu]") {
  std::ostringstream log;
  CHECK(fuzz::run_campaign(*find_kernel("cpu_tiled"), small(64), log)["verdict"]["status"] == "pass");
  const auto dir = std::filesystem::temp_directory_path() / ("fc_fuzz_campaign_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "cases");
  fuzz::CampaignOptions o = small(64);
  o.out = dir.string();
  const Kernel& k = *find_kernel("mutant_masked_row_nan");
  const json r = fuzz::run_campaign(k, o, log);
  REQUIRE(r["verdict"]["status"] == "fail");
  int replayed = 0;
  for (const json& f : r["failures"]) {
    REQUIRE(f.contains("file"));
    std::string law;
    const props::Case c = props::read_case((dir / f["file"].get<std::string>()).string(), &law);
    CHECK(law == f["law"].get<std::string>());
    const props::Law* l = props::find_law(law);
    REQUIRE(l);
    CHECK_FALSE(l->check(k, c).empty());  // the saved case fails its law again
    ++replayed;
  }
  CHECK(replayed > 0);
  std::filesystem::remove_all(dir);
}

// Cases `flashcheck fuzz` found on one kernel that lie outside another claiming kernel's error-model
// domain (so they cannot join properties/regressions, which every claiming kernel replays): each
// replays clean on the kernel it was found on (fc.kernel), through the law it names (fc.law).
TEST_CASE("every fuzz finding replays clean on the kernel it was found on", "[cpu]") {
  int replayed = 0;
  for (const auto& e : std::filesystem::directory_iterator(FC_FUZZ_FINDINGS)) {
    if (e.path().extension() != ".safetensors") continue;
    std::string law;
    const props::Case c = props::read_case(e.path().string(), &law);
    const std::string kernel = io::read_safetensors(e.path().string()).metadata.at("fc.kernel");
    CAPTURE(e.path().string(), law, kernel);
    const Kernel* k = find_kernel(kernel);
    REQUIRE(k);
    REQUIRE(props::find_law(law));
    CHECK(props::find_law(law)->check(*k, c).empty());
    ++replayed;
  }
  CHECK(replayed > 0);
}

TEST_CASE("fuzz --big fills tensors with the per-element path's values, bit for bit", "[cpu]") {
  // Three 2^20-element streams and a partial one; magnitudes whose grid is exact in F16 and F32 but
  // rounds in BF16 (11 significant bits), and one that leaves F16's normal range.
  for (DType t : {DType::F16, DType::BF16, DType::F32, DType::F64})
    for (double magnitude : {std::ldexp(1.0, -2), 4.0, std::ldexp(1.0, 6), 3e-4}) {
      HostTensor fast(t, {3 * (int64_t(1) << 20) + 4097}), slow = fast;
      fuzz::fill_grid(fast, 11, magnitude, 2);
      fuzz::fill_grid_per_element(slow, 11, magnitude, 2);
      CAPTURE(dtype_name(t), magnitude);
      CHECK(fast.bytes == slow.bytes);
    }
  HostTensor a(DType::F16, {5000}), b = a;  // another seed gives other values
  fuzz::fill_grid(a, 1, 1, 1);
  fuzz::fill_grid(b, 2, 1, 1);
  CHECK(a.bytes != b.bytes);
}

TEST_CASE("fuzz --big hands the report to the checkpoint after every case", "[cpu]") {
  fuzz::CampaignOptions o;
  o.big = true, o.big_max_n = 100, o.big_max_elements = 20000, o.cases = 3, o.big_rows = 4, o.threads = 2;
  std::vector<json> seen;
  o.checkpoint = [&](const json& partial) { seen.push_back(partial); };
  std::ostringstream log;
  const json r = fuzz::run_campaign(*find_kernel("cpu_tiled"), o, log);
  REQUIRE(seen.size() == 3);
  for (size_t x = 0; x < seen.size(); ++x) {
    CHECK(seen[x]["batches"].size() == x + 1);
    CHECK(seen[x].contains("verdict"));  // finalized: a stopped run's fuzz.json is a whole report
  }
  CHECK(seen.back() == r);
  CHECK(log.str().find("inputs allocated and filled") != std::string::npos);
}

TEST_CASE("fuzz --big checks sampled rows against the certified oracle run on each row alone", "[cpu]") {
  fuzz::CampaignOptions o;
  o.big = true, o.big_max_n = 200, o.big_max_elements = 60000, o.cases = 2, o.big_rows = 12, o.threads = 2;
  std::ostringstream log;
  const json good = fuzz::run_campaign(*find_kernel("cpu_tiled"), o, log);
  CHECK(good["verdict"]["status"] == "pass");
  CHECK(good["summary"]["checks"]["reference_row"] == 24);
  for (const json& item : good["batches"])  // k and v never hold more elements than q
    CHECK(item["heads_kv"].get<int64_t>() * item["n_k"].get<int64_t>() <=
          item["heads_q"].get<int64_t>() * item["n_q"].get<int64_t>());
  const json bad = fuzz::run_campaign(*find_kernel("mutant_no_o_rescale"), o, log);
  CHECK(bad["verdict"]["status"] == "fail");
  REQUIRE(bad["failures"].size() > 0);
  CHECK(bad["failures"][0]["replay"].get<std::string>().find("--only-batch") != std::string::npos);
}
