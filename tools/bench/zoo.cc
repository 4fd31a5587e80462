// gpipe_bench skips and gpipe_bench resnet: the skip-connection zoo's
// benchmarks (docs/BENCHMARKS.md, "Skips, ResNet-101 and U-Net").
//
// skips: U-Net(B, C) at K = 2 and 4, its long skips sent straight from the
// encoder level's cell to the decoder level's (direct) against carried
// through every cell in between (through-cells, what a bundle would do):
// step throughput, the peak memory of each device, and the bytes the links
// send per step. Each run in a fresh process.
//
// resnet: ResNet-101 (32x32 inputs, 3x3 stem) with its blocks as layers: K = 1
// on one core, K = 2 with M = 8 and one core per stage (the speed-up against
// GPipe's bound 2M/(M+1) for two equal stages), and K = 1 on both cores
// against PyTorch's torchvision-style ResNet-101 on both (benchmarks/resnet_torch.py).
#include <cstdio>
#include <sstream>
#include <string>

#include "core/error.h"
#include "models/resnet.h"
#include "models/unet.h"
#include "tools/bench/benchmarks.h"
#include "tools/bench/common.h"

namespace gpipe::bench {
namespace {

// "cpu:0=123e6 cpu:1=456e6" -> "123/456" (MB).
std::string per_device_gb(const std::string& field) {
  std::istringstream in(field);
  std::string item, out;
  while (in >> item) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) continue;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", std::stod(item.substr(eq + 1)) / 1e6);
    out += (out.empty() ? "" : "/") + std::string(buf);
  }
  return out;
}

}  // namespace

int run_skips(const SkipsBenchOptions& o) {
  models::UNetConfig u;
  u.depth = o.depth;
  u.base_channels = o.channels;
  u.convs_per_block = o.convs;
  u.in_channels = 3;
  std::printf(
      "# U-Net(%ld, %ld), %ld conv units per block, 3x32x32 inputs, 2 classes per pixel; %s "
      "parameters; batch %ld, M = %d, %d thread(s) per stage; SGD(0.01, momentum 0.9)\n"
      "# median of %d steps after %d warm-up; each run a fresh process; memory: peak per device "
      "(activations; everything: parameters, gradients, optimizer state, activations)\n",
      static_cast<long>(o.depth), static_cast<long>(o.channels), static_cast<long>(o.convs),
      std::to_string(models::unet_parameter_count(u)).c_str(), static_cast<long>(o.batch), o.M,
      o.threads, o.steps, o.warmup);
  std::printf("%2s %-14s %9s %7s %-22s %-22s %12s %s\n", "K", "skips", "img/s", "speed",
              "act peak MB", "total peak MB", "MB/step", "cells");
  for (int k : o.K) {
    double routed_rate = 0;
    for (const char* skips : {"through-cells", "direct"}) {
      MeasureOptions m;
      m.workload = "unet";
      m.layers = o.depth;
      m.width = o.channels;
      m.convs = o.convs;
      m.batch = o.batch;
      m.K = k;
      m.M = o.M;
      m.threads = o.threads;
      m.remat = "never";
      m.warmup = o.warmup;
      m.steps = o.steps;
      m.max_seconds = o.max_seconds;
      m.skips = skips;
      const std::string j = measure_in_child(m);
      const double rate = static_cast<double>(o.batch) / json_number(j, "median_s");
      if (routed_rate == 0) routed_rate = rate;
      std::printf("%2d %-14s %9.2f %6.3fx %-22s %-22s %12.1f %s\n", k, skips, rate,
                  rate / routed_rate, per_device_gb(json_string(j, "act_peak_devices")).c_str(),
                  per_device_gb(json_string(j, "total_peak_devices")).c_str(),
                  json_number(j, "bytes_per_step") / 1e6, json_string(j, "partition").c_str());
      std::fflush(stdout);
    }
  }
  std::printf(
      "# speed: against through-cells at the same K. The cuts are the cost-balanced ones, the "
      "same for both (skips do not change them).\n");
  return 0;
}

