#!/usr/bin/env bash
# The kernel seam under the fake device (train.device = fake; docs/ARCHITECTURE.md
# "The kernel seam"): every tensor lives behind pointers that fault if the host
# dereferences them, the kernels untag and run the cpu code, and collectives
# stage device buffers through host memory. Checks:
#   - each covered layout (dp 4 with the hierarchical all-reduce among them) trains bitwise as under cpu (losses, gradient norms,
#     saved model: compare --rtol 0);
#   - the last step's crossings equal the analytic list (number and bytes):
#     per microbatch of N = mb·T tokens, the stage with the embedding mirrors its
#     ids (4N bytes), the stage with the head its targets (4N) and copies its
#     per-token losses out (4N), every stage mirrors the positions (4N); the
#     ring of context parallelism reads its blocks' positions, a mixture of
#     experts plans its route on the host (both counted below); nothing else
#     crosses outside the collectives' staging;
#   - a checkpoint written under fake resumes under cpu bitwise;
#   - generate under fake (one process greedy and sampled with chunked prefill,
#     tp2, pp2, a mixture of experts) prints byte for byte what it prints under
#     cpu, and one prompt's crossings equal the analytic list;
#   - the devices it does not cover, cuda, and an unknown name are refused by name.
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/dist/common.sh
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set train.steps=3)
moe="--set model.n_experts=4 --set model.top_k=2 --set model.expert_ffn_hidden=24"

layouts=(
  "one 1 --set train.microbatch_size=4"
  "dp2_zero1 2 --dp 2 --zero 1 --set train.microbatch_size=2"
  "dp2_zero3 2 --dp 2 --zero 3 --set train.microbatch_size=2"
  "dp4_hier 4 --dp 4 --set parallel.dp_allreduce=hierarchical --set parallel.bucket_mb=0.02 --set train.microbatch_size=2"
  "tp2_sp 2 --tp 2 --set parallel.sp=true --set train.microbatch_size=4"
  "tp2_overlap 2 --tp 2 --set parallel.tp_overlap=true --set train.microbatch_size=4"
  "pp2_1f1b 2 --pp 2 --set train.microbatch_size=2"
  "pp2_interleaved 2 --pp 2 --set model.n_layers=4 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.microbatch_size=1"
  "tp2_dropout 2 --tp 2 --set model.attention_dropout=0.1 --set model.hidden_dropout=0.1 --set train.microbatch_size=4"
  "recompute_lamb 1 --set train.recompute=true --set train.optimizer=lamb --set train.microbatch_size=4"
  "tp2_bf16 2 --tp 2 --set train.precision=bf16 --set train.microbatch_size=4"
  "cp2_ring 2 --cp 2 --set train.microbatch_size=4"
  "cp2_allgather 2 --cp 2 --set parallel.cp_impl=allgather --set train.microbatch_size=4"
  "cp2_ulysses 2 --cp 2 --set parallel.cp_impl=ulysses --set train.microbatch_size=4"
  "moe_one 1 $moe --set train.microbatch_size=4"
  "ep2_moe 2 --dp 2 --set parallel.ep=2 $moe --set train.microbatch_size=2"
  "tp2d_2x2 4 --tp 4 --set parallel.tp2d=2,2 --set model.n_kv_heads=4 --set train.microbatch_size=4"
)
for spec in "${layouts[@]}"; do
  read -r name np flags <<<"$spec"
  for dev in cpu fake; do
    # shellcheck disable=SC2086
    timeout 120 "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" $flags --set train.device=$dev \
      --metrics "$tmp/${name}_$dev.jsonl" --save "$tmp/${name}_$dev" 2>"$tmp/${name}_$dev.err" >/dev/null ||
      { echo "FAIL $name ($dev): the run failed"; tail -3 "$tmp/${name}_$dev.err"; failures=$((failures + 1)); }
  done
  if "$bin" compare --rtol 0 "$tmp/${name}_cpu.jsonl" "$tmp/${name}_fake.jsonl" \
    --model-a "$tmp/${name}_cpu" --model-b "$tmp/${name}_fake" >"$tmp/$name.cmp" 2>&1; then
    echo "ok   $name: fake is bitwise cpu"
  else
    echo "FAIL $name: fake differs from cpu"; cat "$tmp/$name.cmp"; failures=$((failures + 1))
  fi
done

