#!/usr/bin/env bash
# Two hosts on one machine: two network namespaces, "host-a" and "host-b",
# each with its own address and (unshare --uts) its own host name, on a
# bridge that also reaches the root namespace, where mpirun runs. mpirun's
# rsh launcher starts each host's OpenMPI daemon through an agent of ours
# (no ssh) that maps the host's address to its namespace; the ranks talk
# TCP only (btl tcp,self) over the test's own subnet.
#  1. K=2 with a stage per host, and K=2 R=2 with a replica per host: the
#     same losses and parameters as one process with K and R x M.
#  2. A rank on host B killed by SIGKILL mid-step: mpirun names it and its
#     host and ends the job; host A's rank, ended well within --timeout,
#     says what it waited for, which names the lost rank, its stage and the
#     micro-batch (Note [Ended by the launcher] in tools/train/interrupt.cc).
#     The last sharded checkpoint resumes on one host (K=2 under mpirun)
#     and in one process (K=1), as the uninterrupted run continues.
#  3. Host B's link cut mid-step (its veth down): both ranks end within
#     --timeout (plus the abort's grace) with a timeout naming what they
#     waited for; the checkpoint at the path is still the last complete
#     one and resumes. mpirun itself waits for host B's daemon until the
#     link comes back (OpenMPI's own behaviour, not gpipe's), so the link
#     is restored once both ranks are gone and mpirun must then end.
#  4. A slow link (netem delay 20ms both ways; where the kernel has no
#     netem, a tbf rate limit): the same losses, only slower, and a small
#     --watchdog names what each stage waits for.
# Needs root and network namespaces (`ip netns`); elsewhere it prints
# "skipped: no network namespaces" and why, and passes. Its namespaces,
# links, bridge and qdiscs carry its PID and are removed on exit, failed
# or not. Each rank writes its own log (NAME.rankN, its host name first),
# so a rank cut off from mpirun still leaves its words.
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh" "$1" "$2"

skip() {
  echo "skipped: no network namespaces ($*)"
  exit 0
}
[[ $(id -u) -eq 0 ]] || skip "not root"
PATH=$PATH:/usr/sbin:/sbin  # ip and tc (bazel's test PATH has only the bin folders)
for tool in ip tc unshare; do command -v $tool > /dev/null || skip "no $tool command"; done

# Run K (one of 25000) owns the subnet 10.(100 + K / 250).(K % 250).0/24 and
# the names below, claimed by creating its bridge gpbrK: parallel runs (other
# checkouts, other sandboxes, where $$ may repeat) never share them.
ID='' NS_A='' NS_B='' BR='' VETH_A='' VETH_B=''
MPIRUN_PID=''
cleanup() {
  set +e
  [[ -n $MPIRUN_PID ]] && kill -9 "$MPIRUN_PID" 2> /dev/null
  [[ -n $ID ]] || return 0
  tc qdisc del dev "$VETH_B" root 2> /dev/null
  for ns in "$NS_A" "$NS_B"; do
    ip netns list 2> /dev/null | grep -qw "$ns" || continue
    tc -n "$ns" qdisc del dev eth0 root 2> /dev/null
    # Daemons and ranks this test started there (an orted outlives a cut link).
    pids=$(ip netns pids "$ns" 2> /dev/null)
    [[ -n $pids ]] && kill -9 $pids 2> /dev/null
    ip netns del "$ns"
  done
  for link in "$VETH_A" "$VETH_B" "$BR"; do ip link del "$link" 2> /dev/null; done
  return 0
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP # a test timeout cleans up too
first=$(((RANDOM << 15 | RANDOM) % 25000))
for i in $(seq 0 999); do
  k=$(((first + i) % 25000))
  NET=10.$((100 + k / 250)).$((k % 250))
  { ip -4 addr show; ip -4 route show; } | grep -qF "$NET." && continue
  if ip link add gpbr$k type bridge 2> link.err; then
    ID=$k
    break
  fi
  grep -q "File exists" link.err || skip "ip link add type bridge: $(cat link.err)"
done
[[ -n $ID ]] || skip "no free subnet in 10.100.0.0/16..10.199.0.0/16"
NS_A=gpipe-a-$ID NS_B=gpipe-b-$ID BR=gpbr$ID VETH_A=gpva$ID VETH_B=gpvb$ID
ip netns add "$NS_A" 2> netns.err || skip "ip netns add: $(cat netns.err)"
ip netns add "$NS_B"
ip addr add "$NET.1/24" dev "$BR"
ip link set "$BR" up
A=$NET.2 B=$NET.3
for h in A B; do
  ns=NS_$h veth=VETH_$h addr=$h
  ip link add "${!veth}" type veth peer name eth0 netns "${!ns}" 2> link.err ||
    skip "ip link add type veth: $(cat link.err)"
  ip link set "${!veth}" master "$BR" up
  ip -n "${!ns}" addr add "${!addr}/24" dev eth0
  ip -n "${!ns}" link set eth0 up
  ip -n "${!ns}" link set lo up
done

# mpirun's rsh agent: "agent.sh HOST COMMAND..." runs COMMAND (a daemon) on HOST.
cat > agent.sh << EOF
#!/bin/sh
case "\$1" in
  $A) ns=$NS_A name=host-a ;;
  $B) ns=$NS_B name=host-b ;;
  *) echo "two_hosts_test agent: unknown host \$1" >&2; exit 1 ;;
