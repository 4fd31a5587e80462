// Reading tokenizer.json into BpeTokenizer's tables. Every field is checked
// where it is read, so a bad file fails with one message naming the file,
// the field and what is wrong with it; nothing is trusted (ids are bounded,
// merges must name known tokens). Tokens are turned back into raw bytes
// through GPT-2's byte-to-unicode map (Note [Byte-level BPE] in
// data/bpe_tokenizer.cc).
#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "optim/json.h"

namespace gpipe {

namespace json = optim::json;

namespace {

constexpr uint64_t kMaxId = (uint64_t{1} << 24) - 1;  // 16.7M tokens: far above any real vocabulary
// Ids are dense in real files; a file whose largest id passes twice its
// token count (plus this slack) would make the tables mostly holes.
constexpr uint64_t kIdSlack = 1024;

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves,
// the other 68 for U+0100 onwards, in byte order.
std::array<uint32_t, 256> byte_to_code_point() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    map[b] = printable ? b : next++;
  }
  return map;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A token as written -> its raw bytes, if every character is in the byte map
// (`mapped` then true); otherwise the token's own UTF-8, as the reference's
// ByteLevel decoder does.
std::string token_to_bytes(const std::string& token, const std::array<int16_t, 512>& inverse,
                           bool& mapped) {
  std::string out;
  mapped = true;
  for (size_t i = 0; i < token.size() && mapped;) {
    const auto b0 = static_cast<uint8_t>(token[i]);
    uint32_t cp = b0;
    size_t len = 1;
    if (b0 >= 0xC0 && b0 < 0xE0 && i + 1 < token.size()) {
      cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3Fu);
      len = 2;
    }
    if (cp >= inverse.size() || inverse[cp] < 0 || (b0 >= 0x80 && len == 1)) {
      mapped = false;
    } else {
      out += static_cast<char>(inverse[cp]);
    }
    i += len;
  }
  return mapped ? out : token;
}

}  // namespace

class BpeFileReader {
 public:
  BpeFileReader(BpeTokenizer& t, const std::string& name) : t_(t), name_(name) {}

  void read(std::string_view text) {
    json::Value root;
    try {
      root = json::parse(text);
    } catch (const Error& e) {
      fail("not a JSON file (", e.what(), ")");
    }
    if (root.kind != json::Value::Kind::kObject) fail("the top level is not a JSON object");
    check_absent_or_null(root, "normalizer", "normalizer");
    const json::Value& model = object_member(root, "model", "model");
    const json::Value* vocab = model.find("vocab");
    const json::Value* added = root.find("added_tokens");
    const size_t tokens = (vocab != nullptr ? vocab->members.size() : 0) +
                          (added != nullptr ? added->items.size() : 0);
    token_count_ = tokens;
    max_id_ = std::min<uint64_t>(kMaxId, 2 * tokens + kIdSlack);
    read_model(model);
    read_added(root.find("added_tokens"));
    read_pre_tokenizer(root.find("pre_tokenizer"));
    read_decoder(root.find("decoder"));
    choose_eot();
    t_.special_[t_.eot_id_] = 1;  // renders as nothing, even when only model.vocab has it
  }

