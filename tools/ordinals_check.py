#!/usr/bin/env python3
"""tools/ordinals_check.py: docs and comments cite figures and machines, not rounds of work or issues.

A note that rests on a measurement says what was measured and where ("on a 2-core Intel Xeon, W2's
step 1-2% slower"); "the ninth wave", "the twelfth session" or "#33" mean nothing to a reader
outside the project's history (which git keeps). This check fails on
  - a round-of-work ordinal: an ordinal word before "session", "wave" or "round" ("third round");
  - an issue reference: "#" and a number ("(#12)"), or an issues/NN or pull/NN link,
in the Markdown files git tracks and in the comments of its C++/CUDA (.cc .h .cu .cuh .inc),
Python, shell, Starlark (BUILD, WORKSPACE, .bzl) and .bazelrc sources; third_party/ aside.
In sources only comments are read (a Python or Starlark docstring counts as one), so string
literals pass, an SVG colour "#999" among them, and so do #include and the other preprocessor
lines; in a comment or Markdown a three-digit colour after fill=, stroke= or colour: passes too.
Prints each problem as path:line: message and exits 1 if there is any.
"""
import io
import os
import re
import subprocess
import sys
import tokenize

SELF = ("tools/ordinals_check.py", "tools/ordinals_check_test.sh")  # they quote made-up examples
ORDINAL_WORDS = ("first second third fourth fifth sixth seventh eighth ninth tenth eleventh "
                 "twelfth thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth "
                 "nineteenth twentieth").split()
ORDINAL = re.compile(r"\b(?:%s)[\s-]+(?:session|wave|round)s?\b" % "|".join(ORDINAL_WORDS),
                     re.IGNORECASE)
ISSUE = re.compile(r"(?<![\w&/#])#\d{1,5}\b(?![\w-])|\b(?:issues|pull)/\d+\b")
COLOUR = re.compile(r"(?:fill|stroke|colou?r|background)\s*[=:]\s*[\"']?$", re.IGNORECASE)
HEREDOC = re.compile(r"(?<!<)<<-?(?!<)\s*['\"]?([A-Za-z_]\w*)['\"]?")
C_LIKE = (".cc", ".h", ".cu", ".cuh", ".inc", ".c", ".cpp", ".hpp")
PYTHON_LIKE = (".py", ".bzl")
STARLARK_NAMES = ("BUILD", "BUILD.bazel", "WORKSPACE", "WORKSPACE.bazel")


def raw_prefix(text, i):
    """Whether the R at i opens a raw string literal (R"( or u8R"( and the like)."""
    start = i
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    return text[start:i + 1] in ("R", "u8R", "uR", "UR", "LR")


def c_comments(text):
    """(line, text) of every // and /* */ comment, string and character literals skipped."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append((line, text[i + 2:end]))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end
            for k, part in enumerate(text[i + 2:end].split("\n")):
                out.append((line + k, part))
            line += text.count("\n", i, end)
            i = end + 2
        elif text.startswith('R"', i) and raw_prefix(text, i):
            open_paren = text.find("(", i + 2)
            delim = text[i + 2:open_paren] if open_paren >= 0 else ""
            end = text.find(")" + delim + '"', open_paren)
            end = n if open_paren < 0 or end < 0 else end + len(delim) + 2
            line += text.count("\n", i, end)
            i = end
        elif c == '"' or (c == "'" and (i == 0 or not (text[i - 1].isalnum() or
                                                        text[i - 1] == "_"))):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1
    return out


def python_comments(text):
    """(line, text) of every # comment and docstring (strings standing alone as a statement)."""
    toks = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type != tokenize.NL]
    out, statement_start = [], True
    for k, tok in enumerate(toks):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string[1:]))
            continue
        if tok.type == tokenize.STRING and statement_start:
            end = k
            while end < len(toks) and toks[end].type in (tokenize.STRING, tokenize.COMMENT):
                end += 1
            if end == len(toks) or toks[end].type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                for s in toks[k:end]:
                    if s.type == tokenize.STRING:
                        out += [(s.start[0] + j, part)
                                for j, part in enumerate(s.string.split("\n"))]
        statement_start = tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    return out


def shell_comments(text):
    """(line, text) of every # comment: a # that starts a word outside quotes and here-documents."""
    out, quote, heredoc = [], None, None
    for no, line in enumerate(text.split("\n"), 1):
        if heredoc is not None:
            if line.strip() == heredoc:
                heredoc = None
            continue
        code_end, i = len(line), 0
        while i < len(line):
            c = line[i]
            if quote:
                if c == "\\" and quote == '"':
                    i += 1
                elif c == quote:
                    quote = None
            elif c == "\\":
                i += 1
            elif c in "'\"":
                quote = c
            elif c == "#" and (i == 0 or line[i - 1] in " \t;(|&"):
                out.append((no, line[i + 1:]))
                code_end = i
                break
            i += 1
        m = HEREDOC.search(line[:code_end])
        if m and quote is None:
            heredoc = m.group(1)
    return out


def kind_of(path, text):
    name = os.path.basename(path)
    if path.endswith(".md"):
        return "md"
    if path.endswith(C_LIKE):
        return "c"
    if path.endswith(PYTHON_LIKE) or name in STARLARK_NAMES:
        return "python"
    if path.endswith((".sh", ".bash", ".bazelrc")):
        return "shell"
    if "." not in name and text.startswith("#!"):
        first = text.split("\n", 1)[0]
        return "python" if "python" in first else "shell" if "sh" in first else None
    return None


def comments(path, text):
    kind = kind_of(path, text)
    if kind == "md":
        return list(enumerate(text.split("\n"), 1))
    if kind == "c":
        return c_comments(text)
    if kind == "python":
        try:
            return python_comments(text)
        except (tokenize.TokenError, IndentationError, SyntaxError):
            return shell_comments(text)
    if kind == "shell":
        return shell_comments(text)
    return []


def problems_in(path, text):
    found = []
    for no, part in comments(path, text):
        for m in ORDINAL.finditer(part):
            found.append(f'{path}:{no}: round-of-work ordinal "{m.group(0)}": cite the figure '
                         "and the machine, or drop it")
        for m in ISSUE.finditer(part):
            if COLOUR.search(part[:m.start()]) and len(m.group(0)) == 4:
                continue
            found.append(f'{path}:{no}: issue reference "{m.group(0)}": cite the figure and '
                         "the machine, or drop it")
    return found


def main():
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split("\n")
    files = [f for f in files if f and not f.startswith("third_party/") and f not in SELF]
    problems, read = [], 0
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        if kind_of(path, text) is None:
            continue
        read += 1
        problems += problems_in(path, text)
    for p in problems:
        print(p)
    print(f"ordinals_check: {read} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
