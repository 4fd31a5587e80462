#!/usr/bin/env bash
# The commands gpipe is introduced with, as typed (README, first command):
#   gpipe_train --model=transformer --K=8 --M=32
#   gpipe_train --model=amoebanet --K=8 --M=32
# with only a small step count and evaluation size added so CI stays fast
# (the default budget is for users). Each run must train and print the cell
# table, the progress line, the measured and ideal bubble and the evaluation.
set -uo pipefail
TRAIN="$1"
fail=0
run() {
  local name="$1"; shift
  local log="$TEST_TMPDIR/$name.log"
  if ! timeout 300 "$TRAIN" "$@" > "$log" 2>&1; then
    echo "FAILED: $name: gpipe_train $* exited non-zero:"; tail -20 "$log"; fail=1; return
  fi
  for want in "cell  device" "step " "bubble fraction measured" "ideal (K-1)/(M+K-1) 0.179 (K=8, M=32)" \
              "eval at step 2:"; do
    grep -qF -- "$want" "$log" || { echo "FAILED: $name: no '$want' in the output:"; cat "$log"; fail=1; }
  done
  # Eight cells, as asked.
  [ "$(grep -cE '^[0-7] +cpu:[0-7] ' "$log")" -eq 8 ] || { echo "FAILED: $name: not 8 cells:"; cat "$log"; fail=1; }
  echo "ok: $name"
}
run transformer --model=transformer --K=8 --M=32 --steps=2 --log-every=1 --eval-batches=1 --eval-sentences=2 --samples=1
run amoebanet --model=amoebanet --K=8 --M=32 --steps=2 --log-every=1 --eval-batches=1
# And with no flag but the model: the default budget is stated in --help.
"$TRAIN" --help | grep -q -- "--steps=600" || { echo "FAILED: --help does not state the default budget"; fail=1; }
# Bad kernel-selection variables stop at start-up with one clear message (exit 1), not a crash.
for bad in "GPIPE_GEMM=bogus:GPIPE_GEMM='bogus': expected packed, openblas or eigen" \
           "GPIPE_CPU_ISA=avx1024:unknown CPU ISA level 'avx1024'"; do
  var="${bad%%:*}"; want="${bad#*:}"
  out=$(env "$var" "$TRAIN" --model=amoebanet --steps=1 2>&1); rc=$?
  if [ "$rc" -ne 1 ] || ! grep -qF -- "$want" <<< "$out"; then
    echo "FAILED: $var: exit $rc, output: $out"; fail=1
  fi
done
# Runs that cannot fit, or would start far more threads than the cores, are
# refused before anything is built: exit 1 within 2 s, one message naming the
# figure (Note [Preflight] in tools/train/preflight.cc).
for case in "--model=transformer --preset=T(64,16384,32)|needs about 81.68 GB for this process" \
            "--model=transformer --layers=100000000|parameters x 16 bytes" \
            "--model=amoebanet --filters=100000|3,703,006,300,010 parameters x 12 bytes" \
            "--model=amoebanet --normal-cells=100000|out of memory on cpu: --model=amoebanet" \
            "--model=transformer --dim=1000000000|more than 9.2e18 parameters" \
            "--model=transformer --batch=100000000|3276.80 GB of activations" \
            "--model=transformer --threads=100000|--threads=100000: far more threads than the" \
            "--model=transformer --K=8 --M=32 --threads=5000|--threads=5000: far more threads than the"; do
  args="${case%%|*}"; want="${case#*|}"
  start=$(date +%s%N)
  out=$(timeout 60 "$TRAIN" $args --steps=1 2>&1); rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  if [ "$rc" -ne 1 ] || ! grep -qF -- "$want" <<< "$out" || [ "$ms" -gt 2000 ]; then
    echo "FAILED: gpipe_train $args: exit $rc after $ms ms (expected 1 within 2 s, '$want'): $out"; fail=1
  else
    echo "ok: $args refused in $ms ms"
  fi
done
# --print-params still answers for a preset this machine cannot build.
"$TRAIN" --model=transformer --preset="T(64,16384,32)" --print-params | grep -q "5,104,224,256" ||
  { echo "FAILED: --print-params for T(64,16384,32)"; fail=1; }
exit $fail
