// gpipe_data: a language model's data ahead of training.
//
//   gpipe_data tokenize --tokenizer=SPEC --out=DIR [--version=1|7] [--threads=N]
//              [--doc-split=file|blank] [--text-field=KEY] FILES...
//       each text file (.txt, .jsonl; folders and globs as gpipe_train's
//       --data) becomes DIR/<name>.bin, an llm.c token shard: every
//       document's ids followed by the end-of-text id (what gpipe_train packs
//       from the text itself, so --data=DIR trains on the same stream)
//   gpipe_data inspect FILE [--tokenizer=SPEC] [--context=T]
//       a shard's header, token count and largest id, or a text file's
//       documents and tokens; then its first row of T + 1 tokens, ids and text
//   gpipe_data train-tokenizer --out=PREFIX [--vocab=N] [--type=unigram|bpe] FILES...
//       a SentencePiece model (PREFIX.model) from .txt files, one sentence a line
//
// Files are tokenised in parallel, one file per thread at a time; a progress
// bar with an ETA goes to stderr when it is a terminal, and a summary line
// always: the text's MB/s over the wall clock and per core (bytes over the
// CPU time the threads spent encoding). Exit status: 0, 1 for bad data or
// files (one line naming them), 2 for bad flags.
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/lm_corpus.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/text_source.h"
#include "data/text_tokenizer.h"
#include "data/token_shard.h"

using namespace gpipe;
namespace fs = std::filesystem;

