// Checkpoints on top of safetensors.
//
// Tied weights: the save keeps each TensorImpl once, under the first name
// listed for it. On load a tied group is satisfied by any of its names found
// in the file (the first one found wins), and copying into the shared
// TensorImpl restores every alias at once.
//
// Validation first, copies second: load_checkpoint gathers every problem
// (missing, unexpected, wrong shape or dtype) into one message before
// touching a tensor, so a failed load leaves the model as it was.
#include "optim/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "optim/safetensors.h"
#include "optim/stale_temp.h"
#include "runtime/communicator.h"

namespace gpipe::optim {
namespace {

constexpr const char* kFormat = "checkpoint/1";
constexpr const char* kStatePrefix = "optim/";
constexpr const char* kManifestFormat = "checkpoint-manifest/1";

// `name` and every name it may be found under in a file: its tied aliases,
// and for optimizer state "optim/<alias>.<state>".
std::vector<std::string> with_aliases(const std::string& name,
                                      const std::vector<std::vector<std::string>>& aliases) {
  std::vector<std::string> out{name};
  for (const auto& group : aliases)
    for (const std::string& x : group) {
      std::string rest;
      const std::string state = kStatePrefix + x + ".";
      if (name == x)
        rest = "";
      else if (name.rfind(state, 0) == 0)
        rest = name.substr(state.size() - 1);
      else
        continue;
      const bool is_state = name != x;
      for (const std::string& y : group)
        if (y != x) out.push_back(is_state ? kStatePrefix + y + rest : y);
    }
  return out;
}

// True for "<base>.step<S>-<id>.shard<i>of<n>", a shard of the checkpoint `base`.
bool is_shard_of(const std::string& name, const std::string& base) {
  const std::string head = base + ".step";
  if (name.rfind(head, 0) != 0) return false;
  const size_t dash = name.find('-', head.size()), shard = name.rfind(".shard"),
               of = name.rfind("of");
  auto digits = [&](size_t from, size_t to) {
    if (from >= to) return false;
    for (size_t i = from; i < to; ++i)
      if (name[i] < '0' || name[i] > '9') return false;
    return true;
  };
  return dash != std::string::npos && shard != std::string::npos && of != std::string::npos &&
         dash < shard && shard < of && digits(head.size(), dash) && digits(shard + 6, of) &&
         digits(of + 2, name.size());
}

// Note [Orphaned shards]: a sharded save killed after some shards were
// written but before the manifest names them (or after the manifest, before
// the shards it replaced were removed) leaves shard files no manifest names.
// Each save's fresh id means the next save never overwrites them, so they
// would pile up across restarts. Once the new manifest is in place, rank 0
// removes the shards of the same base name that it does not name and that
// are older than this save's start (a file written since then may belong to
// another writer of this path, which is not ours to touch).
void remove_orphaned_shards(const std::filesystem::path& dir, const std::string& base,
                            const std::vector<std::string>& keep,
                            std::filesystem::file_time_type started) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> orphans;
  for (fs::directory_iterator it(dir.empty() ? fs::path(".") : dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!is_shard_of(name, base) || std::find(keep.begin(), keep.end(), name) != keep.end())
      continue;
    std::error_code tec;
    const fs::file_time_type t = fs::last_write_time(it->path(), tec);
    if (!tec && t < started) orphans.push_back(it->path());
  }
  for (const fs::path& o : orphans) {
    std::error_code rm;
    if (fs::remove(o, rm))
      std::fprintf(stderr, "removed the orphaned shard '%s' (no manifest names it)\n", o.c_str());
  }
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// A unique tensor and every name it was listed under, first name first.
struct Group {
  std::vector<std::string> names;
  Tensor* tensor;
};

std::vector<Group> group_by_identity(const std::vector<NamedTensor>& tensors,
                                     const std::string& where) {
  std::vector<Group> groups;
  std::unordered_map<TensorImpl*, size_t> index;
  std::unordered_map<std::string, TensorImpl*> by_name;
  for (const NamedTensor& nt : tensors) {
    GPIPE_CHECK(nt.tensor != nullptr && nt.tensor->defined(), where, "tensor '", nt.name,
                "' is undefined");
    TensorImpl* id = nt.tensor->impl_ptr().get();
    auto [named, fresh_name] = by_name.emplace(nt.name, id);
    GPIPE_CHECK(named->second == id, where, "two different tensors are named '", nt.name, "'");
    if (!fresh_name) continue;
    auto [it, fresh] = index.emplace(id, groups.size());
    if (fresh) groups.push_back({{}, nt.tensor});
    groups[it->second].names.push_back(nt.name);
  }
  return groups;
}

void save_impl(const std::string& path, const std::vector<NamedTensor>& tensors,
               const Optimizer* opt, int64_t step,
               const std::map<std::string, std::string>& metadata) {
  const std::string where = "save_checkpoint: '" + path + "': ";
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : metadata) {
    GPIPE_CHECK(k.rfind("gpipe.", 0) != 0 && k.rfind("optim.", 0) != 0, where, "metadata key '", k,
                "' uses a reserved prefix (gpipe. or optim.)");
    meta[k] = v;
  }
  meta["gpipe.format"] = kFormat;
  meta["gpipe.step"] = std::to_string(step);

