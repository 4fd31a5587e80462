#!/usr/bin/env bash
# The CPU compute figures (W1-W5 and the kernel lab) in one go, each table
# in its own file under OUT (default /tmp/gpipe-cpu-goals), one command after
# another: at the CPU's own level, then again with GPIPE_CPU_ISA=avx2 where the
# CPU has AVX-512 (docs/BENCHMARKS.md, the Zen 5 tables). About 25 minutes on 2 cores;
# run it on an otherwise idle machine.
#
#   bazel build //tools:gpipe_bench && benchmarks/cpu_goals.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
bench=bazel-bin/tools/gpipe_bench
[[ -x "$bench" ]] || { echo "cpu_goals: build it first: bazel build //tools:gpipe_bench" >&2; exit 2; }
py="${GPIPE_BENCH_VENV:-${HOME:-/root}/.cache/gpipe-bench-venv}/bin/python"
[[ -x "$py" ]] || { echo "cpu_goals: no PyTorch venv at $py (benchmarks/setup_torch.sh)" >&2; exit 2; }
out="${1:-/tmp/gpipe-cpu-goals}"
mkdir -p "$out"
{ lscpu | grep -E "Model name|CPU family|Model:|Flags"; nproc; git rev-parse HEAD; } > "$out/machine.txt"

run() {  # run NAME ARGS...: one table
  local name=$1; shift
  echo "cpu_goals: $name" >&2
  "$bench" "$@" > "$out/$name.txt" 2>&1
}
levels=(native)
grep -qw avx512f /proc/cpuinfo && levels+=(avx2)
for level in "${levels[@]}"; do
  if [[ $level == native ]]; then unset GPIPE_CPU_ISA; sfx=""; else export GPIPE_CPU_ISA=$level; sfx="_$level"; fi
  run "peak$sfx" peak
  run "gemm$sfx" gemm --min-seconds 0.5 --python "$py"
  for i in 1 2 3; do run "w2${sfx}_$i" transformer --python "$py"; done
  for i in 1 2 3; do run "w5${sfx}_$i" amoebanet --python "$py"; done
  run "w3$sfx" pipeline --M 1 4 8 --remat never except_last --schedule gpipe 1f1b \
    --torch-threads 2 --python "$py"
  run "w4$sfx" remat --python "$py"
  [[ $level == native ]] && run kernels kernels --threads 1 2
done
echo "cpu_goals: tables in $out" >&2
