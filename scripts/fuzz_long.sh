#!/usr/bin/env bash
# The file-format fuzzers of tests/fuzz for longer: ITERS seeded mutations per
# format (safetensors, token files, config.json, TOML) for each of SEEDS seeds.
# A crash by signal, a hang (past TIMEOUT s) or a loaded value that differs from
# the original outside the mutated bytes fails the run; the failing seed is
# printed so that `MT_FUZZ_SEED=<seed> MT_FUZZ_ITERS=<iters> build/tests/fuzz/fuzz_tests`
# replays it.
#   scripts/fuzz_long.sh [BUILD_DIR] [ITERS] [SEEDS] [TIMEOUT]
set -u
build=${1:-build}
iters=${2:-100000}
seeds=${3:-4}
limit=${4:-1800}
bin=$build/tests/fuzz/fuzz_tests
[ -x "$bin" ] || { echo "fuzz_long.sh: $bin not built (cmake --build $build)" >&2; exit 2; }
fail=0
for s in $(seq 1 "$seeds"); do
  seed=$((20261130 + s))
  MT_FUZZ_SEED=$seed MT_FUZZ_ITERS=$iters timeout "$limit" "$bin" >"/tmp/fuzz_long.$seed.log" 2>&1
  rc=$?
  summary=$(grep -E "mutations" "/tmp/fuzz_long.$seed.log" | tr '\n' ';')
  if [ "$rc" -eq 0 ]; then
    echo "ok   seed $seed: $summary"
  elif [ "$rc" -eq 124 ]; then
    echo "FAIL seed $seed: hung (past $limit s); log /tmp/fuzz_long.$seed.log"
    fail=1
  elif [ "$rc" -gt 128 ]; then
    echo "FAIL seed $seed: killed by signal $((rc - 128)); log /tmp/fuzz_long.$seed.log"
    fail=1
  else
    echo "FAIL seed $seed: a mutated file loaded wrong values; log /tmp/fuzz_long.$seed.log"
    fail=1
  fi
done
exit "$fail"