  std::vector<std::pair<std::string, Tensor>> out;
  for (const Group& g : group_by_identity(tensors, where)) out.emplace_back(g.names[0], *g.tensor);
  if (opt != nullptr) {
    meta["optim.name"] = opt->name();
    meta["optim.step_count"] = std::to_string(opt->step_count());
    for (const auto& [k, v] : opt->hyper_params()) meta["optim." + k] = v;
    for (const NamedTensor& s : opt->state()) out.emplace_back(kStatePrefix + s.name, *s.tensor);
  }
  save_safetensors(path, out, meta);
}

// The metadata value `key` as a T, or a problem appended to `problems`.
template <class T>
T metadata_number(const std::map<std::string, std::string>& meta, const std::string& key,
                  std::vector<std::string>& problems) {
  auto it = meta.find(key);
  if (it == meta.end()) {
    problems.push_back("metadata has no '" + key + "'");
    return T{};
  }
  const std::string& s = it->second;
  T v{};
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty())
    problems.push_back("metadata '" + key + "' is not a number: '" + s + "'");
  return v;
}

// Matches a file's tensors against the tensors a caller expects, collecting
// every problem; copies only once there are none.
class LoadPlan {
 public:
  explicit LoadPlan(const SafetensorsFile& file) : file_(file) {}

  // One tensor known by `names` (tied aliases): the first name found in the
  // file supplies its value. `owner` is "model" or "optimizer".
  void expect(const std::vector<std::string>& asked, Tensor* t, const char* owner,
              const std::vector<std::vector<std::string>>& aliases) {
    std::vector<std::string> names;
    for (const std::string& a : asked)
      for (const std::string& n : with_aliases(a, aliases)) names.push_back(n);
    const std::string* found = nullptr;
    for (const std::string& n : names) {
      known_.insert(n);
      if (!found && file_.tensors.count(n)) found = &n;
    }
    if (!found) return problem("missing tensor '" + names[0] + "'");
    const Tensor& src = file_.tensors.at(*found);
    if (src.shape() != t->shape())
      return problem(detail::concat("tensor '", *found, "' has shape ", src.shape(), ", the ",
                                    owner, " expects ", t->shape()));
    if (src.dtype() != t->dtype())
      return problem(detail::concat("tensor '", *found, "' has dtype ", src.dtype(), ", the ",
                                    owner, " expects ", t->dtype()));
    copies_.emplace_back(t, &src);
  }

  // File tensors nobody expected; "optim/" ones are ignored without an optimizer.
  void check_unexpected(bool have_optimizer) {
    for (const auto& [n, t] : file_.tensors) {
      if (known_.count(n) || (!have_optimizer && n.rfind(kStatePrefix, 0) == 0)) continue;
      problem("unexpected tensor '" + n + "'");
    }
  }

  void problem(std::string p) { problems_.push_back(std::move(p)); }
  std::vector<std::string>& problems() { return problems_; }

