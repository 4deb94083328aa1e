#!/usr/bin/env bash
# parallel.tp_overlap: the chunked, overlapped TP collectives give bitwise the
# losses, gradient norms and parameters of tp_overlap = false, at tp 2 and 4,
# with and without SP (docs/PARALLELISM.md "Overlapping TP communication"),
# and at a token count the chunks do not divide (seq_len 10: 10 rows in 4
# chunks, 5 SP rows in 4). --explain shows the chunks, so that the test fails
# if the switch did nothing. (tp = 1 is refused: tests/cli/bad_input.sh.)
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set train.steps=6)

# check_same A B: bitwise equal losses, gradient norms and saved model.
check_same() {
  if cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors" &&
    diff <(grep -o '"\(loss\|grad_norm\)":[^,]*' "$tmp/$1.jsonl") \
      <(grep -o '"\(loss\|grad_norm\)":[^,]*' "$tmp/$2.jsonl") >/dev/null; then
    echo "ok   $1 = $2 bitwise"
  else
    echo "FAIL $1 differs from $2"
    failures=$((failures + 1))
  fi
}

for tp in 2 4; do
  for sp in false true; do
    for ov in false true; do
      run "tp${tp}_sp${sp}_ov${ov}" "$tp" --tp "$tp" --set parallel.sp="$sp" --set parallel.tp_overlap="$ov" \
        --set train.microbatch_size=4
    done
    check_same "tp${tp}_sp${sp}_ovtrue" "tp${tp}_sp${sp}_ovfalse"
  done
done

for ov in false true; do
  run "uneven_ov$ov" 2 --tp 2 --set parallel.sp=true --set train.seq_len=10 --set train.microbatch_size=1 \
    --set parallel.tp_overlap="$ov"
done
check_same uneven_ovtrue uneven_ovfalse

# Chunks in the ledger: o_proj's all-reduce of [64, 32] (microbatch 4 x 16 tokens)
# goes as 4 chunks of [16, 32]; under SP the q|k|v input arrives block by block.
"${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" --tp 2 --set parallel.tp_overlap=true --set train.steps=1 \
  --set train.microbatch_size=4 --explain >"$tmp/explain.txt"
n=$(grep -c '| tp | all_reduce     | \[16, 32\] | 512 elements | layer 1 attn o: reduce_from_tp forward$' \
  "$tmp/explain.txt" || true)
if [ "$n" = 16 ]; then  # 4 chunks x 2 microbatches (batch 8, microbatch 4) x 2 ranks
  echo "ok   --explain: o_proj's all-reduce in chunks"
else
  echo "FAIL --explain: $n chunked o_proj all-reduces, expected 16"
  grep 'layer 1 attn o' "$tmp/explain.txt" | head -20
  failures=$((failures + 1))
fi

finish "tp overlap"
