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

double Pipeline::evaluate(const Batch& batch, int micro_batches) {
  GPIPE_CHECK(micro_batches >= 0, "evaluate: micro_batches must be >= 0 (0 = M), got ",
              micro_batches);
  NoGradGuard no_grad;
  ModeGuard mode{this, model_.layers.front()->training()};
  train(false);
  const int k = static_cast<int>(partition_.cells());
  auto body = [&](StageExecutor& r) {
    const RankInfo& ri = r.info();
    const bool last = ri.stage == ri.cells - 1;
    const int64_t n = rows_from_first_stage(r, batch);
    const int64_t per_replica = micro_batches > 0 ? micro_batches : opt_.M;
    const int pieces = static_cast<int>(std::min<int64_t>(n, opt_.replicas * per_replica));
    int64_t rows = 0;
    double terms = 0;
    const std::vector<Batch> micro =
        micro_for(r, batch, n, pieces, /*by_replica=*/true, &rows, &terms);
    const Schedule program =
        make_forward_schedule(k, static_cast<int>(micro.size()), /*with_loss=*/true);
    StepContext ctx{opt_.seed, step_, 0, 1.0};
    ctx.precision = opt_.precision;
    const StepTotals t = r.run(program.stages[ri.stage], false, micro, ctx, {});
    double sums[2] = {last ? t.loss : 0.0, last ? terms : 0.0};
    r.world().allreduce(sums, 2, ReduceOp::kSum, "summing the evaluation loss");
    return StepTotals{sums[0], sums[1], 0};
  };
  const StepTotals t = run_ranks(body, false, "pipeline evaluation").front();
  return t.terms > 0 ? t.loss / t.terms : 0.0;
}

Bundle Pipeline::predict(const Bundle& inputs, const PredictOptions& options) {
  NoGradGuard no_grad;
  // Eval mode for this call (dropout off, BatchNorm on running statistics).
  ModeGuard mode{this, model_.layers.front()->training()};
  train(false);
  const int k = static_cast<int>(partition_.cells());
  const Batch batch{inputs, {}};
  Bundle result;
  auto body = [&](StageExecutor& r) {
    const RankInfo& ri = r.info();
    const bool last = ri.stage == ri.cells - 1;
    const int64_t n = rows_from_first_stage(r, batch);
    GPIPE_CHECK(options.micro_batches >= 0, "predict: micro_batches must be >= 0 (0 = M), got ",
                options.micro_batches);
    const int pieces = static_cast<int>(
        std::min<int64_t>(n, options.micro_batches > 0 ? options.micro_batches : opt_.M));
    const std::vector<Batch> micro =
        micro_for(r, batch, n, pieces, /*by_replica=*/false, nullptr, nullptr);
    const Schedule program = make_forward_schedule(k, pieces, /*with_loss=*/false);
    r.run(program.stages[ri.stage], false, micro,
          StepContext{opt_.seed, step_, 0, 1.0, options.session, opt_.precision}, {});
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
      r.pipe().broadcast(bytes, ri.cells - 1, "sharing the prediction of the last stage");
      if (!last) out = deserialize_message(bytes, kCpu).tensors;
    }
    if (last || !holds_whole_pipeline()) result = std::move(out);
    return StepTotals{};
  };
  if (options.session && !inputs.empty()) {
    const int64_t n = batch_size(batch);
    const int64_t per_call = options.micro_batches > 0 ? options.micro_batches : opt_.M;
    options.session->check_layout({n, static_cast<int>(std::min<int64_t>(n, per_call))});
  }
  try {
    run_ranks(body, false, "pipeline prediction");
  } catch (...) {
    // Some layers may have advanced their cache: the session cannot continue.
    if (options.session) options.session->clear();
    throw;
  }
  return result;
}

}  // namespace gpipe
