// Note [Hugging Face folders]. A published model folder is read as the
// checkpoint's own code would: config.json fixes the architecture (gpipe's
// flags may not contradict it), the index (when there is one) says which
// shard holds each tensor, and every gpipe parameter is looked up through the
// family's name map (models/lm_names.h), whose transposes and splits are
// undone on the way in and redone on the way out. GPT-2 folders saved from
// GPT2Model lack the "transformer." prefix; both spellings are accepted.
// Tensors gpipe has no use for (GPT-2's causal-mask buffers) are ignored;
// any other tensor left unread is a sign of a different architecture, but
// is only counted, since a rank reads only its own cells' tensors.
#include "tools/train/hf_io.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/error.h"
#include "models/lm_names.h"
#include "optim/json.h"
#include "optim/safetensors.h"

namespace gpipe::train {
namespace {

namespace fs = std::filesystem;
namespace json = optim::json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GPIPE_CHECK(in.good(), "'", path, "': cannot read the file");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

json::Value read_json(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return json::parse(text);
  } catch (const Error& e) {
    throw Error(detail::concat("'", path, "': ", e.what()));
  }
}

// Typed access to a config's keys, each error naming the file and the key.
class ConfigReader {
 public:
  explicit ConfigReader(std::string path) : path_(std::move(path)), root_(read_json(path_)) {
    GPIPE_CHECK(root_.kind == json::Value::Kind::kObject, "'", path_, "': expected a JSON object");
  }
  const json::Value* get(const std::string& key) const {
    const json::Value* v = root_.find(key);
    return v && v->kind != json::Value::Kind::kNull ? v : nullptr;
  }
  int64_t integer(const std::string& key, std::optional<int64_t> fallback = {}) const {
    const json::Value* v = get(key);
    if (!v) {
      GPIPE_CHECK(fallback.has_value(), "'", path_, "': no \"", key, "\"");
      return *fallback;
    }
    const auto u = v->as_uint();
    GPIPE_CHECK(v->kind == json::Value::Kind::kNumber && u && *u > 0 && *u < (uint64_t{1} << 40),
                "'", path_, "': \"", key, "\" must be a positive integer, got ", v->text);
    return static_cast<int64_t>(*u);
  }
  double number(const json::Value* v, const std::string& key, double fallback) const {
    if (!v) return fallback;
    GPIPE_CHECK(v->kind == json::Value::Kind::kNumber, "'", path_, "': \"", key,
                "\" must be a number");
    return std::stod(v->text);
  }
  double number(const std::string& key, double fallback) const {
    return number(get(key), key, fallback);
  }
  std::string string(const std::string& key, const std::string& fallback = "") const {
    const json::Value* v = get(key);
    if (!v) return fallback;
    GPIPE_CHECK(v->kind == json::Value::Kind::kString, "'", path_, "': \"", key,
                "\" must be a string");
    return v->text;
  }
  bool boolean(const std::string& key, bool fallback) const {
    const json::Value* v = get(key);
    if (!v) return fallback;
    GPIPE_CHECK(v->kind == json::Value::Kind::kBool, "'", path_, "': \"", key,
                "\" must be true or false");
    return v->boolean;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  json::Value root_;
};

// rope_scaling (published) or rope_parameters (transformers 5) into `c`.
void read_rope(const ConfigReader& r, models::LmConfig& c) {
  c.rotary.enabled = true;
  c.rotary.theta = r.number("rope_theta", 10000);
  const json::Value* p = r.get("rope_parameters");
  const char* key = "rope_parameters";
  if (!p) {
    p = r.get("rope_scaling");
    key = "rope_scaling";
  }
  if (!p) return;
  GPIPE_CHECK(p->kind == json::Value::Kind::kObject, "'", r.path(), "': \"", key,
              "\" must be an object");
  auto field = [&](const char* name) -> const json::Value* {
    const json::Value* v = p->find(name);
    return v && v->kind != json::Value::Kind::kNull ? v : nullptr;
  };
  if (const json::Value* t = field("rope_theta")) c.rotary.theta = r.number(t, "rope_theta", 10000);
  const json::Value* type = field("rope_type");
  if (!type) type = field("type");
  const std::string kind =
      type && type->kind == json::Value::Kind::kString ? type->text : "default";
  if (kind == "default") return;
  GPIPE_CHECK(kind == "llama3", "'", r.path(), "': \"", key, "\" of type '", kind,
              "' (gpipe builds the llama3 frequency scaling, or none)");
  c.rotary.scaling.factor = r.number(field("factor"), "factor", 8);
  c.rotary.scaling.low_freq_factor = r.number(field("low_freq_factor"), "low_freq_factor", 1);
  c.rotary.scaling.high_freq_factor = r.number(field("high_freq_factor"), "high_freq_factor", 4);
  c.rotary.scaling.original_context = static_cast<int64_t>(r.number(
      field("original_max_position_embeddings"), "original_max_position_embeddings", 8192));
}

models::LmConfig gpt2_config(const ConfigReader& r) {
  models::LmConfig c = models::lm_default("gpt2");
  c.layers = r.integer("n_layer");
  c.dim = r.integer("n_embd");
  c.heads = r.integer("n_head");
  c.kv_heads = 0;
  c.context = r.integer("n_positions", r.integer("n_ctx", 1024));
  c.vocab = r.integer("vocab_size");
  c.ffn = r.integer("n_inner", 4 * c.dim);
  c.norm_eps = r.number("layer_norm_epsilon", 1e-5);
  c.tied = r.boolean("tie_word_embeddings", true);
  const std::string act = r.string("activation_function", "gelu_new");
  GPIPE_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", "'", r.path(),
              "': activation_function '", act,
              "' (gpipe's GPT-2 uses the tanh approximation: gelu_new)");
  return c;
}

models::LmConfig llama_config(const ConfigReader& r) {
  models::LmConfig c = models::lm_default("llama");
  c.layers = r.integer("num_hidden_layers");
  c.dim = r.integer("hidden_size");
  c.heads = r.integer("num_attention_heads");
  c.kv_heads = r.integer("num_key_value_heads", c.heads);
  c.ffn = r.integer("intermediate_size");
  c.vocab = r.integer("vocab_size");
  c.context = r.integer("max_position_embeddings", 2048);
  c.norm_eps = r.number("rms_norm_eps", 1e-6);
  c.tied = r.boolean("tie_word_embeddings", false);
  GPIPE_CHECK(!r.boolean("attention_bias", false) && !r.boolean("mlp_bias", false), "'", r.path(),
              "': attention_bias / mlp_bias (gpipe's Llama has no biases)");
  const std::string act = r.string("hidden_act", "silu");
  GPIPE_CHECK(act == "silu", "'", r.path(), "': hidden_act '", act, "' (gpipe's Llama: silu)");
  if (r.get("head_dim"))
    GPIPE_CHECK(r.integer("head_dim") * c.heads == c.dim, "'", r.path(), "': head_dim ",
                r.integer("head_dim"), " is not hidden_size / num_attention_heads");
  read_rope(r, c);
  return c;
}

// Where each Hugging Face tensor lives: shard file by name. A single
// model.safetensors is read here once and kept in `loaded`.
std::map<std::string, std::string> weight_files(
    const std::string& dir, std::map<std::string, optim::SafetensorsFile>& loaded) {
  const std::string index = (fs::path(dir) / "model.safetensors.index.json").string();
  const std::string single = (fs::path(dir) / "model.safetensors").string();
  std::map<std::string, std::string> where;
  if (fs::exists(index)) {
    const json::Value root = read_json(index);
    const json::Value* map = root.find("weight_map");
    GPIPE_CHECK(map && map->kind == json::Value::Kind::kObject, "'", index,
                "': no \"weight_map\" object");
    for (const json::Member& m : map->members) {
      GPIPE_CHECK(
          m.value.kind == json::Value::Kind::kString && m.value.text.find('/') == std::string::npos,
          "'", index, "': the shard of '", m.key, "' must be a file name in ", dir);
      where[m.key] = (fs::path(dir) / m.value.text).string();
    }
    return where;
  }
  GPIPE_CHECK(fs::exists(single), "'", dir,
              "': no model.safetensors and no model.safetensors.index.json");
  loaded[single] = optim::load_safetensors(single);
  for (const auto& [name, t] : loaded[single].tensors) where[name] = single;
  return where;
}

}  // namespace

