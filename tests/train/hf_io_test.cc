// Hugging Face folders (tools/train/hf_io.h): a gpipe -> HF -> gpipe round
// trip is bit-exact for GPT-2 (tied, fused c_attn stored transposed) and
// Llama (untied, grouped-query, Llama 3.1 rope scaling), as one file and as
// shards with an index; the transformers-5 config form is read; and each bad
// folder (missing tensor, wrong shape, unknown model_type, another rope
// scaling, truncated shard, flags that contradict the config) gets one error
// naming the file and what is wrong.
#include "tools/train/hf_io.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>

#include "models/lm.h"
#include "ops/ops.h"
#include "optim/safetensors.h"
#include "tests/train/trainer_testing.h"
#include "tools/train/config.h"

using namespace gpipe;
using namespace gpipe::train;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

models::LmConfig tiny(const std::string& arch, uint64_t seed) {
  models::LmConfig c = models::lm_default(arch);
  c.layers = 2;
  c.dim = 16;
  c.heads = 4;
  c.kv_heads = arch == "llama" ? 2 : 0;
  c.ffn = 24;
  c.vocab = 31;
  c.context = 12;
  c.seed = seed;
  if (arch == "llama") {
    c.tied = false;
    c.rotary = {
        .enabled = true,
        .theta = 500000,
        .scaling = {
            .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_context = 64}};
  }
  return c;
}

std::map<std::string, std::vector<float>> values(const Model& m) {
  std::map<std::string, std::vector<float>> v;
  for (const NamedTensor& p : named_state(m.layers)) v[p.name] = p.tensor->to_vector<float>();
  return v;
}

std::string fresh_dir(const std::string& name) {
  const std::string d = testing::temp_path(name);
  fs::remove_all(d);
  return d;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string load_error(const std::string& dir, const models::LmConfig& c) {
  Model m = models::language_model(c);
  try {
    load_hf_weights(dir, c, named_state(m.layers));
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded)";
}

}  // namespace

TEST_CASE("hf folders: gpipe -> Hugging Face -> gpipe is bit-exact, one file or shards") {
  for (const std::string arch : {"gpt2", "llama"})
    for (const int64_t shard_bytes : {int64_t{1} << 30, int64_t{4096}}) {
      INFO(arch << " shard_bytes " << shard_bytes);
      const models::LmConfig c = tiny(arch, 3);
      const Model a = models::language_model(c);
      const std::string dir = fresh_dir("hf_" + arch + std::to_string(shard_bytes));
      export_hf(dir, c, named_state(a.layers), 30, shard_bytes);
      CHECK(fs::exists(fs::path(dir) / (shard_bytes < 10000 ? "model.safetensors.index.json"
                                                            : "model.safetensors")));
      const models::LmConfig back = read_hf_config(dir);
      CHECK(back.arch == c.arch);
      CHECK(back.layers == c.layers);
      CHECK(back.dim == c.dim);
      CHECK(back.heads == c.heads);
      CHECK(back.kv() == c.kv());
      CHECK(back.ffn == c.ffn);
      CHECK(back.vocab == c.vocab);
      CHECK(back.context == c.context);
      CHECK(back.tied == c.tied);
      CHECK(back.rotary.theta == c.rotary.theta);
      CHECK(back.rotary.scaling.factor == c.rotary.scaling.factor);
      CHECK(back.rotary.scaling.original_context == c.rotary.scaling.original_context);
      Model b = models::language_model(tiny(arch, 99));  // other weights
      REQUIRE(values(b) != values(a));
      load_hf_weights(dir, back, named_state(b.layers));
      CHECK(values(b) == values(a));
    }
}

TEST_CASE("hf folders: GPT-2's Conv1D layout and names, with or without 'transformer.'") {
  const models::LmConfig c = tiny("gpt2", 4);
  const Model a = models::language_model(c);
  const std::string dir = fresh_dir("hf_layout");
  export_hf(dir, c, named_state(a.layers), 30);
  const auto f = optim::load_safetensors((fs::path(dir) / "model.safetensors").string());
  REQUIRE(f.tensors.count("transformer.h.0.attn.c_attn.weight"));
  CHECK(f.tensors.at("transformer.h.0.attn.c_attn.weight").shape() == Shape{16, 48});  // [in, 3d]
  CHECK(f.tensors.at("transformer.h.1.mlp.c_fc.weight").shape() == Shape{16, 24});
  CHECK(f.tensors.count("lm_head.weight") == 0);  // tied
  // The same tensors under GPT2Model's names (the published checkpoints' spelling).
  std::vector<std::pair<std::string, Tensor>> bare;
  for (const auto& [name, t] : f.tensors) bare.emplace_back(name.substr(12), t);
  optim::save_safetensors((fs::path(dir) / "model.safetensors").string(), bare);
  Model b = models::language_model(tiny("gpt2", 5));
  load_hf_weights(dir, c, named_state(b.layers));
  CHECK(values(b) == values(a));
}

TEST_CASE("hf folders: the transformers 5 config form (rope_parameters)") {
  const std::string dir = fresh_dir("hf_v5");
  fs::create_directories(dir);
  write(dir + "/config.json",
        R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 16,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 24,
            "vocab_size": 31, "max_position_embeddings": 12, "rms_norm_eps": 1e-5,
            "tie_word_embeddings": true,
            "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}})");
  const models::LmConfig c = read_hf_config(dir);
  CHECK(c.rotary.enabled);
  CHECK(c.rotary.theta == 500000);
  CHECK(c.rotary.scaling.factor == 32);
  CHECK(c.rotary.scaling.original_context == 8192);
  CHECK(c.tied);
  CHECK(c.kv() == 2);
}

