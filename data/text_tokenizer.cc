// Note [Tokenizer interface]. A language model's data is a chain: a source
// yields documents (text), a TextTokenizer turns each into ids, a packer
// (data/lm_corpus.h) concatenates them with the end-of-text id between and
// cuts rows. Only the tokenizer knows the vocabulary, so a model whose
// vocabulary is smaller than the tokenizer's is refused by name before
// training (tools/train/lm_task.cc); a larger one (padded, as llm.c pads
// GPT-2's 50257 to 50304) is allowed.
#include "data/text_tokenizer.h"

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"

namespace gpipe {

std::vector<int64_t> BytesTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (const char ch : text) ids.push_back(static_cast<uint8_t>(ch));
  return ids;
}

std::string BytesTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (const int64_t id : ids) {
    GPIPE_CHECK(id >= 0 && id < vocab_size(), "bytes tokenizer: id ", id,
                " is outside the vocabulary [0, ", vocab_size(), ")");
    if (id != eot_id()) text.push_back(static_cast<char>(id));
  }
  return text;
}

std::unique_ptr<TextTokenizer> make_text_tokenizer(const std::string& spec) {
  if (spec == "bytes") return std::make_unique<BytesTokenizer>();
  if (spec.size() > 5 && spec.ends_with(".json")) return BpeTokenizer::load(spec);
  if (spec.size() > 6 && spec.ends_with(".model")) return SentencePieceTokenizer::load(spec);
  throw Error(detail::concat("--tokenizer: unknown tokenizer '", spec,
                             "' (known: bytes, a Hugging Face tokenizer.json path, or a "
                             "SentencePiece .model path)"));
}

}  // namespace gpipe
