// gpipe_plan --paper: the GPipe paper's Table 1 (the largest model that
// fits per K) and Table 2 (normalised throughput per K and M) from the
// planner, beside the paper's figures.
//
// The cost model (stated in the output):
//  - bytes: gpipe's own layers at the paper's widths, profiled here on one
//    example (Transformer: one encoder layer's attention and FFN at
//    d = 2048, FFN 8192, 32 heads, 1024 tokens; AmoebaNet-D: every cell at
//    F0 = 64 on 224 x 224 images, scaled to F linearly, parameters fitted
//    as a F^2 + b F from F0 and 2 F0), fp32, scaled linearly in examples;
//  - parameters: 12 bytes each (weights, gradients, RMSProp's square average);
//  - time: gpipe's FLOP estimate of each layer (Layer::cost) at a stated
//    accelerator throughput, I = W = F (B = 2F), links free unless given.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "core/autograd.h"
#include "core/parallel.h"
#include "models/amoebanet.h"
#include "models/transformer.h"
#include "pipeline/microbatch.h"
#include "pipeline/plan.h"
#include "tools/bench/benchmarks.h"

namespace gpipe::bench {
namespace {

// One layer's costs for one example.
struct PerExample {
  LayerProfile bytes;  // the byte fields (seconds are ignored)
  double flops = 0;    // forward FLOPs
  double param_bytes = 0;
};

LayerProfile scaled_bytes(const LayerProfile& p, double f) {
  LayerProfile q = p;
  for (int64_t* b : {&q.activation_bytes, &q.output_bytes, &q.output_grad_bytes, &q.pending_bytes,
                     &q.backward_extra_bytes, &q.input_extra_bytes, &q.weight_extra_bytes})
    *b = static_cast<int64_t>(std::llround(static_cast<double>(*b) * f));
  q.workspace_bytes = 0;  // CPU packing buffers: not an accelerator's
  return q;
}

// Costs linear in examples (one profile at one example; ModelCosts::at scales it).
ModelCosts linear_costs(const std::vector<PerExample>& layers, const LayerProfile& loss,
                        double input_bytes, const PaperPlanOptions& o) {
  ModelCosts c;
  ModelProfile p;
  p.rows = 1;
  p.input_bytes = static_cast<int64_t>(input_bytes);
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerProfile l = layers[i].bytes;
    const double f = layers[i].flops / o.accelerator_flops;
    l.forward_seconds = f;
    l.backward_input_seconds = i == 0 ? 0 : f;  // the first layer's input needs no gradient
    l.backward_weight_seconds = layers[i].param_bytes > 0 ? f : 0;
    l.parameter_bytes = static_cast<int64_t>(layers[i].param_bytes);
    p.layers.push_back(l);
    c.tensor_bytes.push_back(l.parameter_bytes);
    c.layer_tensors.push_back({static_cast<int>(i)});
  }
  p.loss = loss;
  p.loss.forward_seconds = p.loss.backward_input_seconds = 0;
  c.profiles = {p};
  c.optimizer_state_factor = 1;  // RMSProp: 4 + 4 + 4 = 12 bytes per parameter
  c.optimizer_bytes_per_tensor = 0;
  c.link_bytes_per_second = o.link_bytes_per_second;
  c.describe = "the paper's model, per-example costs scaled linearly";
  return c;
}

// Profiles `model` on one example; the per-layer bytes, FLOPs and parameter bytes.
std::vector<PerExample> profile_example(const Model& model, const Batch& one, LayerProfile* loss) {
  std::vector<BundleSpec> specs{{}};
  infer_specs(model.layers, spec_of(one.inputs), &specs);
  specs.erase(specs.begin());
  const std::vector<LayerProfile> prof = profile_layers(model.layers, one.inputs, 1);
  std::vector<PerExample> out;
  for (size_t i = 0; i < prof.size(); ++i)
    out.push_back(
        {prof[i], model.layers[i]->cost(specs[i]), static_cast<double>(prof[i].parameter_bytes)});
  Bundle h;
  {
    NoGradGuard no_grad;
    h = run_layers(model.layers, one.inputs);
  }
  *loss = profile_loss(*model.loss, h, one.targets);
  return out;
}

// ---- the Transformer of Table 1: d 2048, FFN 8192, 32 heads, vocab 32k, 1024 tokens ----

struct TransformerParts {
  PerExample embed, attention, ffn, output;
  LayerProfile loss;
  double input_bytes = 0;
};

TransformerParts profile_transformer() {
  models::TransformerConfig c;
  c.layers = 1;
  c.dim = 2048;
  c.ffn = 8192;
  c.heads = 32;
  c.vocab = 32000;
  c.max_len = 1024;
  c.seed = 3;
  Model m = models::transformer(c);
  std::vector<int64_t> tokens(1024);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = 1 + static_cast<int64_t>(i * 7919 % 31999);
  const Tensor t = Tensor::from_vector(tokens, Shape{1, 1024});
  const Batch one{{t, t}, {t}};
  TransformerParts parts;
  const std::vector<PerExample> layers = profile_example(m, one, &parts.loss);
  auto find = [&](const std::string& name) {
    for (size_t i = 0; i < m.layers.size(); ++i)
      if (m.layers[i]->name() == name) return layers[i];
    throw Error(detail::concat("paper: the Transformer has no layer '", name, "'"));
  };
  parts.embed = layers.front();
  parts.attention = find("encoder_0.self_attn");
  parts.ffn = find("encoder_0.ffn");
  parts.output = layers.back();
  parts.input_bytes = 2.0 * 1024 * 8;
  return parts;
}

// The paper's Transformer-L: embedding, L x (attention, FFN), softmax (two tables).
ModelCosts transformer_costs(const TransformerParts& p, int64_t layers, const PaperPlanOptions& o) {
  std::vector<PerExample> l{p.embed};
  for (int64_t i = 0; i < layers; ++i) {
    l.push_back(p.attention);
    l.push_back(p.ffn);
  }
  l.push_back(p.output);
  return linear_costs(l, p.loss, p.input_bytes, o);
}

double transformer_params(const TransformerParts& p, int64_t layers) {
  return (p.embed.param_bytes + p.output.param_bytes +
          static_cast<double>(layers) * (p.attention.param_bytes + p.ffn.param_bytes)) /
         4;
}

// ---- AmoebaNet-D(L, D) of Table 1: 224 x 224 images, 1000 classes ----

constexpr int64_t kF0 = 64;

struct AmoebaParts {
  std::vector<PerExample> at_f0;
  std::vector<double> params_2f0;  // parameter bytes per layer at 2 F0
  LayerProfile loss;
};

AmoebaParts profile_amoebanet(int64_t n) {
  models::AmoebaNetConfig c;
  c.num_normal_cells = n;
  c.filters = kF0;
  c.in_channels = 3;
  c.num_classes = 1000;
  c.seed = 5;
  Model m = models::amoebanet_d(c);
  const Batch one{{Tensor::randn(Shape{1, 3, 224, 224}, 9)},
                  {Tensor::from_vector(std::vector<int64_t>{3}, Shape{1})}};
  AmoebaParts parts;
  parts.at_f0 = profile_example(m, one, &parts.loss);
  c.filters = 2 * kF0;
  const Model m2 = models::amoebanet_d(c);
  for (const auto& layer : m2.layers) {
    double b = 0;
    for (const NamedTensor& t : layer->parameters()) b += static_cast<double>(t.tensor->nbytes());
    parts.params_2f0.push_back(b);
  }
  return parts;
}

ModelCosts amoebanet_costs(const AmoebaParts& p, int64_t f, const PaperPlanOptions& o) {
  const double r = static_cast<double>(f) / kF0;
  std::vector<PerExample> l;
  for (size_t i = 0; i < p.at_f0.size(); ++i) {
    const double p1 = p.at_f0[i].param_bytes, p2 = p.params_2f0[i];
    const double a = (p2 - 2 * p1) / 2, b = p1 - a;  // bytes = a r^2 + b r
    l.push_back({scaled_bytes(p.at_f0[i].bytes, r), p.at_f0[i].flops * r * r,
                 std::max(0.0, a * r * r + b * r)});
  }
  return linear_costs(l, scaled_bytes(p.loss, 1), 3.0 * 224 * 224 * 4, o);
}

double amoebanet_params(int64_t n, int64_t f) {
  models::AmoebaNetConfig c;
  c.num_normal_cells = n;
  c.filters = f;
  c.in_channels = 3;
  c.num_classes = 1000;
  return static_cast<double>(models::amoebanet_parameter_count(c));
}

// ---- the search -------------------------------------------------------------------

struct Setting {
  int k;
  bool naive;  // one device, no micro-batches, no remat
};

PlanRequest request(const Setting& s, int64_t batch, double memory) {
  PlanRequest r;
  r.K = s.k;
  r.batch = batch;
  r.memory_bytes = memory;
  r.schedules = {ScheduleKind::kGPipe};
  r.top = 1;
  r.mixed_remat = false;
  r.max_evaluations = s.k <= 8 ? 100 : 0;
  if (s.naive) {
    r.M = {1};
    r.remat = {RematMode::kNever};
  } else {
    r.M = {1, 2, 4, 8, 16, 32};
    r.remat = {RematMode::kNever, RematMode::kAlways};
  }
  return r;
}

// The largest x in [lo, hi] (in steps of `step`) with fits(x), or lo - step if none.
int64_t largest(int64_t lo, int64_t hi, int64_t step, const std::function<bool(int64_t)>& fits) {
  if (!fits(lo)) return lo - step;
  int64_t a = lo / step, b = hi / step;  // fits(a step), and b is the top candidate
  if (fits(b * step)) return b * step;
  while (b - a > 1) {
    const int64_t mid = (a + b) / 2;
    (fits(mid * step) ? a : b) = mid;
  }
  return a * step;
}

// Whether a plan fits; `what` gets the best plan, or why the smallest candidate does not fit.
bool plan_fits(const ModelCosts& costs, const PlanRequest& r, std::string* what) {
  try {
    const PlanResult res = make_plan(costs, r);
    if (what)
      *what = !res.plans.empty()     ? res.plans[0].choice.describe()
              : res.rejected.empty() ? std::string("no candidate")
                                     : res.rejected[0].choice + ": " + res.rejected[0].why;
    return !res.plans.empty();
  } catch (const Error& e) {
    if (what) *what = e.what();  // e.g. the parameters alone exceed the memory
    return false;
  }
}

std::string setting_name(const Setting& s) {
  return s.naive ? "naive-1" : "pipeline-" + std::to_string(s.k);
}

std::string billions(double params) {
  char buf[32];
  if (params >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", params / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.1fM", params / 1e6);
  return buf;
}

// Table 2's rows: throughput of the best GPipe cut (no remat) on `batch`
// examples for K = 2, 4, 8 and M = 1, 4, 32, normalised to K = 2, M = 1,
// beside `paper` ("-" where it gives no figure).
void print_table2(const ModelCosts& costs, int64_t batch,
                  const std::map<std::pair<int, int>, double>& paper) {
  auto step = [&](int k, int m) {
    PlanChoice ch;
    ch.K = k;
    ch.M = m;
    ch.remat.assign(k, RematMode::kNever);
    return best_cut(costs, ch, batch, 0, 5000, 200).step_seconds;
  };
  std::printf("%-4s %-6s %8s %8s %7s\n", "K", "M", "paper", "ours", "ratio");
  const double base = step(2, 1);
  for (int m : {1, 4, 32})
    for (int k : {2, 4, 8}) {
      const double ours = base / step(k, m);
      auto it = paper.find({k, m});
      if (it == paper.end())
        std::printf("%-4d %-6d %8s %8.2f %7s\n", k, m, "-", ours, "-");
      else
        std::printf("%-4d %-6d %8.2f %8.2f %7.2f\n", k, m, it->second, ours, ours / it->second);
    }
}

}  // namespace