# crossings LAYOUT LABEL TO_N TO_BYTES FROM_N FROM_BYTES: rank 0's last-step line.
crossings() {
  local got want="to_host $3 $4 bytes, from_host $5 $6 bytes"
  got=$(sed -n "s/^crossings step [0-9]* $2: //p" "$tmp/$1_fake.err")
  if [ "$got" = "$want" ]; then
    echo "ok   $1 crossings '$2': $got"
  else
    echo "FAIL $1 crossings '$2': '$got', the analytic list says '$want'"; failures=$((failures + 1))
  fi
}
# One process, batch 8 in 2 microbatches of N = 4·16 = 64 tokens: ids and
# targets in (2·2, 4·256 bytes), positions in (2, 2·256), losses out (2, 2·256).
crossings one tokens 0 0 4 1024
crossings one positions 0 0 2 512
crossings one loss 2 512 0 0
# pp2 rank 0 (the embedding's stage), 4 microbatches of N = 2·16 = 32: ids only, no loss.
crossings pp2_1f1b tokens 0 0 4 512
crossings pp2_1f1b positions 0 0 4 512
# Dropout adds its coordinates: per microbatch the rows' sequences (8·4), and
# each residual row's sequence and position (tp2 without SP: 64 rows, 8 + 4 bytes).
crossings tp2_dropout positions 0 0 8 $((2 * (256 + 32 + 64 * 12)))
# cp2 ring, 2 microbatches of 4 sequences of T/cp = 8 tokens, 2 layers: each
# attention call copies the queries' and each of its P = 2 blocks' positions
# out (3 × 4·4·8 bytes), in the forward and again in the backward.
crossings cp2_ring "cp positions" 24 3072 0 0
# A mixture of experts, per MoE layer and microbatch of N tokens (k = 2, E = 4,
# dropless: R = N·k rows): out the choices (4Nk), the router probabilities
# (4NE) and logsumexps (4N); in the plan's order and row_of (8Nk each); and
# the load-balancing loss's gradient (4E) in the backward. One process: N = 64;
# ep2: N = 32 per rank; 2 layers, 2 microbatches.
crossings moe_one "moe routing" 12 7168 8 8192
crossings moe_one router 0 0 4 64
crossings ep2_moe "moe routing" 12 3584 8 4096
crossings ep2_moe router 0 0 4 64
for name in one pp2_1f1b tp2_dropout cp2_ring cp2_allgather moe_one ep2_moe tp2d_2x2; do
  extra=$(grep '^crossings' "$tmp/${name}_fake.err" |
    grep -v ' \(tokens\|positions\|loss\|comm staging\|init\|checkpoint\|cp positions\|moe routing\|router\):' || true)
  [ -z "$extra" ] || { echo "FAIL $name: crossings outside the list: $extra"; failures=$((failures + 1)); }
done

# A checkpoint written under fake at step 2 (a fault stops the run there) resumes
# under cpu to step 3 bitwise.
ck=(--set train.checkpoint_dir="$tmp/ck" --set train.checkpoint_every=2 --set train.microbatch_size=2)
MESHTRAIN_FAULT=throw:0:2 "${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" --dp 2 --zero 1 "${ck[@]}" \
  --set train.device=fake >/dev/null 2>&1 || true  # stopped after the step-2 checkpoint
[ -f "$tmp/ck/step-00000002/metadata.json" ] || { echo "FAIL no step-2 checkpoint under fake"; exit 1; }
"${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" --dp 2 --zero 1 "${ck[@]}" --resume auto --set train.device=cpu \
  --metrics "$tmp/resumed.jsonl" --save "$tmp/resumed" >/dev/null 2>&1
if "$bin" compare --rtol 0 "$tmp/dp2_zero1_cpu.jsonl" "$tmp/resumed.jsonl" --model-a "$tmp/dp2_zero1_cpu" \
  --model-b "$tmp/resumed" >"$tmp/resume.cmp" 2>&1; then
  echo "ok   a checkpoint saved under fake resumes under cpu bitwise"
else
  echo "FAIL resume of a fake checkpoint under cpu"; cat "$tmp/resume.cmp"; failures=$((failures + 1))
fi

