#!/usr/bin/env bash
# The congestion case on the fortunes data (docs/BENCHMARKS.md, "Congestion"):
# configs/tiny.toml with 4 experts, top 1, under ep 2 (dp 2), 50 steps, the
# router biased toward expert 0 (model.router_skew = 0.1); the same with the
# load-balancing loss (coef 0.1), with the bias rule (rate 0.01), and without
# the skew. Prints, per run, moe_max_load_over_mean (the busiest ep rank's rows
# over the mean) at step 0, averaged over steps 0-9 and 40-49, the hot rank
# named by the log, and the last loss.
#
#   bash bench/moe/congestion.sh BUILD_DIR
set -euo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/../.."
BIN="$BUILD/meshtrain"
OUT=${MOE_CONGESTION_OUT:-$(mktemp -d /tmp/meshtrain-congestion.XXXXXX)}
mkdir -p "$OUT"
if [[ ! -f data/fortunes/train.bin ]]; then
  echo "== data/fortunes missing: $BIN prepare --out data/fortunes --vocab-size 8192 (as make demo)"
  "$BIN" prepare --out data/fortunes --vocab-size 8192
fi
flags=(--config configs/tiny.toml --set train.steps=50 --set train.eval_every=0 --set train.log_every=10
  --set train.threads=1 --set model.n_experts=4 --set model.top_k=1 --set model.expert_ffn_hidden=80
  --dp 2 --set parallel.ep=2)
for spec in "skewed --set model.router_skew=0.1" \
  "aux --set model.router_skew=0.1 --set model.router_aux_loss_coef=0.1" \
  "bias --set model.router_skew=0.1 --set model.router_bias_rate=0.01" "unskewed"; do
  read -r name extra <<<"$spec"
  echo "== $name: mpirun -np 2 $BIN train ${flags[*]} $extra"
  # shellcheck disable=SC2086
  mpirun -np 2 --oversubscribe --allow-run-as-root --mca btl self,vader "$BIN" train "${flags[@]}" $extra \
    --metrics "$OUT/$name.jsonl" >"$OUT/$name.log" 2>&1
done
python3 - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]
print("| run | step 0 | steps 0-9 | steps 40-49 | log at step 0 | loss at step 49 |")
print("|---|---:|---:|---:|---|---:|")
for name in ("skewed", "aux", "bias", "unskewed"):
    s = [j for j in map(json.loads, open(f"{out}/{name}.jsonl")) if "moe_max_load_over_mean" in j]
    m = [j["moe_max_load_over_mean"] for j in s]
    hot = next((l.strip() for l in open(f"{out}/{name}.log") if "moe load" in l), "")
    hot = re.sub(r" \|.*", "", hot.replace("moe load: ", ""))
    print(f"| {name} | {m[0]:.2f} | {sum(m[:10]) / 10:.2f} | {sum(m[40:]) / 10:.2f} | {hot} | {s[-1]['loss']:.3f} |")
PY
