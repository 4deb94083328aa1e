#!/usr/bin/env bash
# prepare -> train (with metrics and save) -> eval -> generate, through the binary.
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/corpus"
for i in $(seq 1 300); do
  echo "the cat sat on the mat number $i and the dog sat on the log"
  echo "%"
done >"$tmp/corpus/c"
"$bin" prepare --text "$tmp/corpus" --out "$tmp/data" --vocab-size 300
args=(--config /dev/null --set data.dir="$tmp/data" --set model.vocab_size=300 --set model.d_model=32
  --set model.n_layers=2 --set model.n_heads=2 --set model.n_kv_heads=2 --set model.ffn_hidden=64
  --set model.max_seq_len=32 --set train.seq_len=32 --set train.batch_size=4 --set train.microbatch_size=2
  --set train.steps=30 --set train.eval_every=10 --set train.eval_windows=4 --set train.lr=1e-2 --quiet)
"$bin" train "${args[@]}" --metrics "$tmp/m.jsonl" --save "$tmp/model"
test "$(grep -c '"loss"' "$tmp/m.jsonl")" -eq 30
test "$(grep -c '"val_loss"' "$tmp/m.jsonl")" -eq 3
test -s "$tmp/model/config.json" && test -s "$tmp/model/model.safetensors"
out=$("$bin" eval --model "$tmp/model" --data "$tmp/data/val.bin" --seq-len 32)
echo "$out"
loss=$(tail -n1 <<<"$out" | awk '$1 == "loss" {print $2}')
first=$(grep -m1 '"loss"' "$tmp/m.jsonl" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
echo "first training loss $first, final eval loss $loss"
awk -v a="$loss" -v b="$first" 'BEGIN { exit !(a < 0.7 * b) }'
"$bin" generate --model "$tmp/model" --tokenizer "$tmp/data/tokenizer.model" --prompt "the cat" --max-new-tokens 8
"$bin" train --help >"$tmp/help.txt"
grep -q "train.microbatch_size" "$tmp/help.txt"
# compare: the same run again is the same; another seed is not (exit 1, naming the worst step).
"$bin" train "${args[@]}" --metrics "$tmp/m2.jsonl" --save "$tmp/model2"
out=$("$bin" compare "$tmp/m2.jsonl" "$tmp/m.jsonl" --model-a "$tmp/model2" --model-b "$tmp/model")
echo "$out"
grep -q "^grad_norm: 30 steps, worst relative difference" <<<"$out"
# compare checks the gradient norm too: the same losses with one step's grad_norm changed differ.
sed '/"step":7,/s/"grad_norm":[^,}]*/"grad_norm":123.5/' "$tmp/m.jsonl" >"$tmp/m_gn.jsonl"
test "$(diff "$tmp/m.jsonl" "$tmp/m_gn.jsonl" | grep -c '^>')" -eq 1  # one line changed
set +e
out=$("$bin" compare "$tmp/m_gn.jsonl" "$tmp/m.jsonl")
rc=$?
set -e
echo "$out"
test "$rc" -eq 1
grep -q "^losses: 30 steps, worst relative difference 0" <<<"$out"
grep -q "^grad_norm: 30 steps, worst relative difference .* at step 7 (1.235000e+02 vs .*EXCEEDS rtol" <<<"$out"
grep -q "DIFFERENT beyond rtol" <<<"$out"
"$bin" train "${args[@]}" --set train.seed=99 --set train.steps=3 --metrics "$tmp/m3.jsonl"
grep -m 3 '"loss"' "$tmp/m.jsonl" >"$tmp/m1-3.jsonl"  # the first 3 step lines (after the header); -m, not | head: under pipefail head's early exit can kill grep by SIGPIPE
set +e
out=$("$bin" compare "$tmp/m3.jsonl" "$tmp/m1-3.jsonl")
rc=$?
set -e
echo "$out"
test "$rc" -eq 1
grep -q "DIFFERENT beyond rtol" <<<"$out"
grep -q "worst relative difference" <<<"$out"
echo "end to end ok"
