#!/usr/bin/env bash
# SIGINT and SIGTERM stop gpipe_train cleanly (Note [Clean stop] in
# tools/train/interrupt.cc): the run saves the last completed step, prints one
# line, exits with 128 + the signal and leaves no temporary file; the
# checkpoint resumes to the same losses, bit for bit, as a run never stopped.
# A second SIGINT exits at once. Without --save the line says so.
set -uo pipefail
set -m  # job control: background jobs keep SIGINT (a script's would ignore it)
source "$(dirname "$0")/mpi_env.sh" "$1" "$2"
fail() { echo "FAILED: $*"; exit 1; }
S="--model=transformer --layers=2 --dim=128 --threads=1 --batch=16 --lr-schedule=constant --optimizer=adam --lr=1e-3 --no-final-eval --log-every=1 --K=2 --M=4"

# start NAME ARGS...: gpipe_train in the background, its pid in $PID.
start() {
  local name=$1; shift
  "$TRAIN" $S "$@" > "$name.out" 2> "$name.err" &
  PID=$!
}
# wait_step FILE N: until FILE (metrics) has a train line of step >= N (30 s at most).
wait_step() {
  for _ in $(seq 300); do
    grep -q "\"type\":\"train\",\"step\":$2," "$1" 2> /dev/null && return 0
    sleep 0.1
  done
  fail "no step $2 in $1 within 30 s"
}

for sig in INT TERM; do
  rm -f ck_$sig.safetensors*
  start $sig --steps=100000 --save=ck_$sig.safetensors --save-every=1000 --metrics=$sig.jsonl
  wait_step $sig.jsonl 3
  t0=$(date +%s.%N)
  kill -$sig $PID
  wait $PID; rc=$?
  took=$(echo "$(date +%s.%N) - $t0" | bc)
  want=$((128 + $(kill -l $sig)))
  [ "$rc" -eq "$want" ] || { cat $sig.err; fail "SIG$sig: exit $rc, expected $want"; }
  line=$(grep -E "interrupted at step [0-9]+ by SIG$sig; checkpoint saved to ck_$sig.safetensors$" $sig.err) ||
    { cat $sig.err; fail "SIG$sig: no 'interrupted at step N by SIG$sig; checkpoint saved to ...' line"; }
  grep -q "SIG$sig received; stopping after the step in flight" $sig.err || { cat $sig.err; fail "SIG$sig: no notice"; }
  step=$(grep -Eo "at step [0-9]+" <<< "$line" | grep -Eo "[0-9]+")
  ls ck_$sig.safetensors* | grep -v "^ck_$sig.safetensors$" && fail "SIG$sig: files besides the checkpoint"
  [ -f ck_$sig.safetensors ] || fail "SIG$sig: no checkpoint"
  # The last metrics line is the stopped step: it completed.
  grep -q "\"type\":\"train\",\"step\":$step," $sig.jsonl || fail "SIG$sig: step $step not in the metrics"
  echo "ok: SIG$sig stopped at step $step after ${took}s, exit $rc"
  # Resume 3 more steps; the same as a run never stopped.
  end=$((step + 3))
  "$TRAIN" $S --steps=$end --resume=ck_$sig.safetensors --metrics=${sig}_resumed.jsonl > /dev/null 2>&1 ||
    fail "SIG$sig: resuming failed"
  "$TRAIN" $S --steps=$end --metrics=${sig}_full.jsonl > /dev/null 2>&1 || fail "the uninterrupted run failed"
  "$PY" "$COMPARE" losses ${sig}_full.jsonl $sig.jsonl --steps "$(seq -s, 1 $step)" --rtol 0 ||
    fail "SIG$sig: the stopped run's losses differ"
  "$PY" "$COMPARE" losses ${sig}_full.jsonl ${sig}_resumed.jsonl --steps "$((step + 1)),$((step + 2)),$end" --rtol 0 ||
    fail "SIG$sig: the resumed losses differ from the uninterrupted run's"
  echo "ok: SIG$sig: resumed at step $step, steps $((step + 1))-$end equal the uninterrupted run's bit for bit"
