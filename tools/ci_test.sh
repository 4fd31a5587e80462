#!/usr/bin/env bash
# tools/ci_test.sh [bazel test flags] [targets]   (targets default to //...)
# Runs `bazel test`, then prints the plain closing line "N passed, N failed, N skipped",
# counted per test target from bazel's summary. Exits with bazel's code (4 "no tests" -> 0):
# 0 all passed, 3 some test failed, 1 build/analysis failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1   # workspace root, so the bazel server is this workspace's
args=("$@"); have_target=0
for a in "$@"; do case "$a" in //*|@*|:*|-//*) have_target=1 ;; esac; done
[ "$have_target" = 1 ] || args+=("//...")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test --color=no --curses=no --keep_going "${args[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
count() { grep -cE "^(@[^/ ]*)?//[^ ]+ +(\(cached\) )?($1)" "$log"; }
passed=$(count 'PASSED|FLAKY')
failed=$(count 'FAILED|TIMEOUT|NO STATUS|INCOMPLETE|REMOTE FAILURE')   # includes "FAILED TO BUILD"
skipped=$(count 'SKIPPED')
[ "$rc" -eq 4 ] && rc=0                                  # no test targets matched
[ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1       # e.g. analysis/loading error: no per-target lines
echo "$passed passed, $failed failed, $skipped skipped"
exit "$rc"
