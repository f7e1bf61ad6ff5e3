// The extreme-range campaign behind `flashcheck fuzz`: random cases from the structured decoder
// (fuzz/decode.hpp) on one kernel, each judged against the certified reference and its bound, the
// empty-row contract and the blast radius (fuzz/judge.hpp). Built for throughput on a GPU kernel:
// cases of one shape are packed along the batch dimension so that one launch runs a whole batch
// (hundreds of independent cases), and the oracle, the bounds and the judging run on every host
// core (std::thread; the oracle's own threads are kept serial inside them).
//
// Everything a run reports is a function of (kernel, seed, batch size, options) and of which batches
// it ran: batch b is decoded from (seed, b) alone, and `--shard i/n` runs the batches b = i (mod n).
// With a case budget (--cases) the shards' reports merge into exactly the unsharded one; with a time
// budget (--seconds) each run reports the batches it finished.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz/decode.hpp"
#include "kernels/registry.hpp"
#include "reports/fuzz_report.hpp"  // the report format: finalize_fuzz_report, render_fuzz_markdown

namespace fc::fuzz {

struct CampaignOptions {
  uint64_t seed = 1;
  double seconds = 0;  // stop after this long (0: no time limit)
  uint64_t cases = 0;  // stop after this many cases (0: no case limit); rounded up to whole batches
  int batch = 256;     // cases per launch
  int threads = 0;     // threads, one batch in flight on each (0: every hardware thread)
  int shard_index = 0, shard_count = 1;
  std::vector<Values> values;                       // value modes to draw from (empty: all)
  ShapeLimits limits;                               // shapes (batch is always 1 per case: cases are packed along it)
  std::string out;                                  // folder for fuzz.json and the failing cases ("": none written)
  int max_saved = 50;                               // failing cases saved to out/cases (all are counted)
  bool big = false;                                 // big-shape mode (campaign_big.cpp)
  int32_t big_max_n = 131072;                       // big mode: longest sequence
  int big_rows = 64;                                // big mode: rows checked per case, sampled
  uint64_t big_max_elements = (uint64_t(3) << 30);  // big mode: q's elements at most (past 2^31 crosses)
  int64_t only_batch = -1;                          // >= 0: run that batch alone (a failure's replay)
  std::string replay_prefix;  // "flashcheck check --kernel K" or the plugin's: the replay lines start so
  // Called about every 30 s with the report so far (finalized), e.g. to rewrite fuzz.json: a
  // campaign killed mid-way still leaves a consistent report of the batches it finished.
  std::function<void(const nlohmann::json&)> checkpoint;
};

// Runs the campaign; progress lines go to `log`. Returns the report (docs/fuzzing.md's format,
// reports/fuzz_report.hpp).
nlohmann::json run_campaign(const Kernel& k, const CampaignOptions& o, std::ostream& log);
nlohmann::json run_big_campaign(const Kernel& k, const CampaignOptions& o, std::ostream& log);

// A batch's item in the report: its sequence number and the problem's shape (the campaigns add theirs).
nlohmann::json problem_item(uint64_t seq, const Problem& p);

// A fuzz report without items: the envelope, `options` as given, the shard when there are several.
nlohmann::json fuzz_report_envelope(const CampaignOptions& o, nlohmann::json options);

// A failing case saved as a regression case (safetensors + metadata, atomically) under dir; returns
// its path. `law` is the law whose replay reproduces it (reference, extreme, nan_blast).
std::string save_failure(const std::string& dir, const std::string& law, const Kernel& k, const props::Case& c,
                         const std::map<std::string, std::string>& extra);

}  // namespace fc::fuzz
