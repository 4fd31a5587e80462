"""PyTorch side of `gpipe_bench transformer | pipeline | remat`: W2, W3 and W4
of shared/BENCHMARKS.md, written from the workload definitions there.

    python transformer_torch.py step     --threads 2                      # W2
    python transformer_torch.py seq      --threads 1 --micro-batches 8    # W3 hand-rolled baseline
    python transformer_torch.py pipe     --threads 2 --partitions 2 ...   # W3 Pipe (torch <= 2.3 only)
    python transformer_torch.py memory   --threads 2 --micro-batches 8 --remat layer   # W4

    python transformer_torch.py step --device cuda --precision bf16 --attention sdpa \
        --layers 6 --dim 1024 --ffn 4096 --heads 16 --vocab 32000 --batch 64 --src-len 128 --tgt-len 128

`step --device cuda` is the PyTorch side of benchmarks/gpu_compare.py (gpipe's
tests/cuda/w2_bench beside it): the same model on cuda:0 at any shape (the flags
default to W2's), in fp32, TF32 (torch.backends.{cuda.matmul,cudnn}.allow_tf32)
or bf16 (torch.autocast("cuda", torch.bfloat16)), with explicit attention
(matmul + softmax, as on the CPU) or F.scaled_dot_product_attention; median of
10 steps after 3, each step ending with the host read of its loss and
torch.cuda.synchronize(). There --precision and --attention take lists
(fp32,bf16 / explicit,sdpa): each pair is one run, in that order (precisions
outer), with its own model (initialised on the GPU), optimizer and warm-up, and
prints its own JSON line as soon as it ends (importing torch and starting CUDA
cost about 10 s a process on an H200 machine: one process per shape keeps the
side-by-side within its budget).

Prints one JSON object on stdout (per run with --device cuda). The caller fixes OMP_NUM_THREADS /
OPENBLAS_NUM_THREADS; this script also calls torch.set_num_threads(--threads)
and torch.set_num_interop_threads(1) before any work.
"""
import argparse
import json
import math
import resource
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["step", "seq", "pipe", "memory"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--layers", type=int, default=None, help="encoder (= decoder) layers; 3 for W2, 8 for W3/W4")
    p.add_argument("--batch", type=int, default=None, help="N; 32 for W2, 64 for W3/W4")
    p.add_argument("--micro-batches", type=int, default=1)
    p.add_argument("--partitions", type=int, default=1, help="Pipe only: K in {1, 2}")
    p.add_argument("--checkpoint", default="never", help="Pipe only: never | except_last | always")
    p.add_argument("--remat", default="none", choices=["none", "layer"], help="memory mode: per-layer checkpoint")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--max-seconds", type=float, default=30.0)
    p.add_argument("--autocast", default="none", choices=["none", "bf16"],
                   help="step/seq: forward and loss under torch.autocast('cpu', bfloat16)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda: step mode only, on cuda:0")
    p.add_argument("--precision", default="fp32",
                   help="fp32 | tf32 | bf16 (a list with --device cuda); bf16: torch.autocast on --device "
                        "(as --autocast bf16); tf32: CUDA only")
    p.add_argument("--attention", default="explicit",
                   help="explicit: matmul, softmax, matmul; sdpa: F.scaled_dot_product_attention (a list with "
                        "--device cuda)")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--src-len", type=int, default=32)
    p.add_argument("--tgt-len", type=int, default=32)
    p.add_argument("--dropout", type=float, default=0.0,
                   help="training dropout where gpipe's Transformer has it (--dropout): embeddings, "
                        "attention probabilities, the FFN's hidden layer, each sublayer's output")
    a = p.parse_args()
    a.precisions, a.attentions = a.precision.split(","), a.attention.split(",")
    if a.device == "cuda" and a.mode != "step":
        p.error("--device cuda: step mode only")
    if any(x not in ("fp32", "tf32", "bf16") for x in a.precisions):
        p.error("--precision: fp32, tf32 or bf16")
    if any(x not in ("explicit", "sdpa") for x in a.attentions):
        p.error("--attention: explicit or sdpa")
    if a.device != "cuda" and (len(a.precisions) > 1 or len(a.attentions) > 1 or a.precision == "tf32"):
        p.error("lists and --precision tf32: --device cuda only")
    if a.dim % a.heads:
        p.error("--dim must be a multiple of --heads")
    if not 0.0 <= a.dropout < 1.0:
        p.error("--dropout must be in [0, 1)")
    return a


ARGS = parse_args()

import torch  # noqa: E402  (threads must be set before torch does any work)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(ARGS.threads)
torch.set_num_interop_threads(1)

D_MODEL, HEADS, FFN, VOCAB, SRC_LEN, TGT_LEN = ARGS.dim, ARGS.heads, ARGS.ffn, ARGS.vocab, ARGS.src_len, ARGS.tgt_len
DEVICE = torch.device("cuda:0" if ARGS.device == "cuda" else "cpu")
# The run's precision and attention (main() sets them per run with --device cuda).
BF16 = ARGS.autocast == "bf16" or ARGS.precision == "bf16"
ATTENTION = ARGS.attention
DROPOUT = ARGS.dropout


def drop(x, training):
    """gpipe's training dropout (--dropout); nothing at all when it is 0."""
    return F.dropout(x, DROPOUT, training) if DROPOUT > 0 else x


def max_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def sinusoid_table(length, dim):
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    i = torch.arange(0, dim, 2, dtype=torch.float64)[None, :]
    angle = pos / torch.pow(10000.0, i / dim)
    pe = torch.zeros(length, dim, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.float()


class Attention(nn.Module):
    """4 separate Linear(D, D) with bias; explicit scores, softmax, P V (--attention sdpa:
    F.scaled_dot_product_attention, is_causal for the decoder's self-attention)."""

    def __init__(self, causal):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(D_MODEL, D_MODEL) for _ in range(4))
        self.causal = causal

    def forward(self, x, mem):
        b, t, _ = x.shape
        s = mem.shape[1]
        dh = D_MODEL // HEADS
        q = self.q(x).view(b, t, HEADS, dh).transpose(1, 2)
        k = self.k(mem).view(b, s, HEADS, dh).transpose(1, 2)
        v = self.v(mem).view(b, s, HEADS, dh).transpose(1, 2)
        if ATTENTION == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal,
                                                 dropout_p=DROPOUT if self.training else 0.0)
            return self.o(out.transpose(1, 2).reshape(b, t, D_MODEL))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(dh)
        if self.causal:
            mask = torch.full((t, s), float("-inf"), device=x.device).triu(1)
            scores = scores + mask
        p = drop(scores.softmax(dim=-1), self.training)
        out = torch.matmul(p, v).transpose(1, 2).reshape(b, t, D_MODEL)
        return self.o(out)


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(D_MODEL, FFN), nn.Linear(FFN, D_MODEL)

    def forward(self, x):
        return self.fc2(drop(F.relu(self.fc1(x)), self.training))


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.attn, self.ffn = Attention(causal=False), FeedForward()

    def forward(self, x):
        h = self.ln1(x)
        x = x + drop(self.attn(h, h), self.training)
        return x + drop(self.ffn(self.ln2(x)), self.training)


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2, self.ln3 = (nn.LayerNorm(D_MODEL) for _ in range(3))
        self.self_attn, self.cross_attn, self.ffn = Attention(causal=True), Attention(causal=False), FeedForward()

    def forward(self, y, mem):
        h = self.ln1(y)
        y = y + drop(self.self_attn(h, h), self.training)
        y = y + drop(self.cross_attn(self.ln2(y), mem), self.training)
        return y + drop(self.ffn(self.ln3(y)), self.training)


