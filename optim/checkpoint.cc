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

#include <charconv>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "optim/safetensors.h"

namespace gpipe::optim {
namespace {

constexpr const char* kFormat = "checkpoint/1";
constexpr const char* kStatePrefix = "optim/";

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
    GPIPE_CHECK(k.rfind("gpipe.", 0) != 0 && k.rfind("optim.", 0) != 0, where, "metadata key '",
                k, "' uses a reserved prefix (gpipe. or optim.)");
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
  void expect(const std::vector<std::string>& names, Tensor* t, const char* owner) {
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

void save_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors,
                     int64_t step, const std::map<std::string, std::string>& metadata) {
  save_impl(path, tensors, nullptr, step, metadata);
}

void load_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors,
                     Optimizer* opt, int64_t* step, const LoadCheckpointOptions& options) {
  const std::string where = "checkpoint " + path + ": ";
  SafetensorsFile file;
  {
    MemoryCategoryGuard category(MemoryCategory::kWorkspace);
    file = load_safetensors(path);
  }
  const auto& meta = file.metadata;
  LoadPlan plan(file);
  for (const Group& g : group_by_identity(tensors, where)) plan.expect(g.names, g.tensor, "model");

  int64_t step_count = 0;
  double lr = 0;
  if (opt != nullptr) {
    auto name = meta.find("optim.name");
    if (name == meta.end()) {
      plan.problem("it has no optimizer state (saved without an optimizer)");
    } else if (name->second != opt->name()) {
      plan.problem("its optimizer state is " + name->second + "'s, the optimizer is " + opt->name());
    } else {
      for (const NamedTensor& s : opt->state())
        plan.expect({kStatePrefix + s.name}, s.tensor, "optimizer");
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

}  // namespace gpipe::optim
