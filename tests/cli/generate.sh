#!/usr/bin/env bash
# meshtrain generate through the binary: text and jsonl output, chunked prefill
# equal to whole, a rope_scaling model, a mixture of experts on one process, tp2, pp2 and cp2, and bad input
# (every case a clear error).
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/corpus"
for i in $(seq 1 300); do
  echo "the cat sat on the mat number $i and the dog sat on the log"
  echo "%"
done >"$tmp/corpus/c"
"$bin" prepare --text "$tmp/corpus" --out "$tmp/data" --vocab-size 300 >/dev/null
"$bin" train --config /dev/null --set data.dir="$tmp/data" --set model.vocab_size=300 --set model.d_model=32 \
  --set model.n_layers=2 --set model.n_heads=2 --set model.n_kv_heads=2 --set model.ffn_hidden=64 \
  --set model.max_seq_len=32 --set train.seq_len=32 --set train.batch_size=4 --set train.microbatch_size=2 \
  --set train.steps=30 --set train.eval_every=0 --set train.lr=1e-2 --quiet --save "$tmp/model"
g=("$bin" generate --model "$tmp/model" --tokenizer "$tmp/data/tokenizer.model")
# text: each prompt followed by its continuation, one line each; nothing else on stdout.
"${g[@]}" --prompt "the cat" --prompt "the dog sat on" --max-new-tokens 6 >"$tmp/out.txt" 2>"$tmp/err.txt"
test "$(wc -l <"$tmp/out.txt")" -eq 2
head -n1 "$tmp/out.txt" | grep -q "^the cat"
grep -q "kv cache f32 .* bytes" "$tmp/err.txt"
# jsonl with log-probs; chunked prefill gives the same continuations.
"${g[@]}" --prompt "the cat" --prompt "the dog sat on" --max-new-tokens 6 --output jsonl --logprobs >"$tmp/a.jsonl"
"${g[@]}" --prompt "the cat" --prompt "the dog sat on" --max-new-tokens 6 --output jsonl --logprobs \
  --prefill-chunk 1 >"$tmp/b.jsonl"
/usr/bin/python3 - "$tmp/a.jsonl" "$tmp/b.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [x["index"] for x in a] == [0, 1], a
assert all(set(x) == {"index", "prompt", "text", "tokens", "stop", "logprobs"} for x in a), a
assert all(x["stop"] in ("eos", "length") and len(x["logprobs"]) == len(x["tokens"]) for x in a), a
assert [x["tokens"] for x in a] == [x["tokens"] for x in b], (a, b)
PY
# --prompts FILE, sampling, int8 cache.
printf 'the cat\nthe dog\n' >"$tmp/prompts.txt"
"${g[@]}" --prompts "$tmp/prompts.txt" --temperature 0.9 --top-k 20 --top-p 0.9 --seed 3 --kv-cache int8 \
  --max-new-tokens 4 --output jsonl >"$tmp/c.jsonl"
test "$(wc -l <"$tmp/c.jsonl")" -eq 2
# A model with RoPE scaling: written to config.json, read back by generate.
"$bin" train --config /dev/null --set data.dir="$tmp/data" --set model.vocab_size=300 --set model.d_model=32 \
  --set model.n_layers=1 --set model.n_heads=2 --set model.n_kv_heads=2 --set model.ffn_hidden=64 \
  --set model.max_seq_len=64 --set train.seq_len=16 --set train.batch_size=2 --set train.microbatch_size=2 \
  --set train.steps=2 --set train.eval_every=0 --quiet \
  --set model.rope_scaling=yarn,factor=4,original_max_position_embeddings=16 --save "$tmp/yarn"
grep -q '"rope_type": "yarn"' "$tmp/yarn/config.json"
"$bin" generate --model "$tmp/yarn" --tokenizer "$tmp/data/tokenizer.model" --prompt "the cat" \
  --max-new-tokens 40 >/dev/null
