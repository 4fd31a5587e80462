// A program's text form (what --print-schedule writes and
// --schedule=file:PATH reads): an action per token ("<F0 F0 >F0 ..."), a
// stage per line under a "schedule K=.. M=.. train|forward [devices=..]"
// header; to_text and parse_schedule_text are each other's inverse.
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "pipeline/schedule.h"

namespace gpipe {
namespace {

const char* prefix(ActionKind kind) {
  switch (kind) {
    case ActionKind::kRecvActivations:
      return "<F";
    case ActionKind::kForward:
      return "F";
    case ActionKind::kSendActivations:
      return ">F";
    case ActionKind::kLoss:
      return "L";
    case ActionKind::kRecompute:
      return "R";
    case ActionKind::kRecvGradients:
      return "<B";
    case ActionKind::kBackward:
      return "B";
    case ActionKind::kBackwardInput:
      return "I";
    case ActionKind::kBackwardWeight:
      return "W";
    case ActionKind::kSendGradients:
      return ">B";
    case ActionKind::kReduceReplicas:
      return "reduce_replicas";
    case ActionKind::kReduceTied:
      return "reduce_tied";
    case ActionKind::kRecvTurn:
      return "<T";
    case ActionKind::kSendTurn:
      return ">T";
  }
  return "?";
}

}  // namespace

std::string to_string(const Action& a) {
  std::string out = prefix(a.kind);
  if (a.micro_batch >= 0) out += std::to_string(a.micro_batch);
  return out;
}

std::string to_string(const std::vector<Action>& actions) {
  std::string out;
  for (size_t i = 0; i < actions.size(); ++i) out += (i ? " " : "") + to_string(actions[i]);
  return out;
}

std::string to_text(const Schedule& s) {
  std::ostringstream os;
  os << "schedule K=" << s.cells() << " M=" << s.M << (s.training ? " train" : " forward");
  if (!s.device_map.empty()) {
    bool round_robin = true;
    const int d = s.device_count();
    for (int c = 0; c < s.cells(); ++c) round_robin = round_robin && s.device_of(c) == c % d;
    os << " devices=";
    if (round_robin) {
      os << d;
    } else {
      for (int c = 0; c < s.cells(); ++c) os << (c ? "," : "") << s.device_of(c);
    }
  }
  os << "\n";
  for (int stage = 0; stage < s.cells(); ++stage)
    os << stage << ": " << to_string(s.stages[stage]) << "\n";
  return os.str();
}

namespace {

Action parse_action(const std::string& tok, const std::string& where) {
  if (tok == "reduce_replicas") return {ActionKind::kReduceReplicas};
  if (tok == "reduce_tied") return {ActionKind::kReduceTied};
  static const std::pair<const char*, ActionKind> kinds[] = {
      {"<F", ActionKind::kRecvActivations}, {">F", ActionKind::kSendActivations},
      {"<B", ActionKind::kRecvGradients},   {">B", ActionKind::kSendGradients},
      {"F", ActionKind::kForward},          {"L", ActionKind::kLoss},
      {"R", ActionKind::kRecompute},        {"B", ActionKind::kBackward},
      {"I", ActionKind::kBackwardInput},    {"W", ActionKind::kBackwardWeight},
      {"<T", ActionKind::kRecvTurn},        {">T", ActionKind::kSendTurn}};
  for (const auto& [p, kind] : kinds) {
    const std::string pre = p;
    if (tok.rfind(pre, 0) != 0) continue;
    const std::string digits = tok.substr(pre.size());
    const bool number =
        !digits.empty() && digits.size() <= 6 &&
        std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); });
    if (!number) break;
    return {kind, std::stoi(digits)};
  }
  throw ScheduleError(
      detail::concat(where, ": unknown action '", tok,
                     "' (expected <Fm Fm >Fm Lm Rm <Bm Bm Im Wm >Bm with m a micro-batch number, "
                     "<Tt >Tt with t a turn number, reduce_replicas or reduce_tied)"));
}

}  // namespace

