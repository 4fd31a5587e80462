"""PyTorch reference for gpipe's translation task (docs/RESULTS.md, "Translation").

    gpipe_train --model=transformer --steps=S ... --export-data=DIR
    python translation_torch.py train DIR --metrics torch.jsonl [--eval-every N] [--threads 1]
    python translation_torch.py compare gpipe.jsonl torch.jsonl

`train` trains the same Transformer as gpipe's models/transformer.cc (pre-
LayerNorm residual sublayers, one embedding table for the source, the target
and the output projection, sinusoidal positions, dropout on the embeddings,
the residual branches, the attention probabilities and the feed-forward
hidden layer) on exactly the run gpipe_train exported: the same pairs, the
same rows in each step's batch, the same byte tokens, the same optimizer and
learning-rate schedule, the same number of steps, from the same initial
weights (--init=gpipe, the default; --init=torch draws them anew from the
same distributions). Only the dropout masks differ (PyTorch's generator).
Before training it checks that its batch of step 0 is gpipe's token for
token and that its eval-mode loss on it equals gpipe's.

Evaluation is gpipe's: the held-out loss (no label smoothing) and token
accuracy over the exported test rows, and corpus chrF (sacreBLEU's CHRF,
the definition gpipe's data/metrics.cc follows) of greedy translations of
the exported decode rows (--final-sentences=all: every test pair at the
end). It writes --metrics in gpipe_train's JSON-lines form ("train", "eval"
and, for the final evaluation, "translation" records), so
benchmarks/compare_curves.py --metric=chrf draws both.

`compare` prints the two runs side by side: the evaluations, the training
loss per window of steps, the learning rates (they must agree), and the
final translations of both scored again by sacreBLEU (gpipe's own chrF
must equal sacreBLEU's on gpipe's hypotheses).

Needs torch and sacrebleu (benchmarks/setup_torch.sh installs both). Not run
in CI.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import reference_common
from reference_common import fail, lr_schedule, read_jsonl


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("train", help="train on a gpipe_train --export-data directory")
    t.add_argument("export", help="the directory gpipe_train --export-data wrote")
    t.add_argument("--metrics", required=True, help="JSON-lines output, as gpipe_train --metrics")
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (0: at the end)")
    t.add_argument("--final-sentences", default="export",
                   help="export: the exported decode rows | all: every test pair | N: the first N")
    t.add_argument("--init", choices=["gpipe", "torch"], default="gpipe")
    t.add_argument("--seed", type=int, default=0, help="torch's generator: dropout masks, --init=torch")
    t.add_argument("--steps", type=int, default=0, help="stop early after N steps (0: all exported)")
    t.add_argument("--log-every", type=int, default=500)
    c = sub.add_parser("compare", help="two runs' --metrics side by side")
    c.add_argument("gpipe", help="gpipe_train's --metrics file")
    c.add_argument("torch", help="this script's --metrics file")
    c.add_argument("--window", type=int, default=1000, help="steps per training-loss row")
    c.add_argument("--gpipe-translations", metavar="JSONL",
                   help="gpipe's final translations from this file instead (a --metrics file of an "
                        "evaluation with more --eval-sentences, e.g. resumed from the final checkpoint)")
    return p.parse_args()


ARGS = parse_args()


def sacrebleu_chrf():
    try:
        from sacrebleu.metrics import CHRF
    except ImportError:
        fail("needs sacrebleu (benchmarks/setup_torch.sh installs it, or pip install sacrebleu)")
    return CHRF()  # char_order 6, word_order 0, beta 2, whitespace removed


def corpus_chrf(hypotheses, references):
    return sacrebleu_chrf().corpus_score(hypotheses, [references]).score


# ---------------------------------------------------------------- compare

def compare(a):
    g, t = read_jsonl(a.gpipe), read_jsonl(a.torch)

    def by_type(rows, kind):
        return [r for r in rows if r.get("type") == kind]

    ge = {r["step"]: r for r in by_type(g, "eval")}
    te = {r["step"]: r for r in by_type(t, "eval")}
    print("| step | gpipe loss | PyTorch loss | gpipe token acc. | PyTorch token acc. "
          "| gpipe chrF | PyTorch chrF | sentences |")
    print("|---|---|---|---|---|---|---|---|")
    for s in sorted(set(ge) | set(te)):
        x, y = ge.get(s, {}), te.get(s, {})

        def f(r, k, scale=1.0, digits=4):
            return f"{scale * r[k]:.{digits}f}" if r.get(k) is not None else "-"
        print(f"| {s} | {f(x, 'loss')} | {f(y, 'loss')} | {f(x, 'token_accuracy', 100, 2)} "
              f"| {f(y, 'token_accuracy', 100, 2)} | {f(x, 'chrf', 1, 2)} | {f(y, 'chrf', 1, 2)} "
              f"| {x.get('sentences', y.get('sentences', '-'))} |")
    gt = {r["step"]: r for r in by_type(g, "train")}
    tt = {r["step"]: r for r in by_type(t, "train")}
    common = sorted(set(gt) & set(tt))
    if common:
        lr_diff = max(abs(gt[s]["lr"] - tt[s]["lr"]) for s in common)
        print(f"\nlearning rate: largest difference {lr_diff:.3g} over {len(common)} steps")
        rel = [abs(gt[s]["loss"] - tt[s]["loss"]) / abs(gt[s]["loss"]) for s in common
               if gt[s]["loss"] is not None and tt[s]["loss"] is not None and gt[s]["loss"] != 0]
        print(f"training loss: largest relative difference {max(rel[:10]):.2e} over the first "
              f"{min(10, len(rel))} steps, {max(rel):.2e} over all")
        print(f"\n| steps | gpipe mean train loss | PyTorch mean train loss |\n|---|---|---|")
        for lo in range(common[0], common[-1] + 1, a.window):
            ss = [s for s in common if lo <= s < lo + a.window
                  and gt[s]["loss"] is not None and tt[s]["loss"] is not None]
            if ss:
                gm = sum(gt[s]["loss"] for s in ss) / len(ss)
                tm = sum(tt[s]["loss"] for s in ss) / len(ss)
                print(f"| {ss[0]}-{ss[-1]} | {gm:.4f} | {tm:.4f} |")
    gtr = read_jsonl(a.gpipe_translations) if a.gpipe_translations else g
    scored = {}
    for label, rows, evals in (("gpipe", gtr, ge), ("PyTorch", t, te)):
        tr = by_type(rows, "translation")
        if not tr:
            print(f"\n{label}: no final translations in its metrics")
            continue
        step = max(r["step"] for r in tr)
        tr = [r for r in tr if r["step"] == step]
        score = corpus_chrf([r["hypothesis"] for r in tr], [r["reference"] for r in tr])
        ev = evals.get(step, {})
        if label == "gpipe" and a.gpipe_translations:
            ev = {r["step"]: r for r in by_type(gtr, "eval")}.get(step, {})
        own = ev.get("chrf_all") if ev.get("sentences_all") == len(tr) else ev.get("chrf")
        exact = sum(r["hypothesis"] == r["reference"] for r in tr)
        scored[label] = {(r["language"], r["source"], r["reference"]) for r in tr}
        print(f"\n{label} at step {step}: sacreBLEU chrF {score:.2f} over {len(tr)} sentences "
              f"(the run reported {own if own is None else round(own, 2)}); "
              f"exact matches {exact} ({100 * exact / len(tr):.1f}%)")
    if len(scored) == 2 and scored["gpipe"] != scored["PyTorch"]:
        print("\nwarning: the two final translation sets are different test pairs "
              f"({len(scored['gpipe'])} and {len(scored['PyTorch'])}; {len(scored['gpipe'] & scored['PyTorch'])} "
              "in common): the two sacreBLEU figures are not side by side (see --gpipe-translations)")


# ---------------------------------------------------------------- train

if ARGS.mode == "compare":
    compare(ARGS)
    sys.exit(0)

import torch  # noqa: E402  (threads are set before torch does any work)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(ARGS.threads)
torch.set_num_interop_threads(1)


def read_safetensors(path):
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32}
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            data = f.read()
        header.pop("__metadata__", None)
        out = {}
        for name, info in header.items():
            lo, hi = info["data_offsets"]
            if hi > len(data):
                raise ValueError(f"tensor {name} ends at byte {hi} of {len(data)}: the file is truncated")
            out[name] = torch.frombuffer(bytearray(data[lo:hi]), dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    except OSError as e:
        fail(f"cannot read the initial weights {path}: {e.strerror} (gpipe_train --export-data writes them)")
    except (struct.error, ValueError, KeyError, RuntimeError) as e:
        fail(f"{path} is not a whole gpipe checkpoint ({e})")
    return out


def sinusoid_table(length, dim):
    pe = torch.zeros(length, dim, dtype=torch.float64)
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    i = torch.arange(0, dim, 2, dtype=torch.float64)[None, :]
    angle = pos / torch.pow(10000.0, i / dim)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : dim // 2])
    return pe.float()


class Attention(nn.Module):
    def __init__(self, dim, heads, dropout, causal):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.heads, self.causal, self.drop = heads, causal, nn.Dropout(dropout)

    def forward(self, x, mem, key_pad=None):
        b, t, d = x.shape
        s, dh = mem.shape[1], d // self.heads
        q = self.q(x).view(b, t, self.heads, dh).transpose(1, 2)
        k = self.k(mem).view(b, s, self.heads, dh).transpose(1, 2)
        v = self.v(mem).view(b, s, self.heads, dh).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(dh)
        if key_pad is not None:
            scores = scores.masked_fill(key_pad[:, None, None, :], float("-inf"))
        if self.causal:
            future = torch.ones(t, s, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        p = self.drop(scores.softmax(dim=-1))
        return self.o((p @ v).transpose(1, 2).reshape(b, t, d))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden, dropout):
        super().__init__()
        self.inp, self.out, self.drop = nn.Linear(dim, hidden), nn.Linear(hidden, dim), nn.Dropout(dropout)

    def forward(self, x):
        return self.out(self.drop(F.relu(self.inp(x))))


class Sublayer(nn.Module):
    """x + dropout(f(LN(x))), f one of self-attention, cross-attention, feed-forward."""

    def __init__(self, cfg, kind):
        super().__init__()
        d = cfg["dim"]
        self.kind, self.norm, self.drop = kind, nn.LayerNorm(d, eps=1e-5), nn.Dropout(cfg["dropout"])
        if kind == "ffn":
            self.f = FeedForward(d, cfg["ffn"], cfg["dropout"])
        else:
            self.f = Attention(d, cfg["heads"], cfg["dropout"], causal=kind == "causal")

    def forward(self, x, mem=None, key_pad=None):
        h = self.norm(x)
        if self.kind == "ffn":
            y = self.f(h)
        elif self.kind == "cross":
            y = self.f(h, mem, key_pad)
        elif self.kind == "self":
            y = self.f(h, h, key_pad)
        else:
            y = self.f(h, h)
        return x + self.drop(y)


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, L = cfg["dim"], cfg["layers"]
        self.cfg = cfg
        self.table = nn.Parameter(torch.empty(cfg["vocab"], d))
        self.register_buffer("pe", sinusoid_table(cfg["max_len"], d), persistent=False)
        self.drop = nn.Dropout(cfg["dropout"])
        self.enc = nn.ModuleList()
        for _ in range(L):
            self.enc.extend([Sublayer(cfg, "self"), Sublayer(cfg, "ffn")])
        self.enc_norm = nn.LayerNorm(d, eps=1e-5)
        self.dec = nn.ModuleList()
        for _ in range(L):
            self.dec.extend([Sublayer(cfg, "causal"), Sublayer(cfg, "cross"), Sublayer(cfg, "ffn")])
        self.dec_norm = nn.LayerNorm(d, eps=1e-5)

    def embed(self, tok):
        x = F.embedding(tok, self.table) * math.sqrt(self.cfg["dim"])
        return self.drop(x + self.pe[: tok.shape[1]])

    def encode(self, src):
        pad = src == self.cfg["pad_id"]
        x = self.embed(src)
        for layer in self.enc:
            x = layer(x, key_pad=pad)
        return self.enc_norm(x), pad

    def decode(self, mem, pad, tgt):
        y = self.embed(tgt)
        for layer in self.dec:
            y = layer(y, mem, pad)
        return self.dec_norm(y) @ self.table.t()

    def forward(self, src, tgt):
        mem, pad = self.encode(src)
        return self.decode(mem, pad, tgt)

    def gpipe_names(self):
        """(gpipe's checkpoint name, parameter) for every parameter, the table once."""
        out = [("src_embed.shared_embedding", self.table)]

        def norm(prefix, ln):
            out.extend([(prefix + ".gamma", ln.weight), (prefix + ".beta", ln.bias)])

        def linear(prefix, lin):
            out.extend([(prefix + ".weight", lin.weight), (prefix + ".bias", lin.bias)])

        def sublayer(prefix, s):
            norm(prefix + ".norm", s.norm)
            if s.kind == "ffn":
                linear(prefix + ".mlp.in", s.f.inp)
                linear(prefix + ".mlp.out", s.f.out)
            else:
                for n in "qkvo":
                    linear(f"{prefix}.attn.{n}", getattr(s.f, n))
        for i in range(self.cfg["layers"]):
            sublayer(f"encoder_{i}.self_attn", self.enc[2 * i])
            sublayer(f"encoder_{i}.ffn", self.enc[2 * i + 1])
        norm("tgt_embed.encoder_norm", self.enc_norm)
        for i in range(self.cfg["layers"]):
            for j, n in enumerate(["self_attn", "cross_attn", "ffn"]):
                sublayer(f"decoder_{i}.{n}", self.dec[3 * i + j])
        norm("output.decoder_norm", self.dec_norm)
        return out


def init_like_gpipe(model):
    """gpipe's distributions (layers/basic.cc, models/transformer.cc), drawn by torch."""
    d = model.cfg["dim"]
    scale = 1 / math.sqrt(2 * model.cfg["layers"]) if model.cfg["scaled_init"] else 1.0
    with torch.no_grad():
        for name, p in model.gpipe_names():
            if name == "src_embed.shared_embedding":
                p.normal_(0, 1 / math.sqrt(d))
            elif name.endswith(".gamma"):
                p.fill_(1)
            elif name.endswith(".beta") or name.endswith(".bias"):
                p.zero_()
            else:  # U(-a, a), a = scale / sqrt(fan_in)
                a = scale / math.sqrt(p.shape[1])
                p.uniform_(-a, a)


def load_gpipe_weights(model, path):
    saved = {k: v for k, v in read_safetensors(path).items() if not k.startswith("optim/")}
    # A pipeline of several cells stores the tied table once per cell using it
    # (tgt_embed., output.): equal copies of src_embed.'s.
    table = "src_embed.shared_embedding"
    for copy in [k for k in saved if k.endswith(".shared_embedding") and k != table]:
        if table in saved and not torch.equal(saved[copy], saved[table]):
            fail(f"{path}: {copy} differs from {table} (the tied table's copies must be equal)")
        del saved[copy]
    names = model.gpipe_names()
    missing = [n for n, _ in names if n not in saved]
    if missing:
        fail(f"{path} lacks {len(missing)} of the model's tensors, e.g. {missing[:3]}")
    unused = set(saved) - {n for n, _ in names}
    if unused:
        fail(f"{path} has tensors this model does not know: {sorted(unused)[:3]}")
    with torch.no_grad():
        for n, p in names:
            if tuple(saved[n].shape) != tuple(p.shape):
                fail(f"{path}: {n} is {tuple(saved[n].shape)}, the model's is {tuple(p.shape)}")
            p.copy_(saved[n])


class Data:
    """The exported pairs, tokenised as data/translation_batch.cc does."""

    def __init__(self, export):
        self.x = export
        tok = export["tokens"]
        self.pad, self.bos, self.eos, self.unk = tok["pad"], tok["bos"], tok["eos"], tok["unk"]
        self.languages = export["languages"]
        self.first_tag, self.first_byte = tok["first_tag"], tok["first_byte"]
        self.lang = {l: i for i, l in enumerate(export["languages"])}
        self.train, self.test = export["train"], export["test"]

    def batch(self, pairs, rows):
        src, tin, tout = [], [], []
        for r in rows:
            lang, source, target = pairs[r]
            if lang not in self.lang:
                fail(f"pair {r}: language '{lang}' is not among the export's {list(self.lang)}")
            s = [self.first_tag + self.lang[lang]] + [self.first_byte + b for b in source.encode("utf-8")]
            t = [self.first_byte + b for b in target.encode("utf-8")]
            src.append(s)
            tin.append([self.bos] + t)
            tout.append(t + [self.eos])
        s_len = min(max(1, max(map(len, src))), self.x["max_src_len"])
        t_len = min(max(1, max(map(len, tout))), self.x["max_tgt_len"])

        def pad(rows_, n):
            return torch.tensor([r[:n] + [self.pad] * (n - len(r[:n])) for r in rows_], dtype=torch.int64)
        return pad(src, s_len), pad(tin, t_len), pad(tout, t_len)


def make_optimizer(model, settings):
    return reference_common.make_optimizer([p for _, p in model.gpipe_names()], settings, torch)


def loss_sum(logits, labels, pad, smoothing=0.0, clip=0.0):
    if clip > 0:
        logits = clip * torch.tanh(logits / clip)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=pad, label_smoothing=smoothing, reduction="sum")


