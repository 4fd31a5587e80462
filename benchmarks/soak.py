"""Soak benchmark: a long K = 2 training run that saves every 500 steps,
sampled every 1,000 steps for resident memory (the process's VmRSS), the
devices' live bytes and the step rate (gpipe_train's progress line), to show
that all three stay flat: no leak per step, per save or per log line.

    python3 benchmarks/soak.py --gpipe-train bazel-bin/tools/gpipe_train [--steps 20000]

Not a timed test: it runs for minutes. Prints a table and, after the first
2,000 steps (allocator and page-cache warm-up), each series' spread
((max - min) / mean) and its drift (last sample - first sample); exits 1 if
resident memory or live bytes drift up by more than 5%.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpipe-train", required=True)
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--every", type=int, default=1000, help="sample every N steps")
    p.add_argument("--save-every", type=int, default=500)
    p.add_argument("--warmup-steps", type=int, default=2000)
    args = p.parse_args()
    ckpt_dir = tempfile.mkdtemp(prefix="gpipe_soak_")
    cmd = [args.gpipe_train, "--model=transformer", "--K=2", "--M=2", "--layers=1", "--dim=32",
           "--ffn=64", "--heads=2", f"--steps={args.steps}", f"--log-every={args.every}",
           f"--save={ckpt_dir}/ckpt", f"--save-every={args.save_every}", "--eval-every=0"]
    print("# soak:", " ".join(cmd))
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    step_re = re.compile(r"^step\s+(\d+)/\d+ .* ([\d.]+) ex/s .* live ([\d.]+) MB")
    rows, saves = [], 0
    for line in proc.stdout:
        if line.startswith("saved checkpoint"):
            saves += 1
        m = step_re.match(line)
        if m:
            rows.append((int(m.group(1)), float(m.group(2)), float(m.group(3)), rss_mb(proc.pid),
                         time.time() - t0))
    rc = proc.wait()
    leftovers = sorted(os.listdir(ckpt_dir))
    print(f"{'step':>7} {'examples/s':>11} {'live MB':>8} {'RSS MB':>8} {'elapsed s':>10}")
    for step, exs, live, rss, el in rows:
        print(f"{step:>7} {exs:>11.1f} {live:>8.2f} {rss:>8.1f} {el:>10.1f}")
    print(f"# gpipe_train exit {rc}; {saves} saves; files left in the checkpoint folder: {leftovers}")
    steady = [r for r in rows if r[0] >= args.warmup_steps]
    if rc != 0 or len(steady) < 2:
        print("# soak: FAILED (the run did not finish, or too few samples)")
        return 1
    ok = True
    for name, col in (("examples/s", 1), ("live MB", 2), ("RSS MB", 3)):
        vals = [r[col] for r in steady]
        mean = sum(vals) / len(vals)
        spread = (max(vals) - min(vals)) / mean if mean else 0.0
        drift = (vals[-1] - vals[0]) / vals[0] if vals[0] else 0.0
        print(f"# {name:>10}: mean {mean:.2f}, spread {100 * spread:.1f}%, drift {100 * drift:+.1f}% "
              f"(steps {steady[0][0]}..{steady[-1][0]})")
        if col in (2, 3) and drift > 0.05:
            ok = False
    print("# soak:", "flat" if ok else "FAILED: memory drifts up by more than 5%")
    for f in leftovers:
        os.remove(os.path.join(ckpt_dir, f))
    os.rmdir(ckpt_dir)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
