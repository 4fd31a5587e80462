// Note [Data position]: a checkpoint records where the training data stands,
// under "data." keys of its metadata, so that --resume can tell whether it
// continues on the data the run was saved with.
//
// The batches themselves need no saving: batch_at(step) is a pure function
// of (seed, step) (StepRows in task.h), so a resumed run sees the batches an
// uninterrupted one would, mid-epoch included. What the keys add is a check
// and a record for people. At step s (s steps done) with E batches per
// epoch, the next batch is batch s mod E of epoch s / E:
//
//   data.examples           the training split's size (rows for the LM task)
//   data.fingerprint        what identifies the data set: the task's
//                           "train.data" (folder, tokenizer, limits)
//   data.epoch, data.batch_in_epoch, data.batches_per_epoch,
//   data.batch, data.seed   the position in the (seed, epoch) order
//   data.next_source        the LM task: "<file>:<line>" of the first row
//                           of the next batch
//
// At --resume a different example count or fingerprint is refused: the same
// step numbers would index other data, and the run would silently not be
// the one it claims to continue. The next source is compared only when the
// order is the same (same batch, seed and epoch length); a difference then
// means the files changed under the same names. Another --batch or --seed is
// allowed (with a warning): the step numbers go on, the order is new.
#include <sstream>

#include "tools/train/task.h"

namespace gpipe::train {

std::map<std::string, std::string> Task::data_position(int64_t step) const {
  std::map<std::string, std::string> m;
  m["data.examples"] = std::to_string(train_size());
  const std::map<std::string, std::string> meta = metadata();
  if (auto it = meta.find("train.data"); it != meta.end()) m["data.fingerprint"] = it->second;
  if (const StepRows* rows = step_rows()) {
    const int64_t per_epoch = rows->batches_per_epoch();
    m["data.epoch"] = std::to_string(step / per_epoch);
    m["data.batch_in_epoch"] = std::to_string(step % per_epoch);
    m["data.batches_per_epoch"] = std::to_string(per_epoch);
    m["data.batch"] = std::to_string(rows->batch());
    m["data.seed"] = std::to_string(rows->seed());
  }
  return m;
}

namespace {

std::string value_or_absent(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? std::string("(absent)") : "'" + it->second + "'";
}

// "epoch 0, batch 5 of 12 (batch size 8, data seed 123)"
std::string describe(const std::map<std::string, std::string>& m) {
  auto get = [&](const char* key) {
    auto it = m.find(key);
    return it == m.end() ? std::string("?") : it->second;
  };
  return detail::concat("epoch ", get("data.epoch"), ", batch ", get("data.batch_in_epoch"), " of ",
                        get("data.batches_per_epoch"), " (batch size ", get("data.batch"),
                        ", data seed ", get("data.seed"), ")");
}

}  // namespace

std::vector<std::string> check_data_position(const std::map<std::string, std::string>& saved,
                                             const Task& task, int64_t step,
                                             const std::string& path) {
  const std::map<std::string, std::string> now = task.data_position(step);
  auto differs = [&](const std::string& key) {
    return saved.count(key) && value_or_absent(saved, key) != value_or_absent(now, key);
  };
  std::vector<std::string> refused;
  for (const std::string key : {"data.examples", "data.fingerprint"})
    if (differs(key))
      refused.push_back(detail::concat(key, " is ", value_or_absent(saved, key),
                                       " in the checkpoint, ", value_or_absent(now, key),
                                       " in this run"));
  bool same_order = true;
  for (const std::string key :
       {"data.batch", "data.seed", "data.batches_per_epoch", "data.epoch", "data.batch_in_epoch"})
    same_order = same_order && !differs(key);
  if (refused.empty() && same_order && differs("data.next_source"))
    refused.push_back(
        detail::concat("the next batch starts at ", value_or_absent(saved, "data.next_source"),
                       " in the checkpoint, at ", value_or_absent(now, "data.next_source"),
                       " in this run (the files changed under the same names)"));
  if (!refused.empty()) {
    std::ostringstream msg;
    msg << "--resume: the checkpoint " << path << " was saved at step " << step
        << " of other training data: ";
    for (size_t i = 0; i < refused.size(); ++i) msg << (i ? "; " : "") << refused[i];
    msg << " (expected the data set it was saved with)";
    throw Error(msg.str());
  }
  if (same_order) return {};
  return {detail::concat("the checkpoint's next batch was ", describe(saved), ", this run's is ",
                         describe(now), ": the steps after ", step,
                         " take batches in another order than the saved run would have")};
}

}  // namespace gpipe::train
