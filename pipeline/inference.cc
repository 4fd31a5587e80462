// Pipelined evaluation and prediction: forward-only programs
// (make_forward_schedule) on the same ranks and workers as training, so the
// micro-batches overlap across the stages instead of running stage by stage.
#include "pipeline/pipeline.h"

namespace gpipe {
namespace {

// Restores the layers' train/eval mode when a call ends.
struct ModeGuard {
  Pipeline* pipe;
  bool was;
  ~ModeGuard() { pipe->train(was); }
};

}  // namespace

double Pipeline::evaluate(const Batch& batch) {
  NoGradGuard no_grad;
  ModeGuard mode{this, model_.layers.front()->training()};
  train(false);
  const int k = static_cast<int>(partition_.cells());
  auto body = [&](StageExecutor& r) {
    const RankInfo& ri = r.info();
    const bool last = ri.stage == ri.stages - 1;
    const int64_t n = rows_from_first_stage(r, batch);
    const int pieces = static_cast<int>(std::min<int64_t>(n, static_cast<int64_t>(opt_.replicas) * opt_.micro_batches));
    int64_t rows = 0;
    double terms = 0;
    const std::vector<Batch> micro = micro_for(r, batch, n, pieces, /*by_replica=*/true, &rows, &terms);
    const Schedule program = make_forward_schedule(k, static_cast<int>(micro.size()), /*with_loss=*/true);
    const StepContext ctx{opt_.seed, step_, 0, 1.0};
    const StepTotals t = r.run(program.stages[ri.stage], false, micro, ctx, {});
    double sums[2] = {last ? t.loss : 0.0, last ? terms : 0.0};
    r.world().allreduce(sums, 2, ReduceOp::kSum, "summing the evaluation loss");
    return StepTotals{sums[0], sums[1], 0};
  };
  const StepTotals t = run_ranks(body, false, "pipeline evaluation").front();
  return t.terms > 0 ? t.loss / t.terms : 0.0;
}

Bundle Pipeline::predict(const Bundle& inputs, DecodeSession* session) {
  NoGradGuard no_grad;
  // Eval mode for this call (dropout off, BatchNorm on running statistics).
  ModeGuard mode{this, model_.layers.front()->training()};
  train(false);
  const int k = static_cast<int>(partition_.cells());
  const Batch batch{inputs, {}};
  Bundle result;
  auto body = [&](StageExecutor& r) {
    const RankInfo& ri = r.info();
    const bool last = ri.stage == ri.stages - 1;
    const int64_t n = rows_from_first_stage(r, batch);
    const int pieces = static_cast<int>(std::min<int64_t>(n, opt_.micro_batches));
    const std::vector<Batch> micro = micro_for(r, batch, n, pieces, /*by_replica=*/false, nullptr, nullptr);
    const Schedule program = make_forward_schedule(k, pieces, /*with_loss=*/false);
    r.run(program.stages[ri.stage], false, micro, StepContext{opt_.seed, step_, 0, 1.0, session}, {});
    Bundle out;
    if (last) {
      std::vector<Bundle> parts;
      for (int i = 0; i < pieces; ++i) parts.push_back(r.take_outputs(i));
      out = merge_micro_batches(parts);
    }
    if (!holds_whole_pipeline()) {
      // The last stage's output, on every rank of this replica.
      std::string bytes;
      if (last) {
        Message msg;
        msg.tensors = out;
        bytes = serialize_message(msg);
      }
      r.pipe().broadcast(bytes, ri.stages - 1, "sharing the prediction of the last stage");
      if (!last) out = deserialize_message(bytes, kCpu).tensors;
    }
    if (last || !holds_whole_pipeline()) result = std::move(out);
    return StepTotals{};
  };
  run_ranks(body, false, "pipeline prediction");
  return result;
}

}  // namespace gpipe
