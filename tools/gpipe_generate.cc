// gpipe_generate: text from a GPT-2 or Llama model through a pipeline of K
// cells, with a KV cache per layer (tools/train/generate.h).
//
//   gpipe_generate --init-from=DIR --prompt="Once upon a time" --max-new-tokens=40
//   gpipe_generate --model=gpt2 --checkpoint=ck.safetensors --prompt-file=prompts.txt
//       --K=2 --temperature=0.8 --top-k=40 --seed=3   (one command)
//   gpipe_generate --init-from=DIR --prompt-ids=3,17,5
//
// The model comes from a Hugging Face folder (--init-from) or from the same
// model flags a gpipe_train run had, with its checkpoint (--checkpoint).
// Greedy by default. Prints each prompt with its continuation, then the
// tokens generated per second. Exit status: 0, 1 (a file, the model, a
// prompt that does not fit), 2 (flags).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/precision.h"
#include "data/text_tokenizer.h"
#include "optim/checkpoint.h"
#include "tools/train/config.h"
#include "tools/train/generate.h"
#include "tools/train/hf_io.h"
#include "tools/train/task.h"
#include "tools/train/version.h"

using namespace gpipe;

namespace {

struct Flags {
  train::TrainConfig model;  // the model flags of gpipe_train (lm_config reads them)
  std::string checkpoint;
  std::vector<std::string> prompts, prompt_ids;
  std::string prompt_file;
  train::SamplingOptions sampling;
  int K = 1, threads = 0;
  std::string precision = "fp32";
};

std::vector<int64_t> parse_ids(const std::string& text, int64_t vocab) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    GPIPE_CHECK(!item.empty() && *end == '\0' && v >= 0 && v < vocab, "--prompt-ids: '", item,
                "' is not an id in [0, ", vocab, ")");
    ids.push_back(v);
  }
  return ids;
}

int run(const Flags& f) {
  train::TrainConfig c = f.model;
  if (!c.init_from.empty()) c.model = train::read_hf_config(c.init_from).arch;
  GPIPE_CHECK(train::lm_model(c.model), "--model: expected gpt2 or llama (or --init-from=DIR)");
  GPIPE_CHECK(c.init_from.empty() != f.checkpoint.empty(),
              "give the weights: --init-from=DIR (a Hugging Face folder) or --checkpoint=PATH "
              "(a gpipe_train checkpoint, with that run's model flags)");
  const auto tok = train::text_tokenizer(c.tokenizer);
  const models::LmConfig m = train::lm_model_config(c);
  GPIPE_CHECK(m.vocab >= tok->vocab_size(), "--tokenizer=", c.tokenizer, ": a vocabulary of ",
              tok->vocab_size(), ", more than the model's ", m.vocab);
  std::vector<std::vector<int64_t>> prompts;
  std::vector<std::string> texts = f.prompts;
  if (!f.prompt_file.empty()) {
    std::ifstream in(f.prompt_file);
    GPIPE_CHECK(in.good(), "--prompt-file: cannot read '", f.prompt_file, "'");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
  }
  for (const std::string& t : texts) prompts.push_back(tok->encode(t));
  for (const std::string& ids : f.prompt_ids) prompts.push_back(parse_ids(ids, m.vocab));
  GPIPE_CHECK(!prompts.empty(), "no prompt: give --prompt, --prompt-file or --prompt-ids");

  if (f.threads > 0) set_default_intra_op_threads(f.threads * f.K);
  const Batch sample{{Tensor::from_vector(std::vector<int64_t>(2, 0), Shape{1, 2})}, {}};
  Pipeline pipe(models::language_model(m),
                PipelineOptions{.K = f.K,
                                .M = 1,
                                .threads_per_stage = f.threads,
                                .precision = parse_precision(f.precision)},
                sample);
  if (!c.init_from.empty())
    train::load_hf_weights(c.init_from, m, pipe.named_state());
  else {
    int64_t step = 0;
    optim::load_checkpoint(f.checkpoint, pipe.named_state(), nullptr, &step,
                           {.allow_unexpected = true, .aliases = pipe.tied_names()});
  }
  train::SamplingOptions s = f.sampling;
  s.stop_id = tok->eot_id();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<int64_t>> out;
  {
    train::EvalMode eval(pipe);
    out = train::generate(pipe, prompts, s, m.context, std::max(1, f.K));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    tokens += static_cast<int64_t>(out[i].size());
    std::cout << "=== prompt " << i + 1 << " ===\n"
              << tok->decode(prompts[i]) << "\x1b[1m" << tok->decode(out[i]) << "\x1b[0m\n";
    if (i < texts.size()) continue;
    std::cout << "ids:";
    for (int64_t id : out[i]) std::cout << ' ' << id;
    std::cout << "\n";
  }
  std::printf("generated %lld tokens for %zu prompt(s) in %.2f s: %.1f tokens/s (K=%d, %s)\n",
              static_cast<long long>(tokens), prompts.size(), secs, tokens / std::max(secs, 1e-9),
              f.K, s.temperature > 0 ? "sampled" : "greedy");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (print_version_if_asked(argc, argv, "gpipe_generate")) return 0;
  Flags f;
  CLI::App app{"gpipe_generate: text from a GPT-2 or Llama model through a pipeline",
               "gpipe_generate"};
  app.add_option("--model", f.model.model, "gpt2 | llama (implied by --init-from)");
  app.add_option("--init-from", f.model.init_from, "a Hugging Face model folder");
  app.add_option("--checkpoint", f.checkpoint, "a gpipe_train checkpoint (with its model flags)");
  app.add_option("--preset", f.model.preset, "the training run's --preset");
  for (auto [flag, field] : {std::pair{"--layers", &f.model.layers},
                             {"--dim", &f.model.dim},
                             {"--heads", &f.model.heads},
                             {"--kv-heads", &f.model.kv_heads},
                             {"--ffn", &f.model.ffn},
                             {"--vocab", &f.model.vocab},
                             {"--context", &f.model.context}})
    app.add_option(flag, *field, "the training run's size flag");
  f.model.layers = f.model.dim = f.model.heads = f.model.ffn = 0;
  app.add_option("--tokenizer", f.model.tokenizer, "bytes (default)")->capture_default_str();
  app.add_option("--prompt", f.prompts, "a prompt (repeatable)");
  app.add_option("--prompt-file", f.prompt_file, "prompts, one per line");
  app.add_option("--prompt-ids", f.prompt_ids, "a prompt as comma-separated token ids");
  app.add_option("--max-new-tokens", f.sampling.max_new_tokens)->capture_default_str();
  app.add_option("--temperature", f.sampling.temperature, "0 = greedy")->capture_default_str();
  app.add_option("--top-k", f.sampling.top_k, "0 = off")->capture_default_str();
  app.add_option("--top-p", f.sampling.top_p, "1 = off")->capture_default_str();
  app.add_option("--seed", f.sampling.seed)->capture_default_str();
  app.add_option("--K", f.K, "cells (one per device)")->capture_default_str();
  app.add_option("--threads", f.threads, "intra-op threads per cell (0 = cores / K)");
  app.add_option("--precision", f.precision, "fp32 | bf16 | fp16")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpipe_generate: error: %s\n", e.what());
    return 1;
  }
}
