// The byte-level BPE tokenizer against ids recorded from the Python
// `tokenizers` package (tests/data/make_bpe_fixtures.py made the two
// tokenizer files and bpe_tokenizer_cases.inc), plus round trips, invalid
// UTF-8, the split patterns, merge order and every refused file.
#include "data/bpe_tokenizer.h"

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/pretokenize.h"
#include "data/text_tokenizer.h"
#include "tests/test_util.h"

using namespace gpipe;
using Catch::Matchers::Contains;

namespace {

struct BpeCase {
  std::string text;
  std::vector<int64_t> ids;
};

#include "tests/data/bpe_tokenizer_cases.inc"

const std::string kGpt2File = "tests/data/testdata/bpe_gpt2_tokenizer.json";
const std::string kLlama3File = "tests/data/testdata/bpe_llama3_tokenizer.json";

std::string without(std::string s, const std::vector<std::string>& specials) {
  for (const auto& sp : specials)
    for (size_t at; (at = s.find(sp)) != std::string::npos;) s.erase(at, sp.size());
  return s;
}

// A small tokenizer.json: bytes "a", "b", "c" and what `vocab_extra` adds,
// with `merges`, <|endoftext|> as id 100, and the given pre-tokenizer.
std::string tiny_json(
    const std::string& vocab_extra, const std::string& merges, const std::string& model_extra = "",
    const std::string& pre = R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":true})") {
  return R"({"added_tokens":[{"id":100,"content":"<|endoftext|>","special":true}],)"
         R"("normalizer":null,"pre_tokenizer":)" +
         pre + R"(,"decoder":{"type":"ByteLevel"},)" + R"("model":{"type":"BPE",)" + model_extra +
         R"("vocab":{"a":0,"b":1,"c":2,"Ġ":3)" + vocab_extra + R"(},"merges":[)" + merges + "]}}";
}

std::vector<std::string> split(std::string_view text, bpe::SplitPattern p) {
  std::vector<std::string_view> pieces;
  bpe::split(text, p, pieces);
  return {pieces.begin(), pieces.end()};
}

}  // namespace

TEST_CASE("bpe: GPT-2 layout gives the reference's ids", "[bpe]") {
  const auto tok = make_text_tokenizer(kGpt2File);
  CHECK(tok->name() == kGpt2File);
  CHECK(tok->vocab_size() == kGpt2VocabSize);
  const auto& bpe = dynamic_cast<const BpeTokenizer&>(*tok);
  CHECK(tok->eot_id() == bpe.token_id("<|endoftext|>"));
  for (const auto& c : kGpt2Cases) {
    INFO(c.text);
    CHECK(tok->encode(c.text) == c.ids);
    CHECK(tok->decode(c.ids) == without(c.text, {"<|endoftext|>"}));
  }
}

TEST_CASE("bpe: Llama 3 layout gives the reference's ids", "[bpe]") {
  const auto tok = make_text_tokenizer(kLlama3File);
  CHECK(tok->vocab_size() == kLlama3VocabSize);
  const auto& bpe = dynamic_cast<const BpeTokenizer&>(*tok);
  CHECK(tok->eot_id() == bpe.token_id("<|end_of_text|>"));
  for (const auto& c : kLlama3Cases) {
    INFO(c.text);
    CHECK(tok->encode(c.text) == c.ids);
    CHECK(tok->decode(c.ids) == without(c.text, {"<|end_of_text|>", "<|begin_of_text|>"}));
  }
}

