"""numpy and torch.mm sides of `gpipe_bench gemm`: W1 of shared/BENCHMARKS.md.

Usage: gemm_numpy.py SIZES MIN_SECONDS [numpy|torch|torch-bf16 THREADS]
Prints one JSON object per size: {"n", "best_s", "median_s", "gflops", "check"}.
numpy: run with the thread count already fixed through OPENBLAS_NUM_THREADS.
torch: torch.mm(A, B, out=C) with torch.set_num_threads(THREADS).
torch-bf16: the same on bfloat16 A, B and C (PyTorch's bfloat16 matmul).
"""
import json
import sys
import time

import numpy as np


def freivalds_ok(a, b, c):
    """C == A @ B checked without BLAS: float64 ufuncs on a random vector."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal(c.shape[1])
    a64, b64, c64 = a.astype(np.float64), b.astype(np.float64), c.astype(np.float64)
    lhs = np.sum(c64 * x[None, :], axis=1)
    bx = np.sum(b64 * x[None, :], axis=1)
    rhs = np.sum(a64 * bx[None, :], axis=1)
    return bool(np.max(np.abs(lhs - rhs)) <= 1e-3 * np.sqrt(a.shape[1]) * np.max(np.abs(rhs)) + 1e-2)


def main():
    sizes = [int(s) for s in sys.argv[1].split(",")]
    min_seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    lib = sys.argv[3] if len(sys.argv) > 3 else "numpy"
    if lib.startswith("torch"):
        import torch
        torch.set_num_threads(int(sys.argv[4]))
        torch.set_num_interop_threads(1)
    for n in sizes:
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        c = np.empty((n, n), dtype=np.float32)
        if lib in ("torch", "torch-bf16"):
            ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
            if lib == "torch-bf16":
                ta, tb = ta.bfloat16(), tb.bfloat16()
                t16 = torch.empty((n, n), dtype=torch.bfloat16)
                a, b = ta.float().numpy(), tb.float().numpy()  # the values multiplied
                def call():
                    torch.mm(ta, tb, out=t16)
                    tc.copy_(t16) if len(times) == 0 else None
            else:
                def call():
                    torch.mm(ta, tb, out=tc)
        else:
            def call():
                np.matmul(a, b, out=c)
        times = []
        for _ in range(2):
            call()
        start = time.perf_counter()
        while len(times) < 50 and (len(times) < 5 or time.perf_counter() - start < min_seconds):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        best = min(times)
        print(json.dumps({"n": n, "best_s": best, "median_s": sorted(times)[len(times) // 2],
                          "gflops": 2 * n ** 3 / best / 1e9, "check": freivalds_ok(a, b, c)}),
              flush=True)


if __name__ == "__main__":
    main()
