"""What the PyTorch training references (translation_torch.py, lm_torch_train.py)
share: gpipe's learning-rate schedules, its Adam / AdamW from an export's
settings, and the reading of a --metrics JSON-lines file. Errors end the
script with "<script>: error: ...", as each script's own fail()."""
import json
import math
import os
import sys


def fail(msg):
    sys.exit(f"{os.path.basename(sys.argv[0])}: error: {msg}")


def read_jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        fail(f"{path}:{number}: not a JSON line ({e})")
    except OSError as e:
        fail(f"cannot read the metrics file {path}: {e.strerror}")
    return rows


def lr_schedule(text, base):
    """gpipe's optim/lr_schedule.cc, in the form its str() prints; steps are 1-based."""
    kind, _, rest = text.partition(":")
    kv = {k: float(v) for k, v in (item.split("=") for item in rest.split(",") if item)}
    if kind == "constant":
        return lambda s: base
    if kind == "inverse_sqrt":
        w = kv["warmup"]
        return lambda s: base * min(s / w, math.sqrt(w / s))
    if kind == "noam":
        w, dm = kv["warmup"], kv["d_model"]
        return lambda s: base / math.sqrt(dm) * min(1 / math.sqrt(s), s * w ** -1.5)
    if kind == "cosine":
        w, total, floor = kv.get("warmup", 0.0), kv["total"], kv.get("floor", 0.0)

        def cosine(s):
            if s <= w:
                return base * s / w
            if s >= total:
                return floor
            return floor + (base - floor) * 0.5 * (1 + math.cos(math.pi * (s - w) / (total - w)))
        return cosine
    if kind == "step":
        every, gamma = int(kv["every"]), kv.get("gamma", 0.1)
        return lambda s: base * gamma ** ((s - 1) // every)
    fail(f"unknown learning-rate schedule '{text}'")


def make_optimizer(params, settings, torch):
    """torch's Adam or AdamW with the hyper-parameters gpipe exported."""
    name, h = settings["optimizer"], settings["hyper_params"]
    if name not in ("Adam", "AdamW"):
        fail(f"the reference knows Adam and AdamW; the export used {name} (train gpipe with "
             "--optimizer=adam or adamw)")
    cls = torch.optim.Adam if name == "Adam" else torch.optim.AdamW
    return cls(params, lr=settings["lr"], betas=(float(h["beta1"]), float(h["beta2"])),
               eps=float(h["eps"]), weight_decay=float(h["weight_decay"]))
