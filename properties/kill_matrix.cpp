#include "properties/kill_matrix.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <ostream>

namespace fc::props {
namespace {

const char* cell_mark(Cell c) { return c == Cell::Killed ? "**X**" : c == Cell::Survived ? "·" : "n/a"; }
const char* cell_word(Cell c) { return c == Cell::Killed ? "killed" : c == Cell::Survived ? "survived" : "n/a"; }

size_t law_index(const KillMatrix& m, const std::string& law) {
  for (size_t i = 0; i < m.laws.size(); ++i)
    if (m.laws[i] == law) return i;
  return m.laws.size();
}

// Laws that kill the row's kernel.
std::vector<std::string> killers(const KillMatrix& m, const KillRow& r) {
  std::vector<std::string> out;
  for (size_t i = 0; i < m.laws.size(); ++i)
    if (r.cells[i] == Cell::Killed) out.push_back(m.laws[i]);
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "—" : s;
}

}  // namespace

KillMatrix kill_matrix(const std::vector<const Kernel*>& kernels, const RunOptions& opt, std::ostream* progress) {
  KillMatrix m;
  m.cases = opt.cases;
  m.seed = opt.seed;
  for (const Law& law : laws()) m.laws.push_back(law.id);
  std::vector<const Kernel*> todo = kernels;
  if (todo.empty())
    for (const Kernel& k : registry())
      if (k.info.mutant && device_present(k.info.device)) todo.push_back(&k);
  for (const Kernel* k : todo) {
    KillRow row{k->info.name, k->info.description, k->info.mutant, {}, {}};
    for (const Law& law : laws()) {
      const LawResult r = run_law(law, *k, opt);
      row.cells.push_back(!r.applies || r.inconclusive ? Cell::NotApplicable : r.ok ? Cell::Survived : Cell::Killed);
      row.first_failure.push_back(r.ok ? "" : r.message.substr(0, r.message.find('\n')));
    }
    if (progress) *progress << fmt::format("{}: killed by {}\n", k->info.name, joined(killers(m, row)));
    m.rows.push_back(std::move(row));
  }
  return m;
}

std::vector<std::string> beyond_reference(const KillMatrix& m, const std::string& law) {
  std::vector<std::string> out;
  const size_t i = law_index(m, law), ref = law_index(m, "reference");
  if (i == m.laws.size() || ref == m.laws.size()) return out;
  for (const KillRow& r : m.rows)
    if (r.cells[i] == Cell::Killed && r.cells[ref] != Cell::Killed) out.push_back(r.kernel);
  return out;
}

void print_markdown(const KillMatrix& m, std::ostream& out) {
  out << fmt::format(
      "Kill matrix: {} random cases per law, seed {} (`flashcheck check --kill-matrix`). "
      "**X** killed, · survived, n/a the law does not apply.\n\n",
      m.cases, m.seed);
  out << "| kernel |";
  for (const std::string& l : m.laws) out << " " << l << " |";
  out << " killed alone by |\n|---|";
  for (size_t i = 0; i < m.laws.size(); ++i) out << ":-:|";
  out << "---|\n";
  for (const KillRow& r : m.rows) {
    out << "| " << r.kernel << " |";
    for (Cell c : r.cells) out << " " << cell_mark(c) << " |";
    const std::vector<std::string> k = killers(m, r);
    out << " " << (k.size() == 1 ? k[0] : "—") << " |\n";
  }
  out << "\nMutants each law kills that `reference` does not:\n\n| law | beyond reference |\n|---|---|\n";
  for (const std::string& l : m.laws)
    if (l != "reference") out << "| " << l << " | " << joined(beyond_reference(m, l)) << " |\n";
}

void print_json(const KillMatrix& m, std::ostream& out) {
  nlohmann::json j;
  j["cases"] = m.cases;
  j["seed"] = m.seed;
  j["laws"] = m.laws;
  j["kernels"] = nlohmann::json::array();
  for (const KillRow& r : m.rows) {
    nlohmann::json row{{"kernel", r.kernel}, {"description", r.description}, {"mutant", r.mutant}};
    nlohmann::json cells = nlohmann::json::object();
    for (size_t i = 0; i < m.laws.size(); ++i) {
      cells[m.laws[i]] = cell_word(r.cells[i]);
      if (!r.first_failure[i].empty()) row["failures"][m.laws[i]] = r.first_failure[i];
    }
    row["laws"] = cells;
    const std::vector<std::string> k = killers(m, r);
    row["killed_by"] = k;
    row["killed_alone_by"] = k.size() == 1 ? nlohmann::json(k[0]) : nlohmann::json(nullptr);
    j["kernels"].push_back(row);
  }
  for (const std::string& l : m.laws)
    if (l != "reference") j["beyond_reference"][l] = beyond_reference(m, l);
  out << j.dump(1) << "\n";
}

}  // namespace fc::props
