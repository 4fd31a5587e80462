"""gpipe against PyTorch on one GPU, side by side, in one call.

    python3 benchmarks/gpu_compare.py --w2-bench bazel-bin/tests/cuda/w2_bench \\
        [--python python3] [--shapes W2,T6,T12,GPT2] [--modes fp32,tf32,bf16] [--budget-seconds 180]

For each shape it runs on cuda:0 gpipe's tests/cuda/w2_bench --only=SHAPE:MODE
--json, a fresh process per precision mode, then one process of
benchmarks/transformer_torch.py step --device cuda for the shape's modes, each
with explicit attention (matmul + softmax) and with
F.scaled_dot_product_attention (SDPA), each run with its own model, optimizer
and warm-up (importing torch and starting CUDA take about 10 s a process on an
H200 machine, a fifth of a minute per PyTorch run otherwise). Both sides
train the same pre-LN encoder-decoder (Q/K/V/O with bias, ReLU FFN, tied
embedding and output, sinusoidal positions, embedding x sqrt(d)) with Adam
1e-4 and report the median of 10 steps after 3, each step reading its loss on
the host. PyTorch's bf16 is torch.autocast("cuda", torch.bfloat16); its TF32 is
allow_tf32 for matmuls and cuDNN.

Shapes (the same as w2_bench.cc's all_shapes()):
  W2   3+3 layers, d 256, FFN 1024, 4 heads, vocab 8192, N 32, 32+32 tokens
  T6   6+6 layers, d 1024, FFN 4096, 16 heads, vocab 32000, N 64, 128+128 tokens
  T12  12+12 layers, d 1024, FFN 4096, 16 heads, vocab 32000, N 32, 256+256 tokens
  GPT2 GPT-2 small (124M): 12 layers, d 768, FFN 3072, 12 heads, vocab 50257, N 8, context
       1024; bf16 only. Its PyTorch side is benchmarks/lm_torch.py --device cuda (SDPA only,
       the loss over [N*T, vocab] logits, as PyTorch users write it; gpipe fuses the loss
       with the tied output projection), one process per mode; the explicit column says
       "not run: SDPA only". Its FLOPs count the causal attention dense, as gpipe's cost().

Prints a markdown table: step time, tokens/s (N x (source + target) / step),
the speed ratio gpipe vs SDPA (PyTorch SDPA step / gpipe step: > 1, gpipe is
faster) and MFU for the three columns. MFU uses one FLOP count for all three:
gpipe's model FLOPs (3 x the forward FLOPs of its layers' cost estimates, the
figure w2_bench prints; the same formula here when gpipe's run failed) over the
dense peak of the precision (tests/cuda/peaks.h, or GPIPE_PEAK_TFLOPS_*).

Runs go in the order W2 (fp32, tf32, bf16), T6 (the same), GPT2 bf16, T12 bf16,
then T12 fp32 and tf32, within --budget-seconds: a run whose estimated time (from the
runs before it) does not fit in what is left is skipped and the table says so;
a process past the budget is stopped (the PyTorch runs it finished still
count). A failed run (out of memory, no torch, a crash) is reported
in its cell and the others go on. Without a torch that sees a GPU, the PyTorch
columns say "skipped: no torch with CUDA on this machine" and gpipe's still
print. Exit status: 1 when a gpipe run failed, 2 for bad arguments, else 0.

`python3 benchmarks/gpu_compare.py --self-test` checks the runs, the budget, the parsing and
the table without a GPU: against a stub w2_bench and a stub python written to a temporary
folder.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# name: (layers, dim, ffn, heads, vocab, batch, src_len, tgt_len); as tests/cuda/w2_bench.cc.
SHAPES = {
    "W2": (3, 256, 1024, 4, 8192, 32, 32, 32),
    "T6": (6, 1024, 4096, 16, 32000, 64, 128, 128),
    "T12": (12, 1024, 4096, 16, 32000, 32, 256, 256),
    "GPT2": (12, 768, 3072, 12, 50257, 8, 1024, 0),  # src_len = the context, no target sequence
}
LM_SHAPES = {"GPT2": "gpt2"}  # decoder-only language models: shape -> lm_torch.py --arch
LM_EXPLICIT = "not run: SDPA only"
MODES = ("fp32", "tf32", "bf16")
SIDES = ("gpipe", "explicit", "sdpa")
STEPS = 13  # 3 warm-up + 10 timed, on both sides
NO_TORCH = "skipped: no torch with CUDA on this machine"


def model_flops(shape):
    """gpipe's figure: 3 x the forward FLOPs of the layers' cost() (models/transformer.cc,
    layers/attention.cc): attention 2B(2Tq + 2Tk)d^2 + 4B Tq Tk d, FFN 4 B T d h, the target
    embedding's 8 B S d, the output projection 2 B T d V. A language model's (models/lm.cc):
    per layer attention 2B(4Td)d + 4B T^2 d (dense, as gpipe's cost()), MLP 4 B T d h, then
    the output projection 2 B T d V; norms and embeddings are not counted."""
    layers, d, h, _, vocab, b, s, t = SHAPES[shape]
    if shape in LM_SHAPES:
        per_layer = 2.0 * b * (4 * s * d) * d + 4.0 * b * s * s * d + 4.0 * b * s * d * h
        return 3 * (layers * per_layer + 2.0 * b * s * d * vocab)

    def attn(tq, tk):
        return 2.0 * b * (2 * tq + 2 * tk) * d * d + 4.0 * b * tq * tk * d

    enc = attn(s, s) + 4.0 * b * s * d * h
    dec = attn(t, t) + attn(t, s) + 4.0 * b * t * d * h
    return 3 * (layers * (enc + dec) + 8.0 * b * s * d + 2.0 * b * t * d * vocab)


def default_peaks(device_name):
    """tests/cuda/peaks.h's dense TFLOP/s, for when no gpipe run reported its peak."""
    p = {"bf16": 0.0, "tf32": 0.0, "fp32": 0.0}
    if "H200" in device_name or ("H100" in device_name and "PCIe" not in device_name):
        p = {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9}
    for mode, var in (("bf16", "BF16"), ("tf32", "TF32"), ("fp32", "FP32")):
        if os.environ.get("GPIPE_PEAK_TFLOPS_" + var):
            p[mode] = float(os.environ["GPIPE_PEAK_TFLOPS_" + var])
    return p


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--w2-bench", required=True, help="gpipe's w2_bench binary (built with --config=cuda)")
    p.add_argument("--python", default=sys.executable or "python3", help="the Python with torch")
    p.add_argument("--torch-script", default=os.path.join(HERE, "transformer_torch.py"))
    p.add_argument("--lm-torch-script", default=os.path.join(HERE, "lm_torch.py"))
    p.add_argument("--shapes", default="W2,T6,T12,GPT2")
    p.add_argument("--modes", default="fp32,tf32,bf16")
    p.add_argument("--budget-seconds", type=float, default=180.0)
    p.add_argument("--gpipe-ld-library-path", default="",
                   help="prepended to LD_LIBRARY_PATH for w2_bench alone (PyTorch keeps the caller's)")
    p.add_argument("--json-out", default="", help="also write every run's result here (JSON)")
    a = p.parse_args(argv)
    a.shapes = [s for s in a.shapes.split(",") if s]
    a.modes = [m for m in a.modes.split(",") if m]
    for s in a.shapes:
        if s not in SHAPES:
            p.error("unknown shape %r (known: %s)" % (s, ", ".join(SHAPES)))
    for m in a.modes:
        if m not in MODES:
            p.error("unknown mode %r (known: %s)" % (m, ", ".join(MODES)))
    return a


def plan(shapes, modes):
    """[(shape, [modes])]: the groups in the order the budget serves them (W2, T6, GPT2's bf16,
    then T12's bf16 before its fp32 and tf32); PyTorch runs a group's modes in one process."""
    out = []
    for s, groups in (("W2", [MODES]), ("T6", [MODES]), ("GPT2", [("bf16",)]),
                      ("T12", [("bf16",), ("fp32", "tf32")])):
        for g in groups:
            ms = [m for m in g if m in modes]
            if s in shapes and ms:
                out.append((s, ms))
    return out


def json_lines(text):
    out = []
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def run_json(cmd, timeout, env=None):
    """Runs cmd; returns (its JSON lines, an error or None, wall seconds). Past the timeout the
    process is stopped and the lines it printed are kept."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=max(1.0, timeout), env=env)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout
        return json_lines(out), "stopped after %.0f s (budget)" % timeout, time.monotonic() - t0
    except OSError as e:
        return [], "cannot run %s: %s" % (cmd[0], e), time.monotonic() - t0
    wall = time.monotonic() - t0
    if p.returncode == 0:
        return json_lines(p.stdout), None, wall
    tail = [x for x in (p.stderr + p.stdout).strip().splitlines() if x.strip() and not x.startswith("{")]
    return json_lines(p.stdout), "exit %d%s" % (p.returncode, (": " + tail[-1][:200]) if tail else ""), wall


def torch_probe(python):
    """(version, device name) of the torch that python imports, or (None, why)."""
    code = ("import json, torch; ok = torch.cuda.is_available(); print(json.dumps({'version': "
            "torch.__version__, 'cuda': ok, 'device': torch.cuda.get_device_name(0) if ok else ''}))")
    lines, err, _ = run_json([python, "-c", code], 120)
    r = lines[-1] if lines else {}
    if not r.get("cuda"):
        return None, err or "torch %s sees no GPU" % r.get("version")
    return r["version"], r["device"]


def gpipe_cmd(a, shape, mode):
    return [a.w2_bench, "--only=%s:%s" % (shape, mode), "--json"]


def torch_cmd(a, shape, modes):
    layers, d, h, heads, vocab, b, s, t = SHAPES[shape]
    if shape in LM_SHAPES:  # one precision per process
        return [a.python, a.lm_torch_script, "--arch", LM_SHAPES[shape], "--device", "cuda", "--precision",
                modes[0], "--layers", str(layers), "--batch", str(b), "--context", str(s), "--warmup", "3",
                "--steps", "10", "--max-seconds", "1e9"]
    return [a.python, a.torch_script, "step", "--device", "cuda", "--precision", ",".join(modes),
            "--attention", "explicit,sdpa", "--layers", str(layers), "--dim", str(d), "--ffn", str(h),
            "--heads", str(heads), "--vocab", str(vocab), "--batch", str(b), "--src-len", str(s),
            "--tgt-len", str(t), "--warmup", "3", "--steps", "10", "--max-seconds", "1e9"]


class Estimator:
    """Expected seconds: a process's start-up overhead (the most seen so far for its side) plus
    13 steps per run. A step is gpipe's at this shape and mode, else the slowest mode measured at
    this shape, else the same mode at the largest shape measured scaled by FLOPs, else unknown (0:
    the run goes ahead under the budget's timeout). PyTorch's steps are taken to be gpipe's."""

    def __init__(self):
        self.overhead = {"gpipe": [], "torch": []}
        self.steps = {}  # (shape, mode) -> gpipe's step, seconds

    def add(self, side, wall, results, shape=None, mode=None):
        steps = [r["step_ms"] / 1e3 for r in results if ok(r)]
        if side == "gpipe" and steps:
            self.steps[(shape, mode)] = steps[0]
        if steps:
            self.overhead[side].append(max(0.0, wall - STEPS * sum(steps)))

    def step(self, shape, mode):
        if (shape, mode) in self.steps:
            return self.steps[(shape, mode)]
        same_shape = [v for (s, _), v in self.steps.items() if s == shape]
        if same_shape:
            return max(same_shape)
        same_mode = [(s, v) for (s, m), v in self.steps.items() if m == mode]
        if same_mode:
            other, step = max(same_mode, key=lambda x: model_flops(x[0]))
            return step * model_flops(shape) / model_flops(other)
        return 0.0

    def seconds(self, side, shape, modes, runs_per_mode=1):
        over = self.overhead[side]
        return (max(over) if over else 0.0) + sum(STEPS * runs_per_mode * self.step(shape, m) for m in modes)


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def ok(r):
    return r is not None and "error" not in r and "skipped" not in r and r.get("step_ms") is not None


def why_not(r):
    """A cell for a run with no figures: not run, skipped (and why), or failed."""
    return "-" if r is None else r["skipped"] if "skipped" in r else "error (below)"


def table(rows, peaks):
    """rows: [(shape, mode, {side: result}, flops)] -> markdown lines."""
    out = ["| shape | mode | gpipe ms | PyTorch explicit ms | PyTorch SDPA ms | gpipe tok/s | explicit tok/s "
           "| SDPA tok/s | gpipe vs SDPA | gpipe MFU | explicit MFU | SDPA MFU |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for shape, mode, res, flops in rows:
        tokens = SHAPES[shape][5] * (SHAPES[shape][6] + SHAPES[shape][7])
        ms, tok, mfu = [], [], []
        peak = peaks.get(mode) or 0.0
        for side in SIDES:
            r = res.get(side)
            if not ok(r):
                ms.append(why_not(r))
                tok.append("-")
                mfu.append("-")
                continue
            step = r["step_ms"] / 1e3
            ms.append("%.2f" % r["step_ms"])
            tok.append("{:,.0f}".format(tokens / step))
            mfu.append("%.1f%%" % (100 * flops / step / (peak * 1e12)) if peak > 0 else "-")
        g, sd = res.get("gpipe"), res.get("sdpa")
        ratio = "%.2fx" % (sd["step_ms"] / g["step_ms"]) if ok(g) and ok(sd) else "-"
        out.append("| %s | %s | %s | %s | %s |" % (shape, mode, " | ".join(ms), " | ".join(tok),
                                                   " | ".join([ratio] + mfu)))
    return out


def details(rows):
    """Losses and memory per run, then the errors in full."""
    out = ["", "| shape | mode | run | loss first -> last | peak MB |", "| --- | --- | --- | --- | ---: |"]
    errors = []
    for shape, mode, res, _ in rows:
        for side in SIDES:
            r = res.get(side)
            if r is None or "skipped" in r:
                continue
            if "error" in r:
                errors.append("- %s %s %s: %s" % (shape, mode, side, r["error"]))
                continue
            lf, ll = r.get("loss_first"), r.get("loss_last")
            out.append("| %s | %s | %s | %s -> %s | %s |" % (shape, mode, side, fmt(lf, ".4f"), fmt(ll, ".4f"),
                                                            fmt(r.get("peak_mb"), ",.0f")))
    if errors:
        out += ["", "errors:"] + errors
    return out


def budget_note(need, have):
    """Runs start only with 5 s left or more."""
    return "skipped: budget (~%.0f s needed, %.0f s left)" % (max(need, 5.0), max(0.0, have))


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    start = time.monotonic()
    left = lambda: a.budget_seconds - (time.monotonic() - start)  # noqa: E731
    gpipe_env = dict(os.environ)
    if a.gpipe_ld_library_path:
        gpipe_env["LD_LIBRARY_PATH"] = a.gpipe_ld_library_path + (
            ":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else "")
    torch_version, torch_device = torch_probe(a.python)
    print("# gpu_compare: gpipe (%s) against PyTorch (%s: %s) on cuda:0" % (
        a.w2_bench, a.python, ("torch " + torch_version) if torch_version else NO_TORCH), flush=True)
    if not torch_version:
        print("# PyTorch columns %s (%s)" % (NO_TORCH, torch_device), flush=True)
    est = Estimator()
    results = {}  # (shape, mode) -> {side: result}
    records, device, peaks_seen = [], torch_device if torch_version else "", {}

    def log(shape, mode, side, r, wall, cmd):
        what = r.get("skipped") or ("failed: %s" % r["error"] if "error" in r else "%.2f ms/step" % r["step_ms"])
        print("# %s %s %s: %s%s" % (shape, mode, side, what, "" if "skipped" in r else " in %.1f s" % wall),
              flush=True)
        if "error" in r:
            print("#   the command: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        records.append(dict(r, shape=shape, mode=mode, side=side, wall_s=wall))

    for shape, modes in plan(a.shapes, a.modes):
        for mode in modes:  # gpipe: a process per mode
            res = results.setdefault((shape, mode), {})
            need, have = est.seconds("gpipe", shape, [mode]), left()
            if have < 5 or need > have:
                res["gpipe"] = {"skipped": budget_note(need, have)}
                log(shape, mode, "gpipe", res["gpipe"], 0.0, [])
                continue
            cmd = gpipe_cmd(a, shape, mode)
            lines, err, wall = run_json(cmd, have, gpipe_env)
            r = dict(lines[-1]) if lines else {}
            if err or not lines:
                r["error"] = r.get("error") or err or "no result"
            est.add("gpipe", wall, [r], shape, mode)
            res["gpipe"] = r
            device = device or r.get("device", "")
            if r.get("peak_tflops"):
                peaks_seen[mode] = r["peak_tflops"]
            log(shape, mode, "gpipe", r, wall, cmd)
        if not torch_version:
            for mode in modes:
                results[(shape, mode)].update({"explicit": {"skipped": NO_TORCH}, "sdpa": {"skipped": NO_TORCH}})
            continue
        # PyTorch: the group's modes that fit, in order, in one process (a language model: its
        # one mode, SDPA alone); the last ones go first.
        lm = shape in LM_SHAPES
        sides = ("sdpa",) if lm else ("explicit", "sdpa")
        if lm:
            for mode in modes:
                results[(shape, mode)]["explicit"] = {"skipped": LM_EXPLICIT}
                log(shape, mode, "explicit", {"skipped": LM_EXPLICIT}, 0.0, [])
        run_modes = list(modes)
        while run_modes and (left() < 5 or est.seconds("torch", shape, run_modes, len(sides)) > left()):
            note = budget_note(est.seconds("torch", shape, run_modes, len(sides)), left())
            dropped = run_modes.pop()
            for side in sides:
                results[(shape, dropped)][side] = {"skipped": note}
                log(shape, dropped, side, {"skipped": note}, 0.0, [])
        if not run_modes:
            continue
        cmd = torch_cmd(a, shape, run_modes)
        lines, err, wall = run_json(cmd, left())
        got = {(r.get("precision"), r.get("attention")): r for r in lines}
        est.add("torch", wall, list(got.values()))
        for mode in run_modes:
            for side in sides:
                r = dict(got.get((mode, side)) or {"error": err or "no result"})
                results[(shape, mode)][side] = r
                log(shape, mode, side, r, r.get("run_s", wall), cmd)

    rows = []
    for shape, modes in plan(a.shapes, a.modes):
        for mode in modes:
            g = results[(shape, mode)].get("gpipe") or {}
            flops = g.get("model_flops") or model_flops(shape)
            if g.get("model_flops") and abs(g["model_flops"] / model_flops(shape) - 1) > 1e-3:
                print("# note: %s's FLOPs differ: gpipe %.4g, gpu_compare.py's formula %.4g (gpipe's used)" % (
                    shape, g["model_flops"], model_flops(shape)))
            rows.append((shape, mode, results[(shape, mode)], flops))
    peaks = default_peaks(device)
    peaks.update(peaks_seen)
    print()
    print("## gpipe vs PyTorch on %s (torch %s), %.0f s" % (device or "cuda:0 (device unknown)",
                                                            torch_version or "-", time.monotonic() - start))
    print()
    print("N x (source + target) tokens per step; median of 10 steps after 3, the loss read on the host "
          "each step; gpipe vs SDPA = PyTorch SDPA step / gpipe step (> 1: gpipe faster); MFU = gpipe's "
          "model FLOPs (3 x forward) / step / dense peak (%s TFLOP/s for fp32, tf32, bf16)" % ", ".join(
              fmt(peaks.get(m), ".1f") for m in MODES))
    print("\n".join([""] + table(rows, peaks) + details(rows)))
    sys.stdout.flush()
    if a.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(a.json_out)), exist_ok=True)
        with open(a.json_out, "w") as f:
            json.dump({"device": device, "torch": torch_version, "runs": records}, f, indent=1)
    gpipe_failed = any("error" in (res.get("gpipe") or {}) for res in results.values())
    return 1 if gpipe_failed else 0


STUB_W2_BENCH = r"""
import json, sys, time
shape, mode = sys.argv[1][len("--only="):].split(":")
assert sys.argv[2:] == ["--json"], sys.argv
time.sleep(0.2)
if (shape, mode) == ("T12", "fp32"):
    print(json.dumps({"shape": shape, "mode": mode, "device": "Stub GPU", "error": "out of memory"}))
    sys.exit(1)
step = {"W2": 2.0, "T6": 400.0, "T12": 800.0, "GPT2": 200.0}[shape] * (0.5 if mode == "bf16" else 1.0)
print(json.dumps({"shape": shape, "mode": mode, "device": "Stub GPU", "step_ms": step,
                  "model_flops": {"W2": 1e11, "T6": 3e13, "T12": 6e13, "GPT2": 5e12}[shape], "peak_tflops": 100.0,
                  "mfu": 0.5, "peak_mb": 123.0, "loss_first": 9.0, "loss_last": 8.0}))
"""

STUB_PYTHON = r"""
import json, os, sys, time
if sys.argv[1] == "-c":  # the probe
    cuda = os.environ.get("STUB_TORCH_CUDA") == "1"
    print(json.dumps({"version": "9.9", "cuda": cuda, "device": "Stub GPU" if cuda else ""}))
    sys.exit(0)
args = sys.argv[2:]
get = lambda flag: args[args.index(flag) + 1]
if args[:4] == ["--arch", "gpt2", "--device", "cuda"]:  # lm_torch.py: one precision, SDPA
    assert sys.argv[1].endswith("lm_torch.py") and get("--context") == "1024", sys.argv
    print(json.dumps({"precision": get("--precision"), "attention": "sdpa", "step_ms": 120.0, "run_s": 0.1,
                      "loss_first": 10.9, "loss_last": 10.8, "peak_mb": 5000.0}))
    sys.exit(0)
assert args[:3] == ["step", "--device", "cuda"] and get("--attention") == "explicit,sdpa", args
for precision in get("--precision").split(","):
    for attention in ("explicit", "sdpa"):
        r = {"precision": precision, "attention": attention, "run_s": 0.1}
        if (get("--dim"), precision, attention) == ("1024", "tf32", "sdpa"):
            r["error"] = "OutOfMemoryError: CUDA out of memory"
        else:
            r.update({"step_ms": 4.0 if attention == "explicit" else 3.0, "loss_first": 9.1, "loss_last": 8.1,
                      "peak_mb": 99.0})
        print(json.dumps(r), flush=True)
        if os.environ.get("STUB_TORCH_HANG") == "1":
            time.sleep(60)
sys.exit(1 if get("--dim") == "1024" and "tf32" in get("--precision") else 0)
"""


def self_test():
    import contextlib
    import io
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        stubs = {}
        for name, text in (("w2_bench", STUB_W2_BENCH), ("python", STUB_PYTHON)):
            stubs[name] = os.path.join(tmp, name)
            with open(stubs[name], "w") as f:
                f.write("#!" + sys.executable + "\n" + text)
            os.chmod(stubs[name], 0o755)

        def run(*extra):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = main(["--w2-bench", stubs["w2_bench"], "--python", stubs["python"],
                           "--json-out", os.path.join(tmp, "out.json")] + list(extra))
            return rc, out.getvalue()

        os.environ["STUB_TORCH_CUDA"] = "1"
        def main_rows(out):  # the first table's rows (12 columns), by (shape, mode)
            cells = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines()]
            return {(c[0], c[1]): c[2:] for c in cells if len(c) == 12 and c[0] in SHAPES}

        rc, out = run()
        rows = main_rows(out)
        assert rc == 1, (rc, out)  # T12 fp32's gpipe run failed
        assert "## gpipe vs PyTorch on Stub GPU (torch 9.9)" in out, out
        # W2 fp32: 2 ms, 4 ms, 3 ms; 32 x 64 tokens; ratio 3 / 2; MFU 1e11 / 2 ms / 100 TFLOP/s = 50%.
        assert rows[("W2", "fp32")] == ["2.00", "4.00", "3.00", "1,024,000", "512,000", "682,667", "1.50x",
                                        "50.0%", "25.0%", "33.3%"], rows[("W2", "fp32")]
        assert rows[("T6", "tf32")][2] == "error (below)" and rows[("T6", "tf32")][6] == "-", rows
        assert "- T6 tf32 sdpa: OutOfMemoryError: CUDA out of memory" in out, out
        assert rows[("T12", "fp32")][0] == "error (below)" and "- T12 fp32 gpipe: out of memory" in out
        assert [k for k in rows] == [("W2", "fp32"), ("W2", "tf32"), ("W2", "bf16"), ("T6", "fp32"),
                                     ("T6", "tf32"), ("T6", "bf16"), ("GPT2", "bf16"), ("T12", "bf16"),
                                     ("T12", "fp32"), ("T12", "tf32")], list(rows)
        # GPT2 bf16: 100 ms, SDPA 120 ms; 8 x 1024 tokens; MFU 5e12 / 0.1 s / 100 TFLOP/s = 50%.
        assert rows[("GPT2", "bf16")] == ["100.00", LM_EXPLICIT, "120.00", "81,920", "-", "68,267", "1.20x",
                                          "50.0%", "-", "41.7%"], rows[("GPT2", "bf16")]
        with open(os.path.join(tmp, "out.json")) as f:
            assert len(json.load(f)["runs"]) == 30
        # The budget: W2's 2 ms step scaled by T6's FLOPs predicts 6 s for gpipe's T6 (run), then
        # its 400 ms step 10 s for PyTorch's two runs; 9 s do not have them.
        rc, out = run("--budget-seconds", "9", "--shapes", "W2,T6", "--modes", "fp32")
        rows = main_rows(out)
        assert rc == 0 and rows[("W2", "fp32")][:3] == ["2.00", "4.00", "3.00"], out
        assert rows[("T6", "fp32")][0] == "400.00", out
        assert all(c.startswith("skipped: budget (~10 s needed") for c in rows[("T6", "fp32")][1:3]), out
        # A PyTorch process stopped by the budget: the runs it printed count.
        os.environ["STUB_TORCH_HANG"] = "1"
        rc, out = run("--budget-seconds", "8", "--shapes", "W2", "--modes", "bf16")
        del os.environ["STUB_TORCH_HANG"]
        row = main_rows(out)[("W2", "bf16")]
        assert rc == 0 and row[:3] == ["1.00", "4.00", "error (below)"], out
        assert "- W2 bf16 sdpa: stopped after " in out, out
        # No torch with CUDA: gpipe's figures still print.
        os.environ["STUB_TORCH_CUDA"] = "0"
        rc, out = run("--shapes", "W2", "--modes", "bf16")
        row = main_rows(out)[("W2", "bf16")]
        assert rc == 0 and row[:3] == ["1.00", NO_TORCH, NO_TORCH] and row[6:8] == ["-", "100.0%"], row
        assert "# PyTorch columns " + NO_TORCH in out, out
    print("gpu_compare self-test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(self_test() if sys.argv[1:] == ["--self-test"] else main())