# W3's tuple -> tuple blocks; W2 chains the same blocks with 3 + 3 layers.
class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(VOCAB, D_MODEL) * D_MODEL ** -0.5)
        self.register_buffer("pe", sinusoid_table(max(512, SRC_LEN, TGT_LEN), D_MODEL), persistent=False)

    def embed(self, tok):
        return drop(self.weight[tok] * math.sqrt(D_MODEL) + self.pe[: tok.shape[1]], self.training)

    def forward(self, src_tok, tgt_tok):
        return self.embed(src_tok), self.embed(tgt_tok)


class EncBlock(nn.Module):
    def __init__(self, remat=False):
        super().__init__()
        self.layer, self.remat = EncoderLayer(), remat

    def forward(self, s, t):
        if self.remat:
            return torch.utils.checkpoint.checkpoint(self.layer, s, use_reentrant=True), t
        return self.layer(s), t


class EncNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(D_MODEL)

    def forward(self, s, t):
        return self.ln(s), t


class DecBlock(nn.Module):
    def __init__(self, remat=False):
        super().__init__()
        self.layer, self.remat = DecoderLayer(), remat

    def forward(self, m, t):
        if self.remat:
            return m, torch.utils.checkpoint.checkpoint(self.layer, t, m, use_reentrant=True)
        return m, self.layer(t, m)