@torch.no_grad()
def greedy(model, src, max_len, data):
    mem, pad = model.encode(src)
    b = src.shape[0]
    tgt = torch.full((b, 1), data.bos, dtype=torch.int64)
    done = torch.zeros(b, dtype=torch.bool)
    out = [[] for _ in range(b)]
    for _ in range(max_len):
        nxt = model.decode(mem, pad, tgt)[:, -1].argmax(-1)
        for i in range(b):
            if not done[i]:
                if nxt[i] == data.eos:
                    done[i] = True
                else:
                    out[i].append(int(nxt[i]))
        tgt = torch.cat([tgt, torch.where(done, data.pad, nxt)[:, None]], 1)
        if done.all():
            break
    return out


def detok(ids, data):
    """ByteTokenizer::decode (data/tokenizer.cc), then the text as gpipe's chrF sees it:
    invalid UTF-8 bytes as surrogate escapes, one character each."""
    out = bytearray()
    for i in ids:
        if i == data.eos:
            break
        if i in (data.pad, data.bos):
            continue
        if i == data.unk:
            out += "\ufffd".encode()
        elif data.first_tag <= i < data.first_byte:
            out += f"<{data.languages[i - data.first_tag]}>".encode()
        else:
            out.append(i - data.first_byte)
    return out.decode("utf-8", errors="surrogateescape")


