#include "runtime/trace.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace gpipe {

Tracer::Tracer() : origin_(std::chrono::steady_clock::now()) {}

double Tracer::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_)
      .count();
}

void Tracer::add(TraceEvent e) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(std::move(e));
}

std::vector<TraceEvent> Tracer::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

void Tracer::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  events_.clear();
}

void Tracer::write(const std::string& path, const std::vector<std::string>& row_names) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    GPIPE_CHECK(out.good(), "trace: cannot write '", path, "'");
    out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    bool first = true;
    for (size_t r = 0; r < row_names.size(); ++r) {
      out << (first ? "" : ",\n")
          << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":0,\"tid\":" << r
          << ",\"args\":{\"name\":\"" << row_names[r] << "\"}}";
      first = false;
    }
    char buf[512];
    for (const TraceEvent& e : events()) {
      std::snprintf(buf, sizeof(buf),
                    "{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
                    "\"dur\":%.3f,"
                    "\"args\":{\"micro_batch\":%d,\"step\":%d}}",
                    e.name.c_str(), e.category.c_str(), e.row, e.start_us, e.duration_us,
                    e.micro_batch, e.step);
      out << (first ? "" : ",\n") << buf;
      first = false;
    }
    out << "\n]}\n";
    GPIPE_CHECK(out.good(), "trace: failed writing '", path, "'");
  }
  GPIPE_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "trace: cannot rename '", tmp, "' to '",
              path, "'");
}

}  // namespace gpipe

namespace gpipe {
namespace {

const char* colour_of(const std::string& category) {
  if (category == "forward") return "#4e79a7";
  if (category == "recompute") return "#f28e2b";
  if (category == "backward") return "#59a14f";
  if (category == "backward-input") return "#8cd17d";
  if (category == "backward-weight") return "#2f6b2a";
  if (category == "transfer") return "#bab0ac";
  if (category == "reduce") return "#b07aa1";
  if (category == "optimizer") return "#e15759";
  return "#9c755f";
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string timeline_svg(const std::vector<TraceEvent>& events,
                         const std::vector<std::string>& row_names, const std::string& unit) {
  const double scale = unit == "ms" ? 1e-3 : 1.0;  // event units -> axis units
  double t0 = 1e300, t1 = -1e300;
  for (const TraceEvent& e : events) {
    t0 = std::min(t0, e.start_us * scale);
    t1 = std::max(t1, (e.start_us + e.duration_us) * scale);
  }
  if (events.empty()) t0 = 0, t1 = 1;
  if (t1 <= t0) t1 = t0 + 1;
  const double left = 150, width = 1000, row_h = 26, top = 30;
  const int rows = static_cast<int>(row_names.size());
  const double height = top + rows * row_h + 70;
  auto x_of = [&](double t) { return left + (t - t0) / (t1 - t0) * width; };
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 20 << "\" height=\""
     << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  os << "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (int r = 0; r < rows; ++r) {
    const double y = top + r * row_h;
    os << "<text x=\"4\" y=\"" << y + row_h * 0.65 << "\">" << xml_escape(row_names[r])
       << "</text>\n";
    os << "<line x1=\"" << left << "\" y1=\"" << y + row_h << "\" x2=\"" << left + width
       << "\" y2=\"" << y + row_h << "\" stroke=\"#eee\"/>\n";
  }
  for (const TraceEvent& e : events) {
    if (e.row < 0 || e.row >= rows) continue;
    const double x = x_of(e.start_us * scale),
                 w = std::max(0.5, x_of((e.start_us + e.duration_us) * scale) - x);
    const double y = top + e.row * row_h + 3;
    os << "<rect class=\"box\" x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\""
       << row_h - 6 << "\" fill=\"" << colour_of(e.category)
       << "\" stroke=\"white\" stroke-width=\"0.5\"><title>" << xml_escape(e.name) << " ("
       << xml_escape(e.category) << ", step " << e.step << ")</title></rect>\n";
    // The micro-batch number, in the largest font up to 11 px that fits the box.
    const int digits = static_cast<int>(std::to_string(std::max(e.micro_batch, 0)).size());
    const double font = std::min(11.0, (w - 2) / (0.62 * digits));
    if (e.micro_batch >= 0 && font >= 6)
      os << "<text x=\"" << x + w / 2 << "\" y=\"" << y + (row_h - 6) * 0.72
         << "\" fill=\"white\" text-anchor=\"middle\" font-size=\"" << font << "\">"
         << e.micro_batch << "</text>\n";
  }
  // Time axis: ten ticks.
  const double axis_y = top + rows * row_h + 4;
  os << "<line x1=\"" << left << "\" y1=\"" << axis_y << "\" x2=\"" << left + width << "\" y2=\""
     << axis_y << "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 10; ++i) {
    const double t = t0 + (t1 - t0) * i / 10, x = x_of(t);
    os << "<line x1=\"" << x << "\" y1=\"" << axis_y << "\" x2=\"" << x << "\" y2=\"" << axis_y + 4
       << "\" stroke=\"black\"/>\n";
    os << "<text x=\"" << x << "\" y=\"" << axis_y + 16 << "\" text-anchor=\"middle\">" << t - t0
       << "</text>\n";
  }
  os << "<text x=\"" << left + width / 2 << "\" y=\"" << axis_y + 30
     << "\" text-anchor=\"middle\">time (" << xml_escape(unit) << ")</text>\n";
  // Legend.
  double lx = left;
  for (const char* cat : {"forward", "recompute", "backward", "backward-input", "backward-weight",
                          "transfer", "reduce", "optimizer"}) {
    os << "<rect x=\"" << lx << "\" y=\"" << axis_y + 40 << "\" width=\"10\" height=\"10\" fill=\""
       << colour_of(cat) << "\"/><text x=\"" << lx + 14 << "\" y=\"" << axis_y + 49 << "\">" << cat
       << "</text>\n";
    lx += 120;
  }
  os << "</svg>\n";
  return os.str();
}

void Tracer::write_svg(const std::string& path, const std::vector<std::string>& row_names) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    GPIPE_CHECK(out.good(), "trace: cannot write '", path, "'");
    out << timeline_svg(events(), row_names, "ms");
    GPIPE_CHECK(out.good(), "trace: failed writing '", path, "'");
  }
  GPIPE_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "trace: cannot rename '", tmp, "' to '",
              path, "'");
}

}  // namespace gpipe
