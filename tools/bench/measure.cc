// gpipe_bench measure: one gpipe measurement of a BENCHMARKS.md workload, run
// by the other subcommands in a fresh process each (so allocator peaks, thread
// pools and caches start clean, as on the PyTorch side).
//
// A step is what PyTorch's reference times: zero the gradients, forward +
// loss + backward of every micro-batch (Pipeline::train_step), optimizer step.
// The optimizer runs on the calling thread with K x threads intra-op threads
// (all the cores the stages use). The memory peaks are reset after the
// warm-up steps, when the optimizer state and the gradients exist, so the
// activation peak is that of the timed steps alone.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/parallel.h"
#include "core/precision.h"
#include "models/amoebanet.h"
#include "models/resnet.h"
#include "models/transformer.h"
#include "models/unet.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "pipeline/pipeline.h"
#include "pipeline/simulate.h"
#include "runtime/mpi.h"
#include "tools/bench/benchmarks.h"
#include "tools/bench/common.h"

namespace gpipe::bench {
namespace {

constexpr int64_t kSrcLen = 32, kTgtLen = 32, kVocab = 8192;

// Uniform tokens in [1, vocab): token 0 is the zoo's pad_id, and W2 has no
// padding, so no token is masked or ignored.
Batch transformer_batch(int64_t n, uint64_t seed) {
  uint64_t x = seed;
  auto next = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>(1 + (x >> 33) % (kVocab - 1));
  };
  std::vector<int64_t> src(n * kSrcLen), target(n * (kTgtLen + 1)), tin, tout;
  for (auto& t : src) t = next();
  for (auto& t : target) t = next();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < kTgtLen; ++j) {
      tin.push_back(target[i * (kTgtLen + 1) + j]);
      tout.push_back(target[i * (kTgtLen + 1) + j + 1]);
    }
  return {
      {Tensor::from_vector(src, Shape{n, kSrcLen}), Tensor::from_vector(tin, Shape{n, kTgtLen})},
      {Tensor::from_vector(tout, Shape{n, kTgtLen})}};
}

Batch image_batch(int64_t n, uint64_t seed) {
  std::vector<int64_t> labels(n);
  uint64_t x = seed;
  for (auto& l : labels) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    l = static_cast<int64_t>((x >> 33) % 10);
  }
  return {{Tensor::randn(Shape{n, 3, 32, 32}, seed)}, {Tensor::from_vector(labels, Shape{n})}};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double transformer_step_flops(int64_t layers, int64_t n, int64_t s, int64_t t, int64_t d,
                              int64_t ffn, int64_t vocab) {
  const double nd = static_cast<double>(d);
  const double enc = n * s * (8 * nd * d + 4.0 * s * d + 4 * nd * ffn);
  const double self_attn = n * t * (8 * nd * d + 4.0 * t * d);
  const double cross = n * t * 4 * nd * d + n * s * 4 * nd * d + n * t * 4.0 * s * d;
  const double dec = self_attn + cross + n * t * 4 * nd * ffn;
  const double head = 2.0 * n * t * d * vocab;
  return 3.0 * (layers * (enc + dec) + head);
}

namespace {

bool lm_workload(const MeasureOptions& o) { return o.workload == "gpt2" || o.workload == "llama"; }

// --layers left at 0: 3 (the Transformer's layers per side, AmoebaNet's N,
// U-Net's depth), ResNet-50 for resnet, whose depth is 50, 101 or 152; 12
// blocks for gpt2 and llama.
int64_t workload_layers(const MeasureOptions& o) {
  if (o.layers > 0) return o.layers;
  if (lm_workload(o)) return 12;
  return o.workload == "resnet" ? 50 : 3;
}

}  // namespace

double transformer_workload_flops(int64_t layers, int64_t n) {
  return transformer_step_flops(layers > 0 ? layers : 3, n, kSrcLen, kTgtLen, 256, 1024, kVocab);
}

