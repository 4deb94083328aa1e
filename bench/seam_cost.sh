#!/usr/bin/env bash
# The kernel seam's cost (docs/BENCHMARKS.md "The kernel seam's cost"): the
# bench model's fp32 step, 1 process, 2 threads, for a base build, this build
# under train.device = cpu and this build under train.device = fake, in
# interleaved rounds; prints each side's per-round medians (first step left
# out), their median, the ratios, and checks that all three are bitwise equal.
#   bench/seam_cost.sh BASE_MESHTRAIN NEW_MESHTRAIN [ROUNDS (15)] [STEPS (6)]
set -euo pipefail
base=$1 new=$2 rounds=${3:-15} steps=${4:-6}
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$new" prepare --out "$tmp/data" --vocab-size 8192 >/dev/null
for r in $(seq 1 "$rounds"); do
  for side in base cpu fake; do
    bin=$new dev=cpu
    [ "$side" = base ] && bin=$base
    [ "$side" = fake ] && dev=fake
    args=(--config "$repo/configs/bench.toml" --set data.dir="$tmp/data" --set train.steps="$steps"
      --set train.threads=2 --metrics "$tmp/$side.$r.jsonl" --quiet)
    [ "$side" = base ] || args+=(--set train.device=$dev)
    "$bin" train "${args[@]}" >/dev/null
  done
  "$new" compare --rtol 0 "$tmp/base.$r.jsonl" "$tmp/cpu.$r.jsonl" >/dev/null
  "$new" compare --rtol 0 "$tmp/cpu.$r.jsonl" "$tmp/fake.$r.jsonl" >/dev/null
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); all rounds bitwise equal across the three sides"
/usr/bin/python3 - "$tmp" "$rounds" <<'PY'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def steps(f):
    return [d["step_time_s"] for d in map(json.loads, open(f).readlines()[1:]) if isinstance(d.get("step_time_s"), float)]
med = {}
for side in ["base", "cpu", "fake"]:
    per = [statistics.median(steps(f"{tmp}/{side}.{r}.jsonl")[1:]) for r in range(1, rounds + 1)]
    med[side] = statistics.median(per)
    print(f"{side:5s} median {med[side]:.3f} s  rounds " + " ".join(f"{x:.3f}" for x in per))
print(f"seam (cpu / base) {med['cpu'] / med['base']:.4f}   fake / cpu {med['fake'] / med['cpu']:.4f}")
PY
