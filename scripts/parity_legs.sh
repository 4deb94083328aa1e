#!/usr/bin/env bash
# The distributed parity suites under the summation orders a host can impose
# (docs/PARALLELISM.md "How the bounds are derived"): OpenBLAS's AVX2 (Haswell)
# and AVX-512 (SkylakeX) sgemm kernels, and a build for x86-64-v3 (256-bit
# vectors, so `omp simd` reductions sum in another order than -march=native on
# an AVX-512 host). An AVX2 host runs the Haswell and x86-64-v3 legs and says
# that it skips SkylakeX.
#   scripts/parity_legs.sh [BUILD] [SUITE...]
# BUILD: the native build folder (default build); SUITE: tests/dist/*.sh names
# (default: the suites whose bounds are derived). The x86-64-v3 build goes to
# BUILD-x86-64-v3 (meshtrain only, about as long as a first build).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
suites=("$@")
[ ${#suites[@]} -eq 0 ] && suites=(parity parity_pp parity_tp parity_cp tp2d checkpoint_reshard parity_optim)
v3=$build-x86-64-v3
cmake -S . -B "$v3" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMESHTRAIN_WERROR=ON -DMESHTRAIN_NATIVE=OFF \
  -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DMESHTRAIN_WITH_CUDA=OFF -DMESHTRAIN_BUILD_BENCH=OFF >/dev/null &&
  cmake --build "$v3" --target meshtrain >/dev/null || { echo "the x86-64-v3 build failed"; exit 1; }

legs=("Haswell $build" "native $v3")
if grep -q avx512f /proc/cpuinfo; then
  legs+=("SkylakeX $build")
else
  echo "note: this host has no AVX-512: the SkylakeX leg is skipped"
fi
failed=0
for leg in "${legs[@]}"; do
  read -r core dir <<<"$leg"
  for suite in "${suites[@]}"; do
    log=$(mktemp)
    if [ "$core" = native ]; then
      (unset OPENBLAS_CORETYPE; bash "tests/dist/$suite.sh" "$dir/meshtrain") >"$log" 2>&1
    else
      OPENBLAS_CORETYPE=$core bash "tests/dist/$suite.sh" "$dir/meshtrain" >"$log" 2>&1
    fi
    rc=$?
    worst=$(grep -o 'grad_norm: [0-9]* steps, worst relative difference [0-9.e+-]*' "$log" | awk '{print $7}' |
      sort -g | tail -1)
    printf '%-8s %-22s %-20s %s (worst grad_norm difference %s)\n' "$core" "$(basename "$dir")" "$suite" \
      "$([ $rc -eq 0 ] && echo pass || echo FAIL)" "${worst:-none}"
    [ $rc -eq 0 ] || { failed=1; grep FAIL "$log" | head -5; }
    rm -f "$log"
  done
done
exit $failed
