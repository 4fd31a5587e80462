#!/usr/bin/env python3
"""tools/line_count.py: source files at the size of a concept (STYLE.md item 10).

Lists every tracked C++/CUDA source file (.cc, .h, .cu, .cuh; third_party/ aside) over 500 lines,
longest first, as "path: N lines", and exits 1 if any is over 600: a file that long is asking to be
split by concept (docs/HOWTO.md says where the seams usually are).
"""
import re
import subprocess
import sys

WARN, FAIL = 500, 600


def main():
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split()
    files = [f for f in files if not f.startswith("third_party/") and
             re.search(r"\.(cc|h|cu|cuh)$", f)]
    long = []
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                n = sum(1 for _ in f)
        except OSError:
            continue
        if n > WARN:
            long.append((n, path))
    long.sort(reverse=True)
    for n, path in long:
        print(f"{path}: {n} lines{' (over ' + str(FAIL) + ')' if n > FAIL else ''}")
    over = sum(1 for n, _ in long if n > FAIL)
    print(f"line_count: {len(files)} files, {len(long)} over {WARN} lines, {over} over {FAIL}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
