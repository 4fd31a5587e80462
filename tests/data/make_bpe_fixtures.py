#!/usr/bin/env python3
"""tests/data/make_bpe_fixtures.py: the byte-level BPE fixtures of tests/data/bpe_tokenizer_test.cc.

Trains two small byte-level BPE tokenizers (vocabulary 500, all 256 bytes in the alphabet) with the
Python `tokenizers` package on about 300 KB of Debian's fortunes (package `fortunes`):

  testdata/bpe_gpt2_tokenizer.json    GPT-2's layout: the ByteLevel pre-tokenizer with its own split
                                      pattern, "<|endoftext|>"; merges rewritten as "a b" strings, the
                                      older form;
  testdata/bpe_llama3_tokenizer.json  Llama 3's layout: a Split with Llama 3's regex, then ByteLevel
                                      without a regex, ignore_merges, "<|begin_of_text|>",
                                      "<|end_of_text|>"; merges as [a, b] pairs, the newer form.

and writes bpe_tokenizer_cases.inc: a fixed list of strings with the ids the reference gives each
(encode(s, add_special_tokens=False)), as C++ literals. Run it in a venv with `tokenizers`:

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
    /tmp/tokvenv/bin/python tests/data/make_bpe_fixtures.py
"""
import glob
import json
import os

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CASES = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see they've done what we'd said it's",
    "DON'T SHOUT: I'LL, WE'VE, THEY'RE, He'S, o'Re \u017fo '\u017f",
    "7 42 365 2024 31415 1234567 3.14159 -0.5",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "\u4f60\u597d\uff0c\u4e16\u754c\u3002\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u0663\u0664\u0665",
    "emoji: \U0001F600\U0001F44D\U0001F3FD \U0001F469\u200D\U0001F469\u200D\U0001F467 "
    "\U0001F1EB\U0001F1F7!",
    "combining: e\u0301 a\u0308 n\u0303 Z\u0351\u0352 \u0915\u094d\u0937",
    "tabs\tand\nnewlines\r\n  two spaces   three\n\n\nend  ",
    "   leading spaces",
    "trailing newline\n",
    " \n \t\n\r x",
    "a<|endoftext|>b c <|endoftext|><|endoftext|> d",
    "x<|end_of_text|>y <|begin_of_text|>",
    "x=1+2; y = [3,4]; // code!? 'quoted' \"double\"",
    "\u00dcn\u00efc\u00f6d\u00e9 fa\u00e7ade na\u00efve caf\u00e9 \u00bd \u216b \u00b2",
    "\u00a0nbsp\u2003em\u3000ideographic\u2028line",
    # Pieces longer than 32 bytes take the queue path of the merges (Note [Short merges]).
    "Pneumonoultramicroscopicsilicovolcanoconiosis thethethethethethethethethethethe",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u4e2d\u6587\u7684\u6587\u672c"
    "\u662f\u4e00\u4e2a\u5f88\u957f\u7684\u5355\u8bcd",
    "",
]


def corpus():
    files = sorted(f for f in glob.glob("/usr/share/games/fortunes/*")
                   if not f.endswith((".dat", ".u8")) and os.path.isfile(f))
    text, size = [], 0
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            t = fh.read()
        text.append(t)
        size += len(t)
        if size > 300_000:
            break
    return text


def train(pre_tokenizer, special, ignore_merges):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    return tok


def c_literal(s):
    out = []
    for b in s.encode("utf-8"):
        c = chr(b)
        if c == "\\" or c == '"':
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append("\\%03o" % b)  # octal: at most three digits, never runs on
    return '"' + "".join(out) + '"'


def main():
    gpt2 = train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                 ["<|endoftext|>"], ignore_merges=False)
    llama3 = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ["<|begin_of_text|>", "<|end_of_text|>"], ignore_merges=True)

    gpt2_path = os.path.join(HERE, "testdata", "bpe_gpt2_tokenizer.json")
    llama3_path = os.path.join(HERE, "testdata", "bpe_llama3_tokenizer.json")
    os.makedirs(os.path.dirname(gpt2_path), exist_ok=True)
    # GPT-2's file: merges as "a b" strings, as older tokenizer.json files write them.
    spec = json.loads(gpt2.to_str())
    spec["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                               for m in spec["model"]["merges"]]
    with open(gpt2_path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False, separators=(",", ":"))
    llama3.save(llama3_path, pretty=False)

    lines = ["// Generated by tests/data/make_bpe_fixtures.py with tokenizers %s; do not edit."
             % tokenizers.__version__,
             "// Each case: a string and the ids the reference gives it, add_special_tokens=False."]
    for name, path in (("kGpt2", gpt2_path), ("kLlama3", llama3_path)):
        tok = Tokenizer.from_file(path)  # read back: the ids are those of the file as saved
        lines.append("const std::vector<BpeCase> %sCases = {" % name)
        for s in CASES:
            ids = tok.encode(s, add_special_tokens=False).ids
            assert tok.decode(ids) == tok.decode(ids, skip_special_tokens=True)
            lines.append("    {%s," % c_literal(s))
            row = "     {"
            for k, i in enumerate(ids):
                item = str(i) + (", " if k + 1 < len(ids) else "")
                if len(row + item) > 99:
                    lines.append(row.rstrip())
                    row = "      "
                row += item
            lines.append(row + "}},")
        lines.append("};")
        lines.append("constexpr int64_t %sVocabSize = %d;" % (name, tok.get_vocab_size()))
    with open(os.path.join(HERE, "bpe_tokenizer_cases.inc"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    for p in (gpt2_path, llama3_path):
        print(p, os.path.getsize(p), "bytes")


if __name__ == "__main__":
    main()
