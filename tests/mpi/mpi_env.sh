# Sourced by the MPI tests: mpirun as root, more ranks than cores, no tty.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1   # CI runs as root
export OMPI_MCA_rmaps_base_oversubscribe=1                         # 4 ranks on 2 cores
export OMPI_MCA_btl_vader_single_copy_mechanism=none               # containers without ptrace rights
export OMPI_MCA_plm=isolated                                       # one host: no ssh needed
export PMIX_MCA_gds=hash                                           # PMIx without its shared-memory store (fails under concurrent jobs)
TRAIN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
COMPARE="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
PY=/usr/bin/python3  # Debian's, with python3-numpy from tools/setup.sh
WORK="${TEST_TMPDIR:-$(mktemp -d)}"
cd "$WORK"
run() {  # run NP ARGS...: mpirun NP ranks of gpipe_train
  local np=$1
  shift
  timeout 300 mpirun -np "$np" "$TRAIN" "$@" < /dev/null
}
# Under AddressSanitizer (--config=asan): OpenMPI keeps allocations alive past
# MPI_Finalize by design (ompi_op_base_op_select, ompi_comm_set_nb, PMIx), so
# leak checking at exit would fail every rank. gpipe's own code is still
# leak-checked by the in-process tests (tests/pipeline/distributed_test.cc
# runs the same distributed pipeline with threads as ranks).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