MeasuredWorkload measure_workload(const MeasureOptions& options) {
  MeasureOptions o = options;
  o.layers = workload_layers(options);
  MeasuredWorkload w;
  if (o.workload == "transformer") {
    models::TransformerConfig c;
    c.layers = o.layers;
    c.ffn = 1024;
    c.heads = 4;
    c.dim = 256;
    c.vocab = kVocab;
    c.max_len = 64;
    c.fused_loss = !o.unfused_loss;
    c.dropout = o.dropout;
    w.expected_params = models::transformer_parameter_count(c);
    w.model = models::transformer(c);
    w.batch = transformer_batch(o.batch, 1234);
  } else if (o.workload == "amoebanet") {
    models::AmoebaNetConfig c;
    c.num_normal_cells = o.layers;
    c.filters = 32;
    c.torchgpipe_maxpool_quirk = o.quirk_maxpool;
    w.expected_params = models::amoebanet_parameter_count(c);
    w.model = models::amoebanet_d(c);
    w.batch = image_batch(o.batch, 7);
  } else if (o.workload == "unet") {
    models::UNetConfig c;
    c.depth = o.layers;
    c.base_channels = o.width;
    c.convs_per_block = o.convs;
    c.in_channels = 3;
    c.num_classes = 2;
    w.expected_params = models::unet_parameter_count(c);
    w.model = models::unet(c);
    w.batch = image_batch(o.batch, 7);
    std::vector<int64_t> mask(o.batch * 32 * 32);  // a class per pixel
    for (size_t i = 0; i < mask.size(); ++i)
      mask[i] = static_cast<int64_t>((i * 2654435761u) >> 7) & 1;
    w.batch.targets = {Tensor::from_vector(mask, Shape{o.batch, 32, 32})};
  } else if (o.workload == "resnet") {
    models::ResNetConfig c;
    c.depth = o.layers;
    c.width = o.width;
    c.in_channels = 3;
    c.num_classes = 10;
    c.small_input = true;
    c.split_blocks = o.split_blocks;
    w.expected_params = models::resnet_parameter_count(c);
    w.model = models::resnet(c);
    w.batch = image_batch(o.batch, 7);
  } else if (lm_workload(o)) {
    const models::LmConfig c = lm_workload_config(o.workload, o.layers, o.context, o.vocab);
    w.expected_params = models::lm_parameter_count(c);
    w.model = models::language_model(c);
    w.batch = lm_batch(o.batch, o.context, c.vocab, 1234);
  } else {
    throw Error(detail::concat("measure: unknown workload '", o.workload,
                               "' (transformer | amoebanet | unet | resnet | gpt2 | llama)"));
  }
  return w;
}

namespace {

struct Timed {
  std::vector<double> seconds, losses;
  std::vector<double> pipeline_seconds;  // train_step alone
  double mean_bubble = 0;
};

// Warm-up steps, peak reset, then timed steps (zero_grad, train_step, optimizer step).
Timed run_steps(Pipeline& pipe, optim::Optimizer& opt, const Batch& batch,
                const MeasureOptions& o) {
  Timed t;
  std::vector<double> bubbles;
  auto step = [&] {
    pipe.zero_grad();
    const StepResult r = pipe.train_step(batch);
    t.losses.push_back(r.loss);
    t.pipeline_seconds.push_back(r.seconds);
    bubbles.push_back(r.bubble_fraction);
    opt.step();
  };
  for (int i = 0; i < o.warmup; ++i) step();
  pipe.reset_memory_peaks();
  pipe.tracer().clear();
  bubbles.clear();
  t.pipeline_seconds.clear();
  const auto start = std::chrono::steady_clock::now();
  while (static_cast<int>(t.seconds.size()) < o.steps &&
         (t.seconds.empty() || seconds_since(start) < o.max_seconds)) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    t.seconds.push_back(seconds_since(t0));
  }
  for (double b : bubbles) t.mean_bubble += b / static_cast<double>(bubbles.size());
  return t;
}

// `extra`: more `"key": value` pairs, each starting with ", ".
void print_json(const Pipeline& pipe, const Timed& t, int64_t params, int64_t expected_params,
                const std::string& extra) {
  int64_t act_max = 0, act_sum = 0, total_max = 0, param_b = 0, grad_b = 0, opt_b = 0;
  std::string per_device, totals;
  for (const DeviceMemory& m : pipe.memory()) {
    totals +=
        (totals.empty() ? "" : " ") + m.device.str() + "=" + std::to_string(m.peak_total_bytes);
    act_max = std::max(act_max, m.peak_activation_bytes);
    act_sum += m.peak_activation_bytes;
    total_max = std::max(total_max, m.peak_total_bytes);
    param_b += m.parameter_bytes;
    grad_b += m.gradient_bytes;
    opt_b += m.optimizer_bytes;
    per_device += (per_device.empty() ? "" : " ") + m.device.str() + "=" +
                  std::to_string(m.peak_activation_bytes);
  }
  std::string
      cell_costs;  // the partitioner's cost per cell (FLOPs), for the simulator's prediction
  for (const CellInfo& c : pipe.cells())
    cell_costs += (cell_costs.empty() ? "" : " ") + std::to_string(c.cost);
  std::printf(
      "{\"median_s\": %.6f, \"best_s\": %.6f, \"steps\": %zu, \"params\": %ld, "
      "\"expected_params\": %ld, "
      "\"loss_first\": %.6f, \"loss_last\": %.6f, \"act_peak_max\": %ld, \"act_peak_sum\": %ld, "
      "\"peak_total_max\": %ld, \"param_bytes\": %ld, \"grad_bytes\": %ld, \"opt_bytes\": %ld, "
      "\"act_peak_devices\": \"%s\", \"total_peak_devices\": \"%s\", \"partition\": \"%s\", "
      "\"cell_costs\": \"%s\", \"bubble\": "
      "%.4f%s}\n",
      median_of(t.seconds), *std::min_element(t.seconds.begin(), t.seconds.end()), t.seconds.size(),
      static_cast<long>(params), static_cast<long>(expected_params), t.losses.front(),
      t.losses.back(), static_cast<long>(act_max), static_cast<long>(act_sum),
      static_cast<long>(total_max), static_cast<long>(param_b), static_cast<long>(grad_b),
      static_cast<long>(opt_b), per_device.c_str(), totals.c_str(), pipe.partition().str().c_str(),
      cell_costs.c_str(), t.mean_bubble, extra.c_str());
  std::fflush(stdout);
}

}  // namespace

