// The tables: a gpipe name is split into its block index and the rest; the
// rest is looked up in the family's table.
#include "models/lm_names.h"

#include <map>

#include "ops/ops.h"

namespace gpipe::models {
namespace {

struct Entry {
  const char* hf;  // "{}" is the block index
  bool transpose;
  int part;  // 0: the whole tensor; 1, 2, 3: Q, K, V of a fused projection
};

const std::map<std::string, Entry>& gpt2_table() {
  static const std::map<std::string, Entry> t = {
      {"embed.wte", {"transformer.wte.weight", false, 0}},
      {"head.wte", {"transformer.wte.weight", false, 0}},
      {"head.weight", {"lm_head.weight", false, 0}},
      {"embed.wpe", {"transformer.wpe.weight", false, 0}},
      {"attn.norm.gamma", {"transformer.h.{}.ln_1.weight", false, 0}},
      {"attn.norm.beta", {"transformer.h.{}.ln_1.bias", false, 0}},
      {"attn.attn.q.weight", {"transformer.h.{}.attn.c_attn.weight", true, 1}},
      {"attn.attn.k.weight", {"transformer.h.{}.attn.c_attn.weight", true, 2}},
      {"attn.attn.v.weight", {"transformer.h.{}.attn.c_attn.weight", true, 3}},
      {"attn.attn.q.bias", {"transformer.h.{}.attn.c_attn.bias", false, 1}},
      {"attn.attn.k.bias", {"transformer.h.{}.attn.c_attn.bias", false, 2}},
      {"attn.attn.v.bias", {"transformer.h.{}.attn.c_attn.bias", false, 3}},
      {"attn.attn.o.weight", {"transformer.h.{}.attn.c_proj.weight", true, 0}},
      {"attn.attn.o.bias", {"transformer.h.{}.attn.c_proj.bias", false, 0}},
      {"mlp.norm.gamma", {"transformer.h.{}.ln_2.weight", false, 0}},
      {"mlp.norm.beta", {"transformer.h.{}.ln_2.bias", false, 0}},
      {"mlp.up.weight", {"transformer.h.{}.mlp.c_fc.weight", true, 0}},
      {"mlp.up.bias", {"transformer.h.{}.mlp.c_fc.bias", false, 0}},
      {"mlp.down.weight", {"transformer.h.{}.mlp.c_proj.weight", true, 0}},
      {"mlp.down.bias", {"transformer.h.{}.mlp.c_proj.bias", false, 0}},
      {"head.norm.gamma", {"transformer.ln_f.weight", false, 0}},
      {"head.norm.beta", {"transformer.ln_f.bias", false, 0}},
  };
  return t;
}

const std::map<std::string, Entry>& llama_table() {
  static const std::map<std::string, Entry> t = {
      {"embed.wte", {"model.embed_tokens.weight", false, 0}},
      {"head.wte", {"model.embed_tokens.weight", false, 0}},
      {"head.weight", {"lm_head.weight", false, 0}},
      {"attn.norm.weight", {"model.layers.{}.input_layernorm.weight", false, 0}},
      {"attn.attn.q.weight", {"model.layers.{}.self_attn.q_proj.weight", false, 0}},
      {"attn.attn.k.weight", {"model.layers.{}.self_attn.k_proj.weight", false, 0}},
      {"attn.attn.v.weight", {"model.layers.{}.self_attn.v_proj.weight", false, 0}},
      {"attn.attn.o.weight", {"model.layers.{}.self_attn.o_proj.weight", false, 0}},
      {"mlp.norm.weight", {"model.layers.{}.post_attention_layernorm.weight", false, 0}},
      {"mlp.gate.weight", {"model.layers.{}.mlp.gate_proj.weight", false, 0}},
      {"mlp.up.weight", {"model.layers.{}.mlp.up_proj.weight", false, 0}},
      {"mlp.down.weight", {"model.layers.{}.mlp.down_proj.weight", false, 0}},
      {"head.norm.weight", {"model.norm.weight", false, 0}},
  };
  return t;
}

}  // namespace

std::optional<HfSlot> hf_slot(const LmConfig& c, const std::string& name) {
  std::string key = name, block;
  if (name.rfind("h.", 0) == 0) {  // "h.<i>.<rest>"
    const size_t dot = name.find('.', 2);
    if (dot == std::string::npos) return std::nullopt;
    block = name.substr(2, dot - 2);
    key = name.substr(dot + 1);
  }
  const auto& table = c.arch == "gpt2" ? gpt2_table() : llama_table();
  const auto it = table.find(key);
  if (it == table.end()) return std::nullopt;
  HfSlot s;
  s.name = it->second.hf;
  if (const size_t at = s.name.find("{}"); at != std::string::npos) {
    if (block.empty()) return std::nullopt;
    s.name.replace(at, 2, block);
  }
  s.transpose = it->second.transpose;
  if (it->second.part > 0) {  // Q, K, V: d, kv_dim, kv_dim rows
    const int64_t kv = c.dim / c.heads * c.kv();
    const int64_t sizes[3] = {c.dim, kv, kv};
    for (int p = 1; p < it->second.part; ++p) s.begin += sizes[p - 1];
    s.rows = sizes[it->second.part - 1];
  }
  return s;
}

Tensor from_hf(const Tensor& hf, const HfSlot& slot) {
  Tensor t = hf.dtype() == DType::kFloat32 ? hf : ops::cast(hf, DType::kFloat32);
  if (slot.transpose) t = ops::transpose(t, 0, 1);
  if (slot.rows > 0) t = ops::narrow(t, 0, slot.begin, slot.rows);
  return t.contiguous();
}

Tensor to_hf(const std::vector<std::pair<HfSlot, Tensor>>& parts) {
  GPIPE_CHECK(!parts.empty(), "to_hf: no parts");
  std::vector<Tensor> rows;
  for (const auto& [slot, t] : parts)
    rows.push_back(t.dtype() == DType::kFloat32 ? t : ops::cast(t, DType::kFloat32));
  Tensor out = rows.size() == 1 ? rows[0] : ops::concat(rows, 0);
  if (parts[0].first.transpose) out = ops::transpose(out, 0, 1);
  return out.contiguous();
}

bool hf_ignored(const std::string& n) {
  auto ends = [&](const char* s) {
    const std::string suffix(s);
    return n.size() >= suffix.size() &&
           n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".attn.bias") || ends(".attn.masked_bias") || ends("rotary_emb.inv_freq");
}

}  // namespace gpipe::models
