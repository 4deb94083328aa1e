#!/usr/bin/env bash
# The planner held to two levels of links (docs/PLANNER.md, "Validation on the
# emulated cluster"): 2 nodes × 1 rank (scripts/cluster.sh), each node with a
# core of its own (--cpus-per-node 1: no rank time-slices another's core), the
# link shaped to each of LINKS in turn. Per link: `meshtrain calibrate` across
# the two nodes (the node's one-rank compute, the link, the all-reduce across),
# then every 2-rank layout of scripts/validate_plan.sh trained for STEPS steps
# in PASSES passes, and `meshtrain plan` on that machine predicting each one.
# The table: measured step (the median after the first step, the fastest
# pass) against predicted, and the error; every 2-rank group crosses the link.
#
#   bench/cluster_validate.sh [BUILD] [LINKS] [STEPS] [PASSES]   defaults: build "1gbit 200mbit" 10 2
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
links=${2:-1gbit 200mbit}
steps=${3:-10}
passes=${4:-2}
bin=$(realpath "$here/$build/meshtrain")
cluster=$here/scripts/cluster.sh
export MT_CLUSTER_PREFIX=mtcv
tmp=$(mktemp -d)
trap 'bash "$cluster" down; rm -rf "$tmp"' EXIT
source "$here/tests/dist/common.sh" # make_data
unset OMP_NUM_THREADS               # each rank takes its node's core (train.threads = 0)
make_data
cfg=$here/configs/plan/validate.toml
moe=$here/configs/plan/validate_moe.toml
bash "$cluster" up 2 --ranks-per-node 1 --cpus-per-node 1 --link "${links%% *}"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# name config layout train-flags...
layouts=(
  "dp2_zero0 $cfg dp2,tp1,pp1,cp1,zero0,mbs2 --dp 2"
  "dp2_zero1 $cfg dp2,tp1,pp1,cp1,zero1,mbs2 --dp 2 --zero 1"
  "dp2_zero3 $cfg dp2,tp1,pp1,cp1,zero3,mbs2 --dp 2 --zero 3"
  "tp2 $cfg dp1,tp2,pp1,cp1,zero0,mbs2 --tp 2"
  "tp2_sp $cfg dp1,tp2,pp1,cp1,zero0,mbs2,sp --tp 2 --set parallel.sp=true"
  "pp2_1f1b $cfg dp1,tp1,pp2,cp1,zero0,mbs2 --pp 2"
  "cp2 $cfg dp1,tp1,pp1,cp2,zero0,mbs2 --cp 2"
  "ep2 $moe dp2,tp1,pp1,cp1,ep2,zero0,mbs2 --dp 2 --set parallel.ep=2"
)
rows=$tmp/rows.tsv
: >"$rows"
for link in $links; do
  bash "$cluster" shape "$link"
  bash "$cluster" mpirun -np 2 --bind-to none "$bin" calibrate --out "$tmp/machine.$link.json" --config "$cfg" \
    --seconds 0.1 | sed "s/^/$link: /"
  for pass in $(seq 1 "$passes"); do
    for spec in "${layouts[@]}"; do
      read -r name config layout flags <<<"$spec"
      # shellcheck disable=SC2086
      bash "$cluster" mpirun -np 2 --bind-to none "$bin" train --config "$config" --set data.dir="$tmp/data" \
        --set train.steps="$steps" $flags --metrics "$tmp/$name.$link.$pass.jsonl" >/dev/null
      [ "$pass" = 1 ] || continue
      "$bin" plan --config "$config" --machine "$tmp/machine.$link.json" --devices 2 --global-batch 8 \
        --layout "$layout" --json "$tmp/$name.$link.plan.json" >/dev/null
      printf '%s\t%s\t%s\n' "$name" "$link" "$tmp/$name.$link" >>"$rows"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$rows" "$passes" <<'PY'
import json, statistics, sys
rows, passes = sys.argv[1], int(sys.argv[2])
print("| layout | link | step (measured) | step (planner) | error | planner's comm over the link |")
print("|---|---|---|---|---|---|")
errors = []
for line in open(rows):
    name, link, prefix = line.rstrip("\n").split("\t")
    medians = []
    for p in range(1, passes + 1):
        steps = [json.loads(l) for l in open(f"{prefix}.{p}.jsonl") if '"step_time_s"' in l]
        medians.append(statistics.median(s["step_time_s"] for s in steps if s["step"] >= 1))
    measured = min(medians)
    plan = json.load(open(prefix + ".plan.json"))
    comm = ", ".join("%s %.3f s" % (c["axis"], c["total_s"]) for c in plan["comm"] if c["crosses_nodes"])
    err = plan["step_s"] / measured - 1
    errors.append(abs(err))
    print("| %s | %s | %.4f s | %.4f s | %+.1f%% | %s |" % (name, link, measured, plan["step_s"], 100 * err,
                                                         comm or "-"))
print("\nwithin 15%%: %d of %d; within 10%%: %d; largest %.1f%%" % (
    sum(e <= 0.15 for e in errors), len(errors), sum(e <= 0.10 for e in errors), 100 * max(errors)))
PY
