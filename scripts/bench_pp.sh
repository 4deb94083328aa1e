#!/usr/bin/env bash
# `make bench-pp`: pipeline parallelism across real processes — each stage's idle
# share of the step against the schedule's theoretical bubble, and each stage's
# peak activation memory, GPipe against 1F1B (docs/BENCHMARKS.md, "Pipeline
# parallel").
#
#   bash scripts/bench_pp.sh BUILD_DIR
#
# Model: bench/pp/pp.toml (d_model 256, 8 layers, seq_len 128, microbatch 1).
# 1. pp = 2, 1 thread per rank: gpipe, 1f1b and interleaved (2 virtual stages per
#    rank) at m = 4 and 8 microbatches (train.batch_size = m × microbatch), STEPS
#    steps each, interleaved round by round. Per run: the median over the steps
#    after the first SKIP of the metrics' pp_idle (each stage's idle share of the
#    executor's phase), against `meshtrain schedule` (the ideal bubble
#    (p−1)/(v·m+p−1) with F = 1, B = 2). Every run writes a Chrome trace of its
#    last step (--trace, open in https://ui.perfetto.dev); the summary reads each
#    stage's forward and backward durations from it.
# 2. Activation memory per stage: the per-rank peak table the run prints at its end
#    (GPipe keeps m microbatches' activations on every stage, 1F1B at most p − s on
#    stage s), against bench/pp/summarise.py's count of src/model/llama.cpp's
#    buffers; also pp = 4 (gpipe, 1f1b, interleaved at m = 8, PP4_STEPS steps: 4
#    processes on 2 cores, so only their memory is reported, not their idle shares).
# The layers are split so that the stages' work is about equal: the last stage
# also runs the LM head [256 → 8192], about 2.7 layers' worth of GEMMs here.
# Environment: BENCH_PP_STEPS (12), BENCH_PP_SKIP (2), BENCH_PP_REPEATS (3),
# BENCH_PP_MS ("4 8": microbatch counts), BENCH_PP_STAGE_LAYERS ("5,3"),
# BENCH_PP_STAGE_LAYERS_V2 ("3,2,2,1"; interleaved), BENCH_PP_PP4_STEPS (2; 0 skips
# pp = 4), BENCH_PP_OUT (a temporary folder: keeps every run's metrics, log, trace
# and the schedules' grids).
set -euo pipefail

BUILD=${1:-build}
CONFIG=bench/pp/pp.toml
STEPS=${BENCH_PP_STEPS:-12}
SKIP=${BENCH_PP_SKIP:-2}
REPEATS=${BENCH_PP_REPEATS:-3}
MS=${BENCH_PP_MS:-4 8}
STAGE_LAYERS=${BENCH_PP_STAGE_LAYERS:-5,3}
STAGE_LAYERS_V2=${BENCH_PP_STAGE_LAYERS_V2:-3,2,2,1}
PP4_STEPS=${BENCH_PP_PP4_STEPS:-2}

cd "$(dirname "$0")/.."
BIN="$BUILD/meshtrain"
if [[ ! -x "$BIN" ]]; then
  echo "bench_pp.sh: $BIN not found: build first (make build, or cmake --build $BUILD --target meshtrain)" >&2
  exit 1
fi
command -v mpirun >/dev/null || { echo "bench_pp.sh: mpirun not found (Open MPI)" >&2; exit 1; }
PY=$(command -v python3) || { echo "bench_pp.sh: python3 not found" >&2; exit 1; }
SUM=bench/pp/summarise.py
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --mca btl self,vader)
OUT=${BENCH_PP_OUT:-$(mktemp -d /tmp/meshtrain-bench-pp.XXXXXX)}
mkdir -p "$OUT"

DATA_DIR=$("$PY" "$SUM" data-dir "$CONFIG")
if [[ ! -f "$DATA_DIR/train.bin" || ! -f "$DATA_DIR/val.bin" ]]; then
  echo "== $DATA_DIR/{train,val}.bin missing: $BIN prepare --out $DATA_DIR"
  "$BIN" prepare --out "$DATA_DIR"
fi
MB=$("$PY" "$SUM" microbatch "$CONFIG")

echo "== meshtrain bench-pp: $CONFIG, $STEPS steps per run (median of steps $SKIP..$((STEPS - 1))), $REPEATS rounds, m in {$MS}; results in $OUT"
echo "load before: $(uptime)"
START=$(date +%s)

# $1: name, $2: pp, $3: schedule, $4: microbatches, $5: steps.
train() {
  local name=$1 pp=$2 kind=$3 m=$4 steps=$5 v=1 layers=$STAGE_LAYERS
  if [[ $kind == interleaved ]]; then v=2; layers=$STAGE_LAYERS_V2; fi
  [[ $pp == 2 ]] || layers=""  # pp = 4: the even split
  local cmd=("${MPIRUN[@]}" -np "$pp" "$BIN" train --config "$CONFIG" --metrics "$OUT/$name.jsonl"
    --trace "$OUT/$name.trace.json" --pp "$pp" --set parallel.schedule="$kind"
    --set parallel.virtual_stages="$v" --set parallel.stage_layers="$layers"
    --set train.batch_size=$((m * MB)) --set train.steps="$steps" --set train.threads=1)
  echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) -- $name: ${cmd[*]}" | tee "$OUT/$name.log"
  local t0=$SECONDS
  if ! "${cmd[@]}" >>"$OUT/$name.log" 2>&1; then
    echo "bench_pp.sh: run $name failed; its log:" >&2
    cat "$OUT/$name.log" >&2
    exit 1
  fi
  "$PY" "$SUM" run-line "$OUT/$name.jsonl" "$SKIP" "$((SECONDS - t0))"
}

# The theory: each schedule's grid, bubble and activation sets in flight.
for pp in 2 4; do
  for m in $(printf "%s\n" $MS 8 | sort -un); do
    for kind in gpipe 1f1b interleaved; do
      v=1; [[ $kind == interleaved ]] && v=2
      "$BIN" schedule --kind "$kind" --pp "$pp" --microbatches "$m" --v "$v" >"$OUT/schedule_${kind}_pp${pp}_m${m}.txt"
    done
  done
done

# 1 + 2: pp = 2, interleaved rounds.
for r in $(seq 1 "$REPEATS"); do
  for m in $MS; do
    for kind in gpipe 1f1b interleaved; do
      train "pp2_${kind}_m${m}_r$r" 2 "$kind" "$m" "$STEPS"
    done
  done
done

# 2: memory at pp = 4.
if [[ $PP4_STEPS -gt 0 ]]; then
  for kind in gpipe 1f1b interleaved; do
    train "pp4_${kind}_m8" 4 "$kind" 8 "$PP4_STEPS"
  done
fi

echo "load after:  $(uptime)"
echo "elapsed: $(($(date +%s) - START)) s"
"$PY" "$SUM" report "$OUT" "$CONFIG" "$SKIP"
