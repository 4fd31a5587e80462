#!/usr/bin/env python3
"""benchmarks/tokenizer_compare.py: gpipe's byte-level BPE against the Python `tokenizers` package.

Outside CI. Builds a corpus of at least --mb MB (10 by default) of records from local text, in many
scripts and with emoji: Debian's fortunes (one record per fortune), the msgstr side of every .mo
catalog under /usr/share/locale (parsed here), text and gzip'd text under /usr/share/doc (one record
per paragraph), and generated lines mixing scripts, emoji sequences, digits, contractions in every
case, Unicode spaces, line breaks, special tokens and random code points from every plane. Records
keep their newlines (gpipe_tokenize --nul).

Each tokenizer encodes every record with `tokenizers` (encode_batch, one thread, no special tokens
added) and with gpipe (bazel-bin/tools/gpipe_tokenize, one thread); the script reports how many
records give identical ids and the throughput of each, in MB of UTF-8 text per second of CPU time,
i.e. per core, which other work on the machine does not dilute (encoding only: gpipe's thread CPU
time around encode(), and the process CPU time of encode_batch). Tokenizers: the two test fixtures
(vocabulary 500); each with add_prefix_space; the GPT-2 one without its split regex (whole records
as one piece: the long-piece path of the merges); and one GPT-2 and one Llama 3 layout trained here
on the corpus (vocabulary --vocab, 8000 by default, so merges cover the other scripts too).

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
    bazel build --config=ci //tools:gpipe_tokenize
    /tmp/tokvenv/bin/python benchmarks/tokenizer_compare.py [--mb 10] [--show 3]
"""
import argparse
import glob
import gzip
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # per core: tokenizers' encode_batch on one thread

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def mo_strings(path):
    """The msgstr strings of a GNU .mo catalog (plural forms split), header aside."""
    data = open(path, "rb").read()
    if len(data) < 28:
        return []
    for endian in ("<", ">"):
        if struct.unpack(endian + "I", data[:4])[0] == 0x950412DE:
            break
    else:
        return []
    n, _, trans = struct.unpack(endian + "III", data[8:20])
    out = []
    for i in range(n):
        length, offset = struct.unpack(endian + "II", data[trans + 8 * i: trans + 8 * i + 8])
        raw = data[offset: offset + length]
        if i == 0 and raw.startswith(b"Project-Id-Version") or b"Content-Type:" in raw[:200]:
            continue
        try:
            out.extend(s for s in raw.decode("utf-8").split("\0") if s)
        except UnicodeDecodeError:
            pass
    return out


def fortunes():
    docs = []
    for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if f.endswith((".dat", ".u8")) or not os.path.isfile(f):
            continue
        text = open(f, encoding="utf-8", errors="replace").read()
        docs.extend(d.strip("\n") for d in re.split(r"\n%\n", text) if d.strip())
    return docs


def doc_paragraphs(limit_bytes):
    out, size = [], 0
    for path in sorted(glob.glob("/usr/share/doc/**/*", recursive=True)):
        if size > limit_bytes or not os.path.isfile(path):
            continue
        try:
            raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError):
            continue
        if "\0" in text or path.endswith((".html", ".png", ".svg", ".js", ".css")):
            continue
        for para in re.split(r"\n\s*\n", text):
            if para.strip():
                out.append(para)
                size += len(para.encode())
    return out


WORDS = [
    "Привет", "мир", "Ελληνικά", "γλώσσα", "مرحبا", "بالعالم", "שלום", "नमस्ते", "क्षत्रिय", "สวัสดี",
    "你好", "世界", "日本語", "テキスト", "ひらがな", "한국어", "안녕하세요", "Ünïcödé", "façade", "naïve",
    "Straße", "ﬁnance", "Ǆemal", "ǅ", "İstanbul", "ııı", "ΣΊΣΥΦΟΣ", "e\u0301", "a\u0308\u0323",
    "Z\u0351\u0352\u0353", "ſtop", "K\u212a", "don't", "DON'T", "I'LL", "we'Re", "it's", "'S", "'ſ",
    "o'clock", "''", "'", "<|endoftext|>", "<|end_of_text|>", "<|begin_of_text|>", "<|eot_id|>",
    "x=1+2;", "f(x)", "->", "...", "—", "«quote»", "“smart”", "$100", "50%", "#tag", "@user",
    "http://example.org/a?b=c", "C++20", "3.14159", "1,234,567", "٣٤٥", "１２３", "²³", "½", "Ⅻ",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚", "\U00020000\U0002A6D6",
]
EMOJI = [
    "\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F469\u200D\U0001F469\u200D\U0001F467",
    "\U0001F1EB\U0001F1F7", "1\uFE0F\u20E3", "\u2764\uFE0F", "\U0001F3F3\uFE0F\u200D\U0001F308",
    "\U0001F9D1\U0001F3FF\u200D\U0001F4BB", "\u263A", "\U0001FAE0", "\U0001F600\U0001F600\U0001F600",
]
SPACES = [" ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\n ", "\u00a0", "\u3000", "\u2028",
          "\x0b", "\x0c", "\x85", "\u2003", " \t \n", "\r", "\u200b"]


def random_code_point(rng):
    while True:
        cp = rng.choice([rng.randrange(0x20, 0x80), rng.randrange(0x80, 0x800),
                         rng.randrange(0x800, 0x10000), rng.randrange(0x10000, 0x110000)])
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def generated(rng, count):
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randrange(3, 30)):
            r = rng.random()
            if r < 0.45:
                parts.append(rng.choice(WORDS))
            elif r < 0.6:
                parts.append(rng.choice(EMOJI))
            elif r < 0.7:
                parts.append(str(rng.randrange(10 ** rng.randrange(1, 8))))
            elif r < 0.8:
                parts.append("".join(random_code_point(rng) for _ in range(rng.randrange(1, 6))))
            elif r < 0.9:
                parts.append(rng.choice("!?.,;:-_()[]{}\"'/\\|*&^%$#@~`<>"))
            parts.append(rng.choice(SPACES) if rng.random() < 0.5 else " ")
        out.append("".join(parts))
    return out


