#!/usr/bin/env bash
# `make bench-dist`: data parallelism and ZeRO 0–3 across real processes, measured
# the way docs/BENCHMARKS.md "Definitions" prescribes: side by side in one run, as ratios
# (docs/BENCHMARKS.md, "Data parallel and ZeRO").
#
#   bash scripts/bench_dist.sh BUILD_DIR
#
# 1. Scaling: dp = 2 (2 processes × 1 thread) against 1 process × 2 threads, same
#    global batch (configs/bench.toml: 8 × 256), tokens/s ratio; overlap share of
#    the gradient all-reduce (zero 0).
# 2. ZeRO-3 against ZeRO-0 step time at dp = 2 (1 thread per rank).
#    Runs 1 and 2 are interleaved — single, dp2 zero 0, dp2 zero 3, single, … —
#    so that load from other processes falls on both sides of each ratio; each
#    run's figure is the median of its steps after the first SKIP, and the best
#    (fastest) median of each kind is kept.
# 3. Memory at dp = 4 (microbatch 2): rank 0's peak parameter, gradient and
#    optimizer bytes for zero 0/1/2/3 against the analytic expectation computed
#    from the model shape (bench/dist/summarise.py).
# Environment: BENCH_DIST_CONFIG (configs/bench.toml), BENCH_DIST_STEPS (6),
# BENCH_DIST_SKIP (2), BENCH_DIST_REPEATS (2), BENCH_DIST_MEM_STEPS (2; 0 skips part 3),
# BENCH_DIST_OUT (a temporary folder: keeps every run's metrics and log).
set -euo pipefail

BUILD=${1:-build}
CONFIG=${BENCH_DIST_CONFIG:-configs/bench.toml}
STEPS=${BENCH_DIST_STEPS:-6}
SKIP=${BENCH_DIST_SKIP:-2}
REPEATS=${BENCH_DIST_REPEATS:-2}
MEM_STEPS=${BENCH_DIST_MEM_STEPS:-2}

cd "$(dirname "$0")/.."
BIN="$BUILD/meshtrain"
if [[ ! -x "$BIN" ]]; then
  echo "bench_dist.sh: $BIN not found: build first (make build, or cmake --build $BUILD --target meshtrain)" >&2
  exit 1
fi
command -v mpirun >/dev/null || { echo "bench_dist.sh: mpirun not found (Open MPI)" >&2; exit 1; }
PY=$(command -v python3) || { echo "bench_dist.sh: python3 not found" >&2; exit 1; }
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --mca btl self,vader)
OUT=${BENCH_DIST_OUT:-$(mktemp -d /tmp/meshtrain-bench-dist.XXXXXX)}
mkdir -p "$OUT"

# The token files of the reference config.
DATA_DIR=$("$PY" "bench/dist/summarise.py" data-dir "$CONFIG")
if [[ ! -f "$DATA_DIR/train.bin" || ! -f "$DATA_DIR/val.bin" ]]; then
  echo "== $DATA_DIR/{train,val}.bin missing: $BIN prepare --out $DATA_DIR"
  "$BIN" prepare --out "$DATA_DIR"
fi

BATCH=$("$PY" bench/dist/summarise.py batch "$CONFIG")
echo "== meshtrain bench-dist: $CONFIG, $STEPS steps per run (median of steps $SKIP..$((STEPS - 1))), $REPEATS rounds; results in $OUT"
echo "load before: $(uptime)"
START=$(date +%s)

train() {  # $1: name, $2: ranks (0: no mpirun), then extra arguments
  local name=$1 np=$2
  shift 2
  local cmd=("$BIN" train --config "$CONFIG" --metrics "$OUT/$name.jsonl" "$@")
  if [[ $np -gt 0 ]]; then cmd=("${MPIRUN[@]}" -np "$np" "${cmd[@]}"); fi
  echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) -- $name: ${cmd[*]}" | tee "$OUT/$name.log"
  local t0=$SECONDS
  if ! "${cmd[@]}" >>"$OUT/$name.log" 2>&1; then
    echo "bench_dist.sh: run $name failed; its log:" >&2
    cat "$OUT/$name.log" >&2
    exit 1
  fi
  "$PY" bench/dist/summarise.py run-line "$OUT/$name.jsonl" "$SKIP" "$((SECONDS - t0))"
}

# 1 + 2: interleaved rounds.
for r in $(seq 1 "$REPEATS"); do
  train "single_r$r" 0 --set train.steps="$STEPS" --set train.threads=2
  train "dp2_z0_r$r" 2 --dp 2 --zero 0 --set train.steps="$STEPS" --set train.threads=1 \
    --set train.microbatch_size=$((BATCH / 2))
  train "dp2_z3_r$r" 2 --dp 2 --zero 3 --set train.steps="$STEPS" --set train.threads=1 \
    --set train.microbatch_size=$((BATCH / 2))
done

# 3: memory at dp = 4, microbatch batch/4.
for z in 0 1 2 3; do
  [[ $MEM_STEPS -gt 0 ]] || break
  train "dp4_z$z" 4 --dp 4 --zero "$z" --set train.steps="$MEM_STEPS" --set train.threads=1 \
    --set train.microbatch_size=$((BATCH / 4))
done

echo "load after:  $(uptime)"
echo "elapsed: $(($(date +%s) - START)) s"
"$PY" bench/dist/summarise.py report "$OUT" "$CONFIG" "$SKIP"
