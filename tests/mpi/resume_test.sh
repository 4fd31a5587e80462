#!/usr/bin/env bash
# Checkpoints across layouts: 3 steps at K=2 R=2 (4 processes, a sharded
# checkpoint), then resumed to step 5 at K=4 (4 processes) and in one
# process (K=1); both continue as the uninterrupted single-process run does.
# Also: a checkpoint from one process resumes under mpirun; a language model
# with replicas resumed mid-epoch repeats its losses bit for bit.
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
# A language model with replicas (K=2 R=2, 5 batches per epoch): a job
# saving every 3 steps, and a job resumed from its step-3 checkpoint (inside
# epoch 0) that runs across the epoch boundary: bit for bit the first job's
# losses. The manifest records the data position. The resumed job saves
# step 6 again: a dead writer's temporaries of that path are removed, a
# live one's are kept.
L="--model=gpt2 --layers=2 --dim=32 --heads=4 --context=32 --batch=8 --train-limit=3 --dropout=0.1 --threads=1 --no-final-eval --log-every=1 --K=2 --M=2 --replicas=2 --steps=7"
run 4 $L --save=lm-{step}.safetensors --save-every=3 --metrics=lm_full.jsonl > lm_full.log
for key in '"data.epoch":"0"' '"data.batch_in_epoch":"3"' '"data.batches_per_epoch":"5"' \
  '"data.next_source":"/usr/share/games/fortunes/'; do
  grep -a -q "$key" lm-3.safetensors || { echo "the manifest lacks $key"; exit 1; }
done
dead=$(sh -c 'echo $$')  # a process that has exited
touch "lm-6.safetensors.tmp.$dead" "lm-6.safetensors.step6-dead.shard0of2.tmp.$dead" "lm-6.safetensors.tmp.$$"
run 4 $L --resume=lm-3.safetensors --save=lm-{step}.safetensors --save-every=3 \
  --metrics=lm_resumed.jsonl > lm_resumed.log 2>&1
grep -q "resumed from lm-3.safetensors at step 3" lm_resumed.log
"$PY" "$COMPARE" losses lm_full.jsonl lm_resumed.jsonl --steps 4,5,6,7 --rtol 0 --atol 0
grep -q "removed the stale temporary file '.*lm-6.safetensors.tmp.$dead'" lm_resumed.log
! ls "lm-6.safetensors.tmp.$dead" "lm-6.safetensors.step6-dead.shard0of2.tmp.$dead" 2> /dev/null
ls "lm-6.safetensors.tmp.$$" > /dev/null  # this script's own: alive
echo "resume across layouts: ok"
