#!/usr/bin/env bash
# Tensor-parallel decode against one process (docs/BENCHMARKS.md, "Generation
# with a KV cache"), side by side in one run:
#
#   bash bench/generate_tp.sh BUILD_DIR
#
# A model of the generate bench's shape (d_model 256, 4 layers, 4 query / 2 kv
# heads, ffn 1024; max_seq_len 1024, vocabulary 384 from a generated corpus,
# trained BENCH_GEN_STEPS steps so that it is not uniform) continues one prompt
# of 352 tokens by 256 greedy tokens (a continuation would stop early at EOS;
# the rates are per token). Run ROUNDS times, in turn: one process with 2
# threads (one2), one process with 1 thread (one1), and mpirun -np 2 --tp 2
# with one thread per rank (tp2: the same 2 cores). Prints each run's prefill
# and decode tokens/s (from the stderr line of one tp rank), the ratios of tp2
# decode to one2 and one1, and whether the tokens are the same.
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
  echo "%"
done >"$tmp/corpus/c"
"$bin" prepare --text "$tmp/corpus" --out "$tmp/data" --vocab-size 384 >/dev/null
"$bin" train --config /dev/null --set data.dir="$tmp/data" --set model.vocab_size=384 --set model.d_model=256 \
  --set model.n_layers=4 --set model.n_heads=4 --set model.n_kv_heads=2 --set model.ffn_hidden=1024 \
  --set model.max_seq_len=1024 --set train.seq_len=128 --set train.batch_size=4 --set train.microbatch_size=4 \
  --set train.steps="$STEPS" --set train.eval_every=0 --quiet --save "$tmp/model" >/dev/null
prompt=$(for i in $(seq 1 40); do printf 'line %d: the quick brown fox ' "$i"; done)
g=("$bin" generate --model "$tmp/model" --tokenizer "$tmp/data/tokenizer.model" --prompt "$prompt"
  --max-new-tokens 256 --output jsonl)
rate() { sed -n "s/.*$1 \([0-9]*\) tokens [0-9.]* s (\([0-9.]*\) tok\/s).*/\1 \2/p" "$2" | head -n1; }
printf '%-6s %-10s %8s %14s %8s %14s\n' round layout prefill "prefill tok/s" decode "decode tok/s"
for r in $(seq 1 "$ROUNDS"); do
  OMP_NUM_THREADS=2 "${g[@]}" --threads 2 >"$tmp/one2.jsonl" 2>"$tmp/one2.err"
  OMP_NUM_THREADS=1 "${g[@]}" --threads 1 >"$tmp/one1.jsonl" 2>"$tmp/one1.err"
  OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe --allow-run-as-root --mca btl self,vader "${g[@]}" --tp 2 \
    --threads 1 >"$tmp/tp2.jsonl" 2>"$tmp/tp2.err"
  for l in one2 one1 tp2; do
    read -r pn pr <<<"$(rate prefill "$tmp/$l.err")"
    read -r dn dr <<<"$(rate decode "$tmp/$l.err")"
    printf '%-6s %-10s %8s %14s %8s %14s\n' "$r" "$l" "$pn" "$pr" "$dn" "$dr"
    eval "${l}_rate=$dr"
  done
  same=no
  /usr/bin/python3 -c "import json,sys; a,b=[json.loads(open(f).readline())['tokens'] for f in sys.argv[1:]]; sys.exit(a!=b)" \
    "$tmp/one2.jsonl" "$tmp/tp2.jsonl" && same=yes
  /usr/bin/python3 -c "import sys; r, a, b, t, s = sys.argv[1:]; t = float(t)
print(f'round {r}: tp2 decode / one2 = {t / float(a):.2f}, / one1 = {t / float(b):.2f}; same tokens: {s}')" \
    "$r" "$one2_rate" "$one1_rate" "$tp2_rate" "$same"
done
