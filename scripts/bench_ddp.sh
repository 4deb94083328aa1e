#!/usr/bin/env bash
# The data-parallel side-by-side of `make bench` (docs/BENCHMARKS.md, "dp2 against
# PyTorch DDP"): meshtrain --dp 2 (2 processes × 1 thread) against PyTorch
# DistributedDataParallel (gloo, 2 processes × 1 thread, bench/torch_ddp.py), same
# model, global batch, sequence, AdamW, float32, in ONE run.
#
#   bash scripts/bench_ddp.sh BUILD_DIR
#
# Interleaved A B A B … for ROUNDS rounds, so that load from other processes falls on
# both sides; each run's figure is the median step time of rank 0 over its timed
# steps (after WARMUP), and the result is the median over rounds of the per-round
# ratio meshtrain ÷ PyTorch tokens/s. The load average is printed beside every run.
# meshtrain's ranks run as mpirun starts them (Open MPI pins each of 2 ranks to a
# core); PyTorch's processes are not pinned. With BENCH_DDP_UNBOUND=1 a third side,
# C, runs meshtrain unpinned too (mpirun --bind-to none; docs/BENCHMARKS.md compares);
# with BENCH_DDP_OTHER=BINARY, side C is that meshtrain binary instead (e.g. one
# built before a change: before and after in one run).
# Besides wall time, each side's CPU seconds per step (both ranks, all threads) are
# compared: on a shared machine they depend far less on the other jobs.
# Environment: BENCH_CONFIG (configs/bench.toml), BENCH_DDP_ROUNDS (3),
# BENCH_DDP_STEPS (4 timed steps), BENCH_DDP_WARMUP (2), BENCH_DDP_UNBOUND (0), BENCH_DDP_OTHER,
# BENCH_OUT (a temporary folder: keeps every run's metrics, JSON and log).
set -euo pipefail

BUILD=${1:-build}
CONFIG=${BENCH_CONFIG:-configs/bench.toml}
ROUNDS=${BENCH_DDP_ROUNDS:-3}
STEPS=${BENCH_DDP_STEPS:-4}
WARMUP=${BENCH_DDP_WARMUP:-2}
UNBOUND=${BENCH_DDP_UNBOUND:-0}
OTHER=${BENCH_DDP_OTHER:-}
TORCH_PY=/usr/bin/python3
OPENMP_BLAS=/usr/lib/x86_64-linux-gnu/openblas-openmp

cd "$(dirname "$0")/.."
BIN="$BUILD/meshtrain"
if [[ ! -x "$BIN" ]]; then
  echo "bench_ddp.sh: $BIN not found: build first (cmake --build $BUILD --target meshtrain)" >&2
  exit 1
fi
if ! "$TORCH_PY" -c 'import torch' 2>/dev/null; then
  echo "bench_ddp.sh: $TORCH_PY has no torch (Debian: apt-get install python3-torch): skipped"
  exit 0
fi
PY=$(command -v python3 || echo "$TORCH_PY")
OUT=${BENCH_OUT:-$(mktemp -d /tmp/meshtrain-bench-ddp.XXXXXX)}
mkdir -p "$OUT"
DATA_DIR=$("$PY" bench/dist/summarise.py data-dir "$CONFIG")
if [[ ! -f "$DATA_DIR/train.bin" ]]; then "$BIN" prepare --out "$DATA_DIR"; fi
BATCH=$("$PY" bench/dist/summarise.py batch "$CONFIG")

echo "== dp2: meshtrain (2 × 1 thread) against PyTorch DDP (gloo, 2 × 1 thread), $CONFIG, $ROUNDS rounds of" \
  "$STEPS timed steps after $WARMUP warm-up; results in $OUT"
START=$(date +%s)
load() { cut -d' ' -f1-3 /proc/loadavg; }

ours() {  # $1: name, $2: binary, then mpirun's binding arguments
  local name=$1 bin=$2
  shift 2
  echo "$(date +%T) load $(load) -- $name: mpirun $* $bin train --dp 2" | tee "$OUT/$name.log"
  OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root --mca btl self,vader -np 2 "$@" \
    "$bin" train --config "$CONFIG" --dp 2 --metrics "$OUT/$name.jsonl" --set train.steps=$((WARMUP + STEPS)) \
    --set train.threads=1 --set train.microbatch_size=$((BATCH / 2)) >>"$OUT/$name.log" 2>&1 ||
    { echo "bench_ddp.sh: run $name failed; its log:" >&2; cat "$OUT/$name.log" >&2; exit 1; }
}
torch_ddp() {  # $1: name
  echo "$(date +%T) load $(load) -- $1: torch_ddp.py" | tee "$OUT/$1.log"
  LD_LIBRARY_PATH="$OPENMP_BLAS" OMP_NUM_THREADS=1 "$TORCH_PY" bench/torch_ddp.py --config "$CONFIG" \
    --world 2 --threads 1 --steps "$STEPS" --warmup "$WARMUP" --json "$OUT/$1.json" >>"$OUT/$1.log" 2>&1 ||
    { echo "bench_ddp.sh: run $1 failed; its log:" >&2; cat "$OUT/$1.log" >&2; exit 1; }
}

for r in $(seq 1 "$ROUNDS"); do
  ours "A_r$r" "$BIN"
  torch_ddp "B_r$r"
  if [[ -n $OTHER ]]; then
    ours "C_r$r" "$OTHER"
  elif [[ $UNBOUND == 1 ]]; then
    ours "C_r$r" "$BIN" --bind-to none
  fi
done
echo "$(date +%T) load $(load) -- done; elapsed $(($(date +%s) - START)) s"
"$PY" bench/ddp_summary.py "$OUT" "$WARMUP" "$ROUNDS"
