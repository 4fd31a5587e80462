// SentencePiece models through libsentencepiece: loading, encoding,
// decoding, and training. The library reports failures as util::Status
// values; each becomes one gpipe::Error that names the file (or the option)
// and carries the library's message. Options the library would only reject
// after reading every input (a missing file, an unknown model type) are
// checked first, so their errors name the flag's value plainly.
#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <sstream>
#include <unordered_map>

#include "core/error.h"

namespace gpipe {
namespace {

std::string status_text(const sentencepiece::util::Status& s) { return s.ToString(); }

std::string format_double(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(
    std::string path, std::unique_ptr<sentencepiece::SentencePieceProcessor> model)
    : path_(std::move(path)), model_(std::move(model)) {}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path) {
  auto model = std::make_unique<sentencepiece::SentencePieceProcessor>();
  std::error_code ec;
  GPIPE_CHECK(std::filesystem::is_regular_file(path, ec), "tokenizer ", path,
              ": no such file (expected a SentencePiece .model file)");
  const sentencepiece::util::Status s = model->Load(path);
  GPIPE_CHECK(s.ok(), "tokenizer ", path, ": not a SentencePiece model (", status_text(s), ")");
  GPIPE_CHECK(model->GetPieceSize() > 0, "tokenizer ", path, ": the model has no pieces");
  GPIPE_CHECK(model->eos_id() >= 0, "tokenizer ", path,
              ": the model has no end-of-text (EOS) piece; train it with an eos piece "
              "(spm_train --eos_id=N, N >= 0; the default is 2)");
  return std::unique_ptr<SentencePieceTokenizer>(
      new SentencePieceTokenizer(path, std::move(model)));
}

int64_t SentencePieceTokenizer::vocab_size() const { return model_->GetPieceSize(); }
int64_t SentencePieceTokenizer::eot_id() const { return model_->eos_id(); }
int64_t SentencePieceTokenizer::unk_id() const { return model_->unk_id(); }
int64_t SentencePieceTokenizer::bos_id() const { return model_->bos_id(); }
int64_t SentencePieceTokenizer::pad_id() const { return model_->pad_id(); }

std::vector<int64_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const sentencepiece::util::Status s = model_->Encode(text, &ids);
  GPIPE_CHECK(s.ok(), "tokenizer ", path_, ": cannot encode ", text.size(), " bytes of text (",
              status_text(s), ")");
  return {ids.begin(), ids.end()};
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (const int64_t id : ids) {
    GPIPE_CHECK(id >= 0 && id < vocab_size(), "tokenizer ", path_, ": id ", id,
                " is outside the vocabulary [0, ", vocab_size(), ")");
    narrow.push_back(static_cast<int>(id));
  }
  std::string text;
  const sentencepiece::util::Status s = model_->Decode(narrow, &text);
  GPIPE_CHECK(s.ok(), "tokenizer ", path_, ": cannot decode ", ids.size(), " ids (", status_text(s),
              ")");
  return text;
}

void train_sentencepiece(const SentencePieceTrainOptions& o) {
  const char* what = "train_sentencepiece";
  GPIPE_CHECK(!o.inputs.empty(), what,
              ": no input files (expected text files, one sentence a line)");
  std::string inputs;
  for (const std::string& file : o.inputs) {
    std::error_code ec;
    GPIPE_CHECK(std::filesystem::is_regular_file(file, ec), what, ": input '", file,
                "' does not exist or is not a regular file");
    GPIPE_CHECK(file.find(',') == std::string::npos, what, ": input '", file,
                "' has a comma in its name (SentencePiece separates input files by commas)");
    inputs += (inputs.empty() ? "" : ",") + file;
  }
  GPIPE_CHECK(!o.model_prefix.empty(), what, ": no output prefix (expected PREFIX: writes ",
              "PREFIX.model and PREFIX.vocab)");
  const std::filesystem::path parent = std::filesystem::path(o.model_prefix).parent_path();
  std::error_code ec;
  GPIPE_CHECK(parent.empty() || std::filesystem::is_directory(parent, ec), what,
              ": the directory of output prefix '", o.model_prefix, "' does not exist");
  GPIPE_CHECK(o.model_type == "unigram" || o.model_type == "bpe", what, ": model type '",
              o.model_type, "' is not known (expected unigram or bpe)");
  GPIPE_CHECK(o.vocab_size >= 4, what, ": vocabulary size ", o.vocab_size,
              " is too small (expected at least 4: unk, bos, eos and one piece)");
  GPIPE_CHECK(o.character_coverage > 0.0 && o.character_coverage <= 1.0, what,
              ": character coverage ", o.character_coverage, " is outside (0, 1]");
  GPIPE_CHECK(o.threads >= 1, what, ": threads must be at least 1, got ", o.threads);
  GPIPE_CHECK(o.max_sentences >= 0, what, ": max sentences must be >= 0, got ", o.max_sentences);

  const std::unordered_map<std::string, std::string> args = {
      {"input", inputs},
      {"model_prefix", o.model_prefix},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"character_coverage", format_double(o.character_coverage)},
      {"num_threads", std::to_string(o.threads)},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"minloglevel", o.verbose ? "0" : "1"},  // 1: warnings and errors only
  };
  const sentencepiece::util::Status s = sentencepiece::SentencePieceTrainer::Train(args);
  GPIPE_CHECK(s.ok(), what, ": training a ", o.model_type, " model of ", o.vocab_size,
              " pieces on ", inputs, " failed (", status_text(s), ")");
}

}  // namespace gpipe