TEST_CASE("bpe: decode(encode(s)) == s for random text in many scripts", "[bpe]") {
  const auto gpt2 = make_text_tokenizer(kGpt2File);
  const auto llama3 = make_text_tokenizer(kLlama3File);
  // Code points from ASCII, Latin-1, Cyrillic, Arabic, Devanagari, CJK, emoji,
  // combining marks and spaces.
  const std::vector<std::pair<uint32_t, uint32_t>> blocks = {
      {0x20, 0x7E},   {0x9, 0xD},       {0xA0, 0xFF},   {0x400, 0x4FF},   {0x600, 0x6FF},
      {0x900, 0x97F}, {0x4E00, 0x4FFF}, {0x300, 0x36F}, {0x2000, 0x206F}, {0x1F300, 0x1F6FF}};
  std::mt19937 rng(7);
  for (int n = 0; n < 300; ++n) {
    std::string s;
    const int len = static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k) {
      const auto& [lo, hi] = blocks[rng() % blocks.size()];
      const uint32_t cp = lo + rng() % (hi - lo + 1);
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        s += static_cast<char>(0xF0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    CHECK(gpt2->decode(gpt2->encode(s)) == s);
    CHECK(llama3->decode(llama3->encode(s)) == s);
  }
}

TEST_CASE("bpe: invalid UTF-8 encodes byte by byte and round-trips", "[bpe]") {
  const auto tok = make_text_tokenizer(kGpt2File);
  const auto llama3 = make_text_tokenizer(kLlama3File);
  const auto& bpe = dynamic_cast<const BpeTokenizer&>(*tok);
  // A lone 0xFF is its own byte token, "ÿ" in the byte-to-unicode map.
  CHECK(tok->encode("\xff") == std::vector<int64_t>{bpe.token_id("\xc3\xbf")});
  const std::vector<std::string> bad = {"\xff",
                                        "abc\x80"
                                        "def",
                                        "\xe4\xb8",
                                        "\xc0\xaf",
                                        "\xed\xa0\x80",
                                        "\xf5\x80\x80\x80",
                                        "x \xfe\xfe y",
                                        "\xf0\x9f\x98",
                                        "it\xe2\x80's",
                                        std::string("nul\0byte", 8)};
  for (const auto& s : bad) {
    CHECK(tok->decode(tok->encode(s)) == s);
    CHECK(llama3->decode(llama3->encode(s)) == s);
  }
  std::mt19937 rng(11);
  for (int n = 0; n < 500; ++n) {
    std::string s(rng() % 48, '\0');
    for (char& ch : s) ch = static_cast<char>(rng() % 256);
    CHECK(tok->decode(tok->encode(s)) == s);
    CHECK(llama3->decode(llama3->encode(s)) == s);
  }
}

TEST_CASE("bpe: the split patterns cut as the reference's regexes do", "[bpe]") {
  const std::string text = "  hello\n\n world 12345 x's (ok)!\r\n";
  CHECK(split(text, bpe::SplitPattern::kGpt2) ==
        std::vector<std::string>{" ", " hello", "\n\n", " world", " 12345", " x", "'s", " (", "ok",
                                 ")!", "\r\n"});
  CHECK(split(text, bpe::SplitPattern::kLlama3) ==
        std::vector<std::string>{" ", " hello", "\n\n", " world", " ", "123", "45", " x", "'s",
                                 " (", "ok", ")!\r\n"});
  CHECK(split("He'LL  \t\n", bpe::SplitPattern::kGpt2) ==
        std::vector<std::string>{"He", "'", "LL", "  \t\n"});
  CHECK(split("He'LL  \t\n", bpe::SplitPattern::kLlama3) ==
        std::vector<std::string>{"He", "'LL", "  \t\n"});
  CHECK(split("", bpe::SplitPattern::kGpt2).empty());
}

TEST_CASE("bpe: character classes are Unicode 16's", "[bpe]") {
  using bpe::CodeClass;
  CHECK(std::string(bpe::unicode_version()) == "16.0.0");
  CHECK(bpe::code_class('a') == CodeClass::kLetter);
  CHECK(bpe::code_class(0x4E00) == CodeClass::kLetter);   // CJK
  CHECK(bpe::code_class(0x105C0) == CodeClass::kLetter);  // Todhri, new in Unicode 16
  CHECK(bpe::code_class(0x663) == CodeClass::kNumber);    // Arabic-Indic three
  CHECK(bpe::code_class(0x216B) == CodeClass::kNumber);   // Roman numeral twelve (Nl)
  CHECK(bpe::code_class(0xBD) == CodeClass::kNumber);     // one half (No)
  CHECK(bpe::code_class(0x3000) == CodeClass::kSpace);
  CHECK(bpe::code_class(0x85) == CodeClass::kSpace);
  CHECK(bpe::code_class(0x1C) == CodeClass::kOther);   // not White_Space, though Python's isspace
  CHECK(bpe::code_class(0x301) == CodeClass::kOther);  // combining acute (Mn)
  CHECK(bpe::code_class(0x1F600) == CodeClass::kOther);
}

TEST_CASE("bpe: merges apply by rank, not by position", "[bpe]") {
  // "b c" ranks first, so "abc" becomes a + bc, and "a bc" has no merge.
  const auto t = BpeTokenizer::from_json(
      tiny_json(R"(,"ab":4,"bc":5,"abc":6)", R"("b c","a b","ab c")"), "tiny");
  CHECK(t->encode("abc") == std::vector<int64_t>{0, 5});
  CHECK(t->encode("ab") == std::vector<int64_t>{4});
  CHECK(t->encode("aab<|endoftext|>abc") == std::vector<int64_t>{0, 4, 100, 0, 5});
  // The [a, b] form reads the same.
  const auto arrays = BpeTokenizer::from_json(
      tiny_json(R"(,"ab":4,"bc":5,"abc":6)", R"(["b","c"],["a","b"],["ab","c"])"), "tiny");
  CHECK(arrays->encode("abc") == std::vector<int64_t>{0, 5});
  // ignore_merges: a piece that is a token is taken whole.
  const auto whole = BpeTokenizer::from_json(
      tiny_json(R"(,"ab":4,"bc":5,"abc":6)", R"("b c")", R"("ignore_merges":true,)"), "tiny");
  CHECK(whole->encode("abc") == std::vector<int64_t>{6});
  CHECK(whole->encode("abcc") == std::vector<int64_t>{0, 5, 2});
  // add_prefix_space: " " is put before a piece that does not start with one.
  const auto prefix = BpeTokenizer::from_json(
      tiny_json("", "", "", R"({"type":"ByteLevel","add_prefix_space":true,"use_regex":true})"),
      "tiny");
  CHECK(prefix->encode("a") == std::vector<int64_t>{3, 0});
  CHECK(prefix->encode(" a") == std::vector<int64_t>{3, 0});
  // A byte with no token and no unk_token is dropped, as in the reference.
  CHECK(t->encode("adc") == std::vector<int64_t>{0, 2});
  CHECK(t->eot_id() == 100);
  CHECK(t->vocab_size() == 101);
  CHECK(t->decode({0, 100, 5}) == "abc");
  // An end-of-text token that only model.vocab holds renders as nothing too.
  std::string vocab_eot = tiny_json(R"(,"<|endoftext|>":7)", "");
  vocab_eot.replace(vocab_eot.find(R"("special":true)"), 14, R"("special":false)");
  vocab_eot.replace(vocab_eot.find("<|endoftext|>"), 13, "<pad>");
  const auto plain = BpeTokenizer::from_json(vocab_eot, "tiny");
  CHECK(plain->eot_id() == 7);
  CHECK(plain->decode({0, 7, 100, 1}) == "a<pad>b");
  CHECK_THROWS_WITH(t->decode({101}), Contains("outside the vocabulary"));
  CHECK_THROWS_WITH(t->decode({50}), Contains("id 50 has no token"));
}

TEST_CASE("bpe: encode is safe on several threads", "[bpe]") {
  const auto tok = make_text_tokenizer(kGpt2File);
  std::string text;
  for (int i = 0; i < 200; ++i) text += "word" + std::to_string(i % 37) + " and more words, ";
  const auto want = tok->encode(text);
  std::vector<std::vector<int64_t>> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) threads.emplace_back([&] { g = tok->encode(text); });
  for (auto& th : threads) th.join();
  for (const auto& g : got) CHECK(g == want);
}