# generate under fake against cpu, byte for byte (tokens and log-probs):
# gen NAME MODEL NP FLAGS...
gen() {
  local name=$1 model=$2 np=$3
  shift 3
  for dev in cpu fake; do
    "${mpi[@]}" -np "$np" "$bin" generate --model "$tmp/$model" --tokenizer "$tmp/data/tokenizer.model" \
      --max-new-tokens 8 --output jsonl --logprobs --threads 1 --device $dev "$@" \
      >"$tmp/gen_${name}_$dev.jsonl" 2>"$tmp/gen_${name}_$dev.err" ||
      { echo "FAIL generate $name ($dev): the run failed"; tail -3 "$tmp/gen_${name}_$dev.err"; failures=$((failures + 1)); }
  done
  if [ -s "$tmp/gen_${name}_cpu.jsonl" ] && cmp -s "$tmp/gen_${name}_cpu.jsonl" "$tmp/gen_${name}_fake.jsonl"; then
    echo "ok   generate $name: fake prints what cpu prints"
  else
    echo "FAIL generate $name: fake differs from cpu"; failures=$((failures + 1))
  fi
}
two=(--prompt "short" --prompt "fortune")
gen greedy one_cpu 1 "${two[@]}"
gen sampled one_cpu 1 "${two[@]}" --temperature 0.9 --top-p 0.95 --seed 11 --prefill-chunk 2 --batch-size 1
gen tp2 one_cpu 2 "${two[@]}" --tp 2
gen pp2 one_cpu 2 "${two[@]}" --pp 2
gen moe moe_one_cpu 1 "${two[@]}"
# One prompt of P tokens, S of them generated (S steps, the first the prefill;
# capacity P + 7): the ids in (4·(P + S − 1) bytes over S steps), the positions
# twice a step, the attention's and the layers' (2 · 4·(P + S − 1)), and the
# cache slots' once (4·(P + 7)); the logits out (4·V·S, V = 300); nothing else.
gen one one_cpu 1 --prompt "fortune"
python3 - "$tmp/gen_one_fake.jsonl" "$tmp/gen_one_fake.err" <<'PY' || failures=$((failures + 1))
import json, re, sys
S = len(json.loads(open(sys.argv[1]).readline())["tokens"])
got = {m[0]: tuple(map(int, m[1:])) for m in re.findall(
    r"crossings (.+?): to_host (\d+) (\d+) bytes, from_host (\d+) (\d+) bytes", open(sys.argv[2]).read())}
P = got.get("tokens", (0, 0, 0, 0))[3] // 4 - S + 1
want = {"tokens": (0, 0, S, 4 * (P + S - 1)), "logits": (S, 4 * 300 * S, 0, 0),
        "positions": (0, 0, 2 * S + 1, 8 * (P + S - 1) + 4 * (P + 7))}
if got == want:
    print(f"ok   generate crossings (P {P}, S {S}): {got}")
else:
    print(f"FAIL generate crossings: {got}, the analytic list says {want}")
    sys.exit(1)
PY
# What generate under fake does not cover, refused by name.
for spec in "cp 2 --cp 2" "int8 1 --kv-cache int8"; do
  read -r what np flags <<<"$spec"
  # shellcheck disable=SC2086
  if "${mpi[@]}" -np "$np" "$bin" generate --model "$tmp/one_cpu" --tokenizer "$tmp/data/tokenizer.model" \
    --prompt short --max-new-tokens 2 --device fake $flags >/dev/null 2>"$tmp/gen_refused.err"; then
    echo "FAIL generate $what under fake: not refused"; failures=$((failures + 1))
  elif grep -q "generate --device fake does not cover" "$tmp/gen_refused.err"; then
    echo "ok   generate $what under fake refused: $(grep -m1 'does not cover' "$tmp/gen_refused.err")"
  else
    echo "FAIL generate $what under fake: refused without naming it"; cat "$tmp/gen_refused.err"
    failures=$((failures + 1))
  fi
done

# refused NAME PATTERN FLAGS...: the run exits non-zero with PATTERN on stderr.
refused() {
  local name=$1 pattern=$2
  shift 2
  if "$bin" train "${tiny[@]}" "$@" >/dev/null 2>"$tmp/refused.err"; then
    echo "FAIL $name: not refused"; failures=$((failures + 1))
  elif grep -q "$pattern" "$tmp/refused.err"; then
    echo "ok   $name refused: $(head -1 "$tmp/refused.err")"
  else
    echo "FAIL $name: refused without '$pattern':"; cat "$tmp/refused.err"; failures=$((failures + 1))
  fi
}
refused "cuda" "train.device = cuda: the trainer has no CUDA kernel table" --set train.device=cuda
refused "fingerprint under fake" "fingerprint with train.device = fake" --set train.device=fake --fingerprint "$tmp/fp"
refused "unknown device" "train.device = 'tpu': the devices are cpu, fake" --set train.device=tpu

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "fake device: all checks passed"
