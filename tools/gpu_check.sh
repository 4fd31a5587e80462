#!/usr/bin/env bash
# tools/gpu_check.sh: the CUDA backend's checks, for a machine with an NVIDIA GPU.
#
#   tools/gpu_check.sh                  build with --config=cuda (needs bazel and /usr/local/cuda),
#                                       run //tests/cuda/... and print the GEMM benchmark
#   tools/gpu_check.sh --stage DIR      on a build machine (no GPU needed): build, then pack the GPU
#                                       tests, the benchmarks (with benchmarks/gpu_compare.py,
#                                       transformer_torch.py and lm_torch.py) and the non-CUDA
#                                       libraries they link (OpenBLAS, gfortran) into
#                                       DIR/gpu_check.tgz (~55 MB, sm_90 only)
#   tools/gpu_check.sh --prebuilt DIR   on the GPU machine, without bazel: unpack and run what
#                                       --stage packed; cudart, cuBLAS, cuDNN 9 and NCCL are looked
#                                       up on the machine (/usr/local/cuda, pip's nvidia-* wheels, ...)
#
# Environment: JOBS (bazel --jobs, default: all cores), BENCH_SIZES (default "4096 8192"),
# STAGE_ARCH (--stage: the one GPU architecture whose machine code is packed, default sm_90 for
# H100/H200; the bundle must stay under 60 MiB),
# OUT (if set, a folder that receives gpu_check.log and gpu_compare.json), SKIP_BENCH (set: no
# GEMM / W2 benchmark, no side-by-side), COMPARE_SECONDS (the side-by-side's limit, default 180),
# TEST_ARGS (--prebuilt: arguments for every test binary, e.g. a Catch2 filter), BAZEL_FLAGS
# (--stage: more bazel flags, e.g. "--config=ci --config=werror" to reuse that build).
# GPIPE_CUDNN_LOG=1 is set for the tests, so the log names the cuDNN engine of every
# convolution.
# Both modes run: the CUDA tests (the op table against the CPU; the pipeline on cuda:0 at
# K = 2..4 against K = 1 for every schedule and remat mode in fp32, bf16 and fp16, with
# BatchNorm, skips, replicas, prediction, failures and a leak check; K GPUs when present;
# GPT-2 and Llama, pipeline_test's [lm] cases, a step of their own in --prebuilt: K cells against
# one under four schedules in fp32 and bf16, cuda:0 against the CPU, greedy generation);
# gpipe_train at K=2, M=4 on cuda:0 for 300 steps in fp32, bf16 and fp16 and the design
# card's --K=8 --M=32 on cuda:0 (the loss must fall and the live bytes stay flat; --stage
# packs the binary and the Transformer's catalogs); with two or more GPUs K=2 on two of
# them ("skipped: one GPU" otherwise); the GEMM benchmark and W2's step (MFU); the GPU
# side-by-side vs PyTorch (benchmarks/gpu_compare.py: W2, T6 and T12 in fp32, TF32 and bf16,
# GPT-2 124M at context 1024 in bf16 beside lm_torch.py's SDPA, GPT-2's MFU also a step alone,
# gpipe beside the machine's python3 with torch, within COMPARE_SECONDS; "skipped: no torch
# with CUDA on this machine" when python3 has none). It ends with a table: case, result,
# seconds. Both modes also run the op table and the attention, epilogue and linear tests with
# the kernels that have not yet passed on a GPU switched on (GPIPE_CUDA_PENDING=1, Note [Pending
# CUDA kernels] in ops/cuda/pending.h); --prebuilt also runs a small 16-bit attention case under
# compute-sanitizer with them and times T6 bf16's step with and without them. What --prebuilt
# cannot run (no bazel, no MPI build): the MPI/NCCL equivalence test.
# --prebuilt also checks the GPU machine's CPU first (unless SKIP_CPU is set): the bfloat16
# GEMM's AMX tiles against their emulation, a bf16 training step on them against AVX512_BF16,
# every bfloat16 GEMM case on them and the panel packers (//tests:bf16_path_test, amx_bf16_test,
# bf16_ops_test, gemm_pack_test), then `gpipe_bench gemm` at 1 thread (float32 and bfloat16 on every path
# the CPU has, with the blocking it chose and its % of the FMA peak). With CPU_W2=1 it also
# measures W2's CPU figures there, pinned to two cores: `gpipe_bench peak` and W2 against
# the machine's python3 with torch at 1 and 2 threads (about 3 minutes).
# Exit status: 0 when every build step and test passed. Without a GPU the tests print
# "SKIPPED: no CUDA device found" and pass, and gpipe_train fails ("cuda:0 is not available");
# the last line counts the failed steps.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

