#!/usr/bin/env python3
"""tools/notes_check.py: every "Note [X]" reference in the tree resolves to exactly one definition.

A definition opens a comment line, "// Note [X]: ...", "// Note [X]. ..." or "// Note [X]" alone
(also "#" comments), or a Markdown paragraph or list item "**Note [X].**" / "* **Note [X]** ...". Every other "Note [X]" is a reference;
one that names a file ("Note [X] in path/file.cc") must point at the file holding the definition.
C++ sources, headers and the .inc fragments they include are all read.
Prints each problem as path:line: message and exits 1 if there is any.
"""
import re
import subprocess
import sys

SELF = ("tools/notes_check.py", "tools/notes_check_test.sh")  # they quote made-up notes
DEF_CODE = re.compile(r"^\s*(?://|#)\s*Note \[([^\]]+)\](?:[.:]|\s*$)")
DEF_MD = re.compile(r"^\s*(?:[*-] )?\*\*Note \[([^\]]+)\]\.?\*\*")
ANY = re.compile(r"Note \[([^\]]+)\]")
WHERE = re.compile(r"Note \[([^\]]+)\],? in `?([\w./-]+\.(?:cuh|cc|cu|h|inc|md|sh|bzl|py))`?")


def main():
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split()
    files = [f for f in files if not f.startswith("third_party/") and
             re.search(r"\.(cc|h|inc|cu|cuh|md|sh|bzl|py)$", f) and f not in SELF]
    defs, refs = {}, []
    for path in files:
        try:
            lines = open(path, encoding="utf-8").read().split("\n")
        except (OSError, UnicodeDecodeError):
            continue
        for no, line in enumerate(lines, 1):
            m = DEF_CODE.match(line) or DEF_MD.match(line)
            skip = None
            if m:
                defs.setdefault(m.group(1), []).append((path, no))
                skip = m.start(1)
            where = {m.group(1): m.group(2) for m in WHERE.finditer(line)}
            for m in ANY.finditer(line):
                if skip is not None and m.start(1) == skip:
                    continue
                refs.append((path, no, m.group(1), where.get(m.group(1))))
    problems = []
    for name, sites in sorted(defs.items()):
        if len(sites) > 1:
            listed = ", ".join(f"{p}:{n}" for p, n in sites)
            problems.append(f"{sites[0][0]}:{sites[0][1]}: Note [{name}] is defined "
                            f"{len(sites)} times ({listed})")
    for path, no, name, where in refs:
        sites = defs.get(name, [])
        if not sites:
            problems.append(f"{path}:{no}: Note [{name}] is referenced but defined nowhere")
        elif where and not any(p == where or p.endswith("/" + where) for p, _ in sites):
            problems.append(f"{path}:{no}: Note [{name}] is said to be in {where}, but it is "
                            f"defined in {sites[0][0]}")
    for p in problems:
        print(p)
    print(f"notes_check: {len(defs)} notes, {len(refs)} references, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
