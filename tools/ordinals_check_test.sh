#!/usr/bin/env bash
# tools/ordinals_check.py on small scratch trees: a clean one passes (preprocessor
# lines, string literals, colours, shell's $# and ${#a[@]}, Markdown headings);
# a round-of-work ordinal or an issue reference in Markdown, a C++ line or block
# comment, a Python docstring or comment, a shell comment or a BUILD file fails
# with a message naming the place. The references below are made up.
set -uo pipefail
CHECK="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
fail=0
tree() {  # tree DIR: a scratch git repository
  rm -rf "$1" && mkdir -p "$1/core" "$1/docs" "$1/tools" && git -C "$1" init -q
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
printf '#include <vector>\n#define K 2\n// a 2-core Xeon: 1-2%% slower\nconst char* c = "#999 and #12";\n' \
  > "$d/core/a.cc"
printf 'auto s = R"(#7 in a raw string)"; // fill="#777"\nint n = 1'"'"'000;\n' > "$d/core/b.cc"
printf '# Benchmarks\n\n## W2 (2026-12-07, c164ca2)\n\nThe first run and the last round of search.\n' \
  > "$d/docs/x.md"
printf 'x = "#5"  # a comment\n\n\ndef f():\n    """Docstring."""\n    return "#6"\n' > "$d/tools/a.py"
printf '#!/usr/bin/env bash\necho "$#" "${#a[@]}" "#8"\ncat <<EOF\n# 9 #10\nEOF\n' > "$d/tools/a.sh"
run "$d" 0 "ordinals_check: 5 files, 0 problem(s)"
d="$TEST_TMPDIR/markdown"; tree "$d"
printf '# Title\n\nAs in the ninth wave.\nSee (#41).\n' > "$d/docs/x.md"
run "$d" 1 'docs/x.md:3: round-of-work ordinal "ninth wave"'
run "$d" 1 'docs/x.md:4: issue reference "#41"'
d="$TEST_TMPDIR/readme"; tree "$d"
printf 'Measured in the Twelfth Session.\n' > "$d/README.md"
run "$d" 1 'README.md:1: round-of-work ordinal "Twelfth Session"'
d="$TEST_TMPDIR/cpp"; tree "$d"
printf 'int a;  // on the Xeon of #52\n/* a block\n   from the third round */\nint b;\n' > "$d/core/a.cc"
run "$d" 1 'core/a.cc:1: issue reference "#52"'
run "$d" 1 'core/a.cc:3: round-of-work ordinal "third round"'
d="$TEST_TMPDIR/python"; tree "$d"
printf '"""Soak benchmark (#61)."""\nx = 1  # the fourth wave\n' > "$d/tools/a.py"
run "$d" 1 'tools/a.py:1: issue reference "#61"'
run "$d" 1 'tools/a.py:2: round-of-work ordinal "fourth wave"'
d="$TEST_TMPDIR/shell"; tree "$d"
printf '#!/usr/bin/env bash\nrun x  # the schedules of #77\n' > "$d/tools/a.sh"
printf '#!/usr/bin/env bash\n# CI, per the eighteenth session\n' > "$d/tools/run"
printf '# Fuzz harnesses (#78).\n' > "$d/tools/BUILD"
run "$d" 1 'tools/a.sh:2: issue reference "#77"'
run "$d" 1 'tools/run:2: round-of-work ordinal "eighteenth session"'
run "$d" 1 'tools/BUILD:1: issue reference "#78"'
[ "$fail" = 0 ] && echo "ordinals_check_test: all cases passed"
exit "$fail"