@torch.no_grad()
def evaluate(model, data, export, decode_rows, scored):
    """Held-out loss and token accuracy; chrF of the first `scored` decode rows
    (with more rows decoded, also "chrf_all" over every one of them)."""
    t0 = time.perf_counter()
    model.eval()
    total, terms, correct = 0.0, 0, 0
    rows, chunk = export["eval_rows"], export["eval_chunk"]
    for lo in range(0, len(rows), chunk):
        src, tin, tout = data.batch(data.test, rows[lo:lo + chunk])
        logits = model(src, tin)
        total += float(loss_sum(logits, tout, data.pad))
        keep = tout != data.pad
        terms += int(keep.sum())
        correct += int(((logits.argmax(-1) == tout) & keep).sum())
    hyps, refs, samples = [], [], []
    for lo in range(0, len(decode_rows), export["batch"]):
        part = decode_rows[lo:lo + export["batch"]]
        src, _, _ = data.batch(data.test, part)
        for r, ids in zip(part, greedy(model, src, export["max_tgt_len"], data)):
            lang, source, target = data.test[r]
            hyps.append(detok(ids, data))
            refs.append(target)
            samples.append({"language": lang, "source": source, "reference": target, "hypothesis": hyps[-1]})
    model.train()
    r = {"loss": total / max(terms, 1), "examples": len(rows), "token_accuracy": correct / max(terms, 1),
         "chrf": corpus_chrf(hyps[:scored], refs[:scored]) if scored else None}
    if scored:
        r["sentences"] = scored
    if len(hyps) > scored:
        r.update({"chrf_all": corpus_chrf(hyps, refs), "sentences_all": len(hyps)})
    r["seconds"] = time.perf_counter() - t0
    return r, samples


