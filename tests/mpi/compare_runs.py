#!/usr/bin/python3
"""Compares two gpipe training runs: the train losses of their metrics files
(JSON lines) and the tensors of their checkpoints (a single safetensors file
or a sharded checkpoint's manifest). Used by the MPI tests; exits 1 naming
the first difference beyond the tolerance.

  compare_runs.py losses A.jsonl B.jsonl [--steps 4,5] [--rtol 1e-5]
  compare_runs.py tensors A.safetensors B.safetensors [--rtol 1e-4 --atol 1e-6]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        lo, hi = info["data_offsets"]
        tensors[name] = np.frombuffer(data[lo:hi], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return tensors, meta


def read_checkpoint(path):
    tensors, meta = read_safetensors(path)
    if meta.get("gpipe.format") != "checkpoint-manifest/1":
        return tensors, meta
    merged = {}
    for shard in meta["gpipe.shards"].split(","):
        t, _ = read_safetensors(os.path.join(os.path.dirname(path), shard))
        for name, value in t.items():
            merged.setdefault(name, value)
    return merged, meta


def losses(path, kind):
    out = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == kind:
                out[r["step"]] = r["loss"]
    return out


def fail(msg):
    print("compare_runs: " + msg)
    sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["losses", "tensors"])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--steps", default="")
    p.add_argument("--rtol", type=float, default=1e-5)
    p.add_argument("--atol", type=float, default=1e-7)
    args = p.parse_args()
    if args.what == "losses":
        a, b = losses(args.a, "train"), losses(args.b, "train")
        steps = [int(s) for s in args.steps.split(",")] if args.steps else sorted(a)
        if not steps:
            fail(f"{args.a} has no train records")
        for s in steps:
            if s not in a or s not in b:
                fail(f"step {s} missing from {args.a if s not in a else args.b}")
            if not np.isclose(a[s], b[s], rtol=args.rtol, atol=args.atol):
                fail(f"step {s}: loss {a[s]!r} in {args.a} but {b[s]!r} in {args.b}")
        ea, eb = losses(args.a, "eval"), losses(args.b, "eval")
        for s in sorted(set(ea) & set(eb)):
            if not np.isclose(ea[s], eb[s], rtol=args.rtol, atol=args.atol):
                fail(f"evaluation at step {s}: loss {ea[s]!r} in {args.a} but {eb[s]!r} in {args.b}")
        print(f"compare_runs: losses of steps {steps} (and {len(set(ea) & set(eb))} evaluations) agree within rtol {args.rtol}")
        return
    a, meta_a = read_checkpoint(args.a)
    b, meta_b = read_checkpoint(args.b)
    if meta_a.get("gpipe.step") != meta_b.get("gpipe.step"):
        fail(f"step {meta_a.get('gpipe.step')} in {args.a} but {meta_b.get('gpipe.step')} in {args.b}")
    model_a = {n for n in a if not n.startswith("optim/")}
    common = model_a & set(b)
    if len(common) < max(1, len(model_a) - 2):  # tied weights may sit under another name
        fail(f"only {len(common)} of {len(model_a)} model tensors of {args.a} are in {args.b}")
    worst = 0.0
    for n in sorted(set(a) & set(b)):
        x, y = a[n].astype(np.float64), b[n].astype(np.float64)
        if x.shape != y.shape:
            fail(f"tensor {n}: shape {x.shape} vs {y.shape}")
        if not np.allclose(x, y, rtol=args.rtol, atol=args.atol):
            i = np.unravel_index(np.argmax(np.abs(x - y)), x.shape)
            fail(f"tensor {n} differs at {tuple(int(v) for v in i)}: {x[i]!r} vs {y[i]!r}")
        worst = max(worst, float(np.max(np.abs(x - y))) if x.size else 0.0)
    print(f"compare_runs: {len(set(a) & set(b))} tensors agree (largest difference {worst:.3g})")


if __name__ == "__main__":
    main()
