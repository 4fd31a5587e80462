#!/bin/bash
# Note [CPU ISA kernels] (ops/cpu/isa/abi.h), checked on the built objects: a
# library compiled for one ISA level defines no global or weak symbol outside
# that level's own namespaces, and has no static initialiser. A shared inline or template function
# instantiated there would be a weak symbol the linker may pick for ordinary
# code too, which then runs AVX-512 (or AVX2) instructions on a CPU without
# them. Arguments: the libraries (a .a each), named lib<target>.a, whose
# target name ends in the level (cpu_kernels_avx512, cpu_gemm_avx2, ...) or
# in bf16 (cpu_gemm_avx512_bf16, cpu_gemm_amx_bf16: instructions beyond the
# levels, whose only global is their kernel set).
set -euo pipefail

checked=0
failed=0
for lib in "$@"; do
  case "$lib" in *.a) ;; *) continue ;; esac
  base=$(basename "$lib" .a)
  level=${base##*_}
  case "$level" in avx512 | avx2 | baseline | bf16) ;; *)
    echo "FAIL: cannot tell the ISA level of $lib"
    exit 1
    ;;
  esac
  # Global and weak definitions (nm letters T W V u D R B i); locals are fine.
  defs=$(nm -C --defined-only "$lib" | awk '$2 ~ /^[TWVuDRBi]$/ { $1 = ""; $2 = ""; sub(/^  /, ""); print }')
  count=$(printf '%s\n' "$defs" | grep -c . || true)
  if [ "$count" -eq 0 ]; then
    echo "FAIL: $lib defines no global symbol at all (was it built for this test?)"
    failed=1
    continue
  fi
  # A sanitizer build (--config=asan, tsan) adds its own globals and module
  # constructors; the shipped build has neither, and is checked as it is.
  sanitized=0
  syms=$(nm "$lib")
  if grep -q -e ' U __asan_' -e ' U __tsan_' <<<"$syms"; then sanitized=1; fi
  bad=$(printf '%s\n' "$defs" | grep -v -e "gpipe::ops::cpu::isa_${level}::" -e "gpipe_eigen_${level}::" \
    -e "^gpipe::ops::cpu::packed::k[A-Za-z0-9]*Kernels$" -e "^DW.ref.__gxx_personality_v0$" \
    -e "^__odr_asan" | grep . || true)
  if [ -n "$bad" ]; then
    echo "FAIL: $lib ($level) defines symbols outside its ISA namespaces:"
    printf '  %s\n' "$bad" | head -20
    failed=1
  else
    echo "ok: $lib ($level): $count global definitions, all in its namespaces"
  fi
  # No static initialiser either: it would run at start-up on any CPU.
  sections=$(objdump -h "$lib")
  if [ "$sanitized" = 0 ] && grep -q -e '\.init_array' -e '\.ctors' <<<"$sections"; then
    echo "FAIL: $lib ($level) has static initialisers (.init_array), which run on every CPU:"
    nm -C "$lib" | grep -i '_GLOBAL__sub_I' | head -5
    failed=1
  fi
  checked=$((checked + 1))
done
if [ "$checked" -lt 11 ]; then
  echo "FAIL: expected the 9 per-ISA libraries and the 2 bfloat16 ones, checked $checked"
  exit 1
fi
exit "$failed"
