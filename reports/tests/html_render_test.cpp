// report.html rendered by headless Chromium (a plain program, not Catch: it exits 77, ctest's
// "skipped", where no Chromium is installed; CI installs Debian's chromium). Every chart is drawn:
// the page marks each chart's container with data-drawn, data-series and data-ink (saturated pixels
// on its canvas), read back with --dump-dom; and a screenshot, decoded here, is not blank.
//   usage: html_render_test FLASHCHECK [CHROMIUM]
#include <zlib.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

const char* kFlags =
    " --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update"
    " --disable-sync --no-first-run --hide-scrollbars --virtual-time-budget=10000";
constexpr int kMinInk = 200;  // saturated pixels of a chart with a drawn series (axes and grid are grey)

[[noreturn]] void fail(const std::string& why) {
  std::printf("html_render_test: FAIL: %s\n", why.c_str());
  std::exit(1);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void run(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) fail("command failed: " + cmd);
}

uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint32_t(uint8_t(s[at + 3]));
}

struct Image {
  uint32_t width = 0, height = 0, bpp = 0;
  std::vector<uint8_t> px;  // rows of width * bpp bytes
};

// An 8-bit RGB or RGBA PNG, as Chromium writes screenshots.
Image read_png(const std::string& path) {
  const std::string d = slurp(path);
  if (d.size() < 8 || d.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) fail("the screenshot is not a PNG");
  Image img;
  std::string idat;
  for (size_t pos = 8; pos + 8 <= d.size();) {
    const uint32_t len = be32(d, pos);
    const std::string kind = d.substr(pos + 4, 4);
    if (pos + 12 + len > d.size()) fail("truncated PNG");
    if (kind == "IHDR") {
      img.width = be32(d, pos + 8), img.height = be32(d, pos + 12);
      const int depth = uint8_t(d[pos + 16]), type = uint8_t(d[pos + 17]);
      if (depth != 8 || (type != 2 && type != 6)) fail("unexpected PNG format");
      img.bpp = type == 2 ? 3 : 4;
    } else if (kind == "IDAT") {
      idat += d.substr(pos + 8, len);
    }
    pos += 12 + len;
  }
  const size_t stride = size_t(img.width) * img.bpp;
  std::vector<uint8_t> raw(img.height * (stride + 1));
  uLongf n = raw.size();
  if (uncompress(raw.data(), &n, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK || n != raw.size())
    fail("cannot inflate the PNG");
  img.px.assign(img.height * stride, 0);
  for (size_t y = 0; y < img.height; ++y) {  // undo each scanline's filter
    const uint8_t f = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    uint8_t* out = &img.px[y * stride];
    const uint8_t* up = y ? &img.px[(y - 1) * stride] : nullptr;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= img.bpp ? out[i - img.bpp] : 0, b = up ? up[i] : 0,
                c = up && i >= img.bpp ? up[i - img.bpp] : 0;
      int pred = 0;
      if (f == 1) pred = a;
      if (f == 2) pred = b;
      if (f == 3) pred = (a + b) / 2;
      if (f == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      out[i] = uint8_t(in[i] + pred);
    }
  }
  return img;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) fail("usage: html_render_test FLASHCHECK [CHROMIUM]");
  std::string browser = argc > 2 ? argv[2] : "";
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (browser.empty() && std::filesystem::exists(c)) browser = c;
  if (browser.empty()) {
    std::printf("html_render_test: no chromium installed: skipped\n");
    return 77;
  }
  const auto tmp = std::filesystem::temp_directory_path() / ("fc_html_" + std::to_string(getpid()));
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  const std::string dir = tmp.string(), html = dir + "/out/report.html";
  run(std::string(argv[1]) + " audit --quick --kernel cpu_naive --kernel cpu_tiled --dtype F16,BF16 --out " + dir +
      "/out > " + dir + "/audit.log 2>&1");
  if (std::regex_search(slurp(html), std::regex(R"((src|href)=\"?(https?:)?//)")))
    fail("report.html refers to something outside the file");

  // The DOM after the charts ran.
  run(browser + kFlags + " --user-data-dir=" + dir + "/p1 --dump-dom file://" + html + " > " + dir +
      "/dom.html 2>/dev/null");
  const std::string dom = slurp(dir + "/dom.html");
  const std::regex chart_re(R"re(<div class="fc-chart" data-chart="([^"]+)"([^>]*)>)re"),
      attr_re(R"re(data-([a-z]+)="([^"]*)")re");
  std::set<std::string> kinds;
  int charts = 0;
  for (std::sregex_iterator it(dom.begin(), dom.end(), chart_re), end; it != end; ++it, ++charts) {
    const std::string name = (*it)[1], attrs = (*it)[2];
    std::map<std::string, std::string> a;
    for (std::sregex_iterator at(attrs.begin(), attrs.end(), attr_re); at != end; ++at) a[(*at)[1]] = (*at)[2];
    if (a["drawn"] != "1" || std::atoi(a["series"].c_str()) < 1 || std::atoi(a["ink"].c_str()) < kMinInk)
      fail("chart " + name + " not drawn (drawn=" + a["drawn"] + " series=" + a["series"] + " ink=" + a["ink"] + ")");
    kinds.insert(std::regex_replace(name, std::regex("-(F16|BF16|F32)$"), ""));
  }
  const std::set<std::string> expected = {"error-vs-n", "error-vs-score", "ratio", "ulp", "regime", "bias-vs-n"};
  if (kinds != expected || charts != 12)
    fail("expected the six charts for each of two dtypes, found " + std::to_string(charts));
  size_t uplots = 0, canvases = 0;
  for (size_t p = 0; (p = dom.find("class=\"uplot", p)) != std::string::npos; ++p) ++uplots;
  for (size_t p = 0; (p = dom.find("<canvas", p)) != std::string::npos; ++p) ++canvases;
  if (uplots < size_t(charts) || canvases < size_t(charts)) fail("uPlot's elements are missing from the DOM");

  // Negative control: the same page with uPlot taken out (its charts then throw) marks no chart drawn,
  // so the marks above come from uPlot's draw hook, not from the page's markup.
  std::string broken = slurp(html);
  const size_t at = broken.find("var uPlot=function");
  if (at == std::string::npos) fail("uPlot is not embedded in report.html");
  broken.replace(at, 18, "var uPlotGone=function");
  std::ofstream(dir + "/broken.html") << broken;
  run(browser + kFlags + " --user-data-dir=" + dir + "/p3 --dump-dom file://" + dir + "/broken.html > " + dir +
      "/dom_broken.html 2>/dev/null");
  const std::string dom_broken = slurp(dir + "/dom_broken.html");
  if (dom_broken.find("<h1") == std::string::npos || dom_broken.find("data-drawn=\"") != std::string::npos)
    fail("the negative control (uPlot removed) did not come out as a page without drawn charts");

  // A screenshot: many colours and saturated (series-coloured) pixels below the summary table.
  run(browser + kFlags + " --user-data-dir=" + dir + "/p2 --window-size=1200,2400 --screenshot=" + dir +
      "/shot.png file://" + html + " > /dev/null 2>&1");
  const Image img = read_png(dir + "/shot.png");
  std::set<uint32_t> colours;
  int64_t ink = 0;
  for (size_t y = img.height / 3; y < img.height; ++y)
    for (size_t x = 0; x < img.width; ++x) {
      const uint8_t* p = &img.px[(y * img.width + x) * img.bpp];
      colours.insert(uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2]);
      ink += std::max({p[0], p[1], p[2]}) - std::min({p[0], p[1], p[2]}) > 60;
    }
  if (colours.size() < 50 || ink < 2000)
    fail("the screenshot looks blank: " + std::to_string(colours.size()) + " colours, " + std::to_string(ink) +
         " saturated pixels");
  std::printf("html_render_test: %d charts drawn; screenshot %ux%u, %zu colours, %lld saturated pixels\n", charts,
              img.width, img.height, colours.size(), static_cast<long long>(ink));
  std::filesystem::remove_all(tmp);
  return 0;
}