models::LmConfig read_hf_config(const std::string& dir) {
  GPIPE_CHECK(fs::is_directory(dir), "--init-from: '", dir, "' is not a directory");
  const ConfigReader r((fs::path(dir) / "config.json").string());
  const std::string type = r.string("model_type");
  models::LmConfig c;
  if (type == "gpt2")
    c = gpt2_config(r);
  else if (type == "llama")
    c = llama_config(r);
  else
    throw Error(
        detail::concat("'", r.path(), "': model_type '", type, "' (gpipe builds gpt2 and llama)"));
  try {
    models::check_lm_config(c);
  } catch (const Error& e) {
    throw Error(detail::concat("'", r.path(), "': ", e.what()));
  }
  return c;
}

void load_hf_weights(const std::string& dir, const models::LmConfig& c,
                     const std::vector<NamedTensor>& state) {
  std::map<std::string, optim::SafetensorsFile> loaded;
  const std::map<std::string, std::string> where = weight_files(dir, loaded);
  // Which Hugging Face tensor each parameter reads, and the shards to open.
  struct Want {
    const NamedTensor* param;
    models::HfSlot slot;
    std::string hf;
  };
  std::vector<Want> wants;
  std::set<std::string> shards;
  for (const NamedTensor& p : state) {
    const auto slot = models::hf_slot(c, p.name);
    if (!slot) continue;  // not a weight of the model (optimizer state, buffers)
    std::string hf = slot->name;
    if (!where.count(hf) && hf.rfind("transformer.", 0) == 0) hf = hf.substr(12);
    GPIPE_CHECK(where.count(hf), "'", dir, "': no tensor '", slot->name, "' (gpipe's '", p.name,
                "')");
    wants.push_back({&p, *slot, hf});
    shards.insert(where.at(hf));
  }
  NoGradGuard no_grad;
  for (const std::string& shard : shards) {
    if (!loaded.count(shard)) loaded[shard] = optim::load_safetensors(shard);
    const optim::SafetensorsFile& f = loaded.at(shard);
    for (const Want& w : wants) {
      if (where.at(w.hf) != shard) continue;
      const auto it = f.tensors.find(w.hf);
      GPIPE_CHECK(it != f.tensors.end(), "'", shard, "': no tensor '", w.hf,
                  "' (the index places it here)");
      const Tensor& hf = it->second;
      const bool fused = w.slot.rows > 0;
      const int64_t fused_rows = c.dim + 2 * (c.dim / c.heads) * c.kv();
      const int64_t axis = w.slot.transpose ? hf.rank() - 1 : 0;
      GPIPE_CHECK(!fused || (hf.rank() >= 1 && hf.size(axis) == fused_rows), "'", shard,
                  "': tensor '", w.hf, "' has shape ", hf.shape(), ", expected ", fused_rows,
                  " outputs (Q, K and V)");
      const Tensor t = models::from_hf(hf, w.slot);
      GPIPE_CHECK(t.shape() == w.param->tensor->shape(), "'", shard, "': tensor '", w.hf,
                  "' has shape ", hf.shape(), "; gpipe's '", w.param->name, "' needs ",
                  w.param->tensor->shape(), w.slot.transpose ? " (stored transposed)" : "");
      w.param->tensor->copy_from(t);
    }
    loaded.erase(shard);  // one shard in memory at a time
  }
}

