#include <fmt/format.h>

#include <map>
#include <vector>

#include "reports/render.hpp"

namespace fc::report {

using nlohmann::json;

namespace {

std::string xml(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\n': out += "&#10;"; break;
      default:
        if (c >= 0x20 || c == '\t') out += char(c);  // other control characters are not XML
    }
  }
  return out;
}

std::string message_of(const json& cell) {
  if (cell.contains("error")) return cell["error"];
  std::string m;
  if (!cell.contains("tensors")) return m;
  for (const auto& [name, t] : cell["tensors"].items())
    if (!t.value("pass", true))
      m += fmt::format("{}{}: {} {}", m.empty() ? "" : "; ", name, t.value("why", std::string()),
                       t.value("why_element", std::string()));
  return m;
}

}  // namespace

// One <testsuite> per kernel, one <testcase> per cell (classname: kernel, name: case id); failures
// carry the reason and the replay line. No timestamps: the file is as reproducible as the report.
std::string render_junit(const json& r) {
  const std::string kind = r["kind"];
  std::vector<std::string> order;
  std::map<std::string, std::vector<const json*>> by_kernel;
  for (const json& cell : r["cells"]) {
    const std::string k = cell["kernel"];
    if (!by_kernel.count(k)) order.push_back(k);
    by_kernel[k].push_back(&cell);
  }
  const json& v = r["verdict"];
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += fmt::format("<testsuites name=\"flashcheck {}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">\n",
                   xml(kind), v["cells"].get<int64_t>(), v["fail"].get<int64_t>(), v["error"].get<int64_t>(),
                   v["refused"].get<int64_t>());
  for (const std::string& k : order) {
    int64_t fail = 0, err = 0, skip = 0;
    for (const json* c : by_kernel[k]) {
      const std::string s = (*c)["status"];
      fail += s == "fail", err += s == "error", skip += s == "refused";
    }
    x += fmt::format(
        "  <testsuite name=\"flashcheck.{}.{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">\n",
        xml(kind), xml(k), by_kernel[k].size(), fail, err, skip);
    for (const json* c : by_kernel[k]) {
      const std::string s = (*c)["status"];
      x += fmt::format("    <testcase classname=\"{}\" name=\"{}\"", xml(k), xml((*c)["case"]));
      if (s == "pass") {
        x += "/>\n";
        continue;
      }
      x += ">\n";
      const std::string msg = message_of(*c);
      const std::string replay = c->contains("replay") ? "replay: " + (*c)["replay"].get<std::string>() : "";
      if (s == "refused")
        x += fmt::format("      <skipped message=\"{}\"/>\n", xml(msg));
      else
        x += fmt::format("      <{} message=\"{}\">{}</{}>\n", s == "fail" ? "failure" : "error", xml(msg), xml(replay),
                         s == "fail" ? "failure" : "error");
      x += "    </testcase>\n";
    }
    x += "  </testsuite>\n";
  }
  return x + "</testsuites>\n";
}

}  // namespace fc::report