BINARIES=(cuda_build_test runtime_test ops_test pipeline_test gemm_bench w2_bench)
TESTS=(pipeline_test ops_test runtime_test cuda_build_test)  # the newest first: --prebuilt has a budget
# //tests: the GPU machine's CPU (AMX) in --prebuilt
CPU_TESTS=(bf16_path_test amx_bf16_test bf16_ops_test gemm_pack_test)
JOBS=${JOBS:-$(nproc)}
BENCH_SIZES=${BENCH_SIZES:-"4096 8192"}
export GPIPE_CUDNN_LOG=1

usage() { sed -n '2,37p' "$0"; }

mode=build
dir=""
case "${1:-}" in
  --stage | --prebuilt)
    mode=${1#--}
    dir=${2:?"$1 needs a folder"}
    ;;
  -h | --help) usage; exit 0 ;;
  "") ;;
  *) usage; exit 2 ;;
esac

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee "$OUT/gpu_check.log") 2>&1
fi

echo "== gpu_check ($mode) on $(hostname), $(date -u +%FT%TZ)"
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "nvidia-smi: not available"

failed=0
results=()   # "name|result|seconds", printed as the closing table
run_step() {  # run_step NAME CMD...: runs CMD, counts a failure, times it
  local name=$1 t0=$SECONDS
  shift
  if [ -n "$BUDGET" ] && [ "$(budget_left)" -le 5 ]; then
    skip_step "$name" "skipped: budget spent"
    return 0
  fi
  echo "== $name"
  "$@"
  local rc=$?
  local result=passed
  if [ "$rc" -ne 0 ]; then
    echo "!! failed (exit $rc): $*"
    failed=$((failed + 1))
    result="FAILED (exit $rc)"
    [ "$rc" -eq 124 ] && result="FAILED (timed out)"
  fi
  results+=("$name|$result|$((SECONDS - t0))")
  return 0
}
skip_step() {  # skip_step NAME WHY
  echo "== $1: $2"
  results+=("$1|$2|0")
}
print_table() {
  echo
  echo "== gpu_check results ($(nvidia-smi -L 2>/dev/null | wc -l) GPU(s), $((SECONDS - START)) s in all)"
  printf '%-52s %-24s %8s\n' case result seconds
  local row name result secs
  for row in "${results[@]}"; do
    IFS='|' read -r name result secs <<<"$row"
    printf '%-52s %-24s %8s\n' "$name" "$result" "$secs"
  done
}
# The pending kernels' tests (Note [Pending CUDA kernels] in ops/cuda/pending.h), one step
# per family so the table says which family passed: "name|seconds at most (--prebuilt)|
# ops_test filter". The op table runs every family's small cases. The caps are guesses, not
# measured: with the sanitizer and T6 steps below they come to 7 minutes at most.
PENDING_GROUPS=(
  "op table|60|cuda ops: every op-table case*"
  "flash attention (tensor cores, dropout)|60|cuda attention*"
  "epilogue pack kernels|30|cuda bias_activation*"
  "cuBLASLt linear|45|cuda linear*"
)
START=$SECONDS
BUDGET=""  # --prebuilt: seconds for the whole check (GPU_CHECK_BUDGET, default 480)
budget_left() { echo $((BUDGET - (SECONDS - START))); }
# limited SECONDS CMD...: CMD under `timeout`, at most SECONDS and never past the budget. A
# crash (a signal) is run again under cuda-gdb or gdb, when there, for its backtrace.
limited() {
  local limit=$1
  shift
  if [ -n "$BUDGET" ]; then
    local left
    left=$(budget_left)
    [ "$left" -lt "$limit" ] && limit=$left
    [ "$limit" -lt 1 ] && limit=1
  fi
  timeout "$limit" "$@"
  local rc=$?
  if [ "$rc" -gt 128 ] && [ "$rc" -ne 137 ]; then
    local dbg
    dbg=$(command -v cuda-gdb || command -v gdb || true)
    if [ -n "$dbg" ]; then
      echo "!! $1 died with signal $((rc - 128)); its backtrace under $dbg:"
      timeout 120 "$dbg" -batch -ex run -ex bt -ex "info threads" --args "$@" 2>&1 | tail -80
    fi
  fi
  return "$rc"
}
gpu_count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