  void throw_if_problems(const std::string& where) const {
    if (problems_.empty()) return;
    constexpr size_t kShown = 10;
    std::string msg = where;
    for (size_t i = 0; i < problems_.size() && i < kShown; ++i)
      msg += (i ? "; " : "") + problems_[i];
    if (problems_.size() > kShown)
      msg += detail::concat("; and ", problems_.size() - kShown, " more problems");
    throw Error(msg);
  }

  // Copies every matched tensor into place, on the destination's device.
  void copy() const {
    NoGradGuard no_grad;
    for (const auto& [dst, src] : copies_)
      dst->copy_from(dst->device().is_cpu() ? *src : src->to(dst->device()));
  }

 private:
  const SafetensorsFile& file_;
  std::unordered_set<std::string> known_;
  std::vector<std::string> problems_;
  std::vector<std::pair<Tensor*, const Tensor*>> copies_;
};

}  // namespace

void save_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors,
                     const Optimizer& opt, int64_t step,
                     const std::map<std::string, std::string>& metadata) {
  save_impl(path, tensors, &opt, step, metadata);
}

void save_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors, int64_t step,
                     const std::map<std::string, std::string>& metadata) {
  save_impl(path, tensors, nullptr, step, metadata);
}

void load_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors,
                     Optimizer* opt, int64_t* step, const LoadCheckpointOptions& options) {
  const std::string where = "checkpoint " + path + ": ";
  SafetensorsFile file;
  {
    MemoryCategoryGuard category(MemoryCategory::kWorkspace);
    file = read_checkpoint(path);
  }
  const auto& meta = file.metadata;
  LoadPlan plan(file);
  for (const Group& g : group_by_identity(tensors, where))
    plan.expect(g.names, g.tensor, "model", options.aliases);

  int64_t step_count = 0;
  double lr = 0;
  if (opt != nullptr) {
    auto name = meta.find("optim.name");
    if (name == meta.end()) {
      plan.problem("it has no optimizer state (saved without an optimizer)");
    } else if (name->second != opt->name()) {
      plan.problem("its optimizer state is " + name->second + "'s, the optimizer is " +
                   opt->name());
    } else {
      for (const NamedTensor& s : opt->state())
        plan.expect({kStatePrefix + s.name}, s.tensor, "optimizer", options.aliases);
      step_count = metadata_number<int64_t>(meta, "optim.step_count", plan.problems());
      lr = metadata_number<double>(meta, "optim.lr", plan.problems());
      if (!(lr >= 0 && std::isfinite(lr)) || step_count < 0)
        plan.problem("metadata 'optim.lr' or 'optim.step_count' is negative or not finite");
    }
  }
  if (!options.allow_unexpected) plan.check_unexpected(opt != nullptr);
  int64_t saved_step = 0;
  if (step != nullptr) saved_step = metadata_number<int64_t>(meta, "gpipe.step", plan.problems());
  plan.throw_if_problems(where);

  plan.copy();
  if (opt != nullptr) {
    opt->set_step_count(step_count);
    opt->set_lr(lr);
  }
  if (step != nullptr) *step = saved_step;
}

SafetensorsFile read_checkpoint(const std::string& path) {
  SafetensorsFile manifest = load_safetensors(path);
  auto format = manifest.metadata.find("gpipe.format");
  if (format == manifest.metadata.end() || format->second != kManifestFormat) return manifest;
  const std::string where = "checkpoint " + path + ": ";
  const std::vector<std::string> shards = split_commas(manifest.metadata["gpipe.shards"]);
  GPIPE_CHECK(!shards.empty(), where, "the manifest lists no shards");
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  SafetensorsFile merged;
  for (const std::string& name : shards) {
    // A shard is a file of the manifest's own folder: a name with a path in
    // it ("../x", "/x", "a/b") would read outside the checkpoint.
    GPIPE_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos,
                where, "shard name '", name,
                "' is not a plain file name (shards live in the manifest's folder)");
    const std::string shard_path = (dir / name).string();
    GPIPE_CHECK(std::filesystem::exists(shard_path), where, "shard '", shard_path,
                "' is missing (a sharded checkpoint needs every shard the manifest lists)");
    SafetensorsFile shard = load_safetensors(shard_path);
    GPIPE_CHECK(shard.metadata["gpipe.step"] == manifest.metadata["gpipe.step"], where, "shard '",
                shard_path, "' is of step ", shard.metadata["gpipe.step"],
                ", the manifest of step ", manifest.metadata["gpipe.step"]);
    for (auto& [n, t] : shard.tensors) merged.tensors.emplace(n, std::move(t));
    if (merged.metadata.empty()) merged.metadata = shard.metadata;
  }
  for (const auto& [k, v] : manifest.metadata) merged.metadata[k] = v;
  return merged;
}