namespace {

std::string config_json(const models::LmConfig& c, int64_t eot) {
  std::ostringstream o;
  o.precision(17);
  auto q = [](const std::string& s) { return json::quote(s); };
  o << "{\n";
  if (c.arch == "gpt2") {
    o << "  \"architectures\": [" << q("GPT2LMHeadModel") << "],\n  \"model_type\": " << q("gpt2")
      << ",\n  \"n_layer\": " << c.layers << ",\n  \"n_embd\": " << c.dim
      << ",\n  \"n_head\": " << c.heads << ",\n  \"n_inner\": " << c.ffn
      << ",\n  \"n_positions\": " << c.context << ",\n  \"n_ctx\": " << c.context
      << ",\n  \"vocab_size\": " << c.vocab << ",\n  \"layer_norm_epsilon\": " << c.norm_eps
      << ",\n  \"activation_function\": " << q("gelu_new")
      << ",\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0";
  } else {
    o << "  \"architectures\": [" << q("LlamaForCausalLM") << "],\n  \"model_type\": " << q("llama")
      << ",\n  \"num_hidden_layers\": " << c.layers << ",\n  \"hidden_size\": " << c.dim
      << ",\n  \"num_attention_heads\": " << c.heads << ",\n  \"num_key_value_heads\": " << c.kv()
      << ",\n  \"head_dim\": " << c.dim / c.heads << ",\n  \"intermediate_size\": " << c.ffn
      << ",\n  \"max_position_embeddings\": " << c.context << ",\n  \"vocab_size\": " << c.vocab
      << ",\n  \"rms_norm_eps\": " << c.norm_eps << ",\n  \"hidden_act\": " << q("silu")
      << ",\n  \"attention_bias\": false,\n  \"mlp_bias\": false"
      << ",\n  \"rope_theta\": " << c.rotary.theta << ",\n  \"rope_scaling\": ";
    const ops::RopeScaling& s = c.rotary.scaling;
    if (s.factor > 0)
      o << "{\"rope_type\": " << q("llama3") << ", \"factor\": " << s.factor
        << ", \"low_freq_factor\": " << s.low_freq_factor
        << ", \"high_freq_factor\": " << s.high_freq_factor
        << ", \"original_max_position_embeddings\": " << s.original_context << "}";
    else
      o << "null";
  }
  o << ",\n  \"tie_word_embeddings\": " << (c.tied ? "true" : "false")
    << ",\n  \"bos_token_id\": " << eot << ",\n  \"eos_token_id\": " << eot
    << ",\n  \"torch_dtype\": " << q("float32") << "\n}\n";
  return o.str();
}

void write_text(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    GPIPE_CHECK(out.good(), "--export-hf: cannot write '", tmp, "'");
  }
  fs::rename(tmp, path);
}

}  // namespace