TEST_CASE("hf folders: each bad folder gets one error naming the file and the tensor or key") {
  const models::LmConfig c = tiny("llama", 6);
  const Model a = models::language_model(c);
  const std::string dir = fresh_dir("hf_bad");
  export_hf(dir, c, named_state(a.layers), 30);
  const std::string file = (fs::path(dir) / "model.safetensors").string();
  auto f = optim::load_safetensors(file);
  // A missing tensor.
  {
    std::vector<std::pair<std::string, Tensor>> less;
    for (const auto& [name, t] : f.tensors)
      if (name != "model.layers.1.mlp.up_proj.weight") less.emplace_back(name, t);
    optim::save_safetensors(file, less);
    CHECK_THAT(load_error(dir, c), Contains(dir) &&
                                       Contains("no tensor 'model.layers.1.mlp."
                                                "up_proj.weight'") &&
                                       Contains("h.1.mlp.up.weight"));
  }
  // A wrong shape.
  {
    std::vector<std::pair<std::string, Tensor>> bad;
    for (const auto& [name, t] : f.tensors)
      bad.emplace_back(name, name == "model.norm.weight" ? Tensor::zeros(Shape{17}) : t);
    optim::save_safetensors(file, bad);
    CHECK_THAT(load_error(dir, c), Contains("model.safetensors") &&
                                       Contains("tensor 'model.norm.weight' has shape [17]"));
  }
  // A truncated file.
  {
    std::vector<std::pair<std::string, Tensor>> all(f.tensors.begin(), f.tensors.end());
    optim::save_safetensors(file, all);
    fs::resize_file(file, fs::file_size(file) - 100);
    CHECK_THAT(load_error(dir, c), Contains("model.safetensors") && Contains("truncated"));
  }
  // Configs gpipe cannot build.
  const std::string cfg = dir + "/config.json";
  write(cfg, R"({"model_type": "mistral", "vocab_size": 10})");
  CHECK_THROWS_WITH(read_hf_config(dir),
                    Contains("config.json") && Contains("model_type 'mistral'"));
  write(cfg, R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 16,
                 "num_attention_heads": 4, "intermediate_size": 24, "vocab_size": 31,
                 "rope_scaling": {"type": "dynamic", "factor": 2.0}})");
  CHECK_THROWS_WITH(read_hf_config(dir), Contains("\"rope_scaling\" of type 'dynamic'"));
  write(cfg, R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 16})");
  CHECK_THROWS_WITH(read_hf_config(dir), Contains("config.json': no \"n_head\""));
  write(cfg, "{not json");
  CHECK_THROWS_WITH(read_hf_config(dir), Contains("config.json': malformed JSON"));
}

TEST_CASE("hf folders: gpipe_train's flags may not contradict the folder's config") {
  const models::LmConfig c = tiny("gpt2", 7);
  const std::string dir = fresh_dir("hf_flags");
  export_hf(dir, c, named_state(models::language_model(c).layers), 30);
  // --model is taken from the folder; a size flag that disagrees is refused by name.
  const TrainConfig t = parse_train_flags({"--init-from=" + dir, "--steps=1"});
  CHECK(t.model == "gpt2");
  CHECK(lm_config(t).layers == 2);
  auto refusal = [&](std::vector<std::string> args) {
    try {
      parse_train_flags(args);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK_THAT(refusal({"--init-from=" + dir, "--layers=3", "--steps=1"}),
             Contains("--layers=3 contradicts") && Contains("config.json', which has 2"));
  CHECK_THAT(refusal({"--model=llama", "--init-from=" + dir, "--steps=1"}),
             Contains("--model=llama") && Contains("is a gpt2 model"));
  CHECK_THAT(refusal({"--init-from=/nonexistent", "--steps=1"}),
             Contains("--init-from") && Contains("'/nonexistent' is not a directory"));
}

TEST_CASE("hf folders: bfloat16 and float16 tensors load as their float32 values") {
  const models::LmConfig c = tiny("llama", 8);
  const Model a = models::language_model(c);
  for (const DType half : {DType::kBFloat16, DType::kFloat16}) {
    INFO(dtype_name(half));
    const std::string dir = fresh_dir("hf_half");
    export_hf(dir, c, named_state(a.layers), 30);
    const std::string file = (fs::path(dir) / "model.safetensors").string();
    std::vector<std::pair<std::string, Tensor>> narrow;
    std::map<std::string, std::vector<float>> want;
    for (const auto& [name, t] : optim::load_safetensors(file).tensors) {
      narrow.emplace_back(name, ops::cast(t, half));
      want[name] = ops::cast(ops::cast(t, half), DType::kFloat32).to_vector<float>();
    }
    optim::save_safetensors(file, narrow);
    Model b = models::language_model(tiny("llama", 9));
    load_hf_weights(dir, c, named_state(b.layers));
    CHECK(values(b).at("h.0.attn.attn.q.weight") ==
          want.at("model.layers.0.self_attn.q_proj.weight"));
    CHECK(values(b).at("head.weight") == want.at("lm_head.weight"));
  }
}
