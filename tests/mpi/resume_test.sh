#!/usr/bin/env bash
# Checkpoints across layouts: 3 steps at K=2 R=2 (4 processes, a sharded
# checkpoint), then resumed to step 5 at K=4 (4 processes) and in one
# process (K=1); both continue as the uninterrupted single-process run does.
# Also: a checkpoint from one process resumes under mpirun.
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh" "$1" "$2"

T="--model=transformer --layers=2 --threads=1 --batch=8 --optimizer=sgd --lr=0.1 --momentum=0.9 --lr-schedule=constant --no-final-eval --log-every=1"

"$TRAIN" $T --K=2 --M=4 --steps=5 --metrics=full.jsonl --save=full.safetensors > full.log
run 4 $T --K=2 --M=2 --replicas=2 --steps=3 --save=ck.safetensors --metrics=first.jsonl > first.log
ls ck.safetensors.step3-*.shard0of2 ck.safetensors.step3-*.shard1of2 > /dev/null
"$PY" "$COMPARE" losses full.jsonl first.jsonl --steps 1,2,3

run 4 $T --K=4 --M=4 --steps=5 --resume=ck.safetensors --metrics=k4.jsonl --save=k4.safetensors > k4.log
grep -q "resumed from ck.safetensors at step 3" k4.log
"$PY" "$COMPARE" losses full.jsonl k4.jsonl --steps 4,5
"$PY" "$COMPARE" tensors full.safetensors k4.safetensors --rtol 1e-4 --atol 1e-6

"$TRAIN" $T --K=1 --M=4 --steps=5 --resume=ck.safetensors --metrics=one.jsonl --save=one.safetensors > one.log
"$PY" "$COMPARE" losses full.jsonl one.jsonl --steps 4,5
"$PY" "$COMPARE" tensors full.safetensors one.safetensors --rtol 1e-4 --atol 1e-6

# The other way: one process's checkpoint into K=2 R=2.
"$TRAIN" $T --K=1 --M=4 --steps=3 --save=single.safetensors > single.log
run 4 $T --K=2 --M=2 --replicas=2 --steps=5 --resume=single.safetensors --metrics=back.jsonl > back.log
"$PY" "$COMPARE" losses full.jsonl back.jsonl --steps 4,5

# A second save replaces the first: the manifest names the new shards, the old ones are gone.
run 4 $T --K=2 --M=2 --replicas=2 --steps=5 --resume=ck.safetensors --save=ck.safetensors > again.log
ls ck.safetensors.step5-*.shard0of2 > /dev/null && ! ls ck.safetensors.step3-* 2> /dev/null
echo "resume across layouts: ok"
