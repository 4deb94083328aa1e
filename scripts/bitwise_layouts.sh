#!/usr/bin/env bash
# Records, or checks against a recording, the metrics and saved models of a
# fixed set of layouts, so that a change meant to keep behaviour can show it
# did: `check` requires every per-step loss, gradient norm and parameter to be
# bitwise equal to the recording (meshtrain compare --rtol 0).
#
#   scripts/bitwise_layouts.sh record DIR [BUILD]   # before the change
#   scripts/bitwise_layouts.sh check  DIR [BUILD]   # after it
#
# The model is the parity tests' tiny Llama (tests/dist/common.sh) with tied
# embeddings off and 4 layers, so every layout below is valid on it.
set -euo pipefail
mode=$1
dir=$(realpath -m "$2")
build=${3:-build}
bin=$(realpath "$build/meshtrain")
mkdir -p "$dir"
tmp=$dir  # common.sh writes its corpus and token files under $tmp
source "$(dirname "$0")/../tests/dist/common.sh"
[ -f "$dir/data/train.bin" ] || make_data
tiny+=(--set model.n_layers=4 --set train.adam_eps=1e-5)

# name ranks flags...
layouts=(
  "one 1 --set train.microbatch_size=4"
  "dp2_zero1 2 --dp 2 --zero 1 --set train.microbatch_size=2"
  "dp4_zero3 4 --dp 4 --zero 3 --set train.microbatch_size=1"
  "tp2_sp 2 --tp 2 --set parallel.sp=true --set train.microbatch_size=4"
  "tp4_kvrep 4 --tp 4 --set train.microbatch_size=4"
  "dp2_tp2_zero3 4 --dp 2 --tp 2 --zero 3 --set train.microbatch_size=2"
  "pp2_1f1b 2 --pp 2 --set parallel.schedule=1f1b --set train.microbatch_size=2"
  "pp2_interleaved 2 --pp 2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.microbatch_size=1"
  "cp2_ring 2 --cp 2 --set parallel.cp_impl=ring --set train.microbatch_size=4"
  "cp2_allgather 2 --cp 2 --set parallel.cp_impl=allgather --set train.microbatch_size=4"
  "dp2_tp2_pp2 8 --dp 2 --tp 2 --pp 2 --zero 1 --set train.microbatch_size=2"
)

status=0
for spec in "${layouts[@]}"; do
  read -r name np flags <<<"$spec"
  # shellcheck disable=SC2086
  if [ "$mode" = record ]; then
    "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" $flags --metrics "$dir/$name.jsonl" --save "$dir/$name"
    echo "recorded $name"
  else
    "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" $flags --metrics "$dir/new_$name.jsonl" --save "$dir/new_$name"
    if out=$("$bin" compare "$dir/new_$name.jsonl" "$dir/$name.jsonl" --model-a "$dir/new_$name" \
      --model-b "$dir/$name" --rtol 0) &&
      cmp -s "$dir/new_$name/model.safetensors" "$dir/$name/model.safetensors" &&
      diff <(grep -o '"grad_norm":[^,]*' "$dir/new_$name.jsonl") \
        <(grep -o '"grad_norm":[^,]*' "$dir/$name.jsonl") >/dev/null; then
      echo "bitwise $name"
    else
      echo "DIFFERS $name: $out"
      status=1
    fi
  fi
done
exit $status
