#!/usr/bin/env bash
# `make bench-bf16-layouts`: bf16 (oneDNN) training steps under tp2 + SP, cp2
# and pp2 against one process, side by side in one run, interleaved
# (docs/BENCHMARKS.md, "bf16 under layouts"; issue 26's figures): each round
# runs one process × 2 threads, then 2 processes × 1 thread each for
# tp 2 + sp, cp 2 (ring) and pp 2 (1f1b, microbatch 1: 8 microbatches), all
# with train.precision = bf16 on configs/bench.toml's model. Each run's figure
# is the median step time of its steps after the first; the ratios are of the
# medians over rounds. pp2's target is 0.9 × (1 − bubble), the bubble of 1f1b
# with p stages and m microbatches being (p − 1) / (m + p − 1).
#
#   bash scripts/bench_bf16_layouts.sh BUILD_DIR
#
# Environment: BENCH_CONFIG (configs/bench.toml), BENCH_ROUNDS (3),
# BENCH_STEPS (4: the first is not counted), BENCH_OUT (a temporary folder).
set -euo pipefail

BUILD=${1:-build}
CONFIG=${BENCH_CONFIG:-configs/bench.toml}
ROUNDS=${BENCH_ROUNDS:-3}
STEPS=${BENCH_STEPS:-4}
BIN="$BUILD/meshtrain"
cd "$(dirname "$0")/.."
[[ -x "$BIN" ]] || { echo "bench_bf16_layouts.sh: $BIN not found: build first" >&2; exit 1; }
OUT=${BENCH_OUT:-$(mktemp -d /tmp/meshtrain-bench-bf16-layouts.XXXXXX)}
mkdir -p "$OUT"
DATA_DIR=$(python3 bench/dist/summarise.py data-dir "$CONFIG")
[[ -f "$DATA_DIR/train.bin" ]] || "$BIN" prepare --out "$DATA_DIR"
echo "== bf16 under layouts: $CONFIG, $ROUNDS rounds of $STEPS steps; results in $OUT"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores;" \
  "bf16 flags: $(grep -o -w 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | xargs)"

common=(--config "$CONFIG" --set train.precision=bf16 --set train.steps="$STEPS" --quiet)
run() {  # $1: side, $2: round, $3: ranks, then the side's flags
  local side=$1 round=$2 np=$3
  shift 3
  echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) -- $side" >>"$OUT/loads.txt"
  if [[ $np == 1 ]]; then
    "$BIN" train "${common[@]}" --set train.threads=2 "$@" --metrics "$OUT/$side.$round.jsonl" \
      >"$OUT/$side.$round.txt" 2>&1
  else
    OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root --mca btl self,vader -np "$np" \
      "$BIN" train "${common[@]}" --set train.threads=1 "$@" --metrics "$OUT/$side.$round.jsonl" \
      >"$OUT/$side.$round.txt" 2>&1
  fi
}
for r in $(seq 1 "$ROUNDS"); do
  echo "-- round $r"
  run single "$r" 1
  run tp2_sp "$r" 2 --tp 2 --set parallel.sp=true
  run cp2 "$r" 2 --set parallel.cp=2
  run pp2_1f1b_m8 "$r" 2 --pp 2 --set train.microbatch_size=1
done

python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def median_step(side, r):
    times = [json.loads(l)["step_time_s"] for l in open(f"{out}/{side}.{r}.jsonl") if '"step_time_s"' in l]
    return statistics.median(times[1:])
sides = ["single", "tp2_sp", "cp2", "pp2_1f1b_m8"]
med = {}
print(f"{'side':<14} {'median step s per round':<28} {'median s':>9}")
for s in sides:
    per = [median_step(s, r) for r in range(1, rounds + 1)]
    med[s] = statistics.median(per)
    print(f"{s:<14} {' / '.join(f'{t:.3f}' for t in per):<28} {med[s]:>9.3f}")
bubble = (2 - 1) / (8 + 2 - 1)
for s, target in [("tp2_sp", 0.9), ("cp2", 0.9), ("pp2_1f1b_m8", 0.9 * (1 - bubble))]:
    ratio = med["single"] / med[s]
    print(f"{s} / single tokens/s: {ratio:.3f} (target {target:.3f}: {'met' if ratio >= target else 'not met'})")
EOF
