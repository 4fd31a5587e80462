#!/usr/bin/env bash
# Sets up the PyTorch reference for gpipe_bench's transformer / pipeline /
# remat / amoebanet subcommands and benchmarks/translation_torch.py (sacreBLEU's
# chrF checks gpipe's) (shared/BENCHMARKS.md: the newest PyTorch from
# PyPI, in a virtual environment outside the repository; never in CI).
#
#   benchmarks/setup_torch.sh            # -> /root/.cache/gpipe-bench-venv (or $GPIPE_BENCH_VENV)
#   bazel run //tools:gpipe_bench -- transformer --python ~/.cache/gpipe-bench-venv/bin/python
#
# PyPI's Linux torch wheel brings its CUDA libraries (several GB); the
# benchmarks only use its CPU path. With --debian, uses Debian's python3-torch
# (1.13) with OpenBLAS instead (the fallback BENCHMARKS.md allows; needs root).
set -euo pipefail

venv="${GPIPE_BENCH_VENV:-${HOME:-/root}/.cache/gpipe-bench-venv}"

if [[ "${1:-}" == "--debian" ]]; then
  sudo=""
  [[ "$(id -u)" == 0 ]] || sudo="sudo"
  $sudo apt-get update
  $sudo apt-get install -y python3-torch python3-numpy libopenblas0-openmp
  echo "reference python: /usr/bin/python3 ($(/usr/bin/python3 -c 'import torch; print(torch.__version__)'))"
  exit 0
fi

python="${PYTHON:-/usr/bin/python3}"
if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --upgrade pip
"$venv/bin/python" -m pip install --upgrade torch numpy sacrebleu
"$venv/bin/python" - <<'PY'
import torch
print("torch", torch.__version__, "| BLAS/threading:", torch.__config__.parallel_info().splitlines()[0:3])
PY
echo "reference python: $venv/bin/python"
