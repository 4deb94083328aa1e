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
# Four data-parallel ranks (real processes) with ZeRO-1: the optimizer state is
# sharded over them; the result equals the one-process run (tests/dist/parity.sh).
ranks=${MESHTRAIN_DEMO_RANKS:-4}
echo "== mpirun -np $ranks meshtrain train --config configs/demo.toml --dp $ranks --zero 1"
mpirun -np "$ranks" --oversubscribe --allow-run-as-root --mca btl self,vader \
  "$bin" train --config configs/demo.toml --dp "$ranks" --zero 1 --print-mesh \
  --metrics runs/demo/metrics.jsonl --save runs/demo/model
echo "== meshtrain eval (validation windows)"
"$bin" eval --model runs/demo/model --data data/fortunes/val.bin --max-windows 64
echo "== meshtrain generate (greedy, three prompts in one batch, KV cache)"
"$bin" generate --model runs/demo/model --tokenizer data/fortunes/tokenizer.model --max-new-tokens 40 \
  --prompt "The meaning of life is" --prompt "Q: What is a computer?" --prompt "You will"