namespace {

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct TokenizeOptions {
  std::string tokenizer = "bytes", out;
  int version = 0;  // 0: 1 when the vocabulary fits uint16, else 7
  int threads = 0;  // 0: the hardware's
  TextSourceOptions text;
  std::vector<std::string> files;
};

struct Job {
  std::string in, out;
  int64_t bytes = 0;
};

// Input files -> output shards, refusing shards as input and two inputs
// that would write the same shard.
std::vector<Job> plan_jobs(const TokenizeOptions& o) {
  std::vector<Job> jobs;
  std::map<std::string, std::string> writer;
  for (const std::string& f : expand_data_paths(o.files, "tokenize")) {
    GPIPE_CHECK(source_format(f) != SourceFormat::kShard, "tokenize: '", f,
                "' is already a token shard (give .txt or .jsonl files)");
    const std::string out = (fs::path(o.out) / fs::path(f).stem()).string() + ".bin";
    const auto [it, fresh] = writer.emplace(out, f);
    GPIPE_CHECK(fresh, "tokenize: '", it->second, "' and '", f, "' would both write '", out,
                "' (tokenize them into different --out folders)");
    jobs.push_back({f, out, static_cast<int64_t>(fs::file_size(f))});
  }
  return jobs;
}

std::string format_seconds(double s) {
  if (s < 60) return detail::concat(static_cast<int>(s), " s");
  return detail::concat(static_cast<int>(s / 60), " min ", static_cast<int>(s) % 60, " s");
}

// Shared by the workers and the progress loop.
struct Progress {
  std::atomic<int64_t> bytes{0}, documents{0}, tokens{0}, files{0};
  std::atomic<size_t> next{0};
  std::atomic<int> running{0};
  std::mutex mu;
  double cpu_seconds = 0;  // encoding, over all threads (under mu)
  std::exception_ptr error;
  std::atomic<bool> failed{false};
};

void tokenize_file(const Job& job, const TextTokenizer& tok, const TokenizeOptions& o, Progress& p,
                   double& cpu) {
  const std::vector<Document> docs = read_documents(job.in, o.text);
  std::vector<int64_t> ids;
  for (const Document& d : docs) {
    if (p.failed) return;
    const double t0 = thread_cpu_seconds();
    const std::vector<int64_t> part = tok.encode(d.text);
    cpu += thread_cpu_seconds() - t0;
    ids.insert(ids.end(), part.begin(), part.end());
    ids.push_back(tok.eot_id());
    p.bytes += static_cast<int64_t>(d.text.size());
    p.documents += 1;
  }
  write_token_shard(job.out, ids, o.version);
  p.tokens += static_cast<int64_t>(ids.size());
  p.files += 1;
}

void worker(const std::vector<Job>& jobs, const TextTokenizer& tok, const TokenizeOptions& o,
            Progress& p) {
  double cpu = 0;
  try {
    for (size_t i = p.next++; i < jobs.size() && !p.failed; i = p.next++)
      tokenize_file(jobs[i], tok, o, p, cpu);
  } catch (...) {
    std::lock_guard<std::mutex> lock(p.mu);
    if (!p.error) p.error = std::current_exception();
    p.failed = true;
  }
  std::lock_guard<std::mutex> lock(p.mu);
  p.cpu_seconds += cpu;
  --p.running;
}

void draw_bar(const Progress& p, int64_t total, double elapsed) {
  const double done = total > 0 ? static_cast<double>(p.bytes) / static_cast<double>(total) : 1;
  const int width = 30, filled = static_cast<int>(done * width);
  const double rate = elapsed > 0 ? static_cast<double>(p.bytes) / elapsed : 0;
  const std::string eta =
      rate > 0 ? format_seconds(static_cast<double>(total - p.bytes) / rate) : std::string("?");
  std::fprintf(stderr, "\r[%s%s] %3d%%  %.1f / %.1f MB  %.1f MB/s  ETA %s   ",
               std::string(static_cast<size_t>(filled), '#').c_str(),
               std::string(static_cast<size_t>(width - filled), '.').c_str(),
               static_cast<int>(done * 100), static_cast<double>(p.bytes) / 1e6,
               static_cast<double>(total) / 1e6, rate / 1e6, eta.c_str());
  std::fflush(stderr);
}

int run_tokenize(TokenizeOptions o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::unique_ptr<TextTokenizer> tok = make_text_tokenizer(o.tokenizer);
  if (o.version == 0) o.version = tok->vocab_size() <= 65536 ? 1 : 7;
  GPIPE_CHECK(o.version == 7 || tok->vocab_size() <= 65536, "--version=1: the ", tok->name(),
              " tokenizer's vocabulary of ", tok->vocab_size(),
              " does not fit uint16 tokens (use --version=7)");
  const std::vector<Job> jobs = plan_jobs(o);
  std::error_code ec;
  fs::create_directories(o.out, ec);
  GPIPE_CHECK(fs::is_directory(o.out), "--out=", o.out, ": cannot create the folder (",
              ec.message(), ")");
  int64_t total = 0;
  for (const Job& j : jobs) total += j.bytes;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int n = std::min<int>(o.threads > 0 ? o.threads : hw, static_cast<int>(jobs.size()));
  Progress p;
  p.running = n;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back(worker, std::cref(jobs), std::cref(*tok), std::cref(o), std::ref(p));
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int tick = 1; p.running > 0; ++tick) {  // the bar redrawn every 10 ticks of 20 ms
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (tty && tick % 10 == 0) draw_bar(p, total, elapsed());
  }
  for (std::thread& t : threads) t.join();
  if (tty) std::fprintf(stderr, "\n");
  if (p.error) std::rethrow_exception(p.error);
  const double wall = elapsed(), mb = static_cast<double>(p.bytes) / 1e6;
  std::fprintf(stderr,
               "tokenized %lld files (%.2f MB of text, %lld documents) into %lld tokens "
               "(version %d shards in %s) in %.2f s with %d threads: %.1f MB/s, %.1f MB/s per "
               "core\n",
               static_cast<long long>(p.files.load()), mb,
               static_cast<long long>(p.documents.load()), static_cast<long long>(p.tokens.load()),
               o.version, o.out.c_str(), wall, n, wall > 0 ? mb / wall : 0.0,
               p.cpu_seconds > 0 ? mb / p.cpu_seconds : 0.0);
  return 0;
}

struct InspectOptions {
  std::string file, tokenizer = "bytes";
  int64_t context = 64;
  TextSourceOptions text;
};

void print_row(const std::vector<int64_t>& row, const TextTokenizer& tok) {
  std::printf("first row (%zu tokens):", row.size());
  for (const int64_t id : row) std::printf(" %lld", static_cast<long long>(id));
  std::printf("\ntext (%s):\n%s\n", tok.name().c_str(), tok.decode(row).c_str());
}

