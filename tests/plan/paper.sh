#!/usr/bin/env bash
# meshtrain plan against Narayanan et al. 2021 (arXiv:2104.04473), Table 1:
# the per-GPU throughput of four rows on their cluster (a100-8x-ib, whose
# numbers come from datasheets, docs/PLANNER.md), counted as the paper counts
# it — 96·B·s·l·h²·(1 + s/6h + V/16lh) FLOPs per step (full recomputation) —
# within ±15% of the paper's figure. The layout is the paper's t, p and dp with
# its software of the time (no ZeRO, no sequence parallelism, full
# recomputation, the attention scores materialised, the gradient all-reduce
# flat and after the backward); the planner picks the microbatch size and
# interleaving.
set -euo pipefail
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
# config devices batch t p paper-TFLOP/s
for row in "gpt-1.7b 32 512 1 1 137" "gpt-18b 256 1024 8 1 135" "gpt-310b 1920 2160 8 16 155" \
  "gpt-1t 3072 3072 8 64 163"; do
  read -r model n batch t p paper <<<"$row"
  dp=$((n / (t * p)))
  "$bin" plan --config "$src/configs/plan/$model.toml" --machine a100-8x-ib --devices "$n" --global-batch "$batch" \
    --layout "dp$dp,tp$t,pp$p,cp1,zero0,nosp,nohier,recompute=full" --attention materialized --grad-overlap none \
    --top 1 --json "$tmp/$model.json" >"$tmp/$model.txt"
  /usr/bin/python3 - "$tmp/$model.json" "$src/configs/plan/$model.toml" "$n" "$batch" "$paper" <<'PY' || status=1
import json, sys, tomllib
plan, cfg, n, batch, paper = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
m = tomllib.load(open(cfg, "rb"))["model"]
s, l, h, V = 2048, m["n_layers"], m["d_model"], m["vocab_size"]
best = json.load(open(plan))["best"][0]
flops = 96 * batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
tflops = flops / best["step_s"] / n / 1e12
err = tflops / paper - 1
print(f"{cfg.split('/')[-1]}: {best['layout']}: {tflops:.1f} TFLOP/s per GPU, paper {paper:.0f} ({err:+.1%})")
sys.exit(0 if abs(err) <= 0.15 else 1)
PY
done
exit $status
