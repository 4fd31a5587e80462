#!/usr/bin/env bash
# gpipe_plan as a user types it: a small Transformer planned on 2 devices
# under a memory limit (the best plans, the rejected ones, the flags for
# gpipe_train, the predicted timeline), and bad input: each a one-line
# message and a non-zero exit, never a crash.
set -uo pipefail
PLAN="$1"
fail=0
tiny=(--layers=1 --dim=16 --ffn=32 --heads=2 --max-len=8)
out="$TEST_TMPDIR/plan.log"
if ! timeout 300 "$PLAN" --model=transformer "${tiny[@]}" --K=2 --batch=8 --memory=1GB \
    --top=3 --svg="$TEST_TMPDIR/best.svg" > "$out" 2>&1; then
  echo "FAILED: the plan exited non-zero:"; cat "$out"; fail=1
fi
for want in "# costs: profiled on cpu:0 at micro-batches of 1, 2, 4, 8 examples" "rank  plan" \
            "   1  " "   3  " "rejected (" "# gpipe_train flags: --K=2 --M=" \
            "plan 1's memory by category" "# wrote the best plan's predicted timeline"; do
  grep -qF -- "$want" "$out" || { echo "FAILED: no '$want' in the plan:"; cat "$out"; fail=1; }
done
grep -q "<svg" "$TEST_TMPDIR/best.svg" || { echo "FAILED: no SVG written"; fail=1; }
# bad input: expected exit status, then the message
check() {
  local rc_want="$1" msg="$2"; shift 2
  local log="$TEST_TMPDIR/bad.log"
  timeout 120 "$PLAN" "$@" > "$log" 2>&1
  local rc=$?
  if [ "$rc" != "$rc_want" ] || ! grep -qF -- "$msg" "$log"; then
    echo "FAILED: gpipe_plan $*: exit $rc (want $rc_want), output:"; cat "$log"
    echo "(wanted: $msg)"; fail=1
  fi
}
check 2 "--model: required (transformer, gpt2, llama, amoebanet, amoebanet-b, resnet or unet)" --K=2
check 2 "--model: foo not in {transformer,gpt2,llama,amoebanet,amoebanet-b,resnet,unet}" --model=foo
check 1 "--K: K = 40 devices but the transformer has 8 layers" \
  --model=transformer "${tiny[@]}" --K=40
check 1 "is below one device's share of the parameters, gradients and optimizer state alone" \
  --model=transformer "${tiny[@]}" --K=2 --memory=1kB
check 2 "--memory: 'lots' is not a memory size (expected e.g. 16GB, 512MiB, 8e9)" \
  --model=transformer "${tiny[@]}" --memory=lots
check 2 "--M: M = 64 for --batch=8 (expected 1 <= M <= N)" \
  --model=transformer "${tiny[@]}" --batch=8 --M=64
check 2 "--link: 'soon' is not a latency in seconds" \
  --model=transformer "${tiny[@]}" --link=10GB,soon
check 2 "--bogus" --model=transformer --bogus=1
check 2 "--devices was renamed: use --K" --model=transformer --devices=2
check 2 "--micro-batches was renamed: use --M" --model=transformer --micro-batches=2
check 2 "--batch: expected a positive number, got 0" --model=transformer --batch=0
check 2 "--paper takes no model flags; not expected: --bogus" --paper --bogus
check 2 "--schedules: unknown schedule 'zz'" --model=transformer "${tiny[@]}" --schedules=zz
check 2 "--remat: " --model=transformer "${tiny[@]}" --remat=sometimes
# a model too large to build here for profiling: refused at once, with the figure
check 1 "gpipe_plan profiles the model by building it: 31899.65 GB of float32 weights" \
  --model=transformer --layers=100000 --dim=1024 --ffn=16384 --heads=16 --K=1
# a given link is used and said
timeout 300 "$PLAN" --model=transformer "${tiny[@]}" --K=2 --batch=8 --link=pcie \
  > "$TEST_TMPDIR/pcie.log" 2>&1
grep -qF "link 10.0 us + 25.00 GB/s" "$TEST_TMPDIR/pcie.log" ||
  { echo "FAILED: --link=pcie not used:"; cat "$TEST_TMPDIR/pcie.log"; fail=1; }
# --precision=bf16: the layers are profiled with 16-bit activations (a
# smaller activation peak than fp32's for the same plan: one device, so the
# cuts cannot differ) and the flags say it
act_bytes() {  # the activations-at-their-peak figure of device 0 of plan 1, in bytes
  awk '/^  device 0:/ { v = $9; u = $10; sub(",", "", u)
    print v * (u == "kB" ? 1e3 : u == "MB" ? 1e6 : u == "GB" ? 1e9 : 1); exit }' "$1"
}
for p in fp32 bf16; do
  timeout 300 "$PLAN" --model=transformer --layers=1 --dim=64 --ffn=128 --heads=2 --max-len=16 \
    --K=1 --batch=8 --M=2 --schedules=gpipe --remat=never --top=1 \
    --precision=$p > "$TEST_TMPDIR/$p.log" 2>&1 || { echo "FAILED: --precision=$p:"; cat "$TEST_TMPDIR/$p.log"; fail=1; }
done
grep -qF -- "--precision=bf16 --balance=" "$TEST_TMPDIR/bf16.log" ||
  { echo "FAILED: the bf16 plan's gpipe_train flags omit --precision=bf16:"; cat "$TEST_TMPDIR/bf16.log"; fail=1; }
a32=$(act_bytes "$TEST_TMPDIR/fp32.log"); a16=$(act_bytes "$TEST_TMPDIR/bf16.log")
awk -v a="$a32" -v b="$a16" 'BEGIN { exit !(a > 0 && b > 0 && b < 0.8 * a) }' ||
  { echo "FAILED: bf16 activation peak $a16 bytes is not below 0.8 x fp32's $a32"; fail=1; }
exit $fail
