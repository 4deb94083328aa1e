#!/usr/bin/env bash
# The canonical mode's cost (docs/BENCHMARKS.md "The canonical mode"): step
# time of parallel.reduction = canonical against the default mode, side by side
# in one run, interleaved, on configs/bench.toml's model (fp32). Sides, each in
# both modes: one process × 2 threads with microbatch 1 (8 microbatches: the
# tree over 8 atoms) and with microbatch 8 (one microbatch: no tree, only the
# fixed GEMM blocks and the exact sums); dp 2 and pp 2 (1f1b), 2 processes × 1
# thread, microbatch 1; tp 2 + its one-process reference (microbatch 8), the
# canonical side with parallel.canonical_tp = 2, and tp 2 with SP and with SP
# and tp_overlap (microbatch 8); cp 2 (2 processes × 1 thread, ring) and its
# one-process reference (2 threads), one sequence a step, the canonical side
# with parallel.canonical_cp = 2. Each run's figure is the median step time of its steps
# after the first; the ratios are canonical ÷ default of the medians over rounds.
# Every round also checks the canonical runs' dp 2 and pp 2 losses and
# gradient norms bitwise the one-process canonical run's, and tp 2's bitwise
# its one-process run with the same 2 pieces, and cp 2's bitwise its one-process
# run with the same 2 cp pieces (compare --rtol 0).
#
#   bash bench/canonical_cost.sh BUILD_DIR
#
# Environment: BENCH_CONFIG (configs/bench.toml), BENCH_ROUNDS (3),
# BENCH_STEPS (4: the first is not counted), BENCH_OUT (a temporary folder),
# BENCH_SIDES (the sides to run, space-separated; default all).
set -euo pipefail

BUILD=${1:-build}
CONFIG=${BENCH_CONFIG:-configs/bench.toml}
ROUNDS=${BENCH_ROUNDS:-3}
STEPS=${BENCH_STEPS:-4}
BIN="$BUILD/meshtrain"
cd "$(dirname "$0")/.."
[[ -x "$BIN" ]] || { echo "canonical_cost.sh: $BIN not found: build first" >&2; exit 1; }
ALL_SIDES="one_mb1 one_mb8 dp2_mb1 pp2_mb1 one_mb8_c2 tp2_mb8_c2 tp2sp_mb8_c2 tp2spov_mb8_c2 one_b1_cp2 cp2_b1_cp2"
SIDES=${BENCH_SIDES:-$ALL_SIDES}
OUT=${BENCH_OUT:-$(mktemp -d /tmp/meshtrain-canonical-cost.XXXXXX)}
mkdir -p "$OUT"
DATA_DIR=$(python3 bench/dist/summarise.py data-dir "$CONFIG")
[[ -f "$DATA_DIR/train.bin" ]] || "$BIN" prepare --out "$DATA_DIR"
echo "== canonical mode's cost: $CONFIG, $ROUNDS rounds of $STEPS steps; results in $OUT"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"

