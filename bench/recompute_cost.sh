#!/usr/bin/env bash
# Recomputation's cost (docs/BENCHMARKS.md "Recomputation"): step time and
# activation memory of each train.recompute choice — none, full, selective
# attention, mlp, norms and all three — side by side in one run, interleaved
# (each round runs every choice once, in order), on configs/bench.toml's model
# (fp32), one process × 2 threads, microbatch 8 (one microbatch a step). Each
# run's figure is the median step time of its steps after the first; the
# table gives the median over rounds and its ratio to none, beside the
# activation peak the tracked allocator measured and the memory model's figure
# (which must be equal). Every round checks each choice's losses and gradient
# norms bitwise none's (compare --rtol 0). The load average before each run is
# written to loads.txt (the machine is shared).
#
#   bash bench/recompute_cost.sh BUILD_DIR
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
[[ -x "$BIN" ]] || { echo "recompute_cost.sh: $BIN not found: build first" >&2; exit 1; }
OUT=${BENCH_OUT:-$(mktemp -d /tmp/meshtrain-recompute-cost.XXXXXX)}
mkdir -p "$OUT"
DATA_DIR=$(python3 bench/dist/summarise.py data-dir "$CONFIG")
[[ -f "$DATA_DIR/train.bin" ]] || "$BIN" prepare --out "$DATA_DIR"
echo "== recomputation's cost: $CONFIG, $ROUNDS rounds of $STEPS steps; results in $OUT"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"

choices=(none full attention mlp norms attention,mlp,norms)
for r in $(seq 1 "$ROUNDS"); do
  echo "-- round $r"
  for c in "${choices[@]}"; do
    name=${c//,/_}
    flags=(--set train.recompute="$c")
    [[ $c != none && $c != full ]] && flags=(--set train.recompute=selective --set train.recompute_modules="$c")
    echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) -- $name" >>"$OUT/loads.txt"
    "$BIN" train --config "$CONFIG" --set train.steps="$STEPS" --set train.threads=2 --quiet "${flags[@]}" \
      --metrics "$OUT/$name.$r.jsonl" >"$OUT/$name.$r.txt" 2>&1
    "$BIN" compare --rtol 0 --grad-norm-rtol 0 "$OUT/$name.$r.jsonl" "$OUT/none.$r.jsonl" >/dev/null ||
      { echo "recompute_cost.sh: $name is not bitwise none (round $r)" >&2; exit 1; }
  done
done

python3 - "$OUT" "$ROUNDS" "${choices[@]}" <<'PY'
import json, statistics, sys
out, rounds, choices = sys.argv[1], int(sys.argv[2]), [c.replace(",", "_") for c in sys.argv[3:]]
def lines(name):
    return [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
def median_step(name):
    return statistics.median([j["step_time_s"] for j in lines(name) if "step_time_s" in j][1:])
print(f"{'choice':<22} {'median step s per round':<26} {'median s':>9} {'x none':>7} "
      f"{'activation MiB':>15} {'model MiB':>10}")
base = None
for c in choices:
    per = [median_step(f"{c}.{r}") for r in range(1, rounds + 1)]
    med = statistics.median(per)
    base = base or med
    ls = lines(f"{c}.1")
    peak = max(j["mem_peak_by_kind"]["activation"] for j in ls if "step_time_s" in j)
    model = ls[0]["header"]["memory_model"]["per_rank"]["activations"]
    assert peak == model, (c, peak, model)
    print(f"{c:<22} {' / '.join(f'{x:.3f}' for x in per):<26} {med:>9.3f} {med / base:>7.3f} "
          f"{peak / 2**20:>15.1f} {model / 2**20:>10.1f}")
PY
echo "loads (1, 5, 15 min) before each run: $OUT/loads.txt"
awk '{print $3}' "$OUT/loads.txt" | sort -n | awk '{a[NR]=$1} END {print "load average (1 min): min " a[1] ", max " a[NR]}'
