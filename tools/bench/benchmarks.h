// The benchmarks behind `gpipe_bench <name>`; each prints gpipe's figures
// beside the reference's from the same run (ratios, not lone times).
// Workloads W1..W5 are defined in shared/BENCHMARKS.md; docs/BENCHMARKS.md
// holds the latest figures and the commands that produced them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/bundle.h"
#include "core/cpu_isa.h"
#include "layers/loss.h"
#include "models/lm.h"

namespace gpipe::bench {

// W1: fp32 GEMM. Square n x n through ops::matmul with each backend (and
// numpy), then the Transformer's shapes (each linear layer's forward A*B^T,
// input gradient A*B and weight gradient A^T*B) through parallel_gemm; each
// as GFLOP/s and as a fraction of the measured FMA peak (measure_fma_peak)
// of the active ISA level at that thread count.
struct GemmBenchOptions {
  std::vector<int64_t> sizes{512, 1024, 2048};
  std::vector<int> threads{1, 2};
  double min_seconds = 2.0;
  std::string python = "/usr/bin/python3";  // Debian's numpy (OpenBLAS)
  bool skip_numpy = false;
  bool skip_torch = false;  // torch.mm column (benchmarks/setup_torch.sh's venv)
  bool skip_square = false, skip_transformer = false;
  bool skip_bf16 = false;  // the bfloat16 section (gpipe's two paths, torch.mm in bfloat16)
  int64_t tokens = 2048, dim = 1024;  // FFN shapes: tokens x d -> 4d -> d
  int64_t vocab_tokens = 1024,
          vocab_dim = 512;  // output projection shapes (smaller: vocab is wide)
  std::vector<int64_t> vocab{256, 32000};
  double shape_min_seconds = 0.5;  // timing budget per Transformer-shape measurement
  bool sweep_blocking = false;     // only the blocking sweep (Note [GEMM blocking])
  bool cold = false;  // Transformer shapes: also the packed GEMM on operands out of the caches
  std::string env_note;
};
int run_gemm(const GemmBenchOptions& opt);

// `gpipe_bench peak`: FMA peak GFLOP/s per ISA level the CPU has, at each
// thread count.
struct PeakBenchOptions {
  std::vector<int> threads{1, 2};
  double seconds = 1.0;  // per measurement
  std::string env_note;
};
int run_peak(const PeakBenchOptions& opt);
// GFLOP/s of `threads` threads of an intra-op pool, each running independent
// FMA chains at `isa`, over about `seconds`; throws gpipe::Error if the CPU
// lacks the level.
double measure_fma_peak(CpuIsa isa, int threads, double seconds);
// Memory bandwidth in GB/s of `threads` threads of an intra-op pool running
// a triad a[i] = b[i] + s c[i] over three 64 MiB float arrays (12 bytes per
// element counted, as STREAM does), best of repeats over about `seconds`.
double measure_bandwidth(int threads, double seconds);
// GFLOP/s of `threads` threads each running the active level's float32 GEMM
// micro-kernel on panels that stay in the caches, best of repeats over about
// `seconds` (Note [Kernel in cache] in peak.cc).
double measure_gemm_kernel_rate(int threads, double seconds);

// `gpipe_bench profile`: one workload's step per kernel slot (time, share,
// bytes and bandwidth against measure_bandwidth; Note [Kernel profile]).
struct ProfileBenchOptions {
  std::string workload = "transformer";
  int64_t layers = 0, batch = 32;  // layers 0: the workload's (measure_workload)
  int threads = 1;
  std::string precision = "fp32";
  bool unfused_loss = false;  // transformer: the output projection outside the loss
  double dropout = 0;         // transformer: TransformerConfig::dropout (training)
  int warmup = 3, steps = 10;
  std::string env_note;
};
int run_profile(const ProfileBenchOptions& opt);

// ---- one gpipe measurement, in a fresh process -------------------------------
// `gpipe_bench measure ...` (hidden) builds one workload, trains it through a
// Pipeline and prints one JSON line: median/best step seconds, first/last
// loss, parameter count, the partition, and per-device allocator statistics
// (peak activation bytes since the peaks were reset after the warm-up steps,
// which also created the optimizer state).
struct KernelsBenchOptions {
  std::vector<int> threads{1, 2};
  double seconds = 0.3;  // timing budget per kernel and level
  std::string filter;    // only kernels whose name contains this
  std::string env_note;
};
int run_kernels(const KernelsBenchOptions& opt);

struct MeasureOptions {
  std::string workload =
      "transformer";   // transformer (Adam 1e-4) | amoebanet, unet, resnet (SGD 0.01, momentum 0.9)
  int64_t layers = 0;  // transformer: encoder (= decoder) layers; amoebanet: N; unet,
                       // resnet: depth; 0: the workload's default (measure_workload)
  int64_t batch = 32;  // N
  int threads = 1;     // intra-op threads per stage
  int K = 1;
  int M = 1;
  std::string remat = "never";     // never | except_last | always
  std::string schedule = "gpipe";  // gpipe | 1f1b | zb-h1 | interleaved
  int virtual_stages = 1;          // v: cells per device (interleaved)
  std::string balance;             // "12,7": explicit layers per cell (else by cost)
  int warmup = 3, steps = 20;
  double max_seconds = 30;     // stop timing after this many seconds (>= 1 timed step)
  bool quirk_maxpool = false;  // amoebanet: torchgpipe's AvgPool for max_pool_3x3
  std::string trace_path;      // write a Chrome trace of the timed steps here
  int replicas = 1;            // R (under mpirun: one process per stage and replica)
  // unet (layers = B): C channels, units per block; resnet (layers = depth): W, blocks split.
  int64_t width = 64, convs = 5;
  bool split_blocks = false;
  std::string skips = "direct";    // direct | through-cells
  std::string precision = "fp32";  // fp32 | bf16 | fp16 (PipelineOptions::precision)
  // transformer: logits then the loss, not linear_cross_entropy (Note [Fused output loss]).
  bool unfused_loss = false;
  double dropout = 0;  // transformer: TransformerConfig::dropout (training)
  // A link slowed on purpose: every hand-over between devices arrives this
  // many microseconds after its send (PipelineOptions::link_delay_seconds).
  double link_delay_us = 0;
  // The hop latency, in a cell's forwards, the cost-built orders are placed
  // for; < 0: measured at start-up (PipelineOptions::measure_link_latency).
  double order_latency = 0;
  int64_t context = 256;  // gpt2, llama: tokens per sequence
  int64_t vocab = 0;      // gpt2, llama: 0 = the architecture's (50257, 32000)
};
int run_measure(const MeasureOptions& opt);
// The model and mini-batch a measurement trains (its workload, layers, batch and quirk).
struct MeasuredWorkload {
  Model model;
  Batch batch;
  int64_t expected_params = 0;
};
MeasuredWorkload measure_workload(const MeasureOptions& opt);
// FLOPs of one training step of measure_workload's Transformer (layers 0: 3)
// on a mini-batch of n sentence pairs (transformer_step_flops).
double transformer_workload_flops(int64_t layers, int64_t n);
// Runs `run_measure(opt)` in a fresh process of this executable; returns its JSON line.
std::string measure_in_child(const MeasureOptions& opt);
// W3's model (8+8 layers, N = 64) at K cells and M micro-batches, one schedule
// and remat mode, `threads` per stage, timed for `steps` after `warmup` with
// no time budget (the pipeline, schedules and remat subcommands' runs).
MeasureOptions w3_measure(int k, int m, const std::string& schedule, const std::string& remat,
                          int threads, int warmup, int steps);

// Options every comparison against PyTorch shares.
struct TorchSide {
  std::string python;  // empty: default_torch_python()
  bool skip = false;   // --no-torch
  std::string env_note;
};

// W2: one training step of the 3+3 Transformer, N = 32, at each thread count.
struct TransformerBenchOptions {
  TorchSide torch;
  std::vector<int> threads{1, 2};
  // bf16: gpipe at --precision=bf16 against PyTorch under torch.autocast("cpu", bfloat16).
  std::string precision = "fp32";
  bool unfused_loss = false;  // gpipe's output projection outside the loss
  // Training dropout on both sides where gpipe's Transformer has it (embeddings, attention
  // probabilities, the FFN's hidden layer, each sublayer's output).
  double dropout = 0;
  int warmup = 3, steps = 20;
  double max_seconds = 30;
  int rounds = 1;  // Note [Rounds against noise] in compare.cc
};
int run_transformer(const TransformerBenchOptions& opt);

// W3: pipeline scaling of the 8+8 model, N = 64: K = 1 (one core) vs K = 2
// (one core per stage) for each M and remat mode; PyTorch's hand-rolled
// `seq` baseline (and Pipe where the installed torch still has it).
struct PipelineBenchOptions {
  TorchSide torch;
  std::vector<int> M{1, 8};
  std::vector<std::string> remat{"except_last", "never"};
  std::vector<std::string> schedules{"gpipe"};
  std::vector<int> torch_threads{1, 2};
  std::string balance;  // explicit K = 2 split, e.g. "12,7"
  int warmup = 1, steps = 3;
  bool try_pipe = true;
};
int run_pipeline(const PipelineBenchOptions& opt);

// Schedules: W3's model at K = 2 (one core per device) for each schedule
// and M: samples/s, the measured bubble beside the schedule's formula, the
// gain over 1F1B beside the gain the formulas predict, and the peak
// activation memory per device.
struct SchedulesBenchOptions {
  std::vector<int> M{2, 4, 8, 16};
  std::vector<std::string> schedules{"gpipe",        "1f1b",      "interleaved",    "zb-h1",
                                     "zb-h1-lowmem", "zb-v",      "zb-interleaved", "v-half",
                                     "v-min",        "dualpipev", "looped-bfs"};
  int K = 2;               // devices, one thread each
  int virtual_stages = 2;  // v for interleaved, zb-interleaved and looped-bfs
  std::string remat = "never";
  int warmup = 1, steps = 5;
  std::string trace_dir;  // write each run's trace (and its SVG) here
  // > 0: the slowed-link mode instead (run_slow_link): every hand-over
  // between devices arrives this many microseconds late; each schedule at
  // each K of slow_K, with the free-link order and with the order built for
  // the latency measured at start-up.
  double slow_link_us = 0;
  std::vector<int> slow_K{2, 4};
  // Its Transformer: layers per side and N (small cells, so that a hop of
  // a millisecond or two is worth forwards).
  int64_t slow_layers = 2, slow_batch = 16;
};
int run_schedules(const SchedulesBenchOptions& opt);

// Processes: W3 with one MPI rank per stage (K=2) against the in-process
// K=2 run, data parallelism (R=2, K=1) against one process, and the bytes
// each boundary carries per step against the paper's communication model.
struct ProcessesBenchOptions {
  std::vector<int> M{4, 8};
  std::string remat = "except_last";
  int warmup = 1, steps = 3;
  int rounds = 2;  // alternate the variants this many times; medians of the rounds
  std::string mpirun = "mpirun";
};
int run_processes(const ProcessesBenchOptions& opt);

// gpipe_plan --validate: the planner's predicted step time and per-device
// activation and total memory peaks against measured runs of W3's model
// (each K, schedule, M and remat mode; the measured run's cut).
struct PlanValidateOptions {
  std::vector<int> K{1, 2};
  std::vector<int> M{1, 2, 4, 8, 16};
  std::vector<std::string> remat{"never", "except_last", "always"};
  std::vector<std::string> schedules{"gpipe",        "1f1b",        "zb-h1",
                                     "zb-h1-lowmem", "interleaved", "zb-v"};
  bool every_remat = false;  // every remat mode for every schedule (else: gpipe and 1f1b only)
  bool compare_cuts = true;  // then W3 at M = 8: the cost-balanced cut vs the planner's
  int rounds = 2;            // of that comparison
  int64_t layers = 8, batch = 64;
  int warmup = 2, steps = 5;
  double max_seconds = 30;
};
int run_plan_validate(const PlanValidateOptions& opt);

// gpipe_plan --paper: Table 1 (the largest model that fits per K) and
// Table 2 (normalised throughput per K and M) of the GPipe paper from the
// planner, with per-layer costs of those models: bytes from gpipe's own
// layers profiled here (scaled to the paper's sizes), time from FLOPs at a
// stated throughput; beside the paper's figures.
struct PaperPlanOptions {
  double accelerator_flops = 100e12;  // sustained FLOP/s of one accelerator (time model)
  double link_bytes_per_second = 0;   // 0: free links (the paper's TPU interconnect)
  bool skip_amoebanet = false, skip_transformer = false;
};
int run_plan_paper(const PaperPlanOptions& opt);

// W4: activation memory and step time with and without rematerialisation.
struct RematBenchOptions {
  TorchSide torch;
  std::vector<std::string> schedules{"gpipe", "1f1b"};  // 1f1b only where it differs: K, M > 1
  std::vector<int> K{1, 2};
  std::vector<int> M{1, 8};
  std::vector<std::string> remat{"never", "except_last",
                                 "always"};  // except_last is skipped at M = 1 (= never)
  int warmup = 1, steps = 2;
};
int run_remat(const RematBenchOptions& opt);

// W5: AmoebaNet-D(2, 32), N = 64, 32x32x3, at each thread count.
struct AmoebaNetBenchOptions {
  TorchSide torch;
  std::vector<int> threads{1, 2};
  bool quirk_maxpool = false;  // both sides: torchgpipe's AvgPool for max_pool_3x3
  int warmup = 2, steps = 10;
  double max_seconds = 30;
  int rounds = 1;  // Note [Rounds against noise] in compare.cc
};
int run_amoebanet(const AmoebaNetBenchOptions& opt);

// One training step of a model, gpipe (measure_in_child, K = 1, M = 1) beside
// a PyTorch script, at each thread count: one table row per count (units/s,
// ratio, GFLOP/s, first loss), both sides' parameter counts checked. W2 and
// W5 are this table with their own model and script.
struct StepComparison {
  const char* name;       // "W5", in errors and the footer
  const char* unit;       // "img" or "tok", in the headers
  MeasureOptions model;   // workload, layers, batch, quirk; threads/warmup/steps are set per row
  double units_per_step;  // images or target tokens per step
  int64_t expected_params;
  const char* script;        // under benchmarks/
  std::string script_args;   // before the common --threads/--warmup/--steps/--max-seconds
  std::string script_extra;  // after them
  const char* gflop_format;  // printf format of the GF/s columns, e.g. "%10.2f"
};
// How each side is run: at each thread count, `rounds` rounds of both sides
// (Note [Rounds against noise] in compare.cc).
struct StepRuns {
  std::vector<int> threads;
  int warmup, steps;
  double max_seconds;
  int rounds = 1;
};
// Prints a row per round, a summary per thread count when there are several
// rounds, and the footer; `gflop` is the model's GFLOP per step.
int compare_steps(const StepComparison& c, const TorchSide& torch, const StepRuns& runs,
                  double gflop);

// Matmul FLOPs of one training step of the encoder-decoder Transformer
// (3 x forward, dense attention), as BENCHMARKS.md counts them.
// gpipe_bench skips: U-Net at K = 2 and 4 with its skips sent directly vs
// through the cells between (tools/bench/zoo.cc).
struct SkipsBenchOptions {
  int64_t depth = 5, channels = 64, convs = 5, batch = 16;
  int M = 8;
  std::vector<int> K = {2, 4};
  int threads = 1, warmup = 1, steps = 3;
  double max_seconds = 60;
};
int run_skips(const SkipsBenchOptions& opt);

// gpipe_bench resnet: ResNet-101 on 32x32 images, K = 2 M = 8 against K = 1
// (efficiency against 2M/(M+1)) and against PyTorch (benchmarks/resnet_torch.py).
struct ResNetBenchOptions {
  int64_t depth = 101, width = 64, batch = 32;
  int M = 8;
  int warmup = 1, steps = 3;
  double max_seconds = 60;
  TorchSide torch;
};
int run_resnet(const ResNetBenchOptions& opt);

// gpipe_bench lm (tools/bench/lm.cc): a GPT-2-small- or Llama-shaped
// training step (d 768, 12 heads; --layers, N, T) vs benchmarks/lm_torch.py.
struct LmBenchOptions {
  TorchSide torch;
  std::string arch = "gpt2";  // gpt2 | llama
  std::vector<int> threads{1, 2};
  int64_t layers = 12, batch = 8, context = 256;
  int64_t vocab = 0;               // 0: the architecture's (50257, 32000)
  std::string precision = "fp32";  // fp32 | bf16 (against PyTorch's CPU autocast)
  int warmup = 1, steps = 3;
  double max_seconds = 60;
  int rounds = 1;
};
int run_lm(const LmBenchOptions& opt);
// The workload's model (lm.cc) and a batch of uniform tokens and targets.
models::LmConfig lm_workload_config(const std::string& arch, int64_t layers, int64_t context,
                                    int64_t vocab = 0);
Batch lm_batch(int64_t n, int64_t context, int64_t vocab, uint64_t seed);

// gpipe_bench data (tools/bench/data.cc): examples/s through PrefetchLoader
// of a generated JPEG folder at each image size and of an llm.c token shard,
// against the examples/s a training step of the default model consumes.
struct DataBenchOptions {
  std::vector<int64_t> sizes{32, 224};
  int64_t images = 64;       // JPEGs generated per size (two classes)
  int64_t batch = 32;        // image batch (loader and step)
  int64_t lm_batch = 16;     // LM rows per batch
  int64_t tokens = 1 << 20;  // tokens in the generated shard
  double seconds = 3;        // loader timing per path
  int threads = 2;           // the step's intra-op threads
  int steps = 2;             // timed steps (after one warm-up)
};
int run_data(const DataBenchOptions& opt);

double transformer_step_flops(int64_t layers, int64_t n, int64_t src_len, int64_t tgt_len,
                              int64_t dim, int64_t ffn, int64_t vocab);

}  // namespace gpipe::bench