common=(--config "$CONFIG" --set train.steps="$STEPS" --quiet)
run() {  # $1: side, $2: round, $3: ranks, $4: mode, then the side's flags
  local side=$1 round=$2 np=$3 mode=$4
  shift 4
  [[ " $SIDES " == *" $side "* ]] || return 0
  echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) -- $side $mode" >>"$OUT/loads.txt"
  local f=(--set parallel.reduction="$mode" --metrics "$OUT/$side.$mode.$round.jsonl")
  [[ $mode == canonical && $side == *_c2 ]] && f+=(--set parallel.canonical_tp=2)
  [[ $mode == canonical && $side == *_cp2 ]] && f+=(--set parallel.canonical_cp=2)
  if [[ $np == 1 ]]; then
    "$BIN" train "${common[@]}" --set train.threads=2 "$@" "${f[@]}" >"$OUT/$side.$mode.$round.txt" 2>&1
  else
    OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root --mca btl self,vader -np "$np" \
      "$BIN" train "${common[@]}" --set train.threads=1 "$@" "${f[@]}" >"$OUT/$side.$mode.$round.txt" 2>&1
  fi
}
for r in $(seq 1 "$ROUNDS"); do
  echo "-- round $r"
  for mode in default canonical; do
    run one_mb1 "$r" 1 "$mode" --set train.microbatch_size=1
    run one_mb8 "$r" 1 "$mode" --set train.microbatch_size=8
    run dp2_mb1 "$r" 2 "$mode" --dp 2 --set train.microbatch_size=1
    run pp2_mb1 "$r" 2 "$mode" --pp 2 --set train.microbatch_size=1
    run one_mb8_c2 "$r" 1 "$mode" --set train.microbatch_size=8
    run tp2_mb8_c2 "$r" 2 "$mode" --tp 2 --set train.microbatch_size=8
    run tp2sp_mb8_c2 "$r" 2 "$mode" --tp 2 --set parallel.sp=true --set train.microbatch_size=8
    run tp2spov_mb8_c2 "$r" 2 "$mode" --tp 2 --set parallel.sp=true --set parallel.tp_overlap=true \
      --set train.microbatch_size=8
    run one_b1_cp2 "$r" 1 "$mode" --set train.batch_size=1 --set train.microbatch_size=1
    run cp2_b1_cp2 "$r" 2 "$mode" --set parallel.cp=2 --set train.batch_size=1 --set train.microbatch_size=1
  done
  for side in dp2_mb1 pp2_mb1; do
    [[ " $SIDES " == *" $side "* && " $SIDES " == *" one_mb1 "* ]] || continue
    "$BIN" compare --rtol 0 "$OUT/$side.canonical.$r.jsonl" "$OUT/one_mb1.canonical.$r.jsonl" >/dev/null ||
      { echo "canonical_cost.sh: $side is not bitwise one_mb1 in the canonical mode (round $r)" >&2; exit 1; }
  done
  for side in tp2_mb8_c2 tp2sp_mb8_c2 tp2spov_mb8_c2; do
    [[ " $SIDES " == *" $side "* && " $SIDES " == *" one_mb8_c2 "* ]] || continue
    "$BIN" compare --rtol 0 "$OUT/$side.canonical.$r.jsonl" "$OUT/one_mb8_c2.canonical.$r.jsonl" >/dev/null ||
      { echo "canonical_cost.sh: $side is not bitwise one_mb8_c2 in the canonical mode (round $r)" >&2; exit 1; }
  done
  if [[ " $SIDES " == *" cp2_b1_cp2 "* && " $SIDES " == *" one_b1_cp2 "* ]]; then
    "$BIN" compare --rtol 0 "$OUT/cp2_b1_cp2.canonical.$r.jsonl" "$OUT/one_b1_cp2.canonical.$r.jsonl" >/dev/null ||
      { echo "canonical_cost.sh: cp2_b1_cp2 is not bitwise one_b1_cp2 in the canonical mode (round $r)" >&2; exit 1; }
  fi
done

python3 - "$OUT" "$ROUNDS" "$SIDES" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def median_step(name):
    t = [json.loads(l)["step_time_s"] for l in open(f"{out}/{name}.jsonl") if '"step_time_s"' in l]
    return statistics.median(t[1:])
print(f"{'side':<10} {'mode':<10} {'median step s per round':<28} {'median s':>9}")
med = {}
SIDES = sys.argv[3].split()
for side in SIDES:
    for mode in ["default", "canonical"]:
        per = [median_step(f"{side}.{mode}.{r}") for r in range(1, rounds + 1)]
        med[side, mode] = statistics.median(per)
        print(f"{side:<10} {mode:<10} {' / '.join(f'{x:.3f}' for x in per):<28} {med[side, mode]:>9.3f}")
for side in SIDES:
    print(f"{side}: canonical / default step time {med[side, 'canonical'] / med[side, 'default']:.3f}")
if ("one_mb1", "canonical") in med and ("one_mb8", "default") in med:
    print(f"one process, canonical microbatch 1 / default microbatch 8: {med['one_mb1', 'canonical'] / med['one_mb8', 'default']:.3f}")
print("canonical: dp2 and pp2 bitwise one_mb1, the tp2 sides bitwise one_mb8_c2, cp2 bitwise one_b1_cp2 (those run), in every round")
PY