esac
shift
exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$name" "\$*"
EOF
# "rank_log.sh PREFIX COMMAND...": the rank's output into PREFIX.rankN, its host name first.
cat > rank_log.sh << 'EOF'
#!/bin/sh
log="$1.rank$OMPI_COMM_WORLD_RANK"
shift
echo "host $(hostname)" > "$log"
exec "$@" >> "$log" 2>&1
EOF
chmod +x agent.sh rank_log.sh
TWO="--mca plm rsh --mca plm_rsh_agent $PWD/agent.sh --mca plm_rsh_no_tree_spawn 1
  --mca btl tcp,self --mca btl_tcp_if_include $NET.0/24 --mca oob_tcp_if_include $NET.0/24"
MPI_EXTRA=

run2() {  # run2 NAME HOSTS NP FLAGS...: gpipe_train on the two hosts; mpirun's words in NAME.mpirun
  local name=$1 hosts=$2 np=$3
  shift 3
  timeout 120 mpirun --host "$hosts" -np "$np" $TWO $MPI_EXTRA "$PWD/rank_log.sh" "$PWD/$name" \
    "$TRAIN" "$@" < /dev/null > "$name.mpirun" 2>&1
}
show() {
  for f in "$1".mpirun "$1".rank*; do
    echo "== $f"
    cat "$f"
  done
}
fail() {  # fail NAME MESSAGE
  echo "FAIL $1: $2"
  show "$1"
  exit 1
}
expect() {  # expect NAME FILE PATTERN
  grep -Eq "$3" "$1.$2" || fail "$1" "no /$3/ in $1.$2"
}
on_host() {  # on_host NAME RANK HOST
  [[ $(head -n 1 "$1.rank$2") == "host $3" ]] || fail "$1" "rank $2 did not run on $3"
}
wait_until() {  # wait_until SECONDS COMMAND...: polls COMMAND until it succeeds; 1 if it never does
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [[ $SECONDS -lt $deadline ]] || return 1
    sleep 0.02
  done
}
ranks_alive() {  # a gpipe_train process in either namespace
  local pid
  for pid in $(ip netns pids "$NS_A") $(ip netns pids "$NS_B"); do
    grep -qx gpipe_train "/proc/$pid/comm" 2> /dev/null && return 0
  done
  return 1
}

# The launch itself: distinct hosts, one rank each.
timeout 60 mpirun --host "$A:1,$B:1" -np 2 $TWO hostname < /dev/null > hosts.log 2>&1 || {
  cat hosts.log
  echo "FAIL: mpirun cannot start on the two namespaces"
  exit 1
}
grep -qx host-a hosts.log && grep -qx host-b hosts.log || {
  cat hosts.log
  echo "FAIL: expected host names host-a and host-b"
  exit 1
}
echo "two hosts: $NS_A ($A, host-a) and $NS_B ($B, host-b) on bridge $BR ($NET.1)"

