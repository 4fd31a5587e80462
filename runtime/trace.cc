#include "runtime/trace.h"

#include <cstdio>
#include <fstream>

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
