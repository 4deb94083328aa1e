#!/usr/bin/env bash
# Tensor-parallel decode against one process (docs/BENCHMARKS.md, "Generation
# with a KV cache"), side by side in one run:
#
#   bash bench/generate_tp.sh BUILD_DIR
#
# A model of the generate bench's shape (d_model 256, 4 layers, 4 query / 2 kv
# heads, ffn 1024, max_seq_len 512; vocabulary 1024 from a generated corpus,
# trained BENCH_GEN_STEPS steps so that it is not uniform) continues one prompt
# of about 256 tokens by 256 greedy tokens (EOS ignored: the tokenizer has one,
# so a continuation may stop early; the rates are per token). Run ROUNDS times,
# alternating: one process with 2 threads, then mpirun -np 2 --tp 2 with one
# thread per rank. Prints each run's decode and prefill tokens/s (stderr of
# rank 0), the ratio tp2 / one process, and whether the tokens are the same.
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${BENCH_GEN_ROUNDS:-2}
STEPS=${BENCH_GEN_STEPS:-20}
bin=$BUILD/meshtrain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/corpus"
for i in $(seq 1 2000); do
  echo "line $i: the quick brown fox $((i * 7 % 101)) jumps over $((i % 13)) lazy dogs and $((i % 17)) cats"
done >"$tmp/corpus/c"
"$bin" prepare --text "$tmp/corpus" --out "$tmp/data" --vocab-size 1024 >/dev/null
"$bin" train --config /dev/null --set data.dir="$tmp/data" --set model.vocab_size=1024 --set model.d_model=256 \
  --set model.n_layers=4 --set model.n_heads=4 --set model.n_kv_heads=2 --set model.ffn_hidden=1024 \
  --set model.max_seq_len=512 --set train.seq_len=128 --set train.batch_size=4 --set train.microbatch_size=4 \
  --set train.steps="$STEPS" --set train.eval_every=0 --quiet --save "$tmp/model" >/dev/null
prompt=$(for i in $(seq 1 40); do printf 'line %d: the quick brown fox ' "$i"; done)
g=("$bin" generate --model "$tmp/model" --tokenizer "$tmp/data/tokenizer.model" --prompt "$prompt"
  --max-new-tokens 256 --output jsonl)
rate() { sed -n "s/.*$1 \([0-9]*\) tokens [0-9.]* s (\([0-9.]*\) tok\/s).*/\1 \2/p" "$2" | head -n1; }
printf '%-6s %-10s %8s %14s %8s %14s\n' round layout prefill "prefill tok/s" decode "decode tok/s"
for r in $(seq 1 "$ROUNDS"); do
  OMP_NUM_THREADS=2 "${g[@]}" --threads 2 >"$tmp/one.jsonl" 2>"$tmp/one.err"
  OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe --allow-run-as-root --mca btl self,vader "${g[@]}" --tp 2 \
    --threads 1 >"$tmp/tp2.jsonl" 2>"$tmp/tp2.err"
  for l in one tp2; do
    read -r pn pr <<<"$(rate prefill "$tmp/$l.err")"
    read -r dn dr <<<"$(rate decode "$tmp/$l.err")"
    printf '%-6s %-10s %8s %14s %8s %14s\n' "$r" "$l" "$pn" "$pr" "$dn" "$dr"
    eval "${l}_rate=$dr"
  done
  same=no
  /usr/bin/python3 -c "import json,sys; a,b=[json.loads(open(f).readline())['tokens'] for f in sys.argv[1:]]; sys.exit(a!=b)" \
    "$tmp/one.jsonl" "$tmp/tp2.jsonl" && same=yes
  /usr/bin/python3 -c "import sys; print(f'round {sys.argv[1]}: tp2 decode / one process = {float(sys.argv[3])/float(sys.argv[2]):.2f}; same tokens: {sys.argv[4]}')" \
    "$r" "$one_rate" "$tp2_rate" "$same"
done