# --- 1. Equivalence with one process ---
T="--model=transformer --layers=2 --threads=1 --batch=8 --steps=3 --optimizer=sgd --lr=0.1 --momentum=0.9 --lr-schedule=constant --eval-batches=1 --eval-sentences=2 --samples=0 --log-every=1"
check() {  # check NAME HOSTS NP "FLAGS" "REFERENCE FLAGS" HOST-OF-RANK-0 HOST-OF-RANK-1 ...
  local name=$1 hosts=$2 np=$3 flags=$4 ref=$5
  shift 5
  "$TRAIN" $T $ref --metrics=$name.ref.jsonl --save=$name.ref.safetensors > $name.ref.log
  run2 $name "$hosts" "$np" $T $flags --metrics=$name.mpi.jsonl --save=$name.mpi.safetensors ||
    fail $name "the job failed"
  local r=0
  for h in "$@"; do
    on_host $name $r $h
    r=$((r + 1))
  done
  "$PY" "$COMPARE" losses $name.ref.jsonl $name.mpi.jsonl --rtol 1e-5
  "$PY" "$COMPARE" tensors $name.ref.safetensors $name.mpi.safetensors --rtol 1e-4 --atol 1e-6
  echo "ok: $name"
}
check k2 "$A:1,$B:1" 2 "--K=2 --M=2" "--K=2 --M=2" host-a host-b
check k2r2 "$A:2,$B:2" 4 "--K=2 --M=2 --replicas=2" "--K=2 --M=4" host-a host-a host-b host-b

# --- 2. A rank on host B killed mid-step ---
S="--model=transformer --layers=2 --threads=1 --batch=8 --optimizer=sgd --lr=0.1 --momentum=0.9 --lr-schedule=constant --no-final-eval --log-every=1"
"$TRAIN" $S --K=2 --M=2 --steps=5 --metrics=full.jsonl > full.log
start=$SECONDS rc=0
MPI_EXTRA="-x GPIPE_FAULT"
export GPIPE_FAULT=rank=1,step=4,micro=1,kind=kill
run2 kill "$A:1,$B:1" 2 $S --K=2 --M=2 --steps=5 --timeout=10 --save=ck.safetensors --save-every=1 || rc=$?
unset GPIPE_FAULT
MPI_EXTRA=
took=$((SECONDS - start))
[[ $rc -ne 0 ]] || fail kill "exited 0"
[[ $took -le 30 ]] || fail kill "took ${took}s"
on_host kill 1 host-b
expect kill mpirun "process rank 1 with PID [0-9]+ on node $B exited on signal 9"
expect kill rank0 "gpipe_train: rank 0: ended by SIGTERM .* in rank 0 \(stage 0 of 2, replica 0 of 1\): step 4 has run for [0-9.]+ s; waiting for gradients of stage 1 \(rank 1\) to stage 0 \(rank 0\), micro-batch 1"
waited=$(grep -Eo "step 4 has run for [0-9.]+" kill.rank0 | grep -Eo "[0-9.]+$")
"$PY" -c "import sys; sys.exit(float('$waited') >= 10)" || fail kill "rank 0 waited ${waited}s, past --timeout=10"
grep -q "saved checkpoint ck.safetensors at step 3" kill.rank0 || fail kill "no checkpoint at step 3"
echo "ok: kill (exit $rc after ${took}s; rank 0 ended ${waited}s into step 4: $(grep -Eo 'waiting for .*' kill.rank0 | tail -n 1))"
# The checkpoint of step 3 resumes on one host and in one process, as the uninterrupted run goes on.
run 2 $S --K=2 --M=2 --steps=5 --resume=ck.safetensors --metrics=resume_k2.jsonl > resume_k2.log 2>&1 || {
  cat resume_k2.log
  fail kill "resuming under mpirun failed"
}
grep -q "resumed from ck.safetensors at step 3" resume_k2.log
"$PY" "$COMPARE" losses full.jsonl resume_k2.jsonl --steps 4,5
"$TRAIN" $S --K=1 --M=2 --steps=5 --resume=ck.safetensors --metrics=resume_k1.jsonl > resume_k1.log
"$PY" "$COMPARE" losses full.jsonl resume_k1.jsonl --steps 4,5
echo "ok: kill, resumed at K=2 on one host and at K=1"

# --- 3. Host B's link cut mid-step ---
# Cut as step 5 begins, right after the save of step 4 (the next save is 4 steps away).
run2 cut "$A:1,$B:1" 2 $S --K=2 --M=2 --steps=400 --timeout=4 --watchdog=1 --save=cut.safetensors --save-every=4 &
MPIRUN_PID=$!
wait_until 60 grep -q "saved checkpoint cut.safetensors at step 4" cut.rank0 2> /dev/null ||
  fail cut "no checkpoint of step 4 within 60 s"
ip -n "$NS_B" link set eth0 down
start=$SECONDS
wait_until 40 eval '! ranks_alive' || fail cut "a rank still runs 40 s after the cut"
took=$((SECONDS - start))
ip -n "$NS_B" link set eth0 up
wait_until 60 eval '! kill -0 $MPIRUN_PID 2> /dev/null' ||
  fail cut "mpirun still runs 60 s after the link came back"