# train_check LOG CMD...: CMD is gpipe_train (bazel run, or the staged binary) with its flags;
# it must exit 0, the logged loss must fall, and the devices' live bytes between steps
# ("live N MB") must not grow after the second report (no leak).
train_check() {
  local log=$1
  shift
  "$@" | tee "$log" || return 1
  awk '/^step /{for(i=1;i<NF;i++) if($i=="loss") l[n++]=$(i+1)} END{exit !(n>=2 && l[n-1]<l[0])}' \
    "$log" || { echo "!! the loss did not fall ($log)"; return 1; }
  awk '/^step /{for(i=1;i<NF;i++) if($i=="live") v[n++]=$(i+1)} END{exit !(n>=2 && v[n-1]<=v[1]+0.5)}' \
    "$log" || { echo "!! the live bytes grew from step to step ($log)"; return 1; }
}

# train_runs CMD...: CMD runs gpipe_train. The Transformer at K=2, M=4 on cuda:0 for 300 steps
# in fp32, bf16 and fp16; the design card's command (K=8, M=32, every cell on cuda:0) for
# 60 steps; with two or more GPUs, K=2 on cuda:0,cuda:1.
train_runs() {
  local precision
  for precision in fp32 bf16 fp16; do
    run_step "gpipe_train K=2 M=4 on cuda:0 ($precision)" train_check \
      "/tmp/gpu_check_train_$precision.log" "$@" --model=transformer --K=2 --M=4 --devices=cuda:0 \
      --precision="$precision" --steps=300 --log-every=50 --eval-sentences=20
  done
  run_step "gpipe_train --K=8 --M=32 on cuda:0 (design card)" train_check \
    /tmp/gpu_check_design_card.log "$@" --model=transformer --K=8 --M=32 --devices=cuda:0 \
    --steps=60 --log-every=20 --eval-sentences=10
  if [ "$gpu_count" -ge 2 ]; then
    run_step "gpipe_train K=2 on cuda:0,cuda:1 (bf16)" train_check /tmp/gpu_check_two_gpus.log \
      "$@" --model=transformer --K=2 --M=4 --devices=cuda:0,cuda:1 --precision=bf16 --steps=300 \
      --log-every=50 --eval-sentences=20
  else
    skip_step "gpipe_train K=2 on cuda:0,cuda:1" "skipped: one GPU"
  fi
}