TEST_CASE("bpe: bad files are refused with one message naming the file", "[bpe]") {
  const auto refused = [](const std::string& json, const std::string& what) {
    INFO(json);
    CHECK_THROWS_WITH(BpeTokenizer::from_json(json, "bad.json"),
                      Contains("tokenizer bad.json: ") && Contains(what));
  };
  refused("{not json", "not a JSON file (malformed JSON at byte 1");
  refused("[1, 2]", "the top level is not a JSON object");
  refused(R"({"model":{"type":"BPE","merges":[]}})", "missing model.vocab");
  refused(tiny_json("", R"("a zzz")"), "model.merges[0] (\"a zzz\") names 'zzz', which is not");
  refused(tiny_json("", R"("a b")"), "the merged token 'ab' is not in model.vocab");
  refused(tiny_json("", R"("ab")"), "model.merges[0] (\"ab\") is not two tokens");
  refused(tiny_json("", "7"), "model.merges[0] is neither");
  refused(tiny_json(R"(,"d":-1)", ""), "token 'd' has id -1, not an integer");
  refused(tiny_json(R"(,"d":0)", ""), "id 0 is given to both 'a' and 'd'");
  refused(tiny_json(R"(,"d":9999999)", ""),
          "model.vocab: token 'd' has id 9999999, far beyond the file's 6 tokens");
  refused(R"({"model":{"type":"WordPiece","vocab":{"a":0}}})",
          "model type 'WordPiece' is not supported (only BPE)");
  refused(tiny_json("", "", R"("dropout":0.1,)"), "model.dropout is not supported");
  refused(tiny_json("", "", R"("byte_fallback":true,)"), "model.byte_fallback is not supported");
  refused(tiny_json("", "", "", R"({"type":"Whitespace"})"),
          "pre_tokenizer 'Whitespace' is not supported");
  refused(tiny_json("", "", "",
                    R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":)"
                    R"({"Regex":"\\w+"},"behavior":"Isolated","invert":false},)"
                    R"({"type":"ByteLevel","use_regex":false}]})"),
          "the split regex '\\w+' is not supported (only GPT-2's and Llama 3's patterns)");
  refused(tiny_json("", "", "",
                    R"({"type":"Sequence","pretokenizers":[{"type":"Digits"},)"
                    R"({"type":"ByteLevel"}]})"),
          "pre_tokenizer Sequence [Digits, ByteLevel] is not supported");
  std::string normalized = tiny_json("", "");
  normalized.replace(normalized.find(R"("normalizer":null)"), 17, R"("normalizer":{"type":"NFC"})");
  refused(normalized, "normalizer 'NFC' is not supported");
  std::string no_decoder = tiny_json("", "");
  no_decoder.replace(no_decoder.find(R"({"type":"ByteLevel"})"), 20, R"({"type":"WordPiece"})");
  refused(no_decoder, "decoder 'WordPiece' is not supported (only ByteLevel)");
  std::string no_eot = tiny_json("", "");
  no_eot.replace(no_eot.find("<|endoftext|>"), 13, "<pad>");
  no_eot.replace(no_eot.find(R"("special":true)"), 14, R"("special":false)");
  refused(no_eot, "no end-of-text token");

  // Through make_text_tokenizer: a file that is not there, and one that is not JSON.
  CHECK_THROWS_WITH(make_text_tokenizer("/nonexistent/tokenizer.json"),
                    Contains("tokenizer /nonexistent/tokenizer.json: cannot open the file"));
  const std::string dir = testing::scratch_dir("bpe_bad");
  testing::write_file(dir + "/tokenizer.json", "merges: [a b]\n");
  CHECK_THROWS_WITH(make_text_tokenizer(dir + "/tokenizer.json"),
                    Contains("tokenizer " + dir + "/tokenizer.json: not a JSON file"));
  CHECK_THROWS_WITH(make_text_tokenizer("vocab.txt"), Contains("unknown tokenizer 'vocab.txt'"));
}
