// Tracer (runtime/trace.h): events in the order added, cleared at will,
// written as Chrome trace JSON with the rows' names, and drawn as an SVG
// timeline with one box per event.
#include "runtime/trace.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

using namespace gpipe;
using Catch::Contains;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

std::string temp_path(const std::string& name) {
  return "/tmp/gpipe_trace_test_" + std::to_string(::getpid()) + "_" + name;
}

}  // namespace

TEST_CASE("trace: events are kept in the order added; clear forgets them") {
  Tracer t;
  CHECK(t.now_us() >= 0);
  t.add({.name = "F0", .category = "forward", .row = 0, .start_us = 0, .duration_us = 10});
  t.add({.name = "B0", .category = "backward", .row = 1, .start_us = 10, .duration_us = 20});
  REQUIRE(t.events().size() == 2);
  CHECK(t.events()[0].name == "F0");
  CHECK(t.events()[1].row == 1);
  t.clear();
  CHECK(t.events().empty());
}

TEST_CASE("trace: Chrome trace JSON names the rows and holds one complete event per action") {
  Tracer t;
  t.add({.name = "F0", .category = "forward", .row = 0, .start_us = 0, .duration_us = 10});
  t.add({.name = "F0", .category = "forward", .row = 1, .start_us = 10, .duration_us = 10});
  t.add({.name = "B0", .category = "backward", .row = 1, .start_us = 20, .duration_us = 20});
  const std::string path = temp_path("run.json");
  t.write(path, {"cpu:0", "cpu:1"});
  const std::string json = read_file(path);
  std::remove(path.c_str());
  CHECK_THAT(json, Contains("cpu:0") && Contains("cpu:1") && Contains("\"B0\""));
  CHECK(count_of(json, "\"ph\":\"X\"") + count_of(json, "\"ph\": \"X\"") == 3);
}

TEST_CASE("trace: the SVG timeline is one document with a row name and a box per event") {
  const std::vector<TraceEvent> events = {
      {.name = "F0", .category = "forward", .row = 0, .start_us = 0, .duration_us = 1000},
      {.name = "F1", .category = "forward", .row = 0, .start_us = 1000, .duration_us = 1000},
      {.name = "B0", .category = "backward", .row = 1, .start_us = 2000, .duration_us = 2000}};
  const std::string svg = timeline_svg(events, {"device 0", "device 1"}, "ms");
  CHECK(svg.rfind("<svg", 0) != std::string::npos);
  CHECK(count_of(svg, "<svg") == 1);
  CHECK(count_of(svg, "</svg>") == 1);
  CHECK_THAT(svg, Contains("device 0") && Contains("device 1"));
  CHECK(count_of(svg, "<rect") >= 3);
}
