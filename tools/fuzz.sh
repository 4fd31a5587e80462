#!/usr/bin/env bash
# tools/fuzz.sh: builds the libFuzzer harnesses of tests/fuzz (clang, ASan + UBSan, its own
# Bazel output base) and runs each for FUZZ_SECONDS (default 60) on a copy of its corpus.
#
#   tools/fuzz.sh                 # every harness
#   tools/fuzz.sh mo schedule     # some
#   FUZZ_SECONDS=600 tools/fuzz.sh json
#   FUZZ_SEED=1 tools/fuzz.sh     # a fixed seed: the same mutations each run (CI)
#
# Without FUZZ_SEED libFuzzer picks a new seed each run: each run explores
# further, which is what finds bugs. CI passes FUZZ_SEED=1 so that a
# commit's verdict does not depend on a draw: on one machine a fixed seed
# replays the same sequence of inputs (a slower machine runs a prefix of it).
# Fails (exit 1) on any crash, hang (-timeout, 10 s per input), leak, out-of-memory
# (-rss_limit_mb, 2048) or sanitizer report, and leaves the input that did it in
# $FUZZ_OUT (default /tmp/gpipe-fuzz-out)/<harness>/ (add it to tests/fuzz/corpus/<harness>/ once
# fixed: the replay tests then run it in the ordinary suite). Prints each harness's
# executions, coverage (libFuzzer's cov and ft) and corpus size.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

ALL=(safetensors checkpoint json idx mo translation_tsv tokenizer_json schedule message train_flags
  plan_inputs plan_flags hf_folder image token_shard)
[ $# -gt 0 ] && ALL=("$@")
SECS=${FUZZ_SECONDS:-60}
SEED_ARGS=()
[ -n "${FUZZ_SEED:-}" ] && SEED_ARGS=(-seed="$FUZZ_SEED")
OUT=${FUZZ_OUT:-/tmp/gpipe-fuzz-out}
BASE=${FUZZ_OUTPUT_BASE:-/root/.cache/gpipe-bazel-fuzz}
if ! command -v clang >/dev/null; then
  echo "fuzz: skipped: no clang on this machine (tools/setup.sh installs it)"
  exit 0
fi
targets=()
for h in "${ALL[@]}"; do targets+=("//tests/fuzz:${h}_fuzzer"); done
# --symlink_prefix=/: no convenience symlinks from this output base (they would replace the
# main build's bazel-bin and friends; TOOLCHAIN.md pitfall 6).
# The disk cache of --config=ci: a fresh clone (its own output base) reuses what an earlier
# run compiled (clang's actions have their own keys).
CC=clang bazel --output_base="$BASE" build --config=fuzz --repo_env=CC=clang --symlink_prefix=/ \
  --disk_cache=/root/.cache/gpipe-bazel-disk --jobs="${JOBS:-2}" --color=no --curses=no \
  "${targets[@]}" ||
  { echo "fuzz: the build failed"; exit 1; }
bin=$(CC=clang bazel --output_base="$BASE" info --config=fuzz --repo_env=CC=clang bazel-bin 2>/dev/null)

failed=0
printf '%-12s %-8s %12s %8s %8s %8s\n' harness result execs cov ft corpus
for h in "${ALL[@]}"; do
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$h/." "$work/"
  mkdir -p "$OUT/$h"
  log="$OUT/$h/fuzz.log"
  "$bin/tests/fuzz/${h}_fuzzer" "$work" "${SEED_ARGS[@]}" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/$h/" >"$log" 2>&1
  rc=$?
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  cov=$(echo "$last" | grep -oE 'cov: [0-9]+' | grep -oE '[0-9]+')
  ft=$(echo "$last" | grep -oE 'ft: [0-9]+' | grep -oE '[0-9]+')
  n=$(find "$work" -type f | wc -l)
  result=passed
  if [ $rc -ne 0 ]; then
    result=FAILED
    failed=$((failed + 1))
    grep -E 'ERROR|SUMMARY|artifact|uncaught|==[0-9]+==' "$log" | head -8
  fi
  printf '%-12s %-8s %12s %8s %8s %8s\n' "$h" "$result" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$n"
  rm -rf "$work"
done
echo "fuzz: ${#ALL[@]} harness(es), ${SECS} s each, seed ${FUZZ_SEED:-random}, $failed failed (logs and crash inputs: $OUT)"
[ $failed -eq 0 ]