Schedule parse_schedule_text(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string line;
  Schedule s;
  bool header = false;
  int k = 0;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string first;
    if (!(words >> first)) continue;
    const std::string where = detail::concat(source, " line ", lineno);
    if (!header) {
      std::string kk, mm, mode, dd, extra;
      words >> kk >> mm >> mode;
      int m = -1;
      const bool has_devices = static_cast<bool>(words >> dd);
      // K=<digits> and M=<digits> that fit an int (sscanf's %d overflows past it).
      const auto count = [](const std::string& tok, const char* pre, int& out) {
        const std::string digits = tok.rfind(pre, 0) == 0 ? tok.substr(2) : "";
        if (digits.empty() || digits.size() > 10 ||
            !std::all_of(digits.begin(), digits.end(),
                         [](unsigned char c) { return std::isdigit(c); }))
          return false;
        const long long v = std::stoll(digits);
        if (v > std::numeric_limits<int>::max()) return false;
        out = static_cast<int>(v);
        return true;
      };
      bool ok = first == "schedule" && count(kk, "K=", k) && count(mm, "M=", m) &&
                (mode == "train" || mode == "forward") && k >= 1 && m >= 0 && !(words >> extra);
      // A program lists every stage on a line of its own and every
      // micro-batch in its actions: a K or M beyond the text's length is
      // not a program (and would size the lists below by the header alone).
      if (ok && (static_cast<size_t>(k) > text.size() || static_cast<size_t>(m) > text.size()))
        throw ScheduleError(detail::concat(where, ": K=", k, " M=", m, " cannot be listed in ",
                                           text.size(), " bytes (one line per stage, every ",
                                           "micro-batch in its actions)"));
      std::vector<int> map;  // devices=D (cell c on c mod D) or devices=d0,d1,... (one per cell)
      if (ok && has_devices) {
        ok = dd.rfind("devices=", 0) == 0;
        std::string list = ok ? dd.substr(8) : "";
        std::vector<int> ids;
        for (size_t at = 0; ok && at <= list.size();) {
          const size_t comma = std::min(list.find(',', at), list.size());
          const std::string id = list.substr(at, comma - at);
          ok = !id.empty() && id.size() <= 6 &&
               std::all_of(id.begin(), id.end(), [](unsigned char c) { return std::isdigit(c); });
          if (ok) ids.push_back(std::stoi(id));
          at = comma + 1;
        }
        if (ok && ids.size() == 1 && k == 1 && ids[0] == 0) {
          // one cell on device 0: the same as no map
        } else if (ok && ids.size() == 1) {
          ok = ids[0] >= 1 && ids[0] <= k;
          for (int c = 0; ok && c < k && ids[0] < k; ++c) map.push_back(c % ids[0]);
        } else if (ok) {
          std::vector<bool> used(k, false);
          ok = static_cast<int>(ids.size()) == k;
          for (int id : ids) ok = ok && id < k && (used[id] = true);
          int devices = 0;
          for (int id : ids) devices = std::max(devices, id + 1);
          for (int x = 0; ok && x < devices; ++x) ok = used[x];
          map = ids;
        }
      }
      if (!ok)
        throw ScheduleError(detail::concat(
            where,
            ": expected the header 'schedule K=<cells> M=<micro-batches> train' (or forward; "
            "optionally 'devices=D' last, with 1 <= D <= K, or 'devices=d0,d1,...' with one "
            "device per cell, numbered from 0 without gaps), got '",
            line, "'"));
      s.M = m;
      bool identity = true;  // every cell on its own device, in order: no map
      for (int c = 0; c < static_cast<int>(map.size()); ++c) identity = identity && map[c] == c;
      if (!identity) s.device_map = map;
      s.training = mode == "train";
      s.stages.resize(k);
      header = true;
      continue;
    }
    int stage = -1;
    if (first.back() != ':' || std::sscanf(first.c_str(), "%d:", &stage) != 1 || stage < 0 ||
        stage >= k)
      throw ScheduleError(detail::concat(where, ": expected '<stage>:' with a stage in [0, ", k,
                                         "), got '", first, "'"));
    if (!s.stages[stage].empty())
      throw ScheduleError(detail::concat(where, ": stage ", stage, " is listed twice"));
    std::string tok;
    while (words >> tok) s.stages[stage].push_back(parse_action(tok, where));
    if (s.stages[stage].empty())
      throw ScheduleError(detail::concat(where, ": stage ", stage, " has no actions"));
  }
  if (!header)
    throw ScheduleError(detail::concat(
        source, ": empty (expected 'schedule K=.. M=.. train' and one line per stage)"));
  for (int stage = 0; stage < k; ++stage)
    if (s.stages[stage].empty() && s.M > 0)
      throw ScheduleError(detail::concat(source, ": no line for stage ", stage, " (K=", k,
                                         " needs lines 0: to ", k - 1, ":)"));
  return s;
}

Schedule load_schedule_file(const std::string& path) {
  std::ifstream in(path);
  GPIPE_CHECK(in.good(), "cannot read the schedule file '", path, "'");
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_schedule_text(buf.str(), "schedule file " + path);
}

}  // namespace gpipe
