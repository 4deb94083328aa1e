#!/usr/bin/env bash
# The long-context study (docs/BENCHMARKS.md, "Long context"): train
# bench/longctx/model.toml at 128 tokens on fortunes mixed with pass-key
# documents, then evaluate it out to 1024 tokens under each RoPE scaling:
#   - the mean loss by position bucket on held-out fortunes (meshtrain eval --position-buckets),
#   - the pass-key probe: a key hidden at several depths of filler text of 128..1024 tokens,
#     retrieved by greedy meshtrain generate.
# Usage: bash bench/longctx/run.sh [BUILD]   (results in runs/longctx/, summary on stdout)
# Steps whose output exists are skipped (delete runs/longctx/ to start over).
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
bin="$PWD/$build/meshtrain"
py=/usr/bin/python3
here=bench/longctx
out=${LONGCTX_OUT:-runs/longctx}
threads=${LONGCTX_THREADS:-1}  # one thread: steadier on a shared 2-core machine
trials=${LONGCTX_TRIALS:-10}
mkdir -p "$out"

if [ ! -s "$out/data/val.bin" ]; then
  "$py" "$here/passkey.py" corpus --out "$out/corpus.txt" --share 0.5 --seed 1
  "$bin" prepare --text "$out/corpus.txt" --out "$out/data" --vocab-size 2048
fi
if [ ! -s "$out/model/config.json" ]; then
  "$bin" train --config "$here/model.toml" --set data.dir="$out/data" --set train.threads="$threads" \
    --metrics "$out/metrics.jsonl" --save "$out/model" | tee "$out/train.log"
fi

# One model directory per scaling: the trained weights, config.json with
# max_position_embeddings 1024 and the scaling (factor 8 = 1024 / 128).
scalings=(none linear dynamic yarn)
for s in "${scalings[@]}"; do
  d="$out/eval-$s"
  mkdir -p "$d"
  ln -sf "$(realpath "$out/model/model.safetensors")" "$d/model.safetensors"
  "$py" - "$out/model/config.json" "$d/config.json" "$s" <<'EOF'
import json, sys
src, dst, kind = sys.argv[1:]
c = json.load(open(src))
c["max_position_embeddings"] = 1024
c.pop("rope_scaling", None)
if kind != "none":
    c["rope_scaling"] = {"rope_type": kind, "factor": 8.0}
    if kind in ("dynamic", "yarn"):
        c["rope_scaling"]["original_max_position_embeddings"] = 128
json.dump(c, open(dst, "w"), indent=2)
EOF
done

# (a) Loss by position: 1024-token windows of held-out fortunes, 8 buckets of 128.
for s in "${scalings[@]}"; do
  "$bin" eval --model "$out/eval-$s" --data "$out/data/val.bin" --seq-len 1024 --position-buckets 8 \
    --threads "$threads" >"$out/loss-$s.txt"
done
"$bin" eval --model "$out/model" --data "$out/data/val.bin" --seq-len 128 --threads "$threads" >"$out/loss-128.txt"

# (b) The pass-key probe. Tokens per filler sentence, measured with the
# tokenizer: the prefill of 0 and of 100 filler sentences.
prefill_tokens() {  # prompts file -> the prefill token count generate reports (one batch)
  "$bin" generate --model "$out/eval-none" --tokenizer "$out/data/tokenizer.model" --prompts "$1" \
    --max-new-tokens 1 --batch-size 1000 --threads "$threads" --output jsonl 2>&1 >/dev/null |
    sed -n 's/.*prefill \([0-9]*\) tokens.*/\1/p'
}
"$py" "$here/passkey.py" probe --out "$out/cal0.txt" --keys "$out/cal0.keys" --sentences 1 --depth 0 --trials 1
"$py" "$here/passkey.py" probe --out "$out/cal100.txt" --keys "$out/cal100.keys" --sentences 101 --depth 0 --trials 1
t0=$(prefill_tokens "$out/cal0.txt")
t100=$(prefill_tokens "$out/cal100.txt")
new=8  # " 12345." and room
: >"$out/probe.tsv"
for len in 128 256 512 1024; do
  # Prompt + new tokens fit `len` with 4 to spare (the cache holds 1024 at most).
  n=$(( (len - new - 4 - t0) * 100 / (t100 - t0) + 1 ))
  prompts="$out/probe-$len.txt"
  keys="$out/probe-$len.keys"
  : >"$prompts"
  : >"$keys"
  for depth in 0.1 0.3 0.5 0.7 0.9; do
    "$py" "$here/passkey.py" probe --out "$out/p.txt" --keys "$out/k.txt" --sentences "$n" --depth "$depth" \
      --trials "$trials" --seed "$len"
    cat "$out/p.txt" >>"$prompts"
    cat "$out/k.txt" >>"$keys"
  done
  for s in "${scalings[@]}"; do
    "$bin" generate --model "$out/eval-$s" --tokenizer "$out/data/tokenizer.model" --prompts "$prompts" \
      --max-new-tokens "$new" --batch-size "$trials" --threads "$threads" --output jsonl \
      >"$out/gen-$s-$len.jsonl" 2>"$out/gen-$s-$len.err"
    "$py" "$here/summarise.py" probe-cell "$s" "$len" "$trials" "$keys" "$out/gen-$s-$len.jsonl" \
      "$out/gen-$s-$len.err" >>"$out/probe.tsv"
  done
done
"$py" "$here/summarise.py" report "$out"
