#!/usr/bin/env bash
# One process per stage (K=2, K=4; ZB-H1's split backward at K=4 and K=2;
# interleaved 1F1B with 2 devices x 2 cells; ZB-V's V of 4 cells on 2 devices) and data-parallel replicas (K=2 R=2,
# K=1 R=2) against the single-process run of the same K, R x M and N: the
# same losses for 3 steps and the same parameters (and optimizer state)
# after them. Transformer (dropout on, tied embeddings across cells),
# AmoebaNet (BatchNorm statistics summed across replicas), and U-Net and a
# split ResNet whose skips cross processes. SGD, because
# Adam turns the rounding noise of gradients that are zero in exact
# arithmetic (attention key biases) into lr-sized steps.
# --threads=1 everywhere: the intra-op split changes the rounding of
# reductions, and a few steps of training amplify rounding differences.
# GPIPE_TEST_DEVICES=cuda:0 (a CUDA build on a GPU machine): the MPI runs put
# every stage on that GPU (NCCL between the ranks) and are compared with the
# CPU reference at a looser tolerance.
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh" "$1" "$2"
DEVICES=${GPIPE_TEST_DEVICES:+--devices=$GPIPE_TEST_DEVICES}
RTOL=1e-5 PTOL="--rtol 1e-4 --atol 1e-6"
if [[ -n "$DEVICES" ]]; then RTOL=1e-3 PTOL="--rtol 1e-2 --atol 1e-4"; fi

T="--model=transformer --layers=2 --threads=1 --batch=8 --steps=3 --optimizer=sgd --lr=0.1 --momentum=0.9 --lr-schedule=constant --eval-batches=1 --eval-sentences=2 --samples=0 --log-every=1"
A="--model=amoebanet --threads=1 --normal-cells=1 --filters=8 --batch=8 --steps=3 --lr=0.01 --train-limit=64 --eval-batches=1 --log-every=1"

check() {  # check NAME NP "FLAGS" "REFERENCE FLAGS" "MODEL FLAGS"
  local name=$1 np=$2 flags=$3 ref=$4 model=$5
  "$TRAIN" $model $ref --metrics=$name.ref.jsonl --save=$name.ref.safetensors > $name.ref.log
  run "$np" $model $flags $DEVICES --metrics=$name.mpi.jsonl --save=$name.mpi.safetensors > $name.mpi.log 2>&1 || {
    cat $name.mpi.log
    exit 1
  }
  "$PY" "$COMPARE" losses $name.ref.jsonl $name.mpi.jsonl --rtol $RTOL
  "$PY" "$COMPARE" tensors $name.ref.safetensors $name.mpi.safetensors $PTOL
  echo "ok: $name"
}

check t_k2 2 "--K=2 --M=2" "--K=2 --M=2" "$T"
check t_k4 4 "--K=4 --M=4" "--K=4 --M=4" "$T"
check t_k2r2 4 "--K=2 --M=2 --replicas=2" "--K=2 --M=4" "$T"
check t_k2r2_stage 4 "--K=2 --M=2 --replicas=2 --layout=stage --schedule=1f1b" "--K=2 --M=4" "$T"
check t_k4_zb 4 "--K=4 --M=4 --schedule=zb-h1 --remat=except_last" "--K=4 --M=4" "$T"
# Interleaved: 2 devices x 2 cells = 4 processes; the cells of a device take turns.
check t_k2v2 4 "--K=2 --virtual=2 --M=2 --schedule=interleaved" "--K=2 --M=2" "$T"
check t_k2_zbv 4 "--K=2 --M=4 --schedule=zb-v --remat=except_last" "--K=2 --M=4" "$T"
# The newer schedules: interleaving at an M that is not a multiple of K, the
# looped zero-bubble order, and the V schedules (2 cells per device).
check t_k2v2_m3 4 "--K=2 --virtual=2 --M=3 --schedule=interleaved" "--K=2 --M=3" "$T"
check t_k2_zbi 4 "--K=2 --virtual=2 --M=4 --schedule=zb-interleaved --remat=except_last" "--K=2 --M=4" "$T"
check t_k2_vmin 4 "--K=2 --M=4 --schedule=v-min" "--K=2 --M=4" "$T"
check t_k2_dualpipev 4 "--K=2 --M=4 --schedule=dualpipev --remat=always" "--K=2 --M=4" "$T"
# M=1 per replica for AmoebaNet: then the replica sum g0 + g1 is the
# reference's own order, and the comparison is exact. (With M=2 it is
# (g0 + g1) + (g2 + g3) against ((g0 + g1) + g2) + g3; BatchNorm on near-
# constant channels amplifies that rounding to ~1e-4 within two steps.)
check a_k2r2 4 "--K=2 --M=1 --replicas=2" "--K=2 --M=2" "$A"
check a_k2_zb 2 "--K=2 --M=2 --schedule=zb-h1 --remat=always" "--K=2 --M=2" "$A"
check a_k2v2 4 "--K=2 --virtual=2 --M=2 --schedule=interleaved --remat=except_last" "--K=2 --M=2" "$A"
check a_k2_zbv 4 "--K=2 --M=2 --schedule=zb-v --remat=never" "--K=2 --M=2" "$A"
check a_k2_vhalf 4 "--K=2 --M=2 --schedule=v-half --remat=except_last" "--K=2 --M=2" "$A"
check a_k1r2 2 "--K=1 --M=1 --replicas=2" "--K=1 --M=2" "$A"
# Skips across cells (Note [Skips]): U-Net's long skips as messages of their
# own between the producing and consuming processes (cells 0 -> 3 crosses 3
# boundaries), or carried through the processes between; a ResNet cut inside
# its blocks (block 1's shortcut around a cell of one layer).
U="--model=unet --threads=1 --unet-depth=3 --unet-channels=4 --unet-convs=1 --batch=8 --steps=3 --lr=0.01 --train-limit=64 --eval-batches=1 --log-every=1"
R="--model=resnet --split-blocks --resnet-width=2 --threads=1 --batch=8 --steps=3 --lr=0.01 --train-limit=64 --eval-batches=1 --log-every=1"
check u_k4 4 "--K=4 --M=2 --balance=2,2,2,2" "--K=4 --M=2 --balance=2,2,2,2" "$U"
check u_k4_zb 4 "--K=4 --M=4 --balance=2,2,2,2 --schedule=zb-h1 --remat=always" "--K=4 --M=4 --balance=2,2,2,2" "$U"
check u_k3_routed 3 "--K=3 --M=2 --balance=3,2,3 --skips=through-cells --schedule=1f1b" "--K=3 --M=2 --balance=3,2,3" "$U"
check u_k2r2 4 "--K=2 --M=1 --replicas=2" "--K=2 --M=2" "$U"
check r_k3 3 "--K=3 --M=2 --balance=5,1,44 --schedule=1f1b --remat=never" "--K=3 --M=2 --balance=5,1,44" "$R"
echo "all MPI layouts match the single-process runs"