# Train short, extend: --init-from with another rope_scaling is refused unless train.init_allow lists it.
ext=(--config /dev/null --set data.dir="$tmp/data" --set model.vocab_size=300 --set model.d_model=32
  --set model.n_layers=2 --set model.n_heads=2 --set model.n_kv_heads=2 --set model.ffn_hidden=64
  --set train.batch_size=2 --set train.microbatch_size=2 --set train.steps=2 --set train.eval_every=0 --quiet
  --set model.max_seq_len=64 --set train.seq_len=64 --init-from "$tmp/model")
if "$bin" train "${ext[@]}" --set model.rope_scaling=linear,factor=2 2>"$tmp/e"; then exit 1; fi
grep -q "model.max_seq_len is 32 in .* but 64" "$tmp/e"
"$bin" train "${ext[@]}" --set model.rope_scaling=linear,factor=2 \
  --set train.init_allow=rope_scaling,max_seq_len 2>"$tmp/e"
grep -q "model.rope_scaling is none in .* but linear,factor=2 in this run's configuration; using" "$tmp/e"
# Dynamic scaling in training depends on the sequence length: under cp (global positions, L = T·cp) the
# run equals the one-process run.
dyn=(--config /dev/null --set data.dir="$tmp/data" --set model.vocab_size=300 --set model.d_model=32
  --set model.n_layers=2 --set model.n_heads=2 --set model.n_kv_heads=2 --set model.ffn_hidden=64
  --set model.max_seq_len=32 --set train.seq_len=32 --set train.batch_size=2 --set train.microbatch_size=2
  --set train.steps=3 --set train.eval_every=0 --quiet
  --set model.rope_scaling=dynamic,factor=2,original_max_position_embeddings=8)
# The bounds: derived from d1's own distance from a float64 run of the same steps (derive_bounds of
# tests/dist/common.sh: train_reference.py, which builds the dynamic tables from Hugging Face's
# formulas, and a twin in other microbatches; 10 x max(d, N u)); 1e-5 without torch.
"$bin" train "${dyn[@]}" --metrics "$tmp/d1.jsonl" --save "$tmp/d1"
timeout 120 mpirun -np 2 --oversubscribe --allow-run-as-root "$bin" train "${dyn[@]}" --cp 2 \
  --metrics "$tmp/d2.jsonl" --save "$tmp/d2"
"$bin" train "${dyn[@]}" --set model.rope_scaling=none --metrics "$tmp/d0.jsonl" --save "$tmp/d0"
(
  set +e
  source "$(dirname "$0")/../dist/common.sh"
  export OMP_NUM_THREADS=2
  rtol=(1e-5 1e-5 1e-5)
  derive_bounds d1
  [ "$failures" -eq 0 ] || exit 1
  [ -e "$tmp/d1.bounds" ] && read -r -a rtol <"$tmp/d1.bounds"
  cmp=(--rtol "${rtol[0]}" --grad-norm-rtol "${rtol[1]}" --tensor-rtol "${rtol[2]}" --model-b "$tmp/d1")
  out=$("$bin" compare "$tmp/d2.jsonl" "$tmp/d1.jsonl" --model-a "$tmp/d2" "${cmp[@]}") &&
    grep -q "^losses: 3 steps" <<<"$out" ||
    { echo "dynamic scaling under cp 2 is not the one-process run within ${rtol[*]}: $out"; exit 1; }
  echo "dynamic scaling, cp 2 against one process: $(tr '\n' ' ' <<<"$out")"
  if "$bin" compare "$tmp/d0.jsonl" "$tmp/d1.jsonl" --model-a "$tmp/d0" "${cmp[@]}" >/dev/null; then
    echo "dynamic scaling past L0 must change the run beyond the bounds ${rtol[*]}"
    exit 1
  fi
)

