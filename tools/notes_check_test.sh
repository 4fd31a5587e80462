#!/usr/bin/env bash
# tools/notes_check.py on small scratch trees: a clean one passes; a note
# defined twice, a reference to a note defined nowhere and a reference
# naming the wrong file each fail with a message naming the place; a note
# defined in an .inc fragment counts.
set -uo pipefail
CHECK="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
fail=0
tree() {  # tree DIR: a scratch git repository
  rm -rf "$1" && mkdir -p "$1/core" "$1/docs" && git -C "$1" init -q
}
run() {  # run DIR WANT_RC MESSAGE
  local out
  out=$(cd "$1" && git add -A && python3 "$CHECK" 2>&1)
  local rc=$?
  if [ "$rc" != "$2" ] || ! grep -qF -- "$3" <<<"$out"; then
    echo "FAILED: $1: exit $rc (want $2), output:"; echo "$out"; echo "(wanted: $3)"; fail=1
  fi
}
d="$TEST_TMPDIR/clean"; tree "$d"
printf '// Note [Alpha]: the definition.\nint a;\n' > "$d/core/a.cc"
printf '// uses it (Note [Alpha] in core/a.cc)\n' > "$d/core/b.cc"
printf '* **Beta** (Note [Alpha] in `core/a.cc`)\n' > "$d/docs/x.md"
run "$d" 0 "1 notes, 2 references, 0 problem(s)"
d="$TEST_TMPDIR/twice"; tree "$d"
printf '// Note [Alpha]: one.\n' > "$d/core/a.cc"; printf '// Note [Alpha]. two.\n' > "$d/core/b.cc"
run "$d" 1 "Note [Alpha] is defined 2 times"
d="$TEST_TMPDIR/nowhere"; tree "$d"
printf '// see Note [Gamma]\n' > "$d/core/a.cc"
run "$d" 1 "core/a.cc:1: Note [Gamma] is referenced but defined nowhere"
d="$TEST_TMPDIR/elsewhere"; tree "$d"
printf '// Note [Alpha]: here.\n' > "$d/core/a.cc"; printf '// (Note [Alpha] in core/b.cc)\n' > "$d/core/c.cc"
run "$d" 1 "core/c.cc:1: Note [Alpha] is said to be in core/b.cc, but it is defined in core/a.cc"
d="$TEST_TMPDIR/fragment"; tree "$d"  # a note defined in an included .inc fragment
printf '// Note [Delta]. in a fragment.\n' > "$d/core/k.inc"
printf '// (Note [Delta] in core/k.inc)\n' > "$d/core/a.cc"
run "$d" 0 "1 notes, 1 references, 0 problem(s)"
[ "$fail" = 0 ] && echo "notes_check_test: all cases passed"
exit "$fail"
