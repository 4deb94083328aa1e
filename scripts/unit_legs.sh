#!/usr/bin/env bash
# The unit tests whose bounds are derived (docs/MODEL.md "Test bounds")
# under the summation orders a host can impose: OpenBLAS's AVX2 (Haswell) and
# AVX-512 (SkylakeX) sgemm kernels, and an x86-64-v3 build (256-bit vectors).
# An AVX2 host skips SkylakeX and says so. Prints, per leg and binary, pass or
# FAIL and the worst measured error as a fraction of its bound (tests/bounds.h
# logs each check under MESHTRAIN_BOUNDS_LOG).
#   [LEGS="Haswell v3 SkylakeX"] [KEEP=DIR] scripts/unit_legs.sh [BUILD]
# KEEP: a folder for each run's log (its bound-ratio lines name every check).
# BUILD: the native build folder (default build); the x86-64-v3 build goes to
# BUILD-x86-64-v3, or to $V3 (the test targets below only).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
v3=${V3:-$build-x86-64-v3}
targets=(ops_tests model_tests tp_tests tp_seed000_tests cp_tests optim_tests infer_tests infer_cp_tests dist_dp_tests pipeline_tests)
want=${LEGS:-Haswell v3 SkylakeX}  # LEGS: a subset, e.g. LEGS=v3
if [[ " $want " == *" v3 "* ]]; then
  cmake -S . -B "$v3" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMESHTRAIN_WERROR=ON -DMESHTRAIN_NATIVE=OFF \
    -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DMESHTRAIN_WITH_CUDA=OFF -DMESHTRAIN_BUILD_BENCH=OFF >/dev/null &&
    cmake --build "$v3" --target "${targets[@]}" >/dev/null || { echo "the x86-64-v3 build failed"; exit 1; }
fi
cmake --build "$build" --target "${targets[@]}" >/dev/null || { echo "the $build build failed"; exit 1; }

legs=()
[[ " $want " == *" Haswell "* ]] && legs+=("Haswell $build")
[[ " $want " == *" v3 "* ]] && legs+=("native $v3")
if [[ " $want " == *" SkylakeX "* ]]; then
  if grep -q avx512f /proc/cpuinfo; then
    legs+=("SkylakeX $build")
  else
    echo "note: this host has no AVX-512: the SkylakeX leg is skipped"
  fi
fi
# name|command (run in the build folder)
mpi="mpirun --oversubscribe --allow-run-as-root"
runs=("ops|tests/ops/ops_tests"
  "optim|tests/optim/optim_tests"
  "model|tests/model/model_tests"
  "infer|tests/infer/infer_tests"
  "pipeline|tests/pipeline/pipeline_tests"
  "tp np2|$mpi -np 2 tests/tp/tp_tests"
  "tp np4|$mpi -np 4 tests/tp/tp_tests"
  "seed000 np4|$mpi -np 4 tests/tp/tp_seed000_tests"
  "cp np2|$mpi -np 2 tests/cp/cp_tests"
  "cp np4|$mpi -np 4 tests/cp/cp_tests"
  "infer_cp np2|$mpi -np 2 tests/infer/infer_cp_tests"
  "infer_cp np3|$mpi -np 3 tests/infer/infer_cp_tests"
  "seed004 np2|$mpi -np 2 tests/dist/dist_dp_tests --gtest_filter=*Seed004.*")
failed=0
for leg in "${legs[@]}"; do
  read -r core dir <<<"$leg"
  for r in "${runs[@]}"; do
    name=${r%%|*} cmd=${r#*|}
    log=$(mktemp)
    if [ "$core" = native ]; then
      (unset OPENBLAS_CORETYPE; cd "$dir" && MESHTRAIN_BOUNDS_LOG=1 OMP_NUM_THREADS=2 timeout 300 $cmd) >"$log" 2>&1
    else
      (cd "$dir" && OPENBLAS_CORETYPE=$core MESHTRAIN_BOUNDS_LOG=1 OMP_NUM_THREADS=2 timeout 300 $cmd) >"$log" 2>&1
    fi
    rc=$?
    worst=$(grep '^bound-ratio' "$log" | awk '{print $NF, $2}' | sort -g | tail -1)
    printf '%-8s %-18s %-13s %s worst error/bound %s\n' "$core" "$(basename "$dir")" "$name" \
      "$([ $rc -eq 0 ] && echo pass || echo FAIL)" "${worst:-none logged}"
    [ $rc -eq 0 ] || { failed=1; grep -E 'FAILED|Failure' "$log" | head -5; }
    [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$log" "$KEEP/$core.${name// /_}.log"
    rm -f "$log"
  done
done
exit $failed
