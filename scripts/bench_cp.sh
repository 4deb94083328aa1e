#!/usr/bin/env bash
# `make bench-cp`: context parallelism across real processes — activation memory
# per rank against the expected T / cp, and step time of ring attention against
# all-gather attention (docs/BENCHMARKS.md, "Context parallel").
#
#   bash scripts/bench_cp.sh BUILD_DIR
#
# Model: bench/cp/cp.toml (d_model 256, 2 layers, 4 heads, 2 kv heads, ffn 688,
# vocab 8192); one sequence of T tokens per step (batch 1, microbatch 1), so each
# of the cp ranks holds T / cp of its tokens; model.max_seq_len = train.seq_len = T.
# 1. Memory: rank 0's peak activation bytes (metrics' mem_peak_by_kind, max over
#    MEM_STEPS steps) for T in TS_MEM × cp in {1, 2, 4} (ring), against the cp = 1
#    figure: every activation buffer of src/model/llama.cpp is per token, so the
#    expectation is 1/cp; also the communication buffers (comm), which are not.
# 2. Speed: step time of cp_impl = ring against allgather at cp = 2 and 4 for T in
#    TS_SPEED, STEPS steps each (median of the steps after the first SKIP),
#    interleaved — ring, allgather, ring, … — round by round; best median of each.
#    1 thread per rank: cp = 2 is 2 processes on the 2 cores, cp = 4 oversubscribes
#    them (4 processes on 2 cores), so its times mostly measure the time-sharing.
# Environment: BENCH_CP_TS_MEM ("512 1024 2048"), BENCH_CP_TS_SPEED ("1024 2048"),
# BENCH_CP_CPS_SPEED ("2 4"), BENCH_CP_MEM_STEPS (2), BENCH_CP_STEPS (8),
# BENCH_CP_SKIP (2), BENCH_CP_REPEATS (3; 0 skips part 2), BENCH_CP_OUT (a temporary
# folder: keeps every run's metrics and log).
set -euo pipefail

BUILD=${1:-build}
CONFIG=bench/cp/cp.toml
TS_MEM=${BENCH_CP_TS_MEM:-512 1024 2048}
TS_SPEED=${BENCH_CP_TS_SPEED:-1024 2048}
CPS_SPEED=${BENCH_CP_CPS_SPEED:-2 4}
MEM_STEPS=${BENCH_CP_MEM_STEPS:-2}
STEPS=${BENCH_CP_STEPS:-8}
SKIP=${BENCH_CP_SKIP:-2}
REPEATS=${BENCH_CP_REPEATS:-3}

cd "$(dirname "$0")/.."
BIN="$BUILD/meshtrain"
if [[ ! -x "$BIN" ]]; then
  echo "bench_cp.sh: $BIN not found: build first (make build, or cmake --build $BUILD --target meshtrain)" >&2
  exit 1
fi
command -v mpirun >/dev/null || { echo "bench_cp.sh: mpirun not found (Open MPI)" >&2; exit 1; }
PY=$(command -v python3) || { echo "bench_cp.sh: python3 not found" >&2; exit 1; }
SUM=bench/cp/summarise.py
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --mca btl self,vader)
OUT=${BENCH_CP_OUT:-$(mktemp -d /tmp/meshtrain-bench-cp.XXXXXX)}
mkdir -p "$OUT"

DATA_DIR=$("$PY" "$SUM" data-dir "$CONFIG")
if [[ ! -f "$DATA_DIR/train.bin" || ! -f "$DATA_DIR/val.bin" ]]; then
  echo "== $DATA_DIR/{train,val}.bin missing: $BIN prepare --out $DATA_DIR"
  "$BIN" prepare --out "$DATA_DIR"
fi

echo "== meshtrain bench-cp: $CONFIG; memory: T in {$TS_MEM} x cp in {1, 2, 4}, $MEM_STEPS steps;" \
  "speed: T in {$TS_SPEED} x cp in {$CPS_SPEED}, ring vs allgather, $STEPS steps (median of steps $SKIP..), $REPEATS rounds; results in $OUT"
echo "load before: $(uptime)"
START=$(date +%s)

# $1: name, $2: cp, $3: T, $4: ring | allgather, $5: steps.
train() {
  local name=$1 cp=$2 T=$3 impl=$4 steps=$5
  local cmd=("$BIN" train --config "$CONFIG" --metrics "$OUT/$name.jsonl" --set model.max_seq_len="$T"
    --set train.seq_len="$T" --set train.steps="$steps" --set train.threads=1)
  if [[ $cp -gt 1 ]]; then
    cmd=("${MPIRUN[@]}" -np "$cp" "${cmd[@]}" --cp "$cp" --set parallel.cp_impl="$impl")
  fi
  echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) -- $name: ${cmd[*]}" | tee "$OUT/$name.log"
  local t0=$SECONDS
  if ! "${cmd[@]}" >>"$OUT/$name.log" 2>&1; then
    echo "bench_cp.sh: run $name failed; its log:" >&2
    cat "$OUT/$name.log" >&2
    exit 1
  fi
  "$PY" "$SUM" run-line "$OUT/$name.jsonl" "$SKIP" "$((SECONDS - t0))"
}

# 1: memory.
for T in $TS_MEM; do
  for cp in 1 2 4; do
    train "mem_T${T}_cp${cp}" "$cp" "$T" ring "$MEM_STEPS"
  done
done

# 2: speed, interleaved rounds.
for r in $(seq 1 "$REPEATS"); do
  for T in $TS_SPEED; do
    for cp in $CPS_SPEED; do
      for impl in ring allgather; do
        train "speed_T${T}_cp${cp}_${impl}_r$r" "$cp" "$T" "$impl" "$STEPS"
      done
    done
  done
done

echo "load after:  $(uptime)"
echo "elapsed: $(($(date +%s) - START)) s"
"$PY" "$SUM" report "$OUT" "$CONFIG" "$SKIP"
