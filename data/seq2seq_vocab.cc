// The offset mapping between tokenizer ids and a seq2seq model's ids.
#include "data/seq2seq_vocab.h"

#include <algorithm>

#include "core/error.h"

namespace gpipe {
namespace {

std::vector<int64_t> shifted(std::vector<int64_t> ids) {
  for (int64_t& id : ids) id += Seq2SeqVocab::kOffset;
  return ids;
}

}  // namespace

Seq2SeqVocab::Seq2SeqVocab(std::shared_ptr<const TextTokenizer> source,
                           std::shared_ptr<const TextTokenizer> target)
    : source_(std::move(source)), target_(std::move(target)) {
  GPIPE_CHECK(source_ && target_, "Seq2SeqVocab: expected a source and a target tokenizer");
}

int64_t Seq2SeqVocab::vocab_size() const {
  return kOffset + std::max(source_->vocab_size(), target_->vocab_size());
}

std::vector<int64_t> Seq2SeqVocab::encode_source(std::string_view text) const {
  return shifted(source_->encode(text));
}

std::vector<int64_t> Seq2SeqVocab::encode_target(std::string_view text) const {
  return shifted(target_->encode(text));
}

std::string Seq2SeqVocab::decode_target(const std::vector<int64_t>& ids) const {
  std::vector<int64_t> own;
  for (const int64_t id : ids) {
    if (id == ByteTokenizer::kEos) break;
    if (id >= kOffset && id < kOffset + target_->vocab_size()) own.push_back(id - kOffset);
  }
  return target_->decode(own);
}

std::string Seq2SeqVocab::describe() const {
  if (source_ == target_ || source_->name() == target_->name())
    return detail::concat(source_->name(), " (", source_->vocab_size(), " ids)");
  return detail::concat("source ", source_->name(), " (", source_->vocab_size(), " ids), target ",
                        target_->name(), " (", target_->vocab_size(), " ids)");
}

}  // namespace gpipe