class Head(nn.Module):
    """logits = LN_dec(y) E^T, E being the Embed block's table (tied, no bias)."""

    def __init__(self, embed):
        super().__init__()
        self.ln = nn.LayerNorm(D_MODEL)
        self.embed = [embed]  # not a submodule: the table is counted once, in Embed

    def forward(self, m, t):
        return torch.matmul(self.ln(t), self.embed[0].weight.t())


def make_blocks(layers, remat=False):
    torch.manual_seed(0)
    embed = Embed()
    blocks = [embed] + [EncBlock(remat) for _ in range(layers)] + [EncNorm()]
    blocks += [DecBlock(remat) for _ in range(layers)] + [Head(embed)]
    return blocks


class Chain(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, src, tgt):
        x = (src, tgt)
        for b in self.blocks:
            x = b(*x)
        return x


def make_data(n):
    g = torch.Generator().manual_seed(1234)
    src = torch.randint(0, VOCAB, (n, SRC_LEN), generator=g)
    target = torch.randint(0, VOCAB, (n, TGT_LEN + 1), generator=g)
    tgt_in, labels = target[:, :TGT_LEN].contiguous(), target[:, 1:].contiguous()
    return src.to(DEVICE), tgt_in.to(DEVICE), labels.to(DEVICE)


def param_count(model):
    return sum(p.numel() for p in model.parameters())


def seq_step_fn(model, opt, src, tgt_in, labels, micro):
    """M = 1: plain training; M > 1: gradient accumulation over M equal micro-batches."""
    srcs, tins, labs = src.chunk(micro), tgt_in.chunk(micro), labels.chunk(micro)
    losses = []

    def step():
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for s, ti, lb in zip(srcs, tins, labs):
            with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=BF16):
                logits = model(s, ti)
                loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), lb.reshape(-1)) / micro
            loss.backward()
            total += loss.item()  # the host read of the loss, as gpipe's train_step
        opt.step()
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()
        losses.append(total)

    return step, losses


def timed(step, warmup, steps, max_seconds):
    for _ in range(warmup):
        step()
    times = []
    start = time.perf_counter()
    while len(times) < steps and (not times or time.perf_counter() - start < max_seconds):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


def run_seq(layers, n, micro, warmup, steps):
    if DEVICE.type == "cuda" and hasattr(torch.device, "__enter__"):  # initialised on the GPU: fast
        with DEVICE:
            model = Chain(make_blocks(layers))
    else:
        model = Chain(make_blocks(layers)).to(DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    src, tgt_in, labels = make_data(n)
    step, losses = seq_step_fn(model, opt, src, tgt_in, labels, micro)
    times = timed(step, warmup, steps, ARGS.max_seconds)
    med = statistics.median(times)
    r = {"median_s": med, "best_s": min(times), "steps": len(times), "params": param_count(model),
         "loss_first": losses[0], "loss_last": losses[-1], "samples_per_s": n / med,
         "tokens_per_s": n * TGT_LEN / med, "peak_rss": max_rss_bytes()}
    if DEVICE.type == "cuda":  # tokens_per_s counts target tokens, as on the CPU; src_tgt_tokens_per_s both
        r.update({"step_ms": med * 1e3, "src_tgt_tokens_per_s": n * (SRC_LEN + TGT_LEN) / med,
                  "peak_mb": torch.cuda.max_memory_allocated() / 1e6,
                  "device_name": torch.cuda.get_device_name(0)})
    return r


def run_pipe(layers, n, micro, k, checkpoint, warmup, steps):
    try:
        from torch.distributed import rpc
        from torch.distributed.pipeline.sync import Pipe
    except ImportError as e:  # removed from PyTorch in 2.4
        return {"error": "torch %s has no torch.distributed.pipeline.sync.Pipe (%s)" % (torch.__version__, e)}
    import os
    import tempfile
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    opts = rpc.TensorPipeRpcBackendOptions(init_method="file://" + tempfile.mktemp(), _transports=["uv"],
                                           _channels=["basic"])
    rpc.init_rpc("worker0", rank=0, world_size=1, rpc_backend_options=opts)
    blocks = make_blocks(layers)
    if k == 1:
        parts = [blocks]
    else:  # balanced by forward MACs: [Embed, Enc x L, EncNorm, Dec x 2] | [Dec x (L - 2), Head]
        cut = 1 + layers + 1 + 2
        parts = [blocks[:cut], blocks[cut:]]

    class Part(nn.Module):
        def __init__(self, bs):
            super().__init__()
            self.bs = nn.ModuleList(bs)

        def forward(self, *x):
            for b in self.bs:
                x = b(*x)
                if not isinstance(x, tuple):
                    x = (x,)
            return x if len(x) > 1 else x[0]

    model = Pipe(nn.Sequential(*[Part(p) for p in parts]), chunks=micro, checkpoint=checkpoint)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    src, tgt_in, labels = make_data(n)
    losses = []

    def step():
        opt.zero_grad(set_to_none=False)
        logits = model(src, tgt_in).local_value()
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())

    times = timed(step, warmup, steps, ARGS.max_seconds)
    med = statistics.median(times)
    out = {"median_s": med, "best_s": min(times), "steps": len(times), "params": param_count(model),
           "loss_first": losses[0], "loss_last": losses[-1], "samples_per_s": n / med, "peak_rss": max_rss_bytes()}
    rpc.shutdown()
    return out


