#!/usr/bin/env bash
# gpipe_data as a user types it: text files tokenised into llm.c shards (in
# parallel, a summary line on stderr), the shard inspected back to the same
# text, and bad input: each a one-line message and a non-zero exit, never a
# crash.
set -uo pipefail
DATA="$1"
fail=0
d="$TEST_TMPDIR/gpipe_data"
mkdir -p "$d/in/sub"
printf 'The first document.\n\nThe second one.\n' > "$d/in/a.txt"
printf '{"text": "A record of JSON lines."}\n{"text": "Another."}\n' > "$d/in/sub/b.jsonl"
log="$d/log"
if ! "$DATA" tokenize --out="$d/shards" --threads=2 --doc-split=blank "$d/in" > "$log" 2>&1; then
  echo "FAILED: tokenize exited non-zero:"; cat "$log"; fail=1
fi
grep -qE "tokenized 2 files \(0\.00 MB of text, 4 documents\) into [0-9]+ tokens \(version 1" \
  "$log" || { echo "FAILED: no summary line:"; cat "$log"; fail=1; }
grep -q "MB/s per core" "$log" || { echo "FAILED: no per-core rate:"; cat "$log"; fail=1; }
for f in a.bin b.bin; do
  [ -s "$d/shards/$f" ] || { echo "FAILED: no shard $f"; ls -l "$d/shards"; fail=1; }
done
# a.bin: 20 + 16 bytes of text ("...\n" each) and 2 end-of-text ids.
if ! "$DATA" inspect "$d/shards/a.bin" --context=100 > "$log" 2>&1; then
  echo "FAILED: inspect exited non-zero:"; cat "$log"; fail=1
fi
for want in "header: magic 20240520, version 1 (uint16 tokens), 38 tokens" \
            "end-of-text (256) tokens: 2" "first row (38 tokens): 84 104 101" \
            "The first document." "The second one."; do
  grep -qF -- "$want" "$log" || { echo "FAILED: no '$want' in inspect:"; cat "$log"; fail=1; }
done
"$DATA" inspect "$d/in/a.txt" --doc-split=blank --context=8 > "$log" 2>&1 &&
  grep -qF "documents: 2, 36 bytes of text, 38 tokens" "$log" ||
  { echo "FAILED: inspect of a text file:"; cat "$log"; fail=1; }
# train-tokenizer, then the chain: its model tokenises, the shard inspects back to the text
for i in $(seq 1 200); do echo "line $i of a small corpus: the quick brown fox"; done > "$d/small.txt"
if "$DATA" train-tokenizer --out="$d/sp" --vocab=60 "$d/small.txt" > "$log" 2>&1 &&
  "$DATA" tokenize --tokenizer="$d/sp.model" --out="$d/sp_shards" "$d/small.txt" >> "$log" 2>&1 &&
  "$DATA" inspect "$d/sp_shards/small.bin" --tokenizer="$d/sp.model" --context=8 > "$log.2" 2>&1; then
  grep -qE "largest id: [1-5]?[0-9]; end-of-text \(2\) tokens: 1" "$log.2" &&
    grep -q "^line 1" "$log.2" ||
    { echo "FAILED: the SentencePiece shard:"; cat "$log.2"; fail=1; }
else
  echo "FAILED: train-tokenizer / tokenize / inspect:"; cat "$log" "$log.2" 2>/dev/null; fail=1
fi
# bad input: expected exit status, then the message
check() {
  local rc_want="$1" msg="$2"; shift 2
  local out="$d/bad.log"
  "$DATA" "$@" > "$out" 2>&1
  local rc=$?
  if [ "$rc" != "$rc_want" ] || ! grep -qF -- "$msg" "$out"; then
    echo "FAILED: gpipe_data $*: exit $rc (want $rc_want), output:"; cat "$out"
    echo "(wanted: $msg)"; fail=1
  fi
}
printf 'x' > "$d/notes.md"
check 1 "unknown data format '.md'" tokenize --out="$d/o" "$d/notes.md"
check 1 "already a token shard" tokenize --out="$d/o" "$d/shards/a.bin"
check 1 "does not exist" tokenize --out="$d/o" "$d/nope.txt"
check 2 "--version" tokenize --out="$d/o" --version=3 "$d/in/a.txt"
check 2 "--out" tokenize "$d/in/a.txt"
head -c 100 "$d/shards/a.bin" > "$d/short.bin"
check 1 "short.bin': 100 bytes, shorter than the 1024-byte header" inspect "$d/short.bin"
printf '{"text": 3}\n' > "$d/bad.jsonl"
check 1 "bad.jsonl:1" tokenize --out="$d/o" "$d/bad.jsonl"
check 1 "train-tokenizer: '$d/in/sub/b.jsonl' is not a .txt file" train-tokenizer \
  --out="$d/sp" "$d/in/sub/b.jsonl"
check 2 "" frobnicate
[ "$fail" = 0 ] && echo "PASSED"
exit "$fail"