 private:
  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    throw Error(detail::concat("tokenizer ", name_, ": ", parts...));
  }

  static std::string type_of(const json::Value& v) {
    const json::Value* type = v.kind == json::Value::Kind::kObject ? v.find("type") : nullptr;
    return type != nullptr && type->kind == json::Value::Kind::kString ? type->text : "?";
  }

  const json::Value& object_member(const json::Value& obj, std::string_view key,
                                   std::string_view path) const {
    const json::Value* v = obj.find(key);
    if (v == nullptr) fail("missing ", path);
    if (v->kind != json::Value::Kind::kObject)
      fail(path, " is a ", json::kind_name(v->kind), ", not an object");
    return *v;
  }

  // A boolean option, `fallback` when absent or null.
  bool flag(const json::Value& obj, std::string_view key, std::string_view path,
            bool fallback) const {
    const json::Value* v = obj.find(key);
    if (v == nullptr || v->kind == json::Value::Kind::kNull) return fallback;
    if (v->kind != json::Value::Kind::kBool) fail(path, ".", key, " is not true or false");
    return v->boolean;
  }

  void check_absent_or_null(const json::Value& obj, std::string_view key,
                            std::string_view path) const {
    const json::Value* v = obj.find(key);
    if (v != nullptr && v->kind != json::Value::Kind::kNull)
      fail(path, " '", type_of(*v), "' is not supported (only null)");
  }

  void read_model(const json::Value& model) {
    const json::Value* type = model.find("type");
    if (type != nullptr && (type->kind != json::Value::Kind::kString || type->text != "BPE"))
      fail("model type '", type_of(model), "' is not supported (only BPE)");
    const json::Value* dropout = model.find("dropout");
    if (dropout != nullptr && dropout->kind != json::Value::Kind::kNull)
      fail("model.dropout is not supported (BPE dropout is a training option)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json::Value* v = model.find(key);
      if (v != nullptr && v->kind != json::Value::Kind::kNull &&
          !(v->kind == json::Value::Kind::kString && v->text.empty()))
        fail("model.", key, " is not supported in a byte-level BPE");
    }
    if (flag(model, "byte_fallback", "model", false))
      fail("model.byte_fallback is not supported in a byte-level BPE");
    t_.fuse_unk_ = flag(model, "fuse_unk", "model", false);
    t_.ignore_merges_ = flag(model, "ignore_merges", "model", false);

    const json::Value& vocab = object_member(model, "vocab", "model.vocab");
    if (vocab.members.empty()) fail("model.vocab is empty");
    for (const auto& [token, id] : vocab.members) {
      const auto v = id.as_uint();
      if (!v || *v > kMaxId)
        fail("model.vocab: token '", token, "' has id ",
             id.text.empty() ? "(not a number)" : id.text, ", not an integer in [0, ", kMaxId, "]");
      vocab_[token] = static_cast<int32_t>(*v);
      assign(static_cast<int32_t>(*v), token, "model.vocab");
    }
    const auto map = byte_to_code_point();
    for (int b = 0; b < 256; ++b) {
      std::string ch;
      append_utf8(map[b], ch);
      const auto it = vocab_.find(ch);
      t_.byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
    }
    const json::Value* unk = model.find("unk_token");
    if (unk != nullptr && unk->kind != json::Value::Kind::kNull) {
      if (unk->kind != json::Value::Kind::kString || !vocab_.count(unk->text))
        fail("model.unk_token is not a token of model.vocab");
      t_.unk_id_ = vocab_[unk->text];
    }
    read_merges(model.find("merges"));
  }

  // Records `token` as the text of `id`.
  void assign(int32_t id, const std::string& token, std::string_view where) {
    if (static_cast<uint64_t>(id) > max_id_)
      fail(where, ": token '", token, "' has id ", id, ", far beyond the file's ", token_count_,
           " tokens (ids must stay below twice the token count plus ", kIdSlack, ")");
    if (static_cast<size_t>(id) >= t_.token_bytes_.size()) {
      t_.token_bytes_.resize(id + 1);
      t_.special_.resize(id + 1, 0);
      t_.assigned_.resize(id + 1, 0);
      written_.resize(id + 1);
    }
    if (t_.assigned_[id] && written_[id] != token)
      fail(where, ": id ", id, " is given to both '", written_[id], "' and '", token, "'");
    static const auto inverse = [] {
      std::array<int16_t, 512> inv;
      inv.fill(-1);
      const auto map = byte_to_code_point();
      for (int b = 0; b < 256; ++b) inv[map[b]] = static_cast<int16_t>(b);
      return inv;
    }();
    bool mapped = false;
    t_.token_bytes_[id] = token_to_bytes(token, inverse, mapped);
    if (mapped && where == "model.vocab") t_.bytes_ids_.insert_or_assign(t_.token_bytes_[id], id);
    t_.assigned_[id] = 1;
    written_[id] = token;
    t_.token_ids_[token] = id;
  }

  int32_t vocab_id(const std::string& token, size_t rank, std::string_view merge) const {
    const auto it = vocab_.find(token);
    if (it == vocab_.end())
      fail("model.merges[", rank, "] (\"", merge, "\") names '", token,
           "', which is not in model.vocab");
    return it->second;
  }

  void read_merges(const json::Value* merges) {
    if (merges == nullptr) fail("missing model.merges");
    if (merges->kind != json::Value::Kind::kArray) fail("model.merges is not an array");
    for (size_t rank = 0; rank < merges->items.size(); ++rank) {
      const json::Value& m = merges->items[rank];
      std::string left, right;
      if (m.kind == json::Value::Kind::kString) {
        const size_t space = m.text.find(' ');
        if (space == std::string::npos || m.text.find(' ', space + 1) != std::string::npos)
          fail("model.merges[", rank, "] (\"", m.text, "\") is not two tokens \"a b\"");
        left = m.text.substr(0, space);
        right = m.text.substr(space + 1);
      } else if (m.kind == json::Value::Kind::kArray && m.items.size() == 2 &&
                 m.items[0].kind == json::Value::Kind::kString &&
                 m.items[1].kind == json::Value::Kind::kString) {
        left = m.items[0].text;
        right = m.items[1].text;
      } else {
        fail("model.merges[", rank, "] is neither \"a b\" nor [\"a\", \"b\"]");
      }
      const std::string shown = left + " " + right;
      const int32_t a = vocab_id(left, rank, shown);
      const int32_t b = vocab_id(right, rank, shown);
      const auto merged = vocab_.find(left + right);
      if (merged == vocab_.end())
        fail("model.merges[", rank, "] (\"", shown, "\"): the merged token '", left + right,
             "' is not in model.vocab");
      // A repeated pair keeps its last rank, as the reference's map does.
      t_.merges_.insert_or_assign(a, b, bpe::Merge{static_cast<int32_t>(rank), merged->second});
    }
  }

  void read_added(const json::Value* added) {
    if (added == nullptr || added->kind == json::Value::Kind::kNull) return;
    if (added->kind != json::Value::Kind::kArray) fail("added_tokens is not an array");
    for (size_t i = 0; i < added->items.size(); ++i) {
      const json::Value& a = added->items[i];
      const json::Value* id = a.kind == json::Value::Kind::kObject ? a.find("id") : nullptr;
      const json::Value* content =
          a.kind == json::Value::Kind::kObject ? a.find("content") : nullptr;
      const auto v = id != nullptr ? id->as_uint() : std::nullopt;
      if (!v || *v > kMaxId || content == nullptr || content->kind != json::Value::Kind::kString ||
          content->text.empty())
        fail("added_tokens[", i, "] needs an integer id and a non-empty content string");
      BpeTokenizer::AddedToken token{content->text, static_cast<int32_t>(*v),
                                     flag(a, "special", "added_tokens[]", false)};
      assign(token.id, token.content, "added_tokens");
      t_.special_[token.id] = token.special ? 1 : 0;
      t_.added_by_first_byte_[static_cast<uint8_t>(token.content[0])].push_back(
          static_cast<int32_t>(t_.added_.size()));
      t_.added_.push_back(std::move(token));
    }
  }

  void read_byte_level(const json::Value& p, std::string_view path) {
    t_.add_prefix_space_ = flag(p, "add_prefix_space", path, false);
    t_.byte_level_regex_ = flag(p, "use_regex", path, true);
  }

  void read_split(const json::Value& p, std::string_view path) {
    const json::Value* pattern = p.find("pattern");
    const json::Value* regex = pattern != nullptr && pattern->kind == json::Value::Kind::kObject
                                   ? pattern->find("Regex")
                                   : nullptr;
    if (regex == nullptr || regex->kind != json::Value::Kind::kString)
      fail(path, ".pattern is not {\"Regex\": ...}");
    const auto known = bpe::split_pattern_from_regex(regex->text);
    if (!known)
      fail(path, ": the split regex '", regex->text,
           "' is not supported (only GPT-2's and Llama 3's patterns)");
    const json::Value* behavior = p.find("behavior");
    if (behavior == nullptr || behavior->kind != json::Value::Kind::kString ||
        behavior->text != "Isolated")
      fail(path, ".behavior is not \"Isolated\"");
    if (flag(p, "invert", path, false)) fail(path, ".invert is not supported");
    t_.has_split_ = true;
    t_.split_ = *known;
  }

  void read_pre_tokenizer(const json::Value* p) {
    if (p == nullptr || p->kind == json::Value::Kind::kNull)
      fail("pre_tokenizer is missing (expected ByteLevel)");
    const std::string type = type_of(*p);
    if (type == "ByteLevel") return read_byte_level(*p, "pre_tokenizer");
    const json::Value* list = type == "Sequence" ? p->find("pretokenizers") : nullptr;
    if (list == nullptr || list->kind != json::Value::Kind::kArray)
      fail("pre_tokenizer '", type, "' is not supported (only ByteLevel, or Split then ByteLevel)");
    const auto& items = list->items;
    const bool split_then_byte_level =
        items.size() == 2 && type_of(items[0]) == "Split" && type_of(items[1]) == "ByteLevel";
    const bool byte_level_only = items.size() == 1 && type_of(items[0]) == "ByteLevel";
    if (!split_then_byte_level && !byte_level_only) {
      std::string names;
      for (const auto& item : items) names += (names.empty() ? "" : ", ") + type_of(item);
      fail("pre_tokenizer Sequence [", names,
           "] is not supported (only [ByteLevel] or [Split, ByteLevel])");
    }
    if (split_then_byte_level) read_split(items[0], "pre_tokenizer.pretokenizers[0]");
    read_byte_level(items.back(), "pre_tokenizer.pretokenizers[-1]");
  }

  void read_decoder(const json::Value* d) {
    if (d == nullptr || d->kind == json::Value::Kind::kNull)
      fail("decoder is missing (expected ByteLevel)");
    if (type_of(*d) != "ByteLevel")
      fail("decoder '", type_of(*d), "' is not supported (only ByteLevel)");
  }

  void choose_eot() {
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "<|eot_id|>"}) {
      const auto it = t_.token_ids_.find(name);
      if (it != t_.token_ids_.end()) {
        t_.eot_id_ = it->second;
        return;
      }
    }
    for (const auto& a : t_.added_)
      if (a.special) {
        t_.eot_id_ = a.id;
        return;
      }
    fail(
        "no end-of-text token (none of <|endoftext|>, <|end_of_text|>, <|eot_id|>, "
        "and no special added token)");
  }

  BpeTokenizer& t_;
  const std::string& name_;
  std::unordered_map<std::string, int32_t> vocab_;  // model.vocab only
  std::vector<std::string> written_;                // per id, the token as written
  uint64_t max_id_ = kMaxId;
  size_t token_count_ = 0;
};

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_json(std::string_view json,
                                                      const std::string& name) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->name_ = name;
  BpeFileReader(*t, name).read(json);
  return t;
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GPIPE_CHECK(in, "tokenizer ", path, ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  GPIPE_CHECK(!in.bad(), "tokenizer ", path, ": cannot read the file");
  return from_json(text.str(), path);
}

}  // namespace gpipe