done

# Without --save: stopped all the same, and the line says there is no checkpoint.
start nosave --steps=100000 --metrics=nosave.jsonl
wait_step nosave.jsonl 2
kill -INT $PID; wait $PID; rc=$?
[ "$rc" -eq 130 ] || fail "no --save: exit $rc"
grep -qE "interrupted at step [0-9]+ by SIGINT; no checkpoint: --save not given" nosave.err ||
  { cat nosave.err; fail "no --save: no line saying so"; }
echo "ok: without --save"

# A second SIGINT exits at once: a step of this model takes seconds, so the
# second signal lands inside the first step after the first one.
"$TRAIN" --model=transformer --dim=512 --ffn=2048 --layers=6 --batch=256 --max-len=64 --threads=1 \
  --steps=100000 --no-final-eval --log-every=1 > twice.out 2> twice.err &
PID=$!
for _ in $(seq 300); do grep -q "^cell" twice.out 2> /dev/null && break; sleep 0.1; done
kill -INT $PID; sleep 0.3; t0=$(date +%s.%N); kill -INT $PID
wait $PID; rc=$?
took=$(echo "$(date +%s.%N) - $t0" | bc)
[ "$rc" -eq 130 ] || { cat twice.err; fail "second SIGINT: exit $rc"; }
grep -q "second signal (SIGINT): exiting at once" twice.err || { cat twice.err; fail "second SIGINT: no line"; }
"$PY" -c "import sys; sys.exit(float('$took') > 2)" || fail "second SIGINT took ${took}s"
echo "ok: a second SIGINT exits at once (${took}s)"

# Under mpirun: SIGTERM to mpirun (as a scheduler sends it) reaches every rank;
# the ranks agree on the step and write one sharded checkpoint, which resumes
# to the uninterrupted job's losses bit for bit.
rm -f ck_mpi.safetensors*
mpirun -np 2 "$TRAIN" $S --steps=100000 --save=ck_mpi.safetensors --save-every=1000 \
  --metrics=mpi.jsonl > mpi.out 2> mpi.err < /dev/null &
PID=$!
wait_step mpi.jsonl 3
kill -TERM $PID
wait $PID
steps=$(grep -Eo "rank [01]: interrupted at step [0-9]+ by SIGTERM; checkpoint saved to ck_mpi.safetensors$" mpi.err |
  grep -Eo "step [0-9]+" | sort -u)
[ "$(grep -c "interrupted at step" mpi.err)" -eq 2 ] && [ "$(wc -l <<< "$steps")" -eq 1 ] ||
  { cat mpi.err; fail "mpirun: the two ranks did not both stop at one step"; }
step=${steps#step }
ls ck_mpi.safetensors.step$step-*.shard0of2 ck_mpi.safetensors.step$step-*.shard1of2 > /dev/null ||
  fail "mpirun: no shards of step $step"
[ "$(ls ck_mpi.safetensors* | wc -l)" -eq 3 ] || { ls ck_mpi.safetensors*; fail "mpirun: stray files"; }
end=$((step + 2))
run 2 $S --steps=$end --metrics=mpi_full.jsonl > /dev/null 2>&1 || fail "mpirun: the uninterrupted job failed"
run 2 $S --steps=$end --resume=ck_mpi.safetensors --metrics=mpi_resumed.jsonl > /dev/null 2>&1 ||
  fail "mpirun: resuming failed"
"$PY" "$COMPARE" losses mpi_full.jsonl mpi.jsonl --steps "$(seq -s, 1 $step)" --rtol 0 ||
  fail "mpirun: the stopped job's losses differ"
"$PY" "$COMPARE" losses mpi_full.jsonl mpi_resumed.jsonl --steps "$((step + 1)),$end" --rtol 0 ||
  fail "mpirun: the resumed losses differ"
echo "ok: mpirun: both ranks stopped at step $step, one sharded checkpoint, resumed bit for bit"
