#!/usr/bin/env bash
# tools/line_count.py on small scratch trees: short files pass quietly; a
# file over 500 lines is listed and passes; one over 600 fails, named;
# third_party/ is not counted.
set -uo pipefail
CHECK="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
fail=0
tree() {  # tree DIR: a scratch git repository
  rm -rf "$1" && mkdir -p "$1/core" "$1/third_party" && git -C "$1" init -q
}
lines() {  # lines N FILE: a file of N lines
  for ((i = 0; i < $1; i++)); do echo "int x$i;"; done > "$2"
}
run() {  # run DIR WANT_RC MESSAGE
  local out
  out=$(cd "$1" && git add -A && python3 "$CHECK" 2>&1)
  local rc=$?
  if [ "$rc" != "$2" ] || ! grep -qF -- "$3" <<<"$out"; then
    echo "FAILED: $1: exit $rc (want $2), output:"; echo "$out"; echo "(wanted: $3)"; fail=1
  fi
}
d="$TEST_TMPDIR/short"; tree "$d"
lines 10 "$d/core/a.cc"; lines 700 "$d/third_party/big.cc"
run "$d" 0 "line_count: 1 files, 0 over 500 lines, 0 over 600"
d="$TEST_TMPDIR/long"; tree "$d"
lines 550 "$d/core/a.cc"; lines 10 "$d/core/b.h"
run "$d" 0 "core/a.cc: 550 lines"
d="$TEST_TMPDIR/too_long"; tree "$d"
lines 601 "$d/core/a.cu"; lines 520 "$d/core/b.h"
run "$d" 1 "core/a.cu: 601 lines (over 600)"
run "$d" 1 "1 over 600"
exit $fail
