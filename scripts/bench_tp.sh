#!/usr/bin/env bash
# `make bench-tp`: tensor parallelism (and sequence parallelism) across real
# processes, measured the way docs/BENCHMARKS.md "Definitions" prescribes: side by side in one run, as
# ratios (docs/BENCHMARKS.md, "Tensor parallel").
#
#   bash scripts/bench_tp.sh BUILD_DIR
#
# 1. Speed: 1 process × 2 threads against tp = 2 (2 processes × 1 thread), and
#    tp = 2 with parallel.sp = true, same global batch and microbatch
#    (configs/bench.toml: 8 × 256, microbatch 8), tokens/s ratios. The runs are
#    interleaved — single, tp2, tp2+sp, single, … — so that load from other
#    processes falls on both sides of each ratio; each run's figure is the median
#    of its steps after the first SKIP, and the best (fastest) median of each kind
#    is kept. tp2 and tp2+sp also run with parallel.tp_overlap = true (the "ov"
#    runs): before and after in the same round, with the share of rank 0's tp
#    communication time hidden behind compute (its ledger's wait times).
# 3. The rank-ordered sum that TP reduces with (SumOrder::ranks) against the MPI
#    library's all-reduce and reduce-scatter at one layer's activation size,
#    whole and in overlap chunks, on 2 and 4 ranks (bench/tp/ranked_sum_bench.cpp;
#    skipped when the build has no benchmarks: -DMESHTRAIN_BUILD_BENCH=ON).
# 2. Activation memory: rank 0's peak activation bytes at tp = 1, 2, 2 + sp (from
#    the runs of part 1) and, if the model allows it, tp = 4 and 4 + sp (MEM_STEPS
#    steps each), all with train.recompute = false, against the analytic count of
#    src/model/llama.cpp's buffers (bench/tp/summarise.py).
# Environment: BENCH_TP_CONFIG (configs/bench.toml), BENCH_TP_STEPS (6),
# BENCH_TP_SKIP (2), BENCH_TP_REPEATS (2), BENCH_TP_MEM_STEPS (2; 0 skips tp = 4),
# BENCH_TP_OUT (a temporary folder: keeps every run's metrics and log).
set -euo pipefail

BUILD=${1:-build}
CONFIG=${BENCH_TP_CONFIG:-configs/bench.toml}
STEPS=${BENCH_TP_STEPS:-6}
SKIP=${BENCH_TP_SKIP:-2}
REPEATS=${BENCH_TP_REPEATS:-2}
MEM_STEPS=${BENCH_TP_MEM_STEPS:-2}

cd "$(dirname "$0")/.."
BIN="$BUILD/meshtrain"
if [[ ! -x "$BIN" ]]; then
  echo "bench_tp.sh: $BIN not found: build first (make build, or cmake --build $BUILD --target meshtrain)" >&2
  exit 1
fi
command -v mpirun >/dev/null || { echo "bench_tp.sh: mpirun not found (Open MPI)" >&2; exit 1; }
PY=$(command -v python3) || { echo "bench_tp.sh: python3 not found" >&2; exit 1; }
SUM=bench/tp/summarise.py
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --mca btl self,vader)
OUT=${BENCH_TP_OUT:-$(mktemp -d /tmp/meshtrain-bench-tp.XXXXXX)}
mkdir -p "$OUT"

# The token files of the reference config.
DATA_DIR=$("$PY" "$SUM" data-dir "$CONFIG")
if [[ ! -f "$DATA_DIR/train.bin" || ! -f "$DATA_DIR/val.bin" ]]; then
  echo "== $DATA_DIR/{train,val}.bin missing: $BIN prepare --out $DATA_DIR"
  "$BIN" prepare --out "$DATA_DIR"
fi

echo "== meshtrain bench-tp: $CONFIG, $STEPS steps per run (median of steps $SKIP..$((STEPS - 1))), $REPEATS rounds; results in $OUT"
echo "load before: $(uptime)"
START=$(date +%s)

train() {  # $1: name, $2: ranks (0: no mpirun), then extra arguments
  local name=$1 np=$2
  shift 2
  local cmd=("$BIN" train --config "$CONFIG" --metrics "$OUT/$name.jsonl" --set train.recompute=false "$@")
  if [[ $np -gt 0 ]]; then cmd=("${MPIRUN[@]}" -np "$np" "${cmd[@]}"); fi
  echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) -- $name: ${cmd[*]}" | tee "$OUT/$name.log"
  local t0=$SECONDS
  if ! "${cmd[@]}" >>"$OUT/$name.log" 2>&1; then
    echo "bench_tp.sh: run $name failed; its log:" >&2
    cat "$OUT/$name.log" >&2
    exit 1
  fi
  "$PY" "$SUM" run-line "$OUT/$name.jsonl" "$SKIP" "$((SECONDS - t0))"
}

# 1 (and 2 at tp = 1, 2): interleaved rounds.
for r in $(seq 1 "$REPEATS"); do
  train "single_r$r" 0 --set train.steps="$STEPS" --set train.threads=2
  train "tp2_r$r" 2 --tp 2 --set train.steps="$STEPS" --set train.threads=1
  train "tp2ov_r$r" 2 --tp 2 --set parallel.tp_overlap=true --set train.steps="$STEPS" --set train.threads=1
  train "tp2sp_r$r" 2 --tp 2 --set parallel.sp=true --set train.steps="$STEPS" --set train.threads=1
  train "tp2spov_r$r" 2 --tp 2 --set parallel.sp=true --set parallel.tp_overlap=true --set train.steps="$STEPS" \
    --set train.threads=1
done

# 2: memory at tp = 4, if the model splits 4 ways.
if [[ $MEM_STEPS -gt 0 ]]; then
  for name in mem_tp4 mem_tp4sp; do
    if [[ $name == mem_tp4sp ]]; then sp=true; else sp=false; fi
    if why=$("$PY" "$SUM" tp-check "$CONFIG" 4 "$([[ $sp == true ]] && echo 1 || echo 0)"); then
      train "$name" 4 --tp 4 --set parallel.sp="$sp" --set train.steps="$MEM_STEPS" --set train.threads=1
    else
      echo "== $name skipped: $why"
    fi
  done
fi

# 3: the rank-ordered sum's cost, at the activation [B_micro x T, d_model] of the config.
RS_BENCH="$BUILD/bench/meshtrain_ranked_sum_bench"
if [[ -x $RS_BENCH ]]; then
  read -r TOKENS WIDTH < <("$PY" "$SUM" activation-shape "$CONFIG")
  for np in 2 4; do
    echo "== 3. rank-ordered sum vs the library, $np ranks, activation [$TOKENS, $WIDTH] (median ms, slowest rank)"
    "${MPIRUN[@]}" -np "$np" "$RS_BENCH" --tokens "$TOKENS" --width "$WIDTH" | tee "$OUT/ranked_sum_np$np.txt"
  done
else
  echo "== 3. skipped: $RS_BENCH not built (configure with -DMESHTRAIN_BUILD_BENCH=ON)"
fi

echo "load after:  $(uptime)"
echo "elapsed: $(($(date +%s) - START)) s"
"$PY" "$SUM" report "$OUT" "$CONFIG" "$SKIP"
