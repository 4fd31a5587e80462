"""PyTorch reference for gpipe's language models (docs/RESULTS.md, "GPT-2 and Llama").

    gpipe_train --model=gpt2 ... --export-data=DIR
    python lm_torch_train.py train DIR --metrics torch.jsonl [--eval-every N] [--threads 2]
    python lm_torch_train.py compare gpipe.jsonl torch.jsonl

`train` loads the initial weights gpipe exported (DIR/init-hf, a Hugging
Face folder) into transformers' GPT2LMHeadModel or LlamaForCausalLM, checks
that step 0's batch and the held-out rows give gpipe's eval-mode losses,
and trains on exactly the run's batches (DIR/data.json: each step's rows of
context + 1 tokens) with gpipe's optimizer (Adam or AdamW, its betas, eps
and weight decay on every parameter), learning-rate schedule (warm-up
included; steps are 1-based), gradient clipping (the global norm; no update
when the loss or the norm is not finite) and dropout. GPT-2's dropout sites
are transformers' own (embeddings, attention probabilities, residual
branches); Llama has only the attention one there, so the embedding and
residual-branch dropout gpipe applies is added with forward hooks. Only the
dropout masks differ (torch's generator). The held-out loss is gpipe's: the
mean cross-entropy over every token of the exported held-out rows.

It writes --metrics in gpipe_train's JSON-lines form ("train" and "eval"
records, with "loss" and "perplexity"), so benchmarks/compare_curves.py
--metric=perplexity draws both. `compare` prints the held-out losses side
by side with their relative difference, and the training loss per window.

Needs torch, transformers and safetensors (benchmarks/setup_torch.sh, then
pip install transformers safetensors). Not run in CI.
"""
import argparse
import json
import math
import os
import time

from reference_common import fail, lr_schedule, make_optimizer, read_jsonl


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("train", help="train on a gpipe_train --export-data directory")
    t.add_argument("export", help="the directory gpipe_train --export-data wrote")
    t.add_argument("--metrics", required=True, help="JSON-lines output, as gpipe_train --metrics")
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (0: at the end)")
    t.add_argument("--seed", type=int, default=0, help="torch's generator: the dropout masks")
    t.add_argument("--steps", type=int, default=0, help="stop early after N steps (0: all exported)")
    t.add_argument("--log-every", type=int, default=50)
    c = sub.add_parser("compare", help="two runs' --metrics side by side")
    c.add_argument("gpipe", help="gpipe_train's --metrics file")
    c.add_argument("torch", help="this script's --metrics file")
    c.add_argument("--window", type=int, default=100, help="steps per training-loss row")
    return p.parse_args()


def compare(a):
    g, t = read_jsonl(a.gpipe), read_jsonl(a.torch)
    ge = {r["step"]: r["loss"] for r in g if r.get("type") == "eval"}
    te = {r["step"]: r["loss"] for r in t if r.get("type") == "eval"}
    print("| step | gpipe held-out loss | PyTorch held-out loss | relative difference |")
    print("|---|---|---|---|")
    worst = 0.0
    for s in sorted(set(ge) | set(te)):
        x, y = ge.get(s), te.get(s)
        rel = "-"
        if x is not None and y is not None:
            worst = max(worst, abs(x - y) / abs(y))
            rel = f"{100 * (x - y) / y:+.2f}%"
        fx = f"{x:.4f}" if x is not None else "-"
        fy = f"{y:.4f}" if y is not None else "-"
        print(f"| {s} | {fx} | {fy} | {rel} |")
    print(f"\nlargest relative difference of the held-out loss: {100 * worst:.2f}%")
    gt = {r["step"]: r for r in g if r.get("type") == "train"}
    tt = {r["step"]: r for r in t if r.get("type") == "train"}
    common = sorted(set(gt) & set(tt))
    if not common:
        return
    lr_diff = max(abs(gt[s]["lr"] - tt[s]["lr"]) for s in common)
    print(f"learning rate: largest difference {lr_diff:.3g} over {len(common)} steps\n")
    print("| steps | gpipe mean training loss | PyTorch mean training loss |")
    print("|---|---|---|")
    for lo in range(0, common[-1], a.window):
        win = [s for s in common if lo < s <= lo + a.window]
        if win:
            mg = sum(gt[s]["loss"] for s in win) / len(win)
            mt = sum(tt[s]["loss"] for s in win) / len(win)
            print(f"| {lo + 1}-{win[-1]} | {mg:.4f} | {mt:.4f} |")


def load_model(export, folder, torch, transformers):
    cfg = export["model"]
    p = cfg["dropout"]
    if cfg["arch"] == "gpt2":
        model = transformers.GPT2LMHeadModel.from_pretrained(
            folder, dtype=torch.float32, resid_pdrop=p, embd_pdrop=p, attn_pdrop=p)
        return model
    if cfg["arch"] != "llama":
        fail(f"unknown architecture '{cfg['arch']}'")
    model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                          attention_dropout=p)
    if p > 0:  # gpipe's embedding and residual-branch dropout (models/lm.cc)
        def drop(module, inputs, output):
            return torch.nn.functional.dropout(output, p, module.training)
        model.model.embed_tokens.register_forward_hook(drop)
        for layer in model.model.layers:
            layer.self_attn.o_proj.register_forward_hook(drop)
            layer.mlp.down_proj.register_forward_hook(drop)
    return model