# side_by_side W2_BENCH BENCH_DIR: BENCH_DIR/gpu_compare.py runs gpipe's w2_bench and PyTorch
# (python3, with LD_LIBRARY_PATH as it was before --prebuilt added the staged libraries) on the
# same shapes, at most COMPARE_SECONDS and never past the budget.
side_by_side() {
  local name="GPU side-by-side vs PyTorch" secs=${COMPARE_SECONDS:-180}
  local torch_ld=${LD_LIBRARY_PATH:-}
  local torch_env=(env -u LD_LIBRARY_PATH)
  [ -n "${libdirs:-}" ] && torch_ld=${torch_ld#"$libdirs"} && torch_ld=${torch_ld#:}
  [ -n "$torch_ld" ] && torch_env=(env LD_LIBRARY_PATH="$torch_ld")
  if ! timeout 120 "${torch_env[@]}" python3 -c \
    'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    skip_step "$name" "skipped: no torch with CUDA on this machine"
    return 0
  fi
  if [ -n "$BUDGET" ] && [ "$(budget_left)" -lt $((secs + 10)) ]; then
    secs=$(($(budget_left) - 10))
    if [ "$secs" -lt 20 ]; then
      skip_step "$name" "skipped: budget spent"
      return 0
    fi
  fi
  run_step "$name" limited $((secs + 10)) "${torch_env[@]}" python3 "$2/gpu_compare.py" \
    --w2-bench "$1" --python python3 --budget-seconds "$secs" \
    --gpipe-ld-library-path "${libdirs:-}" ${OUT:+--json-out "$OUT/gpu_compare.json"}
}

case "$mode" in
  build)
    run_step "build --config=cuda //..." bazel build --config=cuda --jobs="$JOBS" //...
    run_step "test //tests/cuda/..." bazel test --config=cuda --jobs="$JOBS" --test_output=all \
      --test_env=GPIPE_CUDNN_LOG=1 //tests/cuda/...
    for group in "${PENDING_GROUPS[@]}"; do
      IFS='|' read -r name _ filter <<<"$group"
      run_step "pending: $name" bazel test --config=cuda --test_output=errors \
        --test_env=GPIPE_CUDA_PENDING=1 --test_arg="$filter" //tests/cuda:ops_test
    done
    # Multi-process stages on the GPU (NCCL between ranks; needs OpenMPI on the GPU machine).
    run_step "MPI equivalence on cuda:0" bazel test --config=cuda --test_output=errors \
      --test_env=GPIPE_TEST_DEVICES=cuda:0 //tests/mpi:equivalence_test
    train_runs bazel run --config=cuda //tools:gpipe_train --
    if [ -z "${SKIP_BENCH:-}" ]; then
      # shellcheck disable=SC2086
      run_step "gemm benchmark" bazel run --config=cuda //tests/cuda:gemm_bench -- $BENCH_SIZES
      run_step "W2 step (MFU)" bazel run --config=cuda //tests/cuda:w2_bench
      run_step "GPT-2 124M bf16 step (MFU)" bazel run --config=cuda //tests/cuda:w2_bench -- \
        --only=GPT2:bf16
      side_by_side bazel-bin/tests/cuda/w2_bench benchmarks
    else
      skip_step "gemm benchmark, W2 step, side-by-side" "skipped: SKIP_BENCH is set"
    fi
    ;;

  stage)
    run_step "build --config=cuda //tests/cuda/... //tools:gpipe_train (and the CPU checks)" \
      bazel build --config=cuda --jobs="$JOBS" --define=cuda_arch="${STAGE_ARCH:-sm_90}" \
      ${BAZEL_FLAGS:-} //tests/cuda/... \
      //tools:gpipe_train "${CPU_TESTS[@]/#/\/\/tests:}"
    # gpipe_bench measures the CPU only: built without CUDA, it leaves the kernels' 20 MB out.
    run_step "build //tools:gpipe_bench (CPU)" bazel build --jobs="$JOBS" ${BAZEL_FLAGS:-} \
      //tools:gpipe_bench
    pack=$(mktemp -d)
    mkdir -p "$pack/gpu_check/lib" "$dir"
    for b in "${BINARIES[@]}" gpipe_train gpipe_bench "${CPU_TESTS[@]}"; do
      src=bazel-bin/tests/cuda/$b
      case "$b" in gpipe_train | gpipe_bench) src=bazel-bin/tools/$b ;; esac
      for t in "${CPU_TESTS[@]}"; do [ "$b" = "$t" ] && src=bazel-bin/tests/$b; done
      cp -f "$src" "$pack/gpu_check/$b" && chmod u+w "$pack/gpu_check/$b" &&
        strip --strip-debug "$pack/gpu_check/$b" || failed=$((failed + 1))
    done
    # The Transformer's data (docs/DATA.md): the iso-codes catalogs of its default languages.
    for mo in /usr/share/locale/{fr,de,es,it,nl,pl,pt,ru,sv,uk}/LC_MESSAGES/iso_*.mo; do
      rel=${mo#/usr/share/locale/}
      mkdir -p "$pack/gpu_check/locale/$(dirname "$rel")" && cp -f "$mo" "$pack/gpu_check/locale/$rel" ||
        failed=$((failed + 1))
    done
    # Libraries from Debian that a GPU image may lack; CUDA's own are found there at run time.
    for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
      path=$(ldd "$pack/gpu_check/ops_test" | awk -v l="$lib" '$1 == l { print $3 }')
      [ -n "$path" ] && cp -fL "$path" "$pack/gpu_check/lib/$lib"
    done
    # The side-by-side's Python (run by the GPU machine's python3 with its torch).
    mkdir -p "$pack/gpu_check/bench" &&
      cp -f benchmarks/gpu_compare.py benchmarks/transformer_torch.py benchmarks/lm_torch.py \
        "$pack/gpu_check/bench/" ||
      failed=$((failed + 1))
    tar czf "$dir/gpu_check.tgz" -C "$pack" gpu_check || failed=$((failed + 1))
    rm -rf "$pack"
    ls -la "$dir/gpu_check.tgz"
    # The device tool carries at most 64 MiB with the checkout.
    if [ "$(stat -c %s "$dir/gpu_check.tgz")" -gt $((60 << 20)) ]; then
      echo "!! $dir/gpu_check.tgz is over 60 MiB: too large to carry to the GPU machine"
      failed=$((failed + 1))
    fi
    echo "staged $dir/gpu_check.tgz; on the GPU machine: tools/gpu_check.sh --prebuilt $dir"
    ;;

  prebuilt)
    unpacked=$(mktemp -d)
    tar xzf "$dir/gpu_check.tgz" -C "$unpacked" || { echo "!! cannot unpack $dir/gpu_check.tgz"; exit 1; }
    dir="$unpacked/gpu_check"
    # LD_LIBRARY_PATH: the staged libraries, then wherever the machine keeps CUDA's.
    libdirs="$dir/lib"
    for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libnvrtc.so.13; do
      found=$(find /usr/local/cuda/ /usr/lib /usr/local/lib /opt /root/.local -name "$lib" 2>/dev/null | head -1)
      [ -z "$found" ] && found=$(python3 - "$lib" 2>/dev/null <<'EOF'
import glob, site, sys
for p in site.getsitepackages():  # pip's nvidia-* wheels (cuDNN, NCCL, cuBLAS, ...)
    hits = glob.glob(p + "/nvidia/**/" + sys.argv[1], recursive=True)
    if hits:
        print(hits[0])
        break
EOF
)
      [ -z "$found" ] && found=$(find / -xdev -name "$lib" -not -path '/proc/*' 2>/dev/null | head -1)
      if [ -n "$found" ]; then
        libdirs="$libdirs:$(dirname "$found")"
        echo "found $lib: $found"
      else
        echo "!! $lib not found on this machine"
      fi
    done
    export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if ldd "$dir/ops_test" | grep "not found"; then failed=$((failed + 1)); fi
    BUDGET=${GPU_CHECK_BUDGET:-480}
    if [ -z "${SKIP_CPU:-}" ] && [ -x "$dir/gpipe_bench" ]; then
      lscpu | grep -E "Model name|Flags" | sed 's/^/# /' | cut -c1-400
      for t in "${CPU_TESTS[@]}"; do
        run_step "CPU: $t" limited 60 "$dir/$t" --durations yes
      done
      run_step "CPU: gpipe_bench gemm, 1 thread" limited 120 "$dir/gpipe_bench" gemm --threads 1 \
        --sizes 1024 2048 --no-numpy --no-torch --min-seconds 0.5 --shape-min-seconds 0.3 --cold
      if [ -n "${CPU_W2:-}" ]; then  # W2 on this CPU: two cores, as shared/BENCHMARKS.md's table
        run_step "CPU: gpipe_bench peak (cores 0-1)" limited 60 taskset -c 0,1 \
          "$dir/gpipe_bench" peak --threads 1,2
        run_step "CPU: W2 vs PyTorch, 1 and 2 threads (cores 0-1)" limited 240 taskset -c 0,1 \
          "$dir/gpipe_bench" transformer --threads 1,2 --warmup 2 --steps 10 --max-seconds 20 \
          --python python3
      fi
    fi
    # Kernels not yet passed on a GPU (Note [Pending CUDA kernels] in ops/cuda/pending.h:
    # the tensor-core attention, the epilogue's row kernels, the cuBLASLt linear) are off by
    # default until they pass here: the op table and the fused attention, epilogue and linear
    # tests with them switched on, a
    # small case under compute-sanitizer, then T6 bf16's step without and with them.
    # They come first (the newest), within the same budget; what is left of it after them
    # runs the validated suite, so give the whole check more (GPU_CHECK_BUDGET) or SKIP_CPU=1.
    for group in "${PENDING_GROUPS[@]}"; do
      IFS='|' read -r name cap filter <<<"$group"
      run_step "pending: $name" limited "$cap" env GPIPE_CUDA_PENDING=1 "$dir/ops_test" "$filter"
    done
    if command -v compute-sanitizer >/dev/null; then  # shared-memory races and bounds
      for tool in racecheck memcheck; do
        run_step "pending kernels under compute-sanitizer --tool $tool" limited 60 \
          env GPIPE_CUDA_PENDING=1 compute-sanitizer --tool "$tool" --error-exitcode 1 \
          "$dir/ops_test" "cuda attention: small 16-bit case"
      done
    else
      skip_step "pending kernels under compute-sanitizer" "skipped: no compute-sanitizer"
    fi
    if [ -z "${SKIP_BENCH:-}" ]; then
      run_step "T6 bf16 step, validated kernels" limited 60 "$dir/w2_bench" --only=T6:bf16
      run_step "T6 bf16 step, with the pending kernels" limited 60 env GPIPE_CUDA_PENDING=1 \
        "$dir/w2_bench" --only=T6:bf16
    fi
    # The language models' cases (pipeline_test's [lm]) first, a row of their own; then
    # pipeline_test without them (unless TEST_ARGS names a filter).
    run_step "pipeline_test [lm]: GPT-2 and Llama on cuda:0" limited 120 "$dir/pipeline_test" "[lm]"
    for t in "${TESTS[@]}"; do
      if [ "$t" = pipeline_test ] && [ -z "${TEST_ARGS:-}" ]; then
        run_step "$t (all but [lm])" limited 240 "$dir/$t" "~[lm]"
        continue
      fi
      # shellcheck disable=SC2086
      run_step "$t" limited 240 "$dir/$t" ${TEST_ARGS:-}
    done
    train_runs limited 120 "$dir/gpipe_train" --data-dir="$dir/locale"
    if [ -z "${SKIP_BENCH:-}" ]; then
      # shellcheck disable=SC2086
      run_step "gemm benchmark" limited 90 "$dir/gemm_bench" $BENCH_SIZES
      run_step "W2 step (MFU)" limited 90 "$dir/w2_bench"
      run_step "GPT-2 124M bf16 step (MFU)" limited 90 "$dir/w2_bench" --only=GPT2:bf16
      bench=$dir/bench
      [ -f "$bench/gpu_compare.py" ] || bench=benchmarks  # staged before the side-by-side existed
      side_by_side "$dir/w2_bench" "$bench"
    else
      skip_step "gemm benchmark, W2 step, side-by-side" "skipped: SKIP_BENCH is set"
    fi
    # PROFILE=T6:bf16: Nsight Compute's per-kernel time summary of that w2_bench run
    # (kernels PROFILE_SKIP.. +PROFILE_COUNT), into $OUT/ncu_summary.txt when OUT is set.
    if [ -n "${PROFILE:-}" ]; then
      if command -v ncu >/dev/null; then
        run_step "ncu per-kernel summary ($PROFILE)" limited 200 ncu --clock-control none \
          --metrics gpu__time_duration.sum --launch-skip "${PROFILE_SKIP:-6000}" \
          --launch-count "${PROFILE_COUNT:-2000}" --print-summary per-kernel \
          --log-file "${OUT:-/tmp}/ncu_summary.txt" "$dir/w2_bench" --only="$PROFILE"
      else
        skip_step "ncu per-kernel summary" "skipped: no ncu on this machine"
      fi
    fi
    echo "not run by --prebuilt (no bazel, no OpenMPI build here): //tests/mpi:equivalence_test" \
      "on cuda:0 (NCCL between ranks); run tools/gpu_check.sh for it"
    ;;
esac

print_table
echo "== gpu_check: $failed step(s) failed"
[ "$failed" -eq 0 ]