rc=0
wait $MPIRUN_PID || rc=$?
MPIRUN_PID=
[[ $rc -ne 0 ]] || fail cut "exited 0"
# 4 s of --timeout, then MPI_Abort, which gives up after 10 s when mpirun is out of reach.
[[ $took -le 20 ]] || fail cut "the ranks took ${took}s to end"
on_host cut 1 host-b
for r in 0 1; do
  expect cut rank$r "gpipe_train: rank $r: error: .*timed out after 4 s waiting for "
done
saved=$(grep -Eo "saved checkpoint cut.safetensors at step [0-9]+" cut.rank0 | tail -n 1 | grep -Eo "[0-9]+$")
"$TRAIN" $S --K=1 --M=2 --steps=$((saved + 4)) --resume=cut.safetensors --metrics=cut_resume.jsonl > cut_resume.log ||
  fail cut "the checkpoint at the path does not resume: $(cat cut_resume.log)"
at=$(grep -Eo "resumed from cut.safetensors at step [0-9]+" cut_resume.log | grep -Eo "[0-9]+$")
[[ $at -ge $saved ]] || fail cut "resumed at step $at, before the last save logged ($saved)"
"$TRAIN" $S --K=2 --M=2 --steps=$((at + 1)) --metrics=cut_full.jsonl > cut_full.log
"$PY" "$COMPARE" losses cut_full.jsonl cut_resume.jsonl --steps $((at + 1))
orphans=
for f in cut.safetensors.step*; do [[ $f == cut.safetensors.step$at-* ]] || orphans+="$f "; done
echo "ok: cut (the ranks ended ${took}s after the cut, mpirun exit $rc; checkpoint of step $at resumes${orphans:+; not in the manifest: $orphans})"
for r in 0 1; do grep -Eo "timed out after .*" cut.rank$r | sed "s/^/  rank $r: /"; done

# --- 4. A slow link ---
run2 fast "$A:1,$B:1" 2 $S --K=2 --M=2 --steps=3 --metrics=fast.jsonl || fail fast "the job failed"
if tc qdisc add dev "$VETH_B" root netem delay 20ms 2> qdisc.err; then
  tc -n "$NS_B" qdisc add dev eth0 root netem delay 20ms
  slow="netem delay 20ms each way"
elif tc qdisc add dev "$VETH_B" root tbf rate 4mbit burst 16kbit latency 1s 2>> qdisc.err; then
  tc -n "$NS_B" qdisc add dev eth0 root tbf rate 4mbit burst 16kbit latency 1s
  slow="tbf rate 4mbit each way (no netem here: $(head -n 1 qdisc.err))"
else
  echo "skipped: slow link (neither netem nor tbf: $(tr '\n' ' ' < qdisc.err))"
  slow=
fi
if [[ -n $slow ]]; then
  run2 slow "$A:1,$B:1" 2 $S --K=2 --M=2 --steps=3 --timeout=60 --watchdog=0.1 --metrics=slow.jsonl ||
    fail slow "the job failed"
  tc qdisc del dev "$VETH_B" root
  tc -n "$NS_B" qdisc del dev eth0 root
  "$PY" "$COMPARE" losses fast.jsonl slow.jsonl
  elapsed() { "$PY" -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]['elapsed'])" "$1"; }
  t_fast=$(elapsed fast.jsonl) t_slow=$(elapsed slow.jsonl)
  "$PY" -c "import sys; sys.exit(not $t_slow > $t_fast)" || fail slow "not slower: ${t_slow}s vs ${t_fast}s"
  expect slow rank0 "gpipe watchdog: rank 0 \(stage 0 of 2, replica 0 of 1\): step [0-9]+ has run for [0-9.]+ s; waiting for .*rank 1.*, micro-batch [0-9]+"
  expect slow rank1 "gpipe watchdog: rank 1 \(stage 1 of 2, replica 0 of 1\): step [0-9]+ has run for [0-9.]+ s; waiting for .*rank 0.*, micro-batch [0-9]+"
  echo "ok: slow link ($slow): 3 steps in ${t_slow}s instead of ${t_fast}s, the same losses"
  for r in 0 1; do grep -m 1 "gpipe watchdog" slow.rank$r | sed "s/^/  /"; done
fi
echo "two hosts: ok"
