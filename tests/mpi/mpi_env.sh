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
