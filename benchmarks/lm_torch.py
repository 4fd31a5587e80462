"""PyTorch side of `gpipe_bench lm`: one Adam training step of a GPT-2- or
Llama-shaped decoder-only language model, written here from the
architectures (the same shapes gpipe's models/lm.h builds; nothing from
`transformers`), so the comparison needs only torch.

    python lm_torch.py --arch gpt2  --threads 2 --layers 12 --batch 8 --context 256
    python lm_torch.py --arch llama --threads 1 --layers 12 --batch 8 --context 256
    python lm_torch.py --arch gpt2 --device cuda --precision bf16 --batch 8 --context 1024 \
        --warmup 3 --steps 10

gpt2:  d 768, 12 heads, FFN 3072, vocab 50257; learned positions; pre-LayerNorm
       blocks with biases; GELU (tanh); final LayerNorm; output tied to the table.
llama: d 768, 12 heads, 4 K/V heads, FFN 2048, vocab 32000; RMSNorm; rotary
       (theta 500000); SwiGLU; no biases; untied output.

Attention is F.scaled_dot_product_attention(is_causal=True) (PyTorch's fused
CPU kernel; K/V heads repeated for grouped-query attention); the loss is
F.cross_entropy over the [N*T, vocab] logits, which is how PyTorch users
write it. Random tokens and targets (fixed seed). Prints one JSON object:
median_s, best_s, steps, params, loss_first, loss_last, torch.

--device cuda is the PyTorch side of benchmarks/gpu_compare.py's GPT2 row
(tests/cuda/w2_bench --only=GPT2:bf16 beside it): the model on cuda:0 in fp32,
TF32 (allow_tf32 for matmuls) or bf16 (torch.autocast("cuda", torch.bfloat16)),
SDPA attention, each step ending with the host read of its loss and
torch.cuda.synchronize(). It then prints, in gpu_compare.py's form, precision,
attention ("sdpa"), step_ms (the median), loss_first, loss_last, peak_mb
(torch.cuda.max_memory_allocated), run_s, params and torch.
The caller fixes OMP_NUM_THREADS; torch.set_num_threads(--threads) and
torch.set_num_interop_threads(1) are called before any work.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {
    "gpt2": dict(dim=768, heads=12, kv_heads=12, ffn=3072, vocab=50257),
    "llama": dict(dim=768, heads=12, kv_heads=4, ffn=2048, vocab=32000),
}


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--arch", choices=sorted(SHAPES), default="gpt2")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--vocab", type=int, default=0, help="0: the architecture's (50257, 32000)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--max-seconds", type=float, default=60.0)
    p.add_argument("--autocast", default="none", choices=["none", "bf16"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--precision", default="", choices=["", "fp32", "tf32", "bf16"],
                   help="--device cuda: fp32, tf32 or bf16 (autocast); on the CPU use --autocast")
    a = p.parse_args()
    if a.device == "cpu" and a.precision:
        p.error("--precision: --device cuda only (on the CPU: --autocast)")
    if a.device == "cuda":
        a.precision = a.precision or ("bf16" if a.autocast == "bf16" else "fp32")
        a.autocast = "bf16" if a.precision == "bf16" else "none"
    return a


ARGS = parse_args()
torch.set_num_threads(ARGS.threads)
torch.set_num_interop_threads(1)
torch.manual_seed(0)
S = SHAPES[ARGS.arch]
D, H, KV, FFN, T = S["dim"], S["heads"], S["kv_heads"], S["ffn"], ARGS.context
V = ARGS.vocab if ARGS.vocab > 0 else S["vocab"]
HD = D // H


class Gpt2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.c_attn, self.c_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.c_fc, self.mlp_proj = nn.Linear(D, FFN), nn.Linear(FFN, D)

    def forward(self, x):
        n, t, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = (z.view(n, t, H, HD).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(a.transpose(1, 2).reshape(n, t, D))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.h = nn.ModuleList(Gpt2Block() for _ in range(layers))
        self.ln_f = nn.LayerNorm(D)

    def forward(self, tok):
        x = self.wte(tok) + self.wpe(torch.arange(tok.shape[1], device=tok.device))
        for b in self.h:
            x = b(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def rotary_tables(theta=500000.0):
    inv = 1.0 / theta ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD)
    f = torch.outer(torch.arange(T, dtype=torch.float32), inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def rotate(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D, eps=1e-5), nn.RMSNorm(D, eps=1e-5)
        self.q, self.k = nn.Linear(D, D, bias=False), nn.Linear(D, KV * HD, bias=False)
        self.v, self.o = nn.Linear(D, KV * HD, bias=False), nn.Linear(D, D, bias=False)
        self.gate, self.up = nn.Linear(D, FFN, bias=False), nn.Linear(D, FFN, bias=False)
        self.down = nn.Linear(FFN, D, bias=False)

    def forward(self, x, cos, sin):
        n, t, _ = x.shape
        h = self.n1(x)
        q = rotate(self.q(h).view(n, t, H, HD).transpose(1, 2), cos, sin)
        k = rotate(self.k(h).view(n, t, KV, HD).transpose(1, 2), cos, sin)
        v = self.v(h).view(n, t, KV, HD).transpose(1, 2)
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(n, t, D))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.h = nn.ModuleList(LlamaBlock() for _ in range(layers))
        self.norm = nn.RMSNorm(D, eps=1e-5)
        self.head = nn.Linear(D, V, bias=False)
        cos, sin = rotary_tables()
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tok):
        t = tok.shape[1]
        x = self.embed(tok)
        for b in self.h:
            x = b(x, self.cos[:t], self.sin[:t])
        return self.head(self.norm(x))


def main():
    cuda = ARGS.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = ARGS.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = ARGS.precision == "tf32"
    run_start = time.perf_counter()
    model = (Gpt2 if ARGS.arch == "gpt2" else Llama)(ARGS.layers)
    for name, p in model.named_parameters():  # GPT-2's and Llama's initialisation: N(0, 0.02)
        if p.dim() >= 2:
            nn.init.normal_(p, std=0.02)
        elif name.endswith("bias"):
            nn.init.zeros_(p)
    params = sum(p.numel() for p in model.parameters())
    model.to(ARGS.device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1234)
    tok = torch.randint(0, V, (ARGS.batch, T), generator=g).to(ARGS.device)
    tgt = torch.randint(0, V, (ARGS.batch, T), generator=g).to(ARGS.device)
    losses, times = [], []

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast(ARGS.device, dtype=torch.bfloat16, enabled=ARGS.autocast == "bf16"):
            logits = model(tok)
            loss = F.cross_entropy(logits.reshape(-1, V).float(), tgt.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if cuda:
            torch.cuda.synchronize()

    for _ in range(ARGS.warmup):
        step()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(ARGS.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > ARGS.max_seconds:
            break
    if cuda:  # gpu_compare.py's fields
        print(json.dumps({"precision": ARGS.precision, "attention": "sdpa",
                          "step_ms": 1e3 * statistics.median(times), "loss_first": losses[0],
                          "loss_last": losses[-1], "peak_mb": torch.cuda.max_memory_allocated() / 1e6,
                          "run_s": time.perf_counter() - run_start, "steps": len(times), "params": params,
                          "torch": torch.__version__}), flush=True)
        return
    print(json.dumps({"median_s": statistics.median(times), "best_s": min(times), "steps": len(times),
                      "params": params, "loss_first": losses[0], "loss_last": losses[-1],
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