int run_resnet(const ResNetBenchOptions& o) {
  models::ResNetConfig r;
  r.depth = o.depth;
  r.width = o.width;
  r.small_input = true;
  const int64_t params = models::resnet_parameter_count(r);
  std::printf(
      "# ResNet-%ld (W=%ld, 3x3 stem, 32x32 inputs, 10 classes), %ld parameters, blocks as "
      "layers; batch %ld; SGD(0.01, momentum 0.9); median of %d steps after %d warm-up; each "
      "run a fresh process; %s\n",
      static_cast<long>(o.depth), static_cast<long>(o.width), static_cast<long>(params),
      static_cast<long>(o.batch), o.steps, o.warmup, o.torch.env_note.c_str());
  auto measure = [&](int k, int m, int threads) {
    MeasureOptions mo;
    mo.workload = "resnet";
    mo.layers = o.depth;
    mo.width = o.width;
    mo.batch = o.batch;
    mo.K = k;
    mo.M = m;
    mo.threads = threads;
    mo.remat = "never";
    mo.warmup = o.warmup;
    mo.steps = o.steps;
    mo.max_seconds = o.max_seconds;
    return measure_in_child(mo);
  };
  const int mb = o.M;
  const std::string one = measure(1, 1, 1), two = measure(2, mb, 1);
  const double t1 = json_number(one, "median_s"), t2 = json_number(two, "median_s");
  const double speedup = t1 / t2, bound = 2.0 * mb / (mb + 1.0);
  std::printf("%-34s %9s %9s %s\n", "run", "step s", "img/s", "");
  std::printf("%-34s %9.3f %9.2f\n", "gpipe K=1 M=1, 1 core", t1, o.batch / t1);
  std::printf("%-34s %9.3f %9.2f  cells %s, measured bubble %.3f\n",
              detail::concat("gpipe K=2 M=", mb, ", 1 core per stage").c_str(), t2, o.batch / t2,
              json_string(two, "partition").c_str(), json_number(two, "bubble"));
  std::printf(
      "# pipeline speed-up %.3f against GPipe's 2M/(M+1) = %.3f for equal stages: efficiency "
      "%.3f of the bound (speed-up / 2 = %.3f against M/(M+1) = %.3f)\n",
      speedup, bound, speedup / bound, speedup / 2, mb / (mb + 1.0));
  const std::string both = measure(1, 1, 2);
  const double tb = json_number(both, "median_s");
  std::printf("%-34s %9.3f %9.2f\n", "gpipe K=1 M=1, 2 cores", tb, o.batch / tb);
  if (o.torch.skip) return 0;
  const std::string python = o.torch.python.empty() ? default_torch_python() : o.torch.python;
  const std::string ref = try_run_json(
      python_command(python, "resnet_torch.py", 2,
                     detail::concat("--depth ", o.depth, " --width ", o.width, " --batch ", o.batch,
                                    " --threads 2 --warmup ", o.warmup, " --steps ", o.steps,
                                    " --max-seconds ", o.max_seconds)));
  if (ref.empty()) return 0;
  const double tt = json_number(ref, "median_s");
  GPIPE_CHECK(static_cast<int64_t>(json_number(ref, "params")) == params,
              "resnet: PyTorch's model has ", static_cast<int64_t>(json_number(ref, "params")),
              " parameters, gpipe's ", params);
  std::printf("%-34s %9.3f %9.2f  torch %s\n", "PyTorch, 2 threads", tt, o.batch / tt,
              json_string(ref, "torch").c_str());
  std::printf(
      "# against PyTorch on the same 2 cores: gpipe K=1 %.3fx, gpipe K=2 M=%d (1 core per "
      "stage) %.3fx (throughput ratios, > 1: gpipe faster)\n",
      tt / tb, mb, tt / t2);
  return 0;
}

}  // namespace gpipe::bench