int run_inspect(const InspectOptions& o) {
  const std::unique_ptr<TextTokenizer> tok = make_text_tokenizer(o.tokenizer);
  std::vector<int64_t> row;
  if (source_format(o.file) == SourceFormat::kShard) {
    const TokenShard s(o.file);
    std::printf("file: %s\nheader: magic %d, version %d (uint%d tokens), %lld tokens\n",
                o.file.c_str(), s.version() == 1 ? kShardMagicV1 : kShardMagicV7, s.version(),
                8 * s.token_bytes(), static_cast<long long>(s.size()));
    int64_t eots = 0;
    for (int64_t i = 0; i < s.size(); ++i) eots += s[i] == tok->eot_id();
    std::printf("largest id: %lld; end-of-text (%lld) tokens: %lld\n",
                static_cast<long long>(s.max_id()), static_cast<long long>(tok->eot_id()),
                static_cast<long long>(eots));
    GPIPE_CHECK(s.size() == 0 || s.max_id() < tok->vocab_size(), "inspect: '", o.file,
                "' holds id ", s.max_id(), ", beyond the ", tok->name(), " tokenizer's ",
                tok->vocab_size(), " (give the --tokenizer it was written with)");
    s.read(0, std::min<int64_t>(s.size(), o.context + 1), row);
  } else {
    const std::vector<Document> docs = read_documents(o.file, o.text);
    const PackedRows p = pack(docs, *tok, o.context);
    std::printf(
        "file: %s\ndocuments: %lld, %lld bytes of text, %lld tokens (%s) with an "
        "end-of-text id after each\n",
        o.file.c_str(), static_cast<long long>(p.documents), static_cast<long long>(p.text_bytes),
        static_cast<long long>(p.stream_tokens), tok->name().c_str());
    if (p.rows > 0) row.assign(p.tokens.begin(), p.tokens.begin() + o.context + 1);
  }
  std::printf("rows of %lld + 1 tokens: ", static_cast<long long>(o.context));
  print_row(row, *tok);
  return 0;
}

void add_text_flags(CLI::App* app, TextSourceOptions& t) {
  app->add_option("--doc-split", t.doc_split, ".txt: file (one document) | blank (blank lines)")
      ->capture_default_str()
      ->check(CLI::IsMember({"file", "blank"}));
  app->add_option("--text-field", t.text_field, ".jsonl: the key of a record's text")
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpipe_data: tokenise text into llm.c token shards, inspect data, train a tokenizer",
               "gpipe_data"};
  app.require_subcommand(1);
  TokenizeOptions tk;
  CLI::App* tokenize = app.add_subcommand("tokenize", "text files -> llm.c token shards");
  tokenize->add_option("--tokenizer", tk.tokenizer, "bytes | PATH/tokenizer.json | PATH.model")
      ->capture_default_str();
  tokenize->add_option("--out", tk.out, "folder of the shards (DIR/<name>.bin)")->required();
  tokenize
      ->add_option("--version", tk.version,
                   "1: uint16 tokens | 7: uint32 (default: 1 when the vocabulary fits)")
      ->check(CLI::IsMember({1, 7}));
  tokenize->add_option("--threads", tk.threads, "files tokenised at once (0: every core)")
      ->check(CLI::Range(0, 1024));
  add_text_flags(tokenize, tk.text);
  tokenize->add_option("files", tk.files, "files, folders, globs (.txt, .jsonl)")->required();

  InspectOptions in;
  CLI::App* inspect = app.add_subcommand("inspect", "a shard's header and first row");
  inspect->add_option("file", in.file, "a .bin shard, .txt or .jsonl")->required();
  inspect->add_option("--tokenizer", in.tokenizer, "decodes the row")->capture_default_str();
  inspect->add_option("--context", in.context, "T: the row holds T + 1 tokens")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_text_flags(inspect, in.text);

  SentencePieceTrainOptions sp;
  std::vector<std::string> sp_files;
  CLI::App* train = app.add_subcommand("train-tokenizer", "a SentencePiece model from text");
  train->add_option("--out", sp.model_prefix, "writes PREFIX.model and PREFIX.vocab")->required();
  train->add_option("--vocab", sp.vocab_size, "pieces, unk / bos / eos included")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 20));
  train->add_option("--type", sp.model_type, "unigram | bpe")
      ->capture_default_str()
      ->check(CLI::IsMember({"unigram", "bpe"}));
  train->add_option("--coverage", sp.character_coverage, "share of characters spelled, (0, 1]")
      ->capture_default_str();
  train->add_option("--threads", sp.threads, "training threads")->capture_default_str();
  train->add_option("--max-sentences", sp.max_sentences, "> 0: a sample of this many lines");
  train->add_flag("--byte-fallback", sp.byte_fallback, "unknown characters become byte pieces");
  train->add_option("files", sp_files, ".txt files, folders, globs")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*tokenize) return run_tokenize(tk);
    if (*inspect) return run_inspect(in);
    for (const std::string& f : expand_data_paths(sp_files, "train-tokenizer")) {
      GPIPE_CHECK(source_format(f) == SourceFormat::kText, "train-tokenizer: '", f,
                  "' is not a .txt file (SentencePiece reads text, one sentence a line)");
      sp.inputs.push_back(f);
    }
    train_sentencepiece(sp);
    std::fprintf(stderr, "wrote %s.model and %s.vocab\n", sp.model_prefix.c_str(),
                 sp.model_prefix.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpipe_data: %s\n", e.what());
    return 1;
  }
}
