// gpipe_lm_check: one GPT-2 / Llama model from a Hugging Face folder run on
// given tokens, everything a reference implementation can be held against
// written to one safetensors file (benchmarks/hf_compare.py drives it):
//
//   gpipe_lm_check --init-from=DIR --batch=in.safetensors --out=out.safetensors
//       [--K=2] [--lr=0.1 --export-hf=DIR2] [--greedy=32]   (one command)
//
// in.safetensors: "inputs" and "targets" [B, T] int64 (targets -100 = ignored),
// optionally "prompts" [P, L] int64. out.safetensors: "logits" [B, T, V]
// (eval mode), "loss" [1] (the mean over targets), "grad.<Hugging Face name>"
// for every weight (the Hugging Face layout, tied tables once), "greedy"
// [P, n] (greedy continuations of the prompts). With --lr the weights take one
// SGD step (w -= lr * grad) and --export-hf writes them as a folder.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>

#include "models/lm_names.h"
#include "ops/ops.h"
#include "optim/safetensors.h"
#include "tools/train/config.h"
#include "tools/train/generate.h"
#include "tools/train/hf_io.h"
#include "tools/train/task.h"

using namespace gpipe;

namespace {

struct Flags {
  std::string init_from, batch, out, export_hf;
  int K = 1;
  double lr = 0;
  int64_t greedy = 32;
};

int run(const Flags& f) {
  const models::LmConfig c = train::read_hf_config(f.init_from);
  const optim::SafetensorsFile in = optim::load_safetensors(f.batch);
  GPIPE_CHECK(in.tensors.count("inputs") && in.tensors.count("targets"), "'", f.batch,
              "': needs \"inputs\" and \"targets\"");
  const Batch batch{{in.tensors.at("inputs")}, {in.tensors.at("targets")}};
  const int m = static_cast<int>(std::min<int64_t>(batch.inputs[0].size(0), 2 * f.K));
  Pipeline pipe(models::language_model(c),
                PipelineOptions{.K = f.K, .M = m, .threads_per_stage = 1}, batch);
  train::load_hf_weights(f.init_from, c, pipe.named_state());
  std::vector<std::pair<std::string, Tensor>> out;
  {
    train::EvalMode eval(pipe);
    out.emplace_back("logits", pipe.predict(batch.inputs)[0].contiguous());
  }
  const StepResult r = pipe.train_step(batch);
  out.emplace_back("loss", Tensor::from_vector(std::vector<double>{r.loss}, Shape{1}));
  // The gradients in the Hugging Face layout, as export_hf lays out weights.
  std::map<std::string, std::map<int64_t, std::pair<models::HfSlot, Tensor>>> grads;
  for (const NamedTensor& p : pipe.named_state())
    if (const auto slot = models::hf_slot(c, p.name); slot && p.tensor->grad().defined())
      grads[slot->name].emplace(slot->begin, std::pair{*slot, p.tensor->grad()});
  for (auto& [name, parts] : grads) {
    std::vector<std::pair<models::HfSlot, Tensor>> in_order;
    for (auto& [begin, part] : parts) in_order.push_back(part);
    out.emplace_back("grad." + name, models::to_hf(in_order));
  }
  if (in.tensors.count("prompts")) {
    const Tensor& p = in.tensors.at("prompts");
    std::vector<std::vector<int64_t>> prompts;
    const std::vector<int64_t> ids = p.to_vector<int64_t>();
    for (int64_t i = 0; i < p.size(0); ++i)
      prompts.emplace_back(ids.begin() + i * p.size(1), ids.begin() + (i + 1) * p.size(1));
    train::EvalMode eval(pipe);
    const auto got = train::generate(pipe, prompts, {.max_new_tokens = f.greedy}, c.context, f.K);
    std::vector<int64_t> flat;
    for (const auto& row : got) {
      std::vector<int64_t> padded = row;
      padded.resize(static_cast<size_t>(f.greedy), -1);
      flat.insert(flat.end(), padded.begin(), padded.end());
    }
    out.emplace_back("greedy", Tensor::from_vector(flat, Shape{p.size(0), f.greedy}));
  }
  optim::save_safetensors(f.out, out);
  if (f.lr > 0) {
    NoGradGuard ng;
    for (const NamedTensor& p : pipe.parameters())
      if (p.tensor->grad().defined())
        p.tensor->copy_from(ops::sub(*p.tensor, ops::mul_scalar(p.tensor->grad(), f.lr)));
    if (!f.export_hf.empty()) train::export_hf(f.export_hf, c, pipe.named_state(), c.vocab - 1);
  }
  std::printf("gpipe_lm_check: %s, K=%d: loss %.8f; wrote %s\n", c.arch.c_str(), f.K, r.loss,
              f.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"gpipe_lm_check: a Hugging Face GPT-2 / Llama folder run on given tokens",
               "gpipe_lm_check"};
  app.add_option("--init-from", f.init_from, "the Hugging Face folder")->required();
  app.add_option("--batch", f.batch, "safetensors with inputs, targets [, prompts]")->required();
  app.add_option("--out", f.out, "where the results go (safetensors)")->required();
  app.add_option("--K", f.K, "cells")->capture_default_str();
  app.add_option("--lr", f.lr, "one SGD step at this rate after the gradients");
  app.add_option("--export-hf", f.export_hf, "the stepped weights as a Hugging Face folder");
  app.add_option("--greedy", f.greedy, "greedy tokens per prompt")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpipe_lm_check: error: %s\n", e.what());
    return 1;
  }
}