def build_corpus(target_bytes, seed):
    rng = random.Random(seed)
    records = fortunes()
    mo = []
    for path in sorted(glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo")):
        mo.extend(mo_strings(path))
    rng.shuffle(mo)
    records += ["\n".join(mo[i:i + 8]) for i in range(0, min(len(mo), 120_000), 8)]
    records += generated(rng, 15_000)
    size = sum(len(r.encode()) for r in records)
    if size < target_bytes:
        records += doc_paragraphs(target_bytes - size)
    records = [r for r in records if r and "\0" not in r]
    rng.shuffle(records)
    return records


def train(records, layout, vocab, path):
    if layout == "gpt2":
        pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        special, ignore = ["<|endoftext|>"], False
    else:
        pre = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        special, ignore = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], True
    tok = Tokenizer(models.BPE(ignore_merges=ignore))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(records, trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=special, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(path)


def run_gpipe(binary, tokenizer, corpus_path):
    with open(corpus_path, "rb") as fin:
        p = subprocess.run([binary, "--tokenizer=" + tokenizer, "--nul"], stdin=fin,
                           capture_output=True, check=False)
    if p.returncode != 0:
        sys.exit("gpipe_tokenize failed: " + p.stderr.decode(errors="replace"))
    m = re.search(rb"in ([0-9.]+) s", p.stderr)
    ids = [list(map(int, line.split())) for line in p.stdout.decode().split("\n")[:-1]]
    return ids, float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=10.0, help="corpus size, MB of UTF-8 text")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=8000, help="vocabulary of the corpus-trained BPEs")
    ap.add_argument("--binary", default=os.path.join(ROOT, "bazel-bin/tools/gpipe_tokenize"))
    ap.add_argument("--show", type=int, default=3, help="mismatching records to print per tokenizer")
    args = ap.parse_args()

    records = build_corpus(int(args.mb * 1e6), args.seed)
    data = [r.encode() for r in records]
    total = sum(len(d) for d in data)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    print(f"corpus: {len(records)} records, {total / 1e6:.1f} MB of UTF-8 text; CPU: {cpu}")

    work = tempfile.mkdtemp(prefix="tokenizer_compare.")
    corpus_path = os.path.join(work, "corpus.nul")
    with open(corpus_path, "wb") as f:
        for d in data:
            f.write(d + b"\0")
    fixtures = os.path.join(ROOT, "tests/data/testdata")
    gpt2_fixture = os.path.join(fixtures, "bpe_gpt2_tokenizer.json")
    llama3_fixture = os.path.join(fixtures, "bpe_llama3_tokenizer.json")

    def variant(fixture, name, edit):
        spec = json.load(open(fixture, encoding="utf-8"))
        edit(spec)
        path = os.path.join(work, name + ".json")
        json.dump(spec, open(path, "w", encoding="utf-8"), ensure_ascii=False)
        return path

    def llama3_prefix(spec):
        spec["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = True

    tokenizers = [
        ("fixture GPT-2 (500)", gpt2_fixture),
        ("fixture Llama 3 (500)", llama3_fixture),
        ("GPT-2 add_prefix_space (500)", variant(
            gpt2_fixture, "gpt2_prefix", lambda s: s["pre_tokenizer"].update(add_prefix_space=True))),
        ("Llama 3 add_prefix_space (500)", variant(llama3_fixture, "llama3_prefix", llama3_prefix)),
        ("GPT-2 no split regex (500)", variant(
            gpt2_fixture, "gpt2_noregex", lambda s: s["pre_tokenizer"].update(use_regex=False))),
    ]
    for layout in ("gpt2", "llama3"):
        path = os.path.join(work, f"{layout}_{args.vocab}.json")
        t0 = time.time()
        train(records, layout, args.vocab, path)
        print(f"trained {layout} BPE, vocabulary {args.vocab}, in {time.time() - t0:.1f} s")
        tokenizers.append((f"corpus {'GPT-2' if layout == 'gpt2' else 'Llama 3'} ({args.vocab})",
                           path))

    print(f"\n{'tokenizer':30} {'records':>8} {'identical':>10} {'tokens':>10} "
          f"{'gpipe MB/s':>11} {'tokenizers MB/s':>16}")
    all_same = True
    for name, path in tokenizers:
        ref = Tokenizer.from_file(path)
        t0 = time.process_time()  # CPU time of all threads: one rayon thread plus Python
        encodings = ref.encode_batch(records, add_special_tokens=False)
        ref_s = time.process_time() - t0
        want = [e.ids for e in encodings]
        got, gpipe_s = run_gpipe(args.binary, path, corpus_path)
        same = sum(1 for a, b in zip(want, got) if a == b) if len(got) == len(want) else 0
        all_same &= same == len(records)
        print(f"{name:30} {len(records):8} {same:10} {sum(map(len, want)):10} "
              f"{total / 1e6 / gpipe_s:11.1f} {total / 1e6 / ref_s:16.1f}")
        shown = 0
        for r, a, b in zip(records, want, got):
            if a != b and shown < args.show:
                k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                print(f"    differs at id {k}: {r[:160]!r}\n      tokenizers {a[k:k + 8]}\n"
                      f"      gpipe      {b[k:k + 8]}")
                shown += 1
    print("\nevery record identical" if all_same else "\nSOME RECORDS DIFFER")
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
