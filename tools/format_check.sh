#!/usr/bin/env bash
# tools/format_check.sh: fails (exit 1) when a C++/CUDA source differs from
# what clang-format makes of it under .clang-format, and names the files.
# `tools/format_check.sh --fix` rewrites them in place instead.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format || true)
[ -n "$fmt" ] || { echo "format_check: clang-format not found (tools/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files -- '*.cc' '*.h' '*.cu' '*.cuh' | grep -v '^third_party/')
if [ "${1:-}" = "--fix" ]; then
  "$fmt" -i "${files[@]}"
  echo "format_check: formatted ${#files[@]} files"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -gt 0 ]; then
  echo "format_check: ${#bad[@]} of ${#files[@]} files are not clang-formatted (run tools/format_check.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format_check: all ${#files[@]} files follow .clang-format ($("$fmt" --version | grep -o 'version [0-9.]*'))"