// Bytes a boundary carries per step by the communication model: every
// micro-batch's boundary activations forward, and the gradient of each
// floating one backward (N examples in all, per boundary, K - 1 boundaries).
// `specs` describe `spec_examples` examples; a replica's step has `n`. Float
// tensors cross in `precision`'s storage dtype (Note [Mixed precision]).
int64_t predicted_boundary_bytes(const std::vector<BundleSpec>& specs, const Partition& part,
                                 int64_t n, int64_t spec_examples, Precision precision) {
  int64_t bytes = 0;
  for (int64_t c = 1; c < part.cells(); ++c)
    for (const TensorSpec& t : specs[part.begin(c)]) {
      const DType d = t.dtype == DType::kFloat32 ? storage_dtype(precision) : t.dtype;
      const int64_t b = t.shape.numel() / spec_examples * n * static_cast<int64_t>(dtype_size(d));
      bytes += is_float_like(d) ? 2 * b : b;
    }
  return bytes;
}

int run_measure(const MeasureOptions& o) {
  GPIPE_CHECK(o.steps >= 1 && o.warmup >= 0, "measure: need --steps >= 1 and --warmup >= 0");
  MeasuredWorkload w = measure_workload(o);
  std::shared_ptr<Communicator> world;
  if (mpi::launched_by_mpirun()) world = mpi::world();
  // The optimizer's thread budget: every stage's cores in one process, one stage's otherwise.
  set_default_intra_op_threads(world ? o.threads : o.K * o.threads);
  PipelineOptions po;
  po.K = o.K;
  po.M = o.M;
  po.remat = parse_remat(o.remat);
  po.schedule = parse_schedule(o.schedule);
  po.virtual_stages = o.virtual_stages;
  po.threads_per_stage = o.threads;
  if (!o.balance.empty()) po.balance = parse_balance(o.balance);
  po.trace = !o.trace_path.empty();
  po.world = world;
  po.replicas = o.replicas;
  po.skip_transport = parse_skip_transport(o.skips);
  po.precision = parse_precision(o.precision);
  po.link_delay_seconds = o.link_delay_us * 1e-6;
  po.measure_link_latency = o.order_latency < 0;
  po.order_costs.link_latency = std::max(0.0, o.order_latency);
  // Boundary shapes of one micro-batch (to predict the bytes sent), before the model moves in.
  std::vector<BundleSpec> specs;
  const int64_t micro = std::min<int64_t>(o.M * o.replicas, o.batch);
  specs.push_back({});
  const std::vector<Batch> one = split_micro_batches(w.batch, micro);
  infer_specs(w.model.layers, spec_of(one[0].inputs), &specs);
  specs.erase(specs.begin());
  Pipeline pipe(std::move(w.model), po, w.batch);

  std::unique_ptr<optim::Optimizer> opt;
  if (o.workload == "transformer" || lm_workload(o))
    opt = std::make_unique<optim::Adam>(pipe.parameters(), optim::AdamOptions{.lr = 1e-4});
  else
    opt = std::make_unique<optim::Sgd>(pipe.parameters(),
                                       optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
  // Trained elements; with K > 1 a tied table has one copy per cell holding it.
  int64_t params = 0;
  for (const NamedTensor& p : opt->parameters()) params += p.tensor->numel();

  auto sent = [&] {
    int64_t b = 0;
    for (const auto& [name, bytes] : pipe.bytes_sent()) b += bytes;
    return b;
  };
  const int64_t before = sent();
  const Timed t = run_steps(pipe, *opt, w.batch, o);
  // Per step and per replica (replica 0's ranks; the others send as much).
  double bytes =
      static_cast<double>(sent() - before) / static_cast<double>(o.warmup + t.seconds.size());
  if (world) {
    if (pipe.rank_info().replica != 0) bytes = 0;
    world->allreduce(&bytes, 1, ReduceOp::kSum, "summing bytes sent");
    double p = static_cast<double>(params);
    world->allreduce(&p, 1, ReduceOp::kSum, "summing parameters");
    params = static_cast<int64_t>(p) / o.replicas;
  }
  if (po.trace)
    pipe.write_trace(world ? detail::concat(o.trace_path, ".rank", world->rank()) : o.trace_path);
  if (world && world->rank() != 0) return 0;
  // The simulator's prediction of the pipeline step from the costs this run's trace measured
  // (each cell's mean F, R, B, I, W, and the sends as the links); in one process only (a rank
  // traces its own cells).
  double predicted_s = 0, predicted_bubble = 0;
  if (!world) {
    const Simulation sim =
        simulate(pipe.schedule(), costs_from_trace(pipe.schedule(), pipe.tracer().events()));
    predicted_s = sim.step_seconds;
    predicted_bubble = sim.bubble_fraction;
  }
  print_json(
      pipe, t, params, w.expected_params,
      detail::concat(
          ", \"pipeline_s\": ", median_of(t.pipeline_seconds),
          ", \"order_latency\": ", pipe.options().order_costs.link_latency, ", \"link_hop_us\": ",
          pipe.measured_link() ? pipe.measured_link()->hop_seconds * 1e6 : 0.0,
          ", \"predicted_s\": ", predicted_s, ", \"predicted_bubble\": ", predicted_bubble,
          ", \"bytes_per_step\": ", static_cast<int64_t>(bytes), ", \"predicted_bytes_per_step\": ",
          predicted_boundary_bytes(specs, pipe.partition(), o.batch / o.replicas,
                                   batch_size(one[0]), po.precision)));
  return 0;
}

MeasureOptions w3_measure(int k, int m, const std::string& schedule, const std::string& remat,
                          int threads, int warmup, int steps) {
  MeasureOptions mo;
  mo.layers = 8;
  mo.batch = 64;
  mo.threads = threads;
  mo.K = k;
  mo.M = m;
  mo.remat = remat;
  mo.schedule = schedule;
  mo.warmup = warmup;
  mo.steps = steps;
  mo.max_seconds = 1e9;
  return mo;
}

std::string measure_in_child(const MeasureOptions& o) {
  std::string cmd = self_exe() + " measure --workload " + o.workload + " --layers " +
                    std::to_string(workload_layers(o)) + " --batch " + std::to_string(o.batch) +
                    " --threads " + std::to_string(o.threads) + " --K " + std::to_string(o.K) +
                    " --M " + std::to_string(o.M) + " --remat " + o.remat + " --warmup " +
                    std::to_string(o.warmup) + " --steps " + std::to_string(o.steps) +
                    " --max-seconds " + std::to_string(o.max_seconds);
  if (!o.balance.empty()) cmd += " --balance " + o.balance;
  if (o.schedule != "gpipe") cmd += " --schedule " + o.schedule;
  if (o.virtual_stages > 1) cmd += " --virtual " + std::to_string(o.virtual_stages);
  if (!o.trace_path.empty()) cmd += " --trace " + o.trace_path;
  if (o.quirk_maxpool) cmd += " --torchgpipe-maxpool";
  if (o.replicas > 1) cmd += " --replicas " + std::to_string(o.replicas);
  if (o.precision != "fp32") cmd += " --precision " + o.precision;
  if (o.unfused_loss) cmd += " --unfused-loss";
  if (o.dropout > 0) cmd += " --dropout " + std::to_string(o.dropout);
  if (o.link_delay_us > 0) cmd += " --link-delay-us " + std::to_string(o.link_delay_us);
  if (o.order_latency != 0) cmd += " --order-latency " + std::to_string(o.order_latency);
  if (lm_workload(o))
    cmd += " --context " + std::to_string(o.context) + " --vocab " + std::to_string(o.vocab);
  if (o.workload == "unet" || o.workload == "resnet")
    cmd += " --width " + std::to_string(o.width) + " --convs " + std::to_string(o.convs) +
           " --skips " + o.skips + (o.split_blocks ? " --split-blocks" : "");
  return run_json(cmd);
}

}  // namespace gpipe::bench
