// The pipeline's trace and reports: the SVG timeline is well-formed with one
// box per traced action, and the trace, bubble and memory report agree
// with the run.
#include <dirent.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>
#include <unordered_set>

#include "core/autograd.h"
#include "core/precision.h"
#include "core/rng.h"
#include "layers/conv.h"
#include "models/amoebanet.h"
#include "models/transformer.h"
#include "ops/ops.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "pipeline/balance.h"
#include "pipeline/microbatch.h"
#include "pipeline/pipeline.h"
#include "pipeline/profile.h"
#include "pipeline/simulate.h"
#include "tests/pipeline/pipeline_helpers.h"
#include "tests/pipeline/tiny_transformer.h"

using namespace gpipe;
using Catch::Contains;

namespace {

using testing::check_equivalence;
using testing::max_rel_diff;
using testing::reference_grads;
using testing::thread_count;
using testing::tiny;
using testing::token_batch;

}  // namespace

namespace {
// A strict check that `doc` is well-formed XML: one root element, every tag
// closed in order, attribute values quoted, only the five predefined
// entities. Returns "" or what is wrong.
std::string xml_problem(const std::string& doc) {
  std::vector<std::string> open;
  size_t i = 0, roots = 0;
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':';
  };
  auto entity_ok = [&](size_t at) {
    for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
      if (doc.compare(at, std::strlen(e), e) == 0) return true;
    return false;
  };
  while (i < doc.size()) {
    if (doc[i] == '&') {
      if (!entity_ok(i)) return "a bare '&' at " + std::to_string(i);
      ++i;
      continue;
    }
    if (doc[i] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(doc[i])))
        return "text outside the root at " + std::to_string(i);
      ++i;
      continue;
    }
    const bool closing = i + 1 < doc.size() && doc[i + 1] == '/';
    size_t j = i + (closing ? 2 : 1);
    const size_t name_start = j;
    while (j < doc.size() && name_char(doc[j])) ++j;
    const std::string name = doc.substr(name_start, j - name_start);
    if (name.empty()) return "a tag without a name at " + std::to_string(i);
    bool self_closing = false;
    while (j < doc.size() && doc[j] != '>') {
      if (doc[j] == '"') {
        const size_t end = doc.find('"', j + 1);
        if (end == std::string::npos) return "an unterminated attribute in <" + name + ">";
        const std::string value = doc.substr(j + 1, end - j - 1);
        if (value.find('<') != std::string::npos) return "a '<' in an attribute of <" + name + ">";
        for (size_t a = value.find('&'); a != std::string::npos; a = value.find('&', a + 1))
          if (!entity_ok(j + 1 + a)) return "a bare '&' in an attribute of <" + name + ">";
        j = end + 1;
        continue;
      }
      if (doc[j] == '/' && j + 1 < doc.size() && doc[j + 1] == '>') self_closing = true;
      ++j;
    }
    if (j >= doc.size()) return "an unterminated tag <" + name;
    if (closing) {
      if (open.empty() || open.back() != name) return "</" + name + "> closes nothing open";
      open.pop_back();
    } else if (!self_closing) {
      if (open.empty()) ++roots;
      open.push_back(name);
    } else if (open.empty()) {
      ++roots;
    }
    i = j + 1;
  }
  if (!open.empty()) return "<" + open.back() + "> is never closed";
  if (roots != 1) return std::to_string(roots) + " root elements";
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
}  // namespace

TEST_CASE(
    "pipeline: the trace's SVG is well-formed XML with one box per traced action, for ZB-H1 and "
    "interleaved runs, and the planned program draws the same way") {
  const Batch batch = token_batch(8, 2);
  CHECK(xml_problem("<a><b x=\"1\"/></a>").empty());
  CHECK_FALSE(xml_problem("<a><b></a>").empty());
  CHECK_FALSE(xml_problem("<a>R&D</a>").empty());
  CHECK_FALSE(xml_problem("<a x=\"<\"/>").empty());
  const char* tmp = std::getenv("TEST_TMPDIR");
  for (auto [kind, v] :
       {std::pair{ScheduleKind::kZBH1, 1}, std::pair{ScheduleKind::kInterleaved, 2}}) {
    INFO(schedule_name(kind));
    Pipeline pipe(models::transformer(tiny()),
                  {.K = 2, .M = 4, .virtual_stages = v, .schedule = kind, .trace = true}, batch);
    pipe.train_step(batch);
    const std::string path =
        std::string(tmp ? tmp : "/tmp") + "/gpipe_svg_" + schedule_name(kind) + ".json";
    pipe.write_trace(path);
    const std::string svg = read_file(svg_path_for(path));
    CHECK(xml_problem(svg) == "");
    size_t boxes = 0;
    for (size_t at = svg.find("<rect class=\"box\""); at != std::string::npos;
         at = svg.find("<rect class=\"box\"", at + 1))
      ++boxes;
    CHECK(boxes == pipe.tracer().events().size());
    if (kind == ScheduleKind::kZBH1)
      CHECK_THAT(svg,
                 Contains("(backward-input, step 0)") && Contains("(backward-weight, step 0)"));
    else
      CHECK_THAT(svg, Contains("cpu:0 (cells 0,2)") && Contains("F1 cell 2"));
    // The planned program on a unit clock, as --schedule-svg draws it.
    const Simulation sim = simulate(pipe.schedule(), CostModel::uniform(2 * v, 1.0 / v, 2.0 / v));
    const std::string planned =
        timeline_svg(timeline_events(sim), {"device 0", "device 1"}, "units");
    CHECK(xml_problem(planned) == "");
  }
}

TEST_CASE("pipeline: trace, bubble and memory report") {
  const Batch batch = token_batch(8, 2);
  Pipeline pipe(models::transformer(tiny()), {.K = 2, .M = 4, .trace = true}, batch);
  const StepResult r = pipe.train_step(batch);
  CHECK(r.bubble_fraction > 0.0);
  CHECK(r.bubble_fraction < 1.0);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/gpipe_trace_test.json";
  pipe.write_trace(path);
  std::ifstream in(path);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(json.rfind("{\"displayTimeUnit\"", 0) == 0);
  CHECK_THAT(json, Contains("\"name\":\"F3\"") && Contains("\"cat\":\"recompute\"") &&
                       Contains("\"name\":\"send B1\"") && Contains("stage 1 (cpu:1)") &&
                       Contains("\"name\":\"reduce_tied\""));
  // The picture beside it: one box per traced action, tags balanced.
  REQUIRE(svg_path_for(path) == path.substr(0, path.size() - 5) + ".svg");
  std::ifstream svg_in(svg_path_for(path));
  const std::string svg((std::istreambuf_iterator<char>(svg_in)), std::istreambuf_iterator<char>());
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(svg.size() > 7);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = svg.find(needle); at != std::string::npos; at = svg.find(needle, at + 1)) ++n;
    return n;
  };
  CHECK(count("<rect class=\"box\"") == pipe.tracer().events().size());
  CHECK(count("<text") == count("</text>"));
  CHECK(count("<title>") == count("</title>"));
  CHECK(count("<rect class=\"box\"") == count("</rect>"));
  CHECK(svg.find('&') == std::string::npos);  // nothing unescaped to trip a parser
  const auto mem = pipe.memory();
  REQUIRE(mem.size() == 2);
  CHECK(mem[0].device == Device("cpu:0"));
  CHECK(mem[0].parameter_bytes > 0);
  CHECK(mem[1].peak_activation_bytes > 0);
  CHECK_THAT(pipe.describe(), Contains("cpu:1") && Contains("ideal bubble"));
}
