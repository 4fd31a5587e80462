// Validation and the dry run of a schedule (pipeline/schedule.h).
//
// Three passes, each refusing with the grid and the first offending action:
//  1. per stage, in list order: every action is legal where it stands (its
//     micro-batch in range, nothing twice, nothing before what it needs on
//     its own stage, no communication off the pipeline's ends);
//  2. across stages: every receive has its neighbour's send, and every
//     stage has everything it must run (forwards, backwards, loss, sends,
//     reductions);
//  3. the clock: actions run in list order, a receive waits for its send,
//     reduce_tied for every stage; if nothing can move, it is a deadlock.
// Passes 1-2 show each stage's list (a window around the mark); pass 3
// shows the device x tick grid of compute actions with each stuck stage's
// waiting action marked.
#include <algorithm>
#include <map>
#include <sstream>

#include "pipeline/schedule.h"

namespace gpipe {
namespace {

bool is_compute(ActionKind k) {
  return k == ActionKind::kForward || k == ActionKind::kRecompute || k == ActionKind::kBackward ||
         k == ActionKind::kBackwardInput || k == ActionKind::kBackwardWeight;
}

struct Mark {
  int stage = -1;
  size_t index = 0;
};

// Each stage's list, the marked action in brackets, at most `window` actions either side of it.
std::string list_grid(const Schedule& s, Mark mark) {
  constexpr size_t window = 10;
  const size_t centre = mark.index;
  const size_t lo = centre > window ? centre - window : 0, hi = centre + window + 1;
  std::ostringstream os;
  os << "  list positions " << lo << ".." << hi - 1
     << " ([..] marks the first offending action):\n";
  for (int st = 0; st < s.cells(); ++st) {
    os << "  stage " << st << ":" << (lo > 0 ? " ..." : "");
    const auto& a = s.stages[st];
    for (size_t i = lo; i < std::min(hi, a.size()); ++i) {
      const std::string tok = to_string(a[i]);
      os << " " << (st == mark.stage && i == mark.index ? "[" + tok + "]" : tok);
    }
    if (a.size() > hi) os << " ...";
    if (st == mark.stage && mark.index >= a.size()) os << " [end]";
    os << "\n";
  }
  return os.str();
}

[[noreturn]] void refuse(const Schedule& s, Mark mark, const std::string& why) {
  throw ScheduleError(
      detail::concat("invalid schedule: stage ", mark.stage, ": ", why, "\n", list_grid(s, mark)));
}

// What one stage has done for one micro-batch, by list position (npos = not yet).
struct Seen {
  static constexpr size_t npos = static_cast<size_t>(-1);
  size_t recv_f = npos, f = npos, send_f = npos, loss = npos, r = npos, recv_b = npos, b = npos,
         i = npos, w = npos, send_b = npos;
  bool backwarded() const { return b != npos || w != npos; }
};

void check_stage(const Schedule& s, int st, int k, int m, std::vector<Seen>& seen,
                 size_t& replicas_at, size_t& tied_at) {
  const auto& acts = s.stages[st];
  const bool first = st == 0, last = st == k - 1;
  constexpr size_t npos = Seen::npos;
  for (size_t pos = 0; pos < acts.size(); ++pos) {
    const Action& a = acts[pos];
    const Mark here{st, pos};
    const std::string tok = to_string(a);
    if (a.kind == ActionKind::kReduceReplicas || a.kind == ActionKind::kReduceTied) {
      if (!s.training) refuse(s, here, tok + " in a forward-only program");
      size_t& at = a.kind == ActionKind::kReduceReplicas ? replicas_at : tied_at;
      if (at != npos) refuse(s, here, tok + " runs twice (gradients are reduced once per step)");
      for (int mb = 0; mb < m; ++mb)
        if (!seen[mb].backwarded())
          refuse(s, here,
                 detail::concat(tok, " before the backward of micro-batch ", mb,
                                " (it must follow every backward)"));
      at = pos;
      continue;
    }
    if (a.kind == ActionKind::kRecvTurn || a.kind == ActionKind::kSendTurn)
      continue;  // check_turns
    if (a.micro_batch < 0 || a.micro_batch >= m)
      refuse(s, here,
             detail::concat(tok, ": micro-batch ", a.micro_batch, " is out of range [0, ", m, ")"));
    Seen& x = seen[a.micro_batch];
    auto once = [&](size_t& slot) {
      if (slot != npos) refuse(s, here, tok + " appears twice");
      slot = pos;
    };
    auto need = [&](size_t slot, const char* what) {
      if (slot == npos) refuse(s, here, detail::concat(tok, " before ", what, a.micro_batch));
    };
    auto not_yet = [&](size_t slot, const char* what) {
      if (slot != npos)
        refuse(s, here,
               detail::concat(tok, " after ", what, a.micro_batch, " (it must come before)"));
    };
    const bool backward_kind =
        a.kind == ActionKind::kRecompute || a.kind == ActionKind::kRecvGradients ||
        a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardInput ||
        a.kind == ActionKind::kBackwardWeight || a.kind == ActionKind::kSendGradients;
    if (backward_kind && !s.training) refuse(s, here, tok + " in a forward-only program");
    switch (a.kind) {
      case ActionKind::kRecvActivations:
        if (first) refuse(s, here, tok + ": stage 0 has no previous stage to receive from");
        not_yet(x.f, "F");
        once(x.recv_f);
        break;
      case ActionKind::kForward:
        if (!first) need(x.recv_f, "its receive <F");
        once(x.f);
        break;
      case ActionKind::kSendActivations:
        if (last) refuse(s, here, tok + ": the last stage has no next stage to send to");
        need(x.f, "F");
        once(x.send_f);
        break;
      case ActionKind::kLoss:
        if (!last) refuse(s, here, tok + ": only the last stage computes the loss");
        need(x.f, "F");
        once(x.loss);
        break;
      case ActionKind::kRecompute:
        need(x.f, "F");
        if (last) need(x.loss, "L");
        not_yet(x.b, "B");
        not_yet(x.i, "I");
        once(x.r);
        break;
      case ActionKind::kRecvGradients:
        if (last)
          refuse(s, here, tok + ": the last stage has no next stage to receive gradients from");
        not_yet(x.b, "B");
        not_yet(x.i, "I");
        once(x.recv_b);
        break;
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput:
        need(x.f, "F");
        if (last) need(x.loss, "L");
        if (!last) need(x.recv_b, "its receive <B");
        if (a.kind == ActionKind::kBackward && x.i != npos)
          refuse(s, here,
                 tok + " after I" + std::to_string(a.micro_batch) +
                     " (a micro-batch's backward is B, or I then W)");
        if (a.kind == ActionKind::kBackwardInput && x.b != npos)
          refuse(s, here,
                 tok + " after B" + std::to_string(a.micro_batch) +
                     " (a micro-batch's backward is B, or I then W)");
        once(a.kind == ActionKind::kBackward ? x.b : x.i);
        break;
      case ActionKind::kBackwardWeight:
        need(x.i, "I");
        once(x.w);
        break;
      case ActionKind::kSendGradients:
        if (first) refuse(s, here, tok + ": stage 0 has no previous stage to send gradients to");
        if (x.b == npos && x.i == npos)
          refuse(s, here,
                 detail::concat(tok, " before B", a.micro_batch, " (or I", a.micro_batch, ")"));
        once(x.send_b);
        break;
      default:
        break;
    }
  }
}

// Pass 2: a receive whose send is missing, then anything a stage never runs.
void check_complete(const Schedule& s, int k, int m, const std::vector<std::vector<Seen>>& seen,
                    const std::vector<size_t>& replicas_at, const std::vector<size_t>& tied_at) {
  constexpr size_t npos = Seen::npos;
  for (int st = 0; st < k; ++st)
    for (int mb = 0; mb < m; ++mb) {
      const Seen& x = seen[st][mb];
      if (x.recv_f != npos && seen[st - 1][mb].send_f == npos)
        refuse(s, {st, x.recv_f},
               detail::concat("<F", mb, " has no matching >F", mb, " on stage ", st - 1));
      if (x.recv_b != npos && seen[st + 1][mb].send_b == npos)
        refuse(s, {st, x.recv_b},
               detail::concat("<B", mb, " has no matching >B", mb, " on stage ", st + 1));
    }
  for (int st = 0; st < k; ++st) {
    const bool first = st == 0, last = st == k - 1;
    const size_t end = s.stages[st].size();
    for (int mb = 0; mb < m; ++mb) {
      const Seen& x = seen[st][mb];
      auto missing = [&](size_t anchor, const std::string& what) {
        refuse(s, {st, anchor == npos ? end : anchor}, detail::concat("never runs ", what, mb));
      };
      if (x.f == npos) missing(npos, "F");
      if (!last && x.send_f == npos) missing(x.f, ">F");
      if (s.training) {
        if (last && x.loss == npos) missing(x.f, "L");
        if (x.b == npos && x.i == npos) missing(x.f, "a backward (B, or I and W) of micro-batch ");
        if (x.i != npos && x.w == npos) missing(x.i, "W");
        if (!last && x.recv_b == npos) missing(x.f, "<B");
        if (!first && x.send_b == npos) missing(x.b != npos ? x.b : x.i, ">B");
      }
    }
    if (s.training && replicas_at[st] == npos) refuse(s, {st, end}, "never runs reduce_replicas");
    if (s.training && tied_at[st] == npos) refuse(s, {st, end}, "never runs reduce_tied");
  }
}

// Pass 2b: the cells of a shared device take turns (Note [Device turns]).
// On each device one cell starts holding it (its list does not begin with
// <T), every other cell's begins with <T; a cell computes only while it
// holds its device; >Tt hands it over and <Tt takes it; turn t is passed
// by whoever took turn t - 1 (or the first holder), once, to one cell of
// the same device. So a device's cells never compute at once, in any run.
void check_turns(const Schedule& s) {
  const int cells = s.cells();
  if (!s.device_map.empty()) {
    GPIPE_CHECK(static_cast<int>(s.device_map.size()) == cells, "schedule: its device map has ",
                s.device_map.size(), " entries for ", cells, " cells (expected one per cell)");
    std::vector<bool> used(cells, false);
    for (int c = 0; c < cells; ++c) {
      const int d = s.device_map[c];
      GPIPE_CHECK(d >= 0 && d < cells, "schedule: cell ", c, " is on device ", d,
                  " (expected 0 <= device < ", cells, ")");
      used[d] = true;
    }
    for (int d = 0; d < s.device_count(); ++d)
      GPIPE_CHECK(used[d], "schedule: no cell is on device ", d,
                  " (devices are numbered from 0 without gaps)");
  }
  const int devices = s.device_count();
  constexpr size_t npos = Seen::npos;
  struct End {
    int cell = -1;
    size_t pos = npos;
  };
  std::vector<std::map<int, End>> sent(devices), taken(devices);
  std::vector<int> first_holder(devices, -1);
  for (int c = 0; c < cells; ++c) {
    const auto& acts = s.stages[c];
    const int d = s.device_of(c);
    bool shared = false;
    for (int o = 0; o < cells; ++o) shared = shared || (o != c && s.device_of(o) == d);
    bool holding = true;
    size_t head = 0;
    while (head < acts.size() && (acts[head].kind == ActionKind::kReduceReplicas ||
                                  acts[head].kind == ActionKind::kReduceTied))
      ++head;
    if (head < acts.size() && acts[head].kind == ActionKind::kRecvTurn) holding = false;
    if (holding && shared) {
      if (first_holder[d] >= 0)
        refuse(s, {c, head},
               detail::concat("cells ", first_holder[d], " and ", c, " share device ", d,
                              " and both start holding it: all but one must begin with <T "
                              "(the device's turn)"));
      first_holder[d] = c;
    }
    for (size_t pos = 0; pos < acts.size(); ++pos) {
      const Action& a = acts[pos];
      const Mark here{c, pos};
      const std::string tok = to_string(a);
      const bool turn = a.kind == ActionKind::kRecvTurn || a.kind == ActionKind::kSendTurn;
      if (turn && !shared)
        refuse(s, here,
               detail::concat(tok, ": cell ", c, " has device ", d,
                              " to itself (turns are for cells sharing a device: 'devices=D' in "
                              "the header)"));
      if (turn && a.micro_batch < 0)
        refuse(s, here, detail::concat(tok, ": a turn number must be >= 0"));
      if (a.kind == ActionKind::kRecvTurn) {
        if (holding) refuse(s, here, tok + ": the cell holds its device already");
        End& e = taken[d][a.micro_batch];
        if (e.cell >= 0) refuse(s, here, tok + ": turn taken twice on device " + std::to_string(d));
        e = {c, pos};
        holding = true;
      } else if (a.kind == ActionKind::kSendTurn) {
        if (!holding) refuse(s, here, tok + ": the cell does not hold its device");
        End& e = sent[d][a.micro_batch];
        if (e.cell >= 0)
          refuse(s, here, tok + ": turn passed twice on device " + std::to_string(d));
        e = {c, pos};
        holding = false;
      } else if (is_compute(a.kind) && !holding) {
        refuse(s, here,
               detail::concat(tok, " while cell ", c, " does not hold device ", d,
                              " (it passed its turn; wait with <T first)"));
      }
    }
  }
  for (int d = 0; d < devices; ++d) {
    int holder = first_holder[d];
    if (holder < 0 && (!sent[d].empty() || !taken[d].empty())) {
      const End& e = !taken[d].empty() ? taken[d].begin()->second : sent[d].begin()->second;
      refuse(s, {e.cell, e.pos},
             detail::concat("every cell of device ", d,
                            " begins by waiting for a turn (<T): one must start holding it"));
    }
    for (int t = 0; t < static_cast<int>(sent[d].size()) || t < static_cast<int>(taken[d].size());
         ++t) {
      auto si = sent[d].find(t);
      auto ti = taken[d].find(t);
      if (si == sent[d].end() && ti == taken[d].end())
        refuse(s, {holder, s.stages[std::max(holder, 0)].size()},
               detail::concat("device ", d, "'s turns skip turn ", t, " (they count from 0)"));
      if (si == sent[d].end())
        refuse(s, {ti->second.cell, ti->second.pos},
               detail::concat("<T", t, " has no matching >T", t, " on device ", d));
      if (ti == taken[d].end())
        refuse(s, {si->second.cell, si->second.pos},
               detail::concat(">T", t, " has no matching <T", t, " on device ", d));
      if (si->second.cell == ti->second.cell)
        refuse(s, {ti->second.cell, ti->second.pos},
               detail::concat("<T", t, ": cell ", ti->second.cell,
                              " takes back the turn it passed itself (a turn goes to another cell "
                              "of the device)"));
      if (si->second.cell != holder)
        refuse(s, {si->second.cell, si->second.pos},
               detail::concat(">T", t, ": turn ", t, " of device ", d, " is passed by cell ",
                              holder, ", which took the turn before it"));
      holder = ti->second.cell;
    }
  }
}

std::string tick_grid(const Schedule& s, const std::vector<std::vector<int>>& ticks,
                      const std::vector<size_t>& stuck_at, int makespan) {
  std::vector<std::map<int, std::string>> cells(s.cells());
  size_t width = 2;
  for (int st = 0; st < s.cells(); ++st) {
    for (size_t i = 0; i < ticks[st].size(); ++i)
      if (ticks[st][i] >= 0 && is_compute(s.stages[st][i].kind))
        cells[st][ticks[st][i]] = to_string(s.stages[st][i]);
    if (stuck_at[st] < s.stages[st].size()) {
      int at = 0;
      for (int t : ticks[st]) at = std::max(at, t + 1);
      cells[st][at] = "[" + to_string(s.stages[st][stuck_at[st]]) + "]";
      makespan = std::max(makespan, at + 1);
    }
    for (auto& [t, c] : cells[st]) width = std::max(width, c.size());
  }
  std::ostringstream os;
  os << "  tick    ";
  for (int t = 0; t < makespan; ++t) {
    const std::string n = std::to_string(t);
    os << " " << n << std::string(width - std::min(width, n.size()), ' ');
  }
  os << "\n";
  for (int st = 0; st < s.cells(); ++st) {
    const std::string head = "  stage " + std::to_string(st);
    os << head << std::string(head.size() < 10 ? 10 - head.size() : 0, ' ');
    for (int t = 0; t < makespan; ++t) {
      auto it = cells[st].find(t);
      const std::string c = it == cells[st].end() ? "." : it->second;
      os << " " << c << std::string(width - std::min(width, c.size()), ' ');
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace

DryRun validate(const Schedule& s, int k, int m) {
  GPIPE_CHECK(s.cells() == k, "schedule: it has ", s.cells(),
              " stages but the pipeline has K = ", k, " cells");
  GPIPE_CHECK(s.M == m, "schedule: it is written for M = ", s.M,
              " micro-batches but the step has M = ", m);
  // Every stage forwards every micro-batch: a stage with fewer actions than
  // M cannot be complete (checked before the per-micro-batch tables are sized by M).
  for (int st = 0; st < k; ++st)
    if (s.stages[st].size() < static_cast<size_t>(m))
      throw ScheduleError(detail::concat("schedule: stage ", st, " has ", s.stages[st].size(),
                                         " actions, fewer than the M = ", m,
                                         " forwards a complete program runs on every stage"));
  constexpr size_t npos = Seen::npos;
  std::vector<std::vector<Seen>> seen(k, std::vector<Seen>(m));
  std::vector<size_t> replicas_at(k, npos), tied_at(k, npos);
  for (int st = 0; st < k; ++st) check_stage(s, st, k, m, seen[st], replicas_at[st], tied_at[st]);
  check_complete(s, k, m, seen, replicas_at, tied_at);
  check_turns(s);

  // Pass 3: the clock.
  DryRun run;
  run.ticks.resize(k);
  for (int st = 0; st < k; ++st) run.ticks[st].assign(s.stages[st].size(), -1);
  std::vector<size_t> pos(k, 0);
  std::vector<int> clock(k, 0);
  std::vector<std::vector<int>> act_sent(k, std::vector<int>(m, -1)),
      grad_sent(k, std::vector<int>(m, -1));
  std::vector<std::map<int, int>> turn_sent(s.device_count());  // [device][turn] -> tick
  for (bool moved = true; moved;) {
    moved = false;
    for (int st = 0; st < k; ++st) {
      while (pos[st] < s.stages[st].size()) {
        const Action& a = s.stages[st][pos[st]];
        int start = clock[st];
        if (a.kind == ActionKind::kRecvActivations || a.kind == ActionKind::kRecvGradients) {
          const int sent = a.kind == ActionKind::kRecvActivations
                               ? act_sent[st - 1][a.micro_batch]
                               : grad_sent[st + 1][a.micro_batch];
          if (sent < 0) break;
          start = std::max(start, sent);
        } else if (a.kind == ActionKind::kRecvTurn) {
          const auto& sent = turn_sent[s.device_of(st)];
          auto it = sent.find(a.micro_batch);
          if (it == sent.end()) break;
          start = std::max(start, it->second);
        } else if (a.kind == ActionKind::kReduceTied) {
          // A collective: it runs when every stage is waiting at its own.
          bool all = true;
          for (int o = 0; o < k; ++o)
            all = all && pos[o] < s.stages[o].size() &&
                  s.stages[o][pos[o]].kind == ActionKind::kReduceTied;
          if (!all) break;
          int t = 0;
          for (int o = 0; o < k; ++o) t = std::max(t, clock[o]);
          for (int o = 0; o < k; ++o) {
            run.ticks[o][pos[o]] = t;
            clock[o] = t;
            ++pos[o];
          }
          moved = true;
          continue;
        }
        run.ticks[st][pos[st]] = start;
        clock[st] = start + (is_compute(a.kind) ? 1 : 0);
        if (a.kind == ActionKind::kSendActivations) act_sent[st][a.micro_batch] = clock[st];
        if (a.kind == ActionKind::kSendGradients) grad_sent[st][a.micro_batch] = clock[st];
        if (a.kind == ActionKind::kSendTurn) turn_sent[s.device_of(st)][a.micro_batch] = clock[st];
        ++pos[st];
        moved = true;
      }
    }
  }
  for (int st = 0; st < k; ++st) run.makespan = std::max(run.makespan, clock[st]);
  bool stuck = false;
  for (int st = 0; st < k; ++st) stuck = stuck || pos[st] < s.stages[st].size();
  if (stuck) {
    std::string who;
    for (int st = 0; st < k; ++st)
      if (pos[st] < s.stages[st].size())
        who += detail::concat(who.empty() ? "" : ", ", "stage ", st, " waits at ",
                              to_string(s.stages[st][pos[st]]));
    throw ScheduleError(
        detail::concat("invalid schedule: it deadlocks: ", who,
                       ", and nothing else can run\n  ([..] marks where each stuck stage waits)\n",
                       tick_grid(s, run.ticks, pos, run.makespan)));
  }
  for (int st = 0; st < k; ++st) {
    int live = 0, best = 0;
    for (const Action& a : s.stages[st]) {
      if (a.kind == ActionKind::kForward) best = std::max(best, ++live);
      if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight ||
          (!s.training && a.kind == ActionKind::kForward))
        --live;
    }
    run.peak_live.push_back(best);
  }
  return run;
}

}  // namespace gpipe
