#!/usr/bin/env bash
# tools/setup.sh: install the Debian packages gpipe builds with (idempotent, offline-friendly).
# Fast no-op when everything is present; otherwise apt-get update + install of the missing ones.
# Prints one line saying what it did.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap     # Bazel 4.2.3 (/usr/bin/bazel)
  libeigen3-dev       # @eigen
  catch2              # @catch2 (header + prebuilt libCatch2WithMain.a)
  libcli11-dev        # @cli11
  zlib1g-dev          # //third_party:zlib
  libpng-dev          # //third_party:png (data/image_decode)
  libjpeg62-turbo-dev # //third_party:jpeg (libjpeg-turbo, SIMD JPEG decoding)
  libopenblas-dev     # //third_party:openblas (cblas.h)
  libsentencepiece-dev  # //third_party:sentencepiece (SentencePiece .model tokenizers, training)
  clang-format        # tools/format_check.sh (CI): the tree follows .clang-format
  clang               # tools/fuzz.sh (CI): the libFuzzer harnesses of tests/fuzz
  libclang-rt-14-dev  # libFuzzer, ASan and UBSan runtimes for clang 14
  python3-numpy       # /usr/bin/python3 helper scripts (benchmarks, tests/mpi/compare_runs.py)
  libopenmpi-dev      # @mpi (runtime/mpi: one process per stage, replicas)
  openmpi-bin         # mpirun (tests/mpi, multi-process gpipe_train)
  dataset-fashion-mnist
  iso-codes
  fortunes            # the language models' default corpus (/usr/share/games/fortunes)
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

SUDO=()
[ "$(id -u)" -eq 0 ] || SUDO=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq >/dev/null
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null
echo "setup: installed ${missing[*]}"
# @mpi is generated from mpicxx; a workspace built before OpenMPI was
# installed holds an empty one until it is fetched again.
if [[ " ${missing[*]} " == *" libopenmpi-dev "* ]]; then
  (cd "$(dirname "$0")/.." && bazel sync --only=mpi >/dev/null 2>&1) || true
fi
