#!/usr/bin/env bash
# The demo: tokenize Debian's fortunes, train configs/demo.toml, then generate
# from the trained model. Called by `make demo` after the build.
set -euo pipefail
build=${1:-build}
bin="$build/meshtrain"
cd "$(dirname "$0")/.."

if [ ! -s data/fortunes/train.bin ]; then
  echo "== meshtrain prepare: BPE tokenizer and token files from /usr/share/games/fortunes"
  "$bin" prepare --out data/fortunes --vocab-size 8192
fi
mkdir -p runs/demo
# Two data-parallel ranks (real processes) with ZeRO-1: the optimizer state is
# sharded over them; the result equals the one-process run (tests/dist/parity.sh).
# Two, not more, on a 2-core machine: a rank per core leaves the cores to the
# compute, and with more ranks than cores the gradient all-reduce's copies run
# on the cores the backward needs, so almost none of it hides behind the backward.
ranks=${MESHTRAIN_DEMO_RANKS:-2}
steps=$(sed -n 's/^steps = //p' configs/demo.toml)
echo "== the demo trains $steps steps, then evaluates and generates: under 5 minutes on a 2-core machine"
echo "   (4.4 min measured with heavy other load, README); the trainer prints its own estimate after two"
echo "   steps and the time left (eta) on every log line"
echo "== mpirun -np $ranks meshtrain train --config configs/demo.toml --dp $ranks --zero 1"
mpirun -np "$ranks" --oversubscribe --allow-run-as-root --mca btl self,vader \
  "$bin" train --config configs/demo.toml --dp "$ranks" --zero 1 --print-mesh \
  --metrics runs/demo/metrics.jsonl --save runs/demo/model
echo "== meshtrain eval (validation windows)"
"$bin" eval --model runs/demo/model --data data/fortunes/val.bin --max-windows 64
echo "== meshtrain generate (sampled: temperature 0.8, top-k 40; three prompts in one batch, KV cache)"
"$bin" generate --model runs/demo/model --tokenizer data/fortunes/tokenizer.model --max-new-tokens 40 \
  --temperature 0.8 --top-k 40 --seed 1 \
  --prompt "The meaning of life is" --prompt "Q: What is a computer?" --prompt "You will"