def check_step0(model, data, export):
    chk = export["check"]
    rows = export["step_rows"][0]
    src, tin, tout = data.batch(data.train, rows)
    b, s, t = chk["shape"]
    if chk.get("eval_loss") is None:
        fail("the export's step-0 loss is not finite: gpipe's initial model gives no usable check")
    if (tuple(src.shape), tuple(tin.shape)) != ((b, s), (b, t)):
        fail(f"step 0's batch is {tuple(src.shape)} / {tuple(tin.shape)}; gpipe's was {(b, s)} / {(b, t)}")
    for name, mine in (("src", src), ("tgt_in", tin), ("tgt_out", tout)):
        if mine.reshape(-1).tolist() != chk[name]:
            fail(f"step 0's {name} tokens differ from gpipe's")
    model.eval()
    with torch.no_grad():
        loss = float(loss_sum(model(src, tin), tout, data.pad)) / int((tout != data.pad).sum())
    model.train()
    return loss, chk["eval_loss"]


def train(a):
    path = os.path.join(a.export, "data.json")
    try:
        with open(path) as f:
            export = json.load(f)
    except FileNotFoundError:
        fail(f"{path} does not exist (write it with gpipe_train --model=transformer ... --export-data={a.export})")
    except json.JSONDecodeError as e:
        fail(f"{path} is not JSON ({e})")
    if export.get("format") != "gpipe-translation-export/1":
        fail(f"{path}: format '{export.get('format')}', expected 'gpipe-translation-export/1'")
    torch.manual_seed(a.seed)
    cfg, settings = export["model"], export["settings"]
    if cfg["activation"] != "relu":
        fail(f"the reference has a ReLU feed-forward; the export's is {cfg['activation']}")
    model = Transformer(cfg)
    data = Data(export)
    if a.init == "gpipe":
        load_gpipe_weights(model, os.path.join(a.export, "init.safetensors"))
        mine, theirs = check_step0(model, data, export)
        if abs(mine - theirs) > 1e-4 * abs(theirs):
            fail(f"step 0's eval-mode loss is {mine:.7f} here and {theirs:.7f} in gpipe "
                 "from the same weights: the models differ")
        print(f"check: step 0's batch equals gpipe's; eval-mode loss {mine:.7f} (gpipe {theirs:.7f})", flush=True)
    else:
        init_like_gpipe(model)
        check_step0(model, data, export)
        print("check: step 0's batch equals gpipe's; weights drawn by torch", flush=True)
    opt = make_optimizer(model, settings)
    lr_at = lr_schedule(settings["lr_schedule"], settings["lr"])
    params = [p for _, p in model.gpipe_names()]
    n_params = sum(p.numel() for p in params)
    steps = export["steps"] if a.steps <= 0 else min(a.steps, export["steps"])
    # The final evaluation decodes the exported rows (its chrF is gpipe's) and,
    # with --final-sentences, the rest of the test pairs up to that many.
    final_rows = list(export["decode_rows"])
    if a.final_sentences != "export":
        want = len(data.test) if a.final_sentences == "all" else int(a.final_sentences)
        seen = set(final_rows)
        final_rows += [r for r in range(len(data.test)) if r not in seen][:max(0, want - len(final_rows))]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); {n_params:,} parameters; "
          f"{settings['optimizer']} {settings['lr_schedule']} lr {settings['lr']}; {steps} steps of "
          f"{export['batch']}; {export['describe']}", flush=True)
    out = open(a.metrics, "w")

    def write(rec):
        out.write(json.dumps(rec) + "\n")
        out.flush()

    def run_eval(step, rows, final):
        r, samples = evaluate(model, data, export, rows, len(export["decode_rows"]))
        write({"type": "eval", "step": step, **r})
        more = (f"; chrF {r['chrf_all']:.2f} over all {r['sentences_all']} decoded" if "chrf_all" in r else "")
        chrf = (f", chrF {r['chrf']:.2f} ({r['sentences']} greedy translations{more})"
                if r["chrf"] is not None else "")
        print(f"eval at step {step}: held-out loss {r['loss']:.4f} ({r['examples']} examples), token accuracy "
              f"{100 * r['token_accuracy']:.2f}%{chrf}  [{r['seconds']:.0f}s]", flush=True)
        if final:
            for s in samples:
                write({"type": "translation", "step": step, **s})

    smoothing, clip = cfg["label_smoothing"], cfg["logit_clip"]
    train_time, t_window, window_ex = 0.0, time.perf_counter(), 0
    model.train()
    for step in range(steps):
        t0 = time.perf_counter()
        lr = lr_at(step + 1)
        for g in opt.param_groups:
            g["lr"] = lr
        src, tin, tout = data.batch(data.train, export["step_rows"][step])
        terms = int((tout != data.pad).sum())
        loss = loss_sum(model(src, tin), tout, data.pad, smoothing, clip) / terms
        loss.backward()
        # As gpipe's trainer: clip (or only measure) the global norm; no update when not finite.
        norm = torch.nn.utils.clip_grad_norm_(params, settings["clip_norm"] or float("inf"))
        value = loss.item()
        if math.isfinite(value) and math.isfinite(norm.item()):
            opt.step()
        opt.zero_grad(set_to_none=False)
        dt = time.perf_counter() - t0
        train_time += dt
        window_ex += src.shape[0]
        write({"type": "train", "step": step + 1, "loss": value, "lr": lr, "seconds": dt,
               "tokens": terms})
        if (step + 1) % a.log_every == 0 or step + 1 == steps:
            now = time.perf_counter()
            print(f"step {step + 1:6d}/{steps}  loss {value:.4f}  lr {lr:.2e}  "
                  f"{window_ex / (now - t_window):.1f} ex/s", flush=True)
            t_window, window_ex = now, 0
        if a.eval_every > 0 and (step + 1) % a.eval_every == 0 and step + 1 < steps:
            run_eval(step + 1, export["decode_rows"], final=False)
    print(f"trained {steps} steps in {train_time:.0f}s: {steps * export['batch'] / train_time:.1f} examples/s",
          flush=True)
    run_eval(steps, final_rows, final=True)
    out.close()


train(ARGS)