void save_sharded_checkpoint(Communicator& world, const ShardedSave& who, const std::string& path,
                             const std::vector<NamedTensor>& tensors, const Optimizer& opt,
                             int64_t step, const std::map<std::string, std::string>& metadata) {
  const auto started = std::filesystem::file_time_type::clock::now();
  const std::string base = std::filesystem::path(path).filename().string();
  // A fresh id per save: saving the same step to the same path again never
  // overwrites the shards the current manifest names.
  std::string id;
  if (world.rank() == 0) {
    std::random_device rd;
    id = detail::concat(
        std::hex,
        (static_cast<uint64_t>(rd()) << 32 | rd()) ^
            static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  }
  world.broadcast(id, 0, "sharing the checkpoint's save id");
  auto shard_name = [&](int i) {
    return detail::concat(base, ".step", step, "-", id, ".shard", i, "of", who.shards);
  };
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::string problem;
  if (who.writer) {
    try {
      save_impl((dir / shard_name(who.shard)).string(), tensors, &opt, step, metadata);
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  const std::vector<std::string> problems =
      world.allgather(problem, "gathering checkpoint shard results");
  std::string failed;
  for (size_t r = 0; r < problems.size(); ++r)
    if (!problems[r].empty())
      failed += detail::concat(failed.empty() ? "" : "; ", "rank ", r, ": ", problems[r]);
  GPIPE_CHECK(failed.empty(), "checkpoint ", path, " at step ", step,
              " was not taken (the previous one, if any, is intact): ", failed);
  std::string manifest_problem;
  if (world.rank() == 0) {
    // Every writer of this job has finished (the gather above), so a
    // temporary shard left now is another process's: Note [Stale temporaries].
    remove_stale_temporaries(dir.string(),
                             [&](const std::string& target) { return is_shard_of(target, base); });
    try {
      std::vector<std::string> old;
      if (std::filesystem::exists(path)) {
        try {
          const SafetensorsFile prev = load_safetensors(path);
          auto it = prev.metadata.find("gpipe.shards");
          if (it != prev.metadata.end()) old = split_commas(it->second);
        } catch (const Error&) {
          // Not a readable manifest: nothing of ours to clean up.
        }
      }
      std::map<std::string, std::string> meta;
      for (const auto& [k, v] : metadata) meta[k] = v;
      meta["gpipe.format"] = kManifestFormat;
      meta["gpipe.step"] = std::to_string(step);
      std::string list;
      for (int i = 0; i < who.shards; ++i) list += (i ? "," : "") + shard_name(i);
      meta["gpipe.shards"] = list;
      save_safetensors(path, {}, meta);
      const std::vector<std::string> now = split_commas(list);
      for (const std::string& o : old)
        if (std::find(now.begin(), now.end(), o) == now.end()) {
          std::error_code ec;  // the new checkpoint is complete either way
          std::filesystem::remove(dir / o, ec);
          if (ec)
            std::fprintf(stderr, "warning: checkpoint %s: could not remove the old shard %s: %s\n",
                         path.c_str(), o.c_str(), ec.message().c_str());
        }
      remove_orphaned_shards(dir, base, now, started);
    } catch (const std::exception& e) {
      manifest_problem = e.what();
    }
  }
  world.broadcast(manifest_problem, 0, "sharing the checkpoint manifest's result");
  GPIPE_CHECK(manifest_problem.empty(), "checkpoint ", path, " at step ", step,
              ": writing the manifest failed: ", manifest_problem);
}

}  // namespace gpipe::optim
