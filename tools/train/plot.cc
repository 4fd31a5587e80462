#include "tools/train/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace gpipe::train {
namespace {

constexpr double kWidth = 760, kPanel = 150, kLeft = 70, kRight = 20, kTop = 40, kGap = 30;

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string number(double v) {
  char buf[32];
  const double a = std::abs(v);
  std::snprintf(buf, sizeof buf, a != 0 && (a < 1e-2 || a >= 1e5) ? "%.3g" : "%.4g", v);
  return buf;
}

}  // namespace

std::string metrics_svg(const std::string& title, const std::vector<PlotSeries>& series) {
  double x0 = 0, x1 = 1;
  bool any = false;
  for (const PlotSeries& s : series)
    for (const auto& [x, y] : s.points) {
      if (!any) x0 = x1 = x;
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      any = true;
    }
  if (x1 <= x0) x1 = x0 + 1;
  const double plot_w = kWidth - kLeft - kRight;
  const double height = kTop + static_cast<double>(series.size()) * (kPanel + kGap) + 10;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << kLeft << "\" y=\"22\" font-size=\"14\">" << escape(title) << "</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const double top = kTop + static_cast<double>(i) * (kPanel + kGap);
    double y0 = 0, y1 = 0;
    bool have = false;
    for (const auto& [x, y] : s.points)
      if (std::isfinite(y)) {
        y0 = have ? std::min(y0, y) : y, y1 = have ? std::max(y1, y) : y;
        have = true;
      }
    if (y1 <= y0) y0 -= 0.5, y1 += 0.5;
    auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * plot_w; };
    auto py = [&](double y) { return top + kPanel - (y - y0) / (y1 - y0) * kPanel; };
    o << "<g class=\"panel\" data-series=\"" << escape(s.name) << "\">\n"
      << "<rect x=\"" << kLeft << "\" y=\"" << top << "\" width=\"" << plot_w << "\" height=\""
      << kPanel << "\" fill=\"none\" stroke=\"#999\"/>\n"
      << "<text x=\"" << kLeft + 4 << "\" y=\"" << top + 13 << "\" font-weight=\"bold\">"
      << escape(s.name) << "</text>\n";
    if (!have) {
      o << "<text x=\"" << kLeft + plot_w / 2 << "\" y=\"" << top + kPanel / 2
        << "\" text-anchor=\"middle\" fill=\"#777\">no data</text>\n</g>\n";
      continue;
    }
    // y ticks: min, middle, max; x ticks on the last panel below.
    for (double f : {0.0, 0.5, 1.0}) {
      const double v = y0 + f * (y1 - y0);
      o << "<text x=\"" << kLeft - 4 << "\" y=\"" << py(v) + 4 << "\" text-anchor=\"end\">"
        << number(v) << "</text>\n"
        << "<line x1=\"" << kLeft << "\" y1=\"" << py(v) << "\" x2=\"" << kLeft + plot_w
        << "\" y2=\"" << py(v) << "\" stroke=\"#eee\"/>\n";
    }
    // One polyline per run of finite points.
    std::string pts;
    int count = 0;
    auto flush = [&] {
      if (count > 0)
        o << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.3\" points=\"" << pts
          << "\"/>\n";
      pts.clear();
      count = 0;
    };
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y)) {
        flush();
        continue;
      }
      pts += (count ? " " : "") + number(px(x)) + "," + number(py(y));
      ++count;
      if (s.markers)
        o << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"2.5\" fill=\"#d62728\"/>\n";
    }
    flush();
    o << "</g>\n";
  }
  const double bottom = kTop + static_cast<double>(series.size()) * (kPanel + kGap) - kGap;
  for (double f : {0.0, 0.25, 0.5, 0.75, 1.0})
    o << "<text x=\"" << kLeft + f * plot_w << "\" y=\"" << bottom + 14
      << "\" text-anchor=\"middle\">" << number(std::round(x0 + f * (x1 - x0))) << "</text>\n";
  o << "<text x=\"" << kLeft + plot_w << "\" y=\"" << bottom + 26
    << "\" text-anchor=\"end\">step</text>\n</svg>\n";
  return o.str();
}

}  // namespace gpipe::train