int run_plan_paper(const PaperPlanOptions& o) {
  set_default_intra_op_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  std::printf(
      "# cost model: bytes of gpipe's own fp32 layers profiled here at the paper's widths on one "
      "example, scaled linearly; 12 bytes per parameter (RMSProp); time from gpipe's FLOP "
      "estimates at %.0f TFLOP/s per accelerator, B = 2F; links %s; GPipe's schedule, the "
      "planner choosing M (1..32), remat (never or always) and the cuts\n",
      o.accelerator_flops / 1e12, o.link_bytes_per_second > 0 ? "as given" : "free");
  if (!o.skip_transformer) {
    const TransformerParts tp = profile_transformer();
    std::printf(
        "\n## Table 1, Transformer (d 2048, FFN 8192, 32 heads, vocab 32k, 1024 tokens, batch 32, "
        "16 GB per accelerator)\n");
    std::printf(
        "# one layer (attention + FFN): %.2fM parameters, %.0f MB activations per "
        "sequence without remat, %.1f MB boundary\n",
        (tp.attention.param_bytes + tp.ffn.param_bytes) / 4e6,
        (tp.attention.bytes.activation_bytes + tp.ffn.bytes.activation_bytes) / 1e6,
        tp.ffn.bytes.output_bytes / 1e6);
    std::printf("%-13s %14s %16s %14s %16s %7s  %s\n", "setting", "paper layers", "paper params",
                "ours layers", "ours params", "ratio", "plan at the largest");
    const std::vector<std::pair<Setting, std::pair<int64_t, double>>> rows = {
        {{1, true}, {3, 282.2e6}},
        {{1, false}, {13, 785.8e6}},
        {{8, false}, {103, 5.3e9}},
        {{128, false}, {1663, 83.9e9}}};
    for (const auto& [s, paper] : rows) {
      std::string plan;
      const PlanRequest r = request(s, 32, 16e9);
      const int64_t lo = std::max(1, s.k / 2);  // K cells need 2 L + 2 >= K layers
      const int64_t l = largest(lo, 4 * paper.first + 64, 1, [&](int64_t x) {
        return plan_fits(transformer_costs(tp, x, o), r, nullptr);
      });
      plan_fits(transformer_costs(tp, std::max(l, lo), o), r, &plan);
      const double params = l >= lo ? transformer_params(tp, l) : 0;
      std::printf("%-13s %14ld %16s %14ld %16s %7.2f  %s\n", setting_name(s).c_str(),
                  static_cast<long>(paper.first), billions(paper.second).c_str(),
                  static_cast<long>(l), billions(params).c_str(), params / paper.second,
                  plan.c_str());
      std::fflush(stdout);
    }
    std::printf(
        "\n## Table 2, Transformer-48: throughput normalised to K = 2, M = 1 (GPipe without "
        "remat: gpipe's program recomputes a cell as soon as the device is free, which would "
        "hide a third of the M = 1 baseline's recompute behind the next cell; the planner's "
        "best cut for each K and M, batch 32)\n");
    // The paper's figures as the issue quotes them (M = 1: "1.0-1.3").
    print_table2(transformer_costs(tp, 48, o), 32,
                 {{{2, 1}, 1.0},
                  {{8, 1}, 1.3},
                  {{2, 4}, 1.7},
                  {{4, 4}, 3.2},
                  {{8, 4}, 4.8},
                  {{2, 32}, 1.8},
                  {{4, 32}, 3.4},
                  {{8, 32}, 6.3}});
  }
  if (!o.skip_amoebanet) {
    std::printf(
        "\n## Table 1, AmoebaNet-D(L, D) (224 x 224, batch 128, 8 GB per accelerator; L = 3N)\n");
    std::printf("%-13s %12s %14s %12s %14s %7s  %s\n", "setting", "paper (L,D)", "paper params",
                "ours (L,D)", "ours params", "ratio", "plan at the largest");
    const std::vector<std::pair<Setting, std::pair<std::pair<int64_t, int64_t>, double>>> rows = {
        {{1, true}, {{18, 208}, 82e6}},
        {{1, false}, {{18, 416}, 318e6}},
        {{2, false}, {{18, 544}, 542e6}},
        {{4, false}, {{36, 544}, 1.05e9}},
        {{8, false}, {{72, 512}, 1.8e9}}};
    std::map<int64_t, AmoebaParts> parts;
    for (const auto& [s, paper] : rows) {
      const int64_t n = paper.first.first / 3;
      if (!parts.count(n)) parts.emplace(n, profile_amoebanet(n));
      const AmoebaParts& p = parts.at(n);
      const PlanRequest r = request(s, 128, 8e9);
      const int64_t d = largest(
          16, 4096, 16, [&](int64_t f) { return plan_fits(amoebanet_costs(p, f, o), r, nullptr); });
      std::string plan;
      plan_fits(amoebanet_costs(p, std::max<int64_t>(d, 16), o), r, &plan);
      const double params = d >= 16 ? amoebanet_params(n, d) : 0;
      std::printf("%-13s %5ld, %-5ld %14s %5ld, %-5ld %14s %7.2f  %s\n", setting_name(s).c_str(),
                  static_cast<long>(paper.first.first), static_cast<long>(paper.first.second),
                  billions(paper.second).c_str(), static_cast<long>(paper.first.first),
                  static_cast<long>(d), billions(params).c_str(), params / paper.second,
                  plan.c_str());
      std::fflush(stdout);
    }
    std::printf(
        "\n## Table 2, AmoebaNet-D(18, 256): throughput normalised to K = 2, M = 1 (as above, "
        "batch 128)\n");
    if (!parts.count(6)) parts.emplace(6, profile_amoebanet(6));
    print_table2(amoebanet_costs(parts.at(6), 256, o), 128,
                 {{{2, 1}, 1.0}, {{2, 32}, 1.21}, {{4, 32}, 1.84}, {{8, 32}, 3.48}});
  }
  std::printf(
      "\n# ratio = ours / paper. Table 2's paper figures: Huang et al. 2019, Table 2 (TPUs; "
      "\"batch size was adjusted to fit memory if necessary\").\n");
  return 0;
}

}  // namespace gpipe::bench
