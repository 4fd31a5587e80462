// Fuzz harness: the language models' own data files. The input is read as
// an llm.c token shard (header checks, every token, the largest id, rows of
// LmRows, and a rewrite that must read back the same tokens), then as JSON
// lines (the "text" field of each record) and as text split at blank lines.
#include "data/lm_rows.h"
#include "data/text_source.h"
#include "data/token_shard.h"
#include "tests/fuzz/fuzz.h"

namespace {

void read_shard(const std::string& path) {
  auto shard = std::make_shared<const gpipe::TokenShard>(path);
  std::vector<int64_t> all;
  shard->read(0, shard->size(), all);
  int64_t top = 0;
  for (const int64_t id : all) top = std::max(top, id);
  GPIPE_ASSERT(top == (all.empty() ? 0 : shard->max_id()), "max_id disagrees with the tokens");
  gpipe::LmRows rows(3);
  rows.add_shard(shard, 0, shard->size());
  std::vector<int64_t> row(4);
  for (int64_t r = 0; r < std::min<int64_t>(rows.rows(), 8); ++r) rows.row(r, row.data());
  const std::string copy = gpipe::fuzz::scratch_dir() + "/copy.bin";
  gpipe::write_token_shard(copy, all, shard->version());
  gpipe::TokenShard back(copy);
  GPIPE_ASSERT(back.size() == shard->size() && back.token_bytes() == shard->token_bytes(),
               "the rewritten shard differs in size or width");
  for (int64_t i = 0; i < back.size(); ++i)
    GPIPE_ASSERT(back[i] == all[static_cast<size_t>(i)], "token ", i, " differs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = gpipe::fuzz::bytes(data, size);
  gpipe::fuzz::refusing_bad_input([&] { read_shard(gpipe::fuzz::write_file("in.bin", input)); });
  gpipe::fuzz::refusing_bad_input(
      [&] { (void)gpipe::read_documents(gpipe::fuzz::write_file("in.jsonl", input), {}); });
  gpipe::fuzz::refusing_bad_input([&] {
    (void)gpipe::read_documents(gpipe::fuzz::write_file("in.txt", input), {.doc_split = "blank"});
  });
  return 0;
}
