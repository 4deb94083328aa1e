#!/usr/bin/env bash
# The congestion case (docs/BENCHMARKS.md "Congestion"): a router biased toward
# expert 0 (model.router_skew, a test knob: expert 0's selection bias starts at
# 0.1, above every gap between the initial router probabilities) under ep 2,
# 4 experts, top 1. Step 0 sends every token to expert 0, so the load report
# names ep rank 0 as hot at 2x the mean (+100%), in the metrics and in the log
# line. Over 50 steps, the load-balancing loss (coef 0.1) or the bias rule
# (rate 0.01) lowers the imbalance: the mean moe_max_load_over_mean of steps
# 40-49 is below the skewed run's.
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set model.n_experts=4 --set model.top_k=1 --set model.expert_ffn_hidden=24 --set train.steps=50
  --set train.microbatch_size=2 --set model.router_skew=0.1 --set train.log_every=10 --dp 2 --set parallel.ep=2)
args=()  # the tiny flags without --quiet: the log's load line is checked
for a in "${tiny[@]}"; do [[ $a == --quiet ]] || args+=("$a"); done
for spec in "skewed" "aux --set model.router_aux_loss_coef=0.1" "bias --set model.router_bias_rate=0.01"; do
  read -r name flags <<<"$spec"
  # shellcheck disable=SC2086
  "${mpi[@]}" -np 2 "$bin" train "${args[@]}" $flags --metrics "$tmp/$name.jsonl" >"$tmp/$name.log"
done
log=$(cat "$tmp/skewed.log")
if [[ "$log" == *"moe load: hot ep rank 0 at 2.00x the mean (+100%)"* ]]; then
  echo "ok   the log names the hot ep rank and its excess"
else
  echo "FAIL the log's load line: $(grep 'moe load' "$tmp/skewed.log" | head -2)"
  failures=$((failures + 1))
fi
if python3 - "$tmp" <<'PY'; then
import json, sys
def steps(name):
    return [j for j in map(json.loads, open(f"{sys.argv[1]}/{name}.jsonl")) if "moe_max_load_over_mean" in j]
s = steps("skewed")
assert len(s) == 50 and s[0]["moe_max_load_over_mean"] == 2.0 and s[0]["moe_busiest_ep_rank"] == 0, s[0]
late = {n: sum(j["moe_max_load_over_mean"] for j in steps(n)[40:]) / 10 for n in ("skewed", "aux", "bias")}
print("mean max load / mean, steps 40-49:", {n: round(v, 3) for n, v in late.items()})
assert late["aux"] < late["skewed"] and late["bias"] < late["skewed"], late
PY
  echo "ok   the aux loss and the bias rule lower the imbalance"
else
  echo "FAIL the imbalance did not go down"
  failures=$((failures + 1))
fi
[ "$failures" -eq 0 ] && echo "congestion: all checks pass" || exit 1
