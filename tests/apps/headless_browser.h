// Opening a page in Debian's headless Chromium from a test, and reading what
// it rendered: the DOM after the page's scripts ran (--dump-dom), the
// browser's console log, and a screenshot's pixels (libpng). For the run
// report's test (test_mtrain_report.cc): its <svg class="plot"> elements, the
// series paths inside them and the colours painted in a plot's frame.
#pragma once

#include <png.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "mtrain_runner.h"

namespace mtrain::functional {

// The browser: $MTRAIN_CHROMIUM, else the first of Debian's two packages on PATH.
inline std::string find_chromium() {
  if (const char* e = std::getenv("MTRAIN_CHROMIUM"); e && *e) return e;
  for (const char* name : {"chromium-headless-shell", "chromium"}) {
    const std::string probe = std::string("command -v ") + name + " > /dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return name;
  }
  return "";
}

// A shell word: '...' with each ' written as '\''.
inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  q += '\'';
  return q;
}

struct Page {
  std::string dom, console;  // --dump-dom output; the browser's stderr log
};

// Opens `url` headless; with `screenshot`, also writes a PNG of the page. As
// root (CI containers) Chromium needs --no-sandbox.
inline Page open_page(const std::string& url, const fs::path& work, const std::string& tag,
                      const fs::path& screenshot = {}) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    ADD_FAILURE() << "no headless Chromium found: install Debian's chromium-headless-shell (scripts/install_deps.sh "
                     "does) or set MTRAIN_CHROMIUM to the browser";
    return {};
  }
  std::string cmd = "timeout 120 " + quote(chromium) +
                    " --headless --no-sandbox --disable-gpu --no-first-run --force-device-scale-factor=1 "
                    "--window-size=1500,3600 --enable-logging=stderr --v=0 --user-data-dir=" +
                    quote((work / ("profile_" + tag)).string());
  cmd += screenshot.empty() ? " --dump-dom" : " --screenshot=" + quote(screenshot.string());
  cmd += " " + quote(url) + " > " + quote((work / (tag + ".dom")).string()) + " 2> " +
         quote((work / (tag + ".log")).string());
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd << "\n" << read_text(work / (tag + ".log"));
  return {read_text(work / (tag + ".dom")), read_text(work / (tag + ".log"))};
}

inline std::string attr(const std::string& tag, const std::string& name) {
  std::smatch m;
  if (std::regex_search(tag, m, std::regex(" " + name + "=\"([^\"]*)\""))) return m[1];
  return "";
}

inline std::vector<std::string> tags(const std::string& html, const std::string& open) {
  std::vector<std::string> out;
  const std::regex re("<" + open + "[^>]*>");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back(it->str());
  return out;
}

// One <svg class="plot"> of the DOM and the series paths inside it.
struct SvgPlot {
  std::string tag;
  std::vector<std::string> paths;
  std::string hover;  // the text the page's hover code shows
  std::string id() const { return attr(tag, "data-plot"); }
  bool log() const { return attr(tag, "data-log") == "1"; }
};

inline std::vector<SvgPlot> plots_of(const std::string& dom) {
  std::vector<SvgPlot> out;
  size_t at = 0;
  while ((at = dom.find("<svg ", at)) != std::string::npos) {
    const size_t end = dom.find("</svg>", at);
    const std::string body = dom.substr(at, end - at);
    SvgPlot p;
    p.tag = body.substr(0, body.find('>') + 1);
    for (const std::string& t : tags(body, "path class=\"series\"")) p.paths.push_back(t);
    std::smatch m;
    if (std::regex_search(body, m, std::regex("<text class=\"hover\"[^>]*>([^<]*)"))) p.hover = m[1];
    if (attr(p.tag, "class") == "plot") out.push_back(p);
    at = end;
  }
  return out;
}

inline std::vector<double> numbers(const std::string& csv) {
  std::vector<double> v;
  std::stringstream s(csv);
  std::string item;
  while (std::getline(s, item, ',')) v.push_back(item == "NaN" ? std::nan("") : std::stod(item));
  return v;
}

inline int path_points(const std::string& path) {
  const std::string d = attr(path, "d");
  return static_cast<int>(std::count(d.begin(), d.end(), 'M') + std::count(d.begin(), d.end(), 'L'));
}

// RGB pixels of a PNG (libpng's simplified API).
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

inline Image read_png(const fs::path& path) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  Image out;
  if (!png_image_begin_read_from_file(&img, path.c_str())) return out;
  img.format = PNG_FORMAT_RGB;
  out.rgb.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, out.rgb.data(), 0, nullptr)) return {};
  out.width = static_cast<int>(img.width);
  out.height = static_cast<int>(img.height);
  return out;
}

// Whether pixel p is colour c drawn over white with some coverage a (an
// anti-aliased line pixel): p = a c + (1 - a) 255 with one a for every
// channel (channels where c is near white say nothing about a). Grey grid
// lines, the frame and text give very different a per channel for a colour.
inline bool is_colour_over_white(const uint8_t* p, const int c[3]) {
  double lo = 1e9, hi = -1e9;
  for (int k = 0; k < 3; ++k) {
    if (255 - c[k] < 40) {
      if (p[k] < 200) return false;
      continue;
    }
    const double a = (255.0 - p[k]) / (255.0 - c[k]);
    lo = std::min(lo, a);
    hi = std::max(hi, a);
  }
  return lo >= 0.3 && hi <= 1.1 && hi - lo <= 0.2;
}

// Pixels inside `rect` ("left,top,width,height" in page pixels) painted in
// `hex` ("#1f77b4"), anti-aliased ones included.
inline int pixels_of_colour(const Image& img, const std::string& rect, const std::string& hex) {
  const std::vector<double> r = numbers(rect);
  if (r.size() != 4 || hex.size() != 7) return -1;
  const int c[3] = {std::stoi(hex.substr(1, 2), nullptr, 16), std::stoi(hex.substr(3, 2), nullptr, 16),
                    std::stoi(hex.substr(5, 2), nullptr, 16)};
  int n = 0;
  for (int y = std::max(0, int(r[1])); y < std::min(img.height, int(r[1] + r[3])); ++y)
    for (int x = std::max(0, int(r[0])); x < std::min(img.width, int(r[0] + r[2])); ++x)
      n += is_colour_over_white(&img.rgb[(size_t(y) * img.width + x) * 3], c);
  return n;
}

// The page rectangle of a plot's data area (inside the axes: no legend, no
// title): the svg's place on the page, as the page recorded it, plus the
// frame the svg declares (data-px0/px1 left and right, data-py1/py0 top and bottom).
inline std::string plot_area(const SvgPlot& p) {
  const std::vector<double> r = numbers(attr(p.tag, "data-rendered-rect"));
  if (r.size() != 4) return "";
  const double scale = r[2] / std::stod(attr(p.tag, "width"));
  const double x0 = std::stod(attr(p.tag, "data-px0")), x1 = std::stod(attr(p.tag, "data-px1"));
  const double top = std::stod(attr(p.tag, "data-py1")), bottom = std::stod(attr(p.tag, "data-py0"));
  std::ostringstream area;  // 1 px inside the frame's border
  area << r[0] + x0 * scale + 1 << ',' << r[1] + top * scale + 1 << ',' << (x1 - x0) * scale - 2 << ','
       << (bottom - top) * scale - 2;
  return area.str();
}

}  // namespace mtrain::functional
