#!/usr/bin/env bash
# Mixture of experts, measured side by side in one run, as ratios
# (docs/BENCHMARKS.md, "Mixture of experts and expert parallelism").
#
#   bash bench/moe/moe_bench.sh BUILD_DIR
#
# On configs/bench.toml cut to MOE_BENCH_LAYERS (4) layers, global batch 8 × 256:
# (a) the MoE layer against a dense SwiGLU of the same active parameters:
#     dense (ffn_hidden 1376) and MoE (8 experts, top 2, expert_ffn_hidden 688:
#     2 × 688 = 1376 active) against the same model with ffn_hidden 8 (the
#     rest of the step: attention, norms, embedding, LM head, optimizer); an
#     FFN's time per step is the run's median step less the rest's, so the
#     layer ratio is (dense − rest) / (moe − rest) and the whole-step ratio
#     is printed beside it; 1 process × 2 threads. The step includes AdamW
#     over every expert's parameters (4× the dense FFN's); the layer alone is
#     the same difference of the forward + backward kernel times (--profile);
# (b) ep 2 (2 processes × 1 thread, dp 2) against 1 process × 2 threads on the
#     MoE model, tokens/s;
# (c) one ep 2 step with --explain: the elements each all-to-all-v moves, per
#     rank, layer and direction, from the comm ledger, against the count the
#     step's routing implies (moe_tokens_per_expert): a rank sends its N·k rows
#     to the experts and sends back the rows its experts took.
# Runs of (a) and (b) are interleaved — rest, dense, moe, ep2, rest, … — and the
# best (lowest) median of each kind is kept.
# Environment: MOE_BENCH_STEPS (5), MOE_BENCH_SKIP (2), MOE_BENCH_REPEATS (2),
# MOE_BENCH_LAYERS (4), MOE_BENCH_OUT (a temporary folder with every run's metrics and log).
set -euo pipefail

BUILD=${1:-build}
CONFIG=configs/bench.toml
STEPS=${MOE_BENCH_STEPS:-5}
SKIP=${MOE_BENCH_SKIP:-2}
REPEATS=${MOE_BENCH_REPEATS:-2}
LAYERS=${MOE_BENCH_LAYERS:-4}

cd "$(dirname "$0")/../.."
BIN="$BUILD/meshtrain"
[[ -x "$BIN" ]] || { echo "moe_bench.sh: $BIN not found: build first" >&2; exit 1; }
PY=$(command -v python3) || { echo "moe_bench.sh: python3 not found" >&2; exit 1; }
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --mca btl self,vader)
OUT=${MOE_BENCH_OUT:-$(mktemp -d /tmp/meshtrain-bench-moe.XXXXXX)}
mkdir -p "$OUT"
DATA_DIR=$("$PY" bench/moe/summarise.py data-dir "$CONFIG")
if [[ ! -f "$DATA_DIR/train.bin" ]]; then
  echo "== $DATA_DIR/train.bin missing: $BIN prepare --out $DATA_DIR"
  "$BIN" prepare --out "$DATA_DIR"
fi
echo "== moe bench: $CONFIG with $LAYERS layers, $STEPS steps per run (median of steps $SKIP..$((STEPS - 1))), $REPEATS rounds; results in $OUT"
echo "load before: $(uptime)"

base=(--config "$CONFIG" --set model.n_layers="$LAYERS" --set train.steps="$STEPS")
moe=(--set model.n_experts=8 --set model.top_k=2 --set model.expert_ffn_hidden=688)
train() {  # $1: name, $2: ranks (0: no mpirun), then extra arguments
  local name=$1 np=$2
  shift 2
  local cmd=("$BIN" train "${base[@]}" --metrics "$OUT/$name.jsonl" "$@")
  if [[ $np -gt 0 ]]; then cmd=("${MPIRUN[@]}" -np "$np" "${cmd[@]}"); fi
  echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) -- $name: ${cmd[*]}" | tee "$OUT/$name.log"
  "${cmd[@]}" >>"$OUT/$name.log" 2>&1 || { echo "moe_bench.sh: run $name failed:" >&2; cat "$OUT/$name.log" >&2; exit 1; }
  "$PY" bench/moe/summarise.py run-line "$OUT/$name.jsonl" "$SKIP" 0
}
for r in $(seq 1 "$REPEATS"); do
  train "rest_r$r" 0 --set train.threads=2 --set model.ffn_hidden=8 --profile
  train "dense_r$r" 0 --set train.threads=2 --profile
  train "moe_r$r" 0 --set train.threads=2 "${moe[@]}" --profile
  train "ep2_r$r" 2 --dp 2 --set parallel.ep=2 --set train.threads=1 --set train.microbatch_size=4 "${moe[@]}"
done
"${MPIRUN[@]}" -np 2 "$BIN" train "${base[@]}" --dp 2 --set parallel.ep=2 --set train.threads=1 \
  --set train.microbatch_size=4 --set train.steps=1 "${moe[@]}" --explain --metrics "$OUT/ledger.jsonl" \
  >"$OUT/explain.txt" 2>&1
echo "load after: $(uptime)"
"$PY" bench/moe/summarise.py report "$OUT" "$CONFIG" "$SKIP"