def run_memory(layers, n, micro, remat, warmup, steps):
    model = Chain(make_blocks(layers, remat=remat == "layer"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    after_model = max_rss_bytes()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()  # zero gradients: creates exp_avg / exp_avg_sq, leaves the weights unchanged
    after_state = max_rss_bytes()
    src, tgt_in, labels = make_data(n)
    step, losses = seq_step_fn(model, opt, src, tgt_in, labels, micro)
    times = timed(step, warmup, steps, 1e9)
    peak = max_rss_bytes()
    med = statistics.median(times)
    return {"median_s": med, "best_s": min(times), "steps": len(times), "params": param_count(model),
            "loss_first": losses[0], "loss_last": losses[-1], "samples_per_s": n / med,
            "rss_after_model": after_model, "rss_after_state": after_state, "peak_rss": peak,
            "activation_bytes": peak - after_state}


def main():
    a = ARGS
    if "sdpa" in a.attentions and not hasattr(F, "scaled_dot_product_attention"):
        print(json.dumps({"error": "torch %s has no F.scaled_dot_product_attention" % torch.__version__,
                          "torch": torch.__version__}), flush=True)
        sys.exit(1)
    if a.mode == "step" and a.device == "cuda":
        if not torch.cuda.is_available():
            print(json.dumps({"error": "torch %s: no CUDA device available" % torch.__version__,
                              "torch": torch.__version__}), flush=True)
            sys.exit(1)
        sys.exit(run_cuda(a))
    elif a.mode == "step":
        layers, n = a.layers or 3, a.batch or 32
        r = run_seq(layers, n, 1, 3 if a.warmup is None else a.warmup, 20 if a.steps is None else a.steps)
    elif a.mode == "seq":
        layers, n = a.layers or 8, a.batch or 64
        r = run_seq(layers, n, a.micro_batches, 1 if a.warmup is None else a.warmup, 3 if a.steps is None else a.steps)
    elif a.mode == "pipe":
        layers, n = a.layers or 8, a.batch or 64
        r = run_pipe(layers, n, a.micro_batches, a.partitions, a.checkpoint, 1 if a.warmup is None else a.warmup,
                     3 if a.steps is None else a.steps)
    else:
        layers, n = a.layers or 8, a.batch or 64
        r = run_memory(layers, n, a.micro_batches, a.remat, 1 if a.warmup is None else a.warmup,
                       2 if a.steps is None else a.steps)
    r.update({"torch": torch.__version__, "threads": torch.get_num_threads(), "mode": a.mode,
              "autocast": a.autocast})
    print(json.dumps(r), flush=True)


def run_cuda(a):
    """step --device cuda: one run per (precision, attention), one JSON line each; 1 if any failed."""
    global BF16, ATTENTION
    import gc
    layers, n = a.layers or 3, a.batch or 32
    failed = 0
    for precision in a.precisions:
        for attention in a.attentions:
            BF16, ATTENTION = precision == "bf16", attention
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
            torch.backends.cudnn.allow_tf32 = precision == "tf32"
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            try:
                r = run_seq(layers, n, 1, 3 if a.warmup is None else a.warmup, 10 if a.steps is None else a.steps)
            except RuntimeError as e:  # torch.cuda.OutOfMemoryError among them
                r = {"error": "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:200])}
                failed = 1
            r.update({"precision": precision, "attention": attention, "layers": layers, "batch": n, "dim": D_MODEL,
                      "ffn": FFN, "heads": HEADS, "vocab": VOCAB, "src_len": SRC_LEN, "tgt_len": TGT_LEN,
                      "run_s": time.perf_counter() - t0, "torch": torch.__version__, "mode": a.mode})
            print(json.dumps(r), flush=True)
    return failed


if __name__ == "__main__":
    main()
