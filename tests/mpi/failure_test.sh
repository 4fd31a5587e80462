#!/usr/bin/env bash
# Failures in a multi-process job end it everywhere, in bounded time, with
# the failure named (GPIPE_FAULT: Note [Fault injection] in pipeline/faults.h):
# a rank killed mid-step, a rank that throws, a rank that hangs (the others
# time out, the watchdog says what they wait for); start-up mistakes (a
# process count that is not K x R, flags that differ between ranks) stop
# every rank with one message; a non-finite loss skips the step on all ranks.
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh" "$1" "$2"

T="--model=transformer --layers=2 --threads=1 --batch=8 --steps=4 --no-final-eval --log-every=1"

expect_failure() {  # expect_failure NAME MAX_SECONDS PATTERN COMMAND...: non-zero exit, in time, PATTERN in output
  local name=$1 max=$2 pattern=$3
  shift 3
  local start=$SECONDS rc=0
  "$@" > $name.log 2>&1 || rc=$?
  local took=$((SECONDS - start))
  if [[ $rc -eq 0 ]]; then echo "FAIL $name: exited 0"; cat $name.log; exit 1; fi
  if [[ $took -gt $max ]]; then echo "FAIL $name: took ${took}s (limit ${max}s)"; cat $name.log; exit 1; fi
  if ! grep -Eq "$pattern" $name.log; then echo "FAIL $name: no /$pattern/ in the output"; cat $name.log; exit 1; fi
  echo "ok: $name (exit $rc after ${took}s)"
}

# Rank 1 (stage 1 of replica 0) dies by SIGKILL in step 2: mpirun names it and ends the others.
expect_failure kill 60 "rank 1 .*(signal 9|Killed)|process rank 1" \
  env GPIPE_FAULT=rank=1,step=2,micro=1,kind=kill timeout 120 mpirun -x GPIPE_FAULT -np 4 "$TRAIN" $T --K=2 --M=2 --replicas=2

# Rank 2 throws in step 2: its message names rank, stage, replica and micro-batch.
expect_failure throw 60 "rank 2 \(stage 0 of 2, replica 1 of 2\).*forward of micro-batch 1: injected fault" \
  env GPIPE_FAULT=rank=2,step=2,micro=1,kind=throw timeout 120 mpirun -x GPIPE_FAULT -np 4 "$TRAIN" $T --K=2 --M=2 --replicas=2

# Rank 0 hangs in step 2: rank 1 times out after 4 s naming what it waited for; the watchdog spoke first.
expect_failure hang 60 "timed out after 4 s waiting for activations of stage 0 \(rank 0\) to stage 1 \(rank 1\)" \
  env GPIPE_FAULT=rank=0,step=2,micro=0,kind=hang timeout 120 mpirun -x GPIPE_FAULT -np 2 "$TRAIN" $T --K=2 --M=2 --timeout=4 --watchdog=1
grep -q "gpipe watchdog: rank 1 (stage 1 of 2, replica 0 of 1): step 2 has run for" hang.log || {
  echo "FAIL hang: no watchdog report"; cat hang.log; exit 1; }

# Rank 1 hangs where its replica partner sits in the (blocking) gradient
# all-reduce: the partner's watchdog ends the job after 2 x --timeout there.
expect_failure hang_sync 60 "gpipe watchdog: rank 0 \(stage 0 of 1, replica 0 of 2\): step 2 has run for .* summing gradients with this stage's replicas, past the timeout; ending the job" \
  env GPIPE_FAULT=rank=1,step=2,micro=0,kind=hang,at=sync timeout 120 mpirun -x GPIPE_FAULT -np 2 "$TRAIN" $T --K=1 --M=1 --replicas=2 --timeout=3

# 3 processes for K=2 x R=1: every rank says so.
expect_failure count 30 "the job has 3 processes but --K=2 x --replicas=1 = 2" run 3 $T --K=2 --M=2
test "$(grep -c "the job has 3 processes" count.log)" -eq 3 || { echo "FAIL count: not one message per rank"; cat count.log; exit 1; }

# Ranks started with different flags (MPMD launch): every rank says which differ.
expect_failure flags 30 "rank\(s\) 1 differ from rank 0" \
  timeout 60 mpirun -np 1 "$TRAIN" $T --K=2 --M=2 : -np 1 "$TRAIN" $T --K=2 --M=2 --seed=7
test "$(grep -c "differ from rank 0" flags.log)" -eq 2 || { echo "FAIL flags: not one message per rank"; cat flags.log; exit 1; }

# The same flags in another order and spelling are the same flags.
timeout 60 mpirun -np 1 "$TRAIN" $T --K=2 --M=2 : -np 1 "$TRAIN" $T --M 2 --K 2 < /dev/null \
  > reordered.log 2>&1 || { echo "FAIL reordered: the job failed"; cat reordered.log; exit 1; }
echo "ok: reordered"

# --replicas without mpirun: a usage error naming the launch.
expect_failure replicas 30 "launch with mpirun -np 4" "$TRAIN" $T --K=2 --M=2 --replicas=2

# A loss that becomes infinite (a huge learning rate) skips those steps on every rank alike, and the job ends normally.
run 2 $T --K=2 --M=2 --optimizer=sgd --lr=1e12 --lr-schedule=constant --metrics=nan.jsonl > nan.log 2>&1 || {
  echo "FAIL nan: the job failed"; cat nan.log; exit 1; }
grep -q "skipped (the loss is not finite)\|skipped (the gradient norm is not finite)" nan.log || {
  echo "FAIL nan: no step was skipped"; cat nan.log; exit 1; }
echo "ok: nan"
echo "failure handling: ok"