fails() {  # fails NEEDLE CMD...: the command exits non-zero and says NEEDLE on stderr
  local needle=$1
  shift
  if "$@" >/dev/null 2>"$tmp/e"; then
    echo "expected a failure: $*"
    exit 1
  fi
  grep -q -- "$needle" "$tmp/e" || {
    echo "expected '$needle' in:"
    cat "$tmp/e"
    exit 1
  }
}
fails "prompt 0 has .* tokens; with --max-new-tokens 40 the KV cache needs" "${g[@]}" --prompt "the cat" \
  --max-new-tokens 40
fails "\-\-top-p (0) must be in (0, 1\]" "${g[@]}" --prompt "x" --top-p 0
fails "\-\-top-p (1.5) must be in (0, 1\]" "${g[@]}" --prompt "x" --top-p 1.5
fails "= 2 but the world has 1 rank" "${g[@]}" --prompt "x" --tp 2
fails "generate needs a prompt" "${g[@]}"
"$bin" prepare --text "$tmp/corpus" --out "$tmp/data2" --vocab-size 290 >/dev/null
fails "has 290 tokens but the model .* has a vocabulary of 300" "$bin" generate --model "$tmp/model" \
  --tokenizer "$tmp/data2/tokenizer.model" --prompt "x"
cp -r "$tmp/model" "$tmp/bad"
/usr/bin/python3 - "$tmp/bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_scaling"] = {"rope_type": "ntk", "factor": 2.0}
json.dump(c, open(sys.argv[1], "w"))
PY
fails "unknown RoPE scaling type 'ntk'" "$bin" generate --model "$tmp/bad" --tokenizer "$tmp/data/tokenizer.model" \
  --prompt "x"
# A mixture of experts generates through the training layer (src/model/llama_decode.cpp): tp2 (the experts
# whole on each rank, the attention split by heads), pp2 and cp2 (the experts on each rank's block of rows)
# give the one-process tokens, greedy.
"$bin" train --config /dev/null --set data.dir="$tmp/data" --set model.vocab_size=300 --set model.d_model=32 \
  --set model.n_layers=2 --set model.n_heads=2 --set model.n_kv_heads=2 --set model.n_experts=4 \
  --set model.top_k=2 --set model.expert_ffn_hidden=16 --set model.max_seq_len=32 --set train.seq_len=32 \
  --set train.batch_size=4 --set train.microbatch_size=2 --set train.steps=20 --set train.lr=1e-2 \
  --set train.eval_every=0 --quiet --save "$tmp/moe"
moe=("$bin" generate --model "$tmp/moe" --tokenizer "$tmp/data/tokenizer.model" --prompt "the cat"
  --prompt "the dog sat on the" --max-new-tokens 12 --output jsonl --threads 1)
"${moe[@]}" >"$tmp/moe1.jsonl" 2>/dev/null
for lay in "--tp 2" "--pp 2" "--cp 2"; do
  # shellcheck disable=SC2086 # the layout flags split on purpose
  timeout 120 mpirun -np 2 --oversubscribe --allow-run-as-root "${moe[@]}" $lay >"$tmp/moe2.jsonl" 2>/dev/null
  /usr/bin/python3 - "$tmp/moe1.jsonl" "$tmp/moe2.jsonl" "$lay" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == 2 and all(len(x["tokens"]) > 0 for x in a), a
assert [x["tokens"] for x in a] == [x["tokens"] for x in b], (sys.argv[3], a, b)
PY
done
# Under mpirun with two ranks and no layout flags: the world does not match the layout, said once, non-zero
# (tests/dist/generate_layouts.sh runs the layouts themselves).
set +e
timeout 60 mpirun -np 2 --oversubscribe --allow-run-as-root "${g[@]}" --prompt "x" >/dev/null 2>"$tmp/e"
rc=$?
set -e
test "$rc" -ne 0
test "$(grep -c "= 1 but the world has 2 ranks" "$tmp/e")" -eq 1
echo "generate ok"
