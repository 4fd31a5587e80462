#!/usr/bin/env python3
"""gpipe's GPT-2 and Llama against Hugging Face transformers on the same weights.

Builds small random models from transformers configs (GPT-2 with a tied head;
Llama with grouped-query attention, Llama 3.1 rope scaling and an untied head;
Llama tied with plain rope), saves them with save_pretrained, and runs the
same tokens through both (gpipe via gpipe_lm_check, at K = 1 and K = 2). In
float32 it compares:

  logits (max relative error <= 1e-4), loss (<= 1e-5), every gradient (<= 1e-3),
  the weights after one SGD step as gpipe exports them (read back with
  from_pretrained; <= 1e-5), and 32 greedy tokens per prompt (identical).

Outside CI; in the PyTorch venv with transformers:
  benchmarks/setup_torch.sh && ~/.cache/gpipe-bench-venv/bin/pip install transformers safetensors
  bazel build //tools:gpipe_lm_check
  ~/.cache/gpipe-bench-venv/bin/python benchmarks/hf_compare.py --tool bazel-bin/tools/gpipe_lm_check
Prints one table row per (model, K) and exits 1 if any check fails.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from safetensors.torch import load_file, save_file

LR = 0.05


def models():
    gpt2 = transformers.GPT2Config(vocab_size=97, n_positions=64, n_embd=48, n_layer=3, n_head=4,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                   activation_function="gelu_new", bos_token_id=0, eos_token_id=0)
    common = dict(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                  num_attention_heads=8, max_position_embeddings=64, rms_norm_eps=1e-5,
                  attention_bias=False, mlp_bias=False, hidden_act="silu")
    llama_gqa = transformers.LlamaConfig(
        **common, num_key_value_heads=2, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 16})
    llama_tied = transformers.LlamaConfig(
        **common, num_key_value_heads=8, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return [("gpt2 (tied)", gpt2, transformers.GPT2LMHeadModel),
            ("llama (GQA 8/2, llama3 rope, untied)", llama_gqa, transformers.LlamaForCausalLM),
            ("llama (MHA, tied)", llama_tied, transformers.LlamaForCausalLM)]


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", default="bazel-bin/tools/gpipe_lm_check")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    failed = 0
    print(f"# transformers {transformers.__version__}, torch {torch.__version__}, float32, "
          f"batch 4 x 24 tokens, one SGD step at lr {LR}, 32 greedy tokens for 2 prompts")
    print("| model | K | logits rel | loss abs | worst grad rel | SGD step rel | greedy |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for title, config, cls in models():
        model = cls(config).float().eval()
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "hf")
            model.save_pretrained(src, safe_serialization=True)
            vocab = config.vocab_size
            inputs = torch.randint(0, vocab, (4, 24))
            targets = torch.randint(0, vocab, (4, 24))
            targets[0, 3] = -100
            prompts = torch.randint(0, vocab, (2, 5))
            save_file({"inputs": inputs, "targets": targets, "prompts": prompts},
                      os.path.join(tmp, "in.safetensors"))
            # The reference: logits, loss, gradients, one SGD step, greedy tokens.
            logits = model(inputs).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                                     targets.reshape(-1), ignore_index=-100)
            model.zero_grad()
            loss.backward()
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
            stepped = {n: (p - LR * p.grad).detach() for n, p in model.named_parameters()}
            greedy = model.generate(prompts, max_new_tokens=32, do_sample=False,
                                    eos_token_id=None, pad_token_id=0,
                                    attention_mask=torch.ones_like(prompts))[:, 5:]
            for k in (1, 2):
                out_file = os.path.join(tmp, f"out{k}.safetensors")
                dst = os.path.join(tmp, f"step{k}")
                subprocess.run([a.tool, f"--init-from={src}",
                                f"--batch={os.path.join(tmp, 'in.safetensors')}",
                                f"--out={out_file}", f"--K={k}", f"--lr={LR}",
                                f"--export-hf={dst}"], check=True, stdout=subprocess.DEVNULL)
                got = load_file(out_file)
                l_rel = rel(got["logits"], logits.detach())
                loss_abs = abs(got["loss"].item() - loss.item())
                worst = 0.0
                for n, g in grads.items():
                    key = "grad." + n
                    if key not in got:  # a tied head: one tensor in gpipe's layout
                        continue
                    worst = max(worst, rel(got[key], g))
                missing = [n for n in grads if "grad." + n not in got and "lm_head" not in n]
                back = cls.from_pretrained(dst, torch_dtype=torch.float32)
                step_rel = max(rel(p.detach(), stepped[n]) for n, p in back.named_parameters())
                same = torch.equal(got["greedy"], greedy)
                ok = (l_rel <= 1e-4 and loss_abs <= 1e-5 and worst <= 1e-3 and step_rel <= 1e-5
                      and same and not missing)
                failed += not ok
                print(f"| {title} | {k} | {l_rel:.1e} | {loss_abs:.1e} | {worst:.1e} | "
                      f"{step_rel:.1e} | {'identical' if same else 'DIFFERENT'} |"
                      + ("" if ok else f" FAILED{' missing ' + str(missing) if missing else ''}"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