void export_hf(const std::string& dir, const models::LmConfig& c,
               const std::vector<NamedTensor>& state, int64_t eot_id, int64_t shard_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  GPIPE_CHECK(fs::is_directory(dir), "--export-hf: cannot make the directory '", dir, "'");
  // Each Hugging Face tensor from its gpipe parts (a tied table once).
  std::vector<std::string> order;
  std::map<std::string, std::map<int64_t, std::pair<models::HfSlot, Tensor>>> parts;
  for (const NamedTensor& p : state) {
    const auto slot = models::hf_slot(c, p.name);
    if (!slot) continue;
    if (!parts.count(slot->name)) order.push_back(slot->name);
    parts[slot->name].emplace(slot->begin, std::pair{*slot, *p.tensor});
  }
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  int64_t bytes = 0, total = 0;
  for (const std::string& name : order) {
    std::vector<std::pair<models::HfSlot, Tensor>> in;
    for (auto& [begin, part] : parts[name]) in.push_back(part);
    Tensor t = models::to_hf(in).to(Device(DeviceType::kCPU, 0));
    const int64_t size = t.numel() * 4;
    if (bytes > 0 && bytes + size > shard_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().emplace_back(name, t);
    bytes += size;
    total += size;
  }
  // A previous export's files would shadow or contradict this one's.
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    if (f == "model.safetensors.index.json" ||
        (f.rfind("model-", 0) == 0 && f.find("-of-") != std::string::npos))
      fs::remove(e.path(), ec);
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  if (shards.size() == 1) {
    optim::save_safetensors((fs::path(dir) / "model.safetensors").string(), shards[0], meta);
  } else {
    std::ostringstream index;
    index << "{\n  \"metadata\": {\"total_size\": " << total << "},\n  \"weight_map\": {";
    bool first = true;
    for (size_t i = 0; i < shards.size(); ++i) {
      char file[64];
      std::snprintf(file, sizeof(file), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      optim::save_safetensors((fs::path(dir) / file).string(), shards[i], meta);
      for (const auto& [name, t] : shards[i]) {
        index << (first ? "\n    " : ",\n    ") << json::quote(name) << ": " << json::quote(file);
        first = false;
      }
    }
    index << "\n  }\n}\n";
    write_text((fs::path(dir) / "model.safetensors.index.json").string(), index.str());
  }
  write_text((fs::path(dir) / "config.json").string(), config_json(c, eot_id));
}

}  // namespace gpipe::train