def train(a):
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    path = os.path.join(a.export, "data.json")
    try:
        with open(path) as f:
            export = json.load(f)
    except FileNotFoundError:
        fail(f"{path} does not exist (write it with gpipe_train --model=gpt2 ... --export-data={a.export})")
    if export.get("format") != "gpipe-lm-export/1":
        fail(f"{path}: format '{export.get('format')}', expected 'gpipe-lm-export/1'")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cfg, settings, check = export["model"], export["settings"], export["check"]
    model = load_model(export, os.path.join(a.export, export["init_hf"]), torch, transformers)
    ignore = cfg["ignore_index"]
    train_rows = {r: torch.tensor(toks, dtype=torch.int64) for r, toks in export["train_rows"]}
    eval_rows = torch.tensor(export["eval_rows"], dtype=torch.int64)
    batch = export["batch"]

    def loss_sum(rows):  # rows [n, T + 1]: the sum of cross-entropy over the targets, and their count
        logits = model(rows[:, :-1]).logits
        y = rows[:, 1:]
        s = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                              ignore_index=ignore, reduction="sum")
        return s, int((y != ignore).sum())

    def heldout():
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for i in range(0, eval_rows.shape[0], batch):
                s, n = loss_sum(eval_rows[i:i + batch])
                total, count = total + float(s), count + n
        model.train()
        return total / max(count, 1)

    def step_batch(step):
        return torch.stack([train_rows[r] for r in export["step_rows"][step]])

    model.eval()
    with torch.no_grad():
        s, n = loss_sum(step_batch(0))
    mine0, held0 = float(s) / n, heldout()
    for what, mine, theirs in (("step 0's batch", mine0, check["step0_loss"]),
                               ("the held-out rows", held0, check["heldout_loss"])):
        if abs(mine - theirs) > 1e-4 * abs(theirs):
            fail(f"{what}: eval-mode loss {mine:.7f} here and {theirs:.7f} in gpipe from the same "
                 "weights: the models differ")
    print(f"check: eval-mode loss of step 0's batch {mine0:.7f} (gpipe {check['step0_loss']:.7f}), "
          f"held-out {held0:.7f} (gpipe {check['heldout_loss']:.7f})", flush=True)
    opt = make_optimizer(model.parameters(), settings, torch)
    lr_at = lr_schedule(settings["lr_schedule"], settings["lr"])
    params = list(model.parameters())
    steps = export["steps"] if a.steps <= 0 else min(a.steps, export["steps"])
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} thread(s); {sum(p.numel() for p in params):,} parameters; "
          f"{settings['optimizer']} {settings['lr_schedule']} lr {settings['lr']}, dropout "
          f"{cfg['dropout']}; {steps} steps of {batch}; {export['describe']}", flush=True)
    out = open(a.metrics, "w")

    def write(rec):
        out.write(json.dumps(rec) + "\n")
        out.flush()

    def run_eval(step):
        t0 = time.perf_counter()
        loss = heldout()
        write({"type": "eval", "step": step, "loss": loss, "perplexity": math.exp(loss),
               "examples": int(eval_rows.shape[0]), "seconds": time.perf_counter() - t0})
        print(f"eval at step {step}: held-out loss {loss:.4f}, perplexity {math.exp(loss):.3f}",
              flush=True)

    model.train()
    train_time = 0.0
    clip = settings["clip_norm"] or float("inf")
    for step in range(steps):
        t0 = time.perf_counter()
        lr = lr_at(step + 1)
        for g in opt.param_groups:
            g["lr"] = lr
        s, n = loss_sum(step_batch(step))
        loss = s / n
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, clip)
        value = loss.item()
        if math.isfinite(value) and math.isfinite(norm.item()):
            opt.step()
        opt.zero_grad(set_to_none=False)
        dt = time.perf_counter() - t0
        train_time += dt
        write({"type": "train", "step": step + 1, "loss": value, "lr": lr, "seconds": dt,
               "tokens": n})
        if (step + 1) % a.log_every == 0 or step + 1 == steps:
            print(f"step {step + 1:6d}/{steps}  loss {value:.4f}  lr {lr:.2e}  "
                  f"{n / dt:.0f} tok/s", flush=True)
        if a.eval_every > 0 and (step + 1) % a.eval_every == 0 and step + 1 < steps:
            run_eval(step + 1)
    print(f"trained {steps} steps in {train_time:.0f}s", flush=True)
    run_eval(steps)
    out.close()


def main():
    a = parse_args()
    if a.mode == "compare":
        compare(a)
    else:
        train(a)


if __name__ == "__main__":
    main()
