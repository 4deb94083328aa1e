#!/usr/bin/env bash
# meshtrain generate under mpirun on any layout (src/cli/generate_command.cpp,
# src/infer): the continuations of one saved model equal the one-process ones
# under tp2, tp4 (kv heads replicated: n_kv_heads = 2), pp2, dp2, cp2,
# tp2 x pp2 and tp2 x cp2 — greedy and sampled (same seed) token for token, the log-probs
# within a bound derived from the one-process log-probs' distance from float64 (REFTOOL,
# tests/infer/generate_reference.cpp: 10 x max(d, K u scale); 1e-5 without it) — and each rank's
# KV cache bytes on stderr equal
# 2 · layers · positions · kv heads per rank · head_dim · 4 · batch, computed
# here from the layout (positions: ceil(capacity / cp)), and the bytes the
# allocator charged to kv_cache (also with int8 caches, in one process and tp2); cp2 prefills in chunks
# of 3 against its position-sharded cache, by the ring (the default) and by
# all-gathering q|k|v (--cp-impl allgather), and each cp rank's count of the
# prefill's calls on the cp axis says which ran (ring: layers x (cp - 1) sends
# and one all-gather, of the hidden state, per step; all-gather: no send, and
# 2 x layers + 1 all-gathers); cp3 with chunks of 2 leaves cp rank 2 an empty
# block of rows in each prefill step; one prompt's streamed text under
# tp2 x pp2 is the one-process line, printed once; a tied-embedding model gives the
# one-process tokens under pp2 and tp2 x pp2. Bad input (world size,
# heads not divisible by tp, an unknown cp_impl, training's ulysses) is refused at start-up,
# once, non-zero. (A mixture of experts generates: tests/cli/generate.sh.)
# Usage: generate_layouts.sh path/to/meshtrain [path/to/generate_reference (REFTOOL)]
set -uo pipefail
bin=$1
reftool=${2:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data
# vocab 301: the vocabulary shards of tp2 and tp4 have padding rows.
"$bin" prepare --text "$tmp/corpus" --out "$tmp/data" --vocab-size 301 >/dev/null
tiny+=(--set model.vocab_size=301 --set model.max_seq_len=64 --set train.seq_len=32)
"$bin" train "${tiny[@]}" --save "$tmp/model" >/dev/null
prompts=(--prompt "fortune 12: the quick" --prompt "short" --prompt "fortune 3: the quick brown fox number 8 jumps")
g=("$bin" generate --model "$tmp/model" --tokenizer "$tmp/data/tokenizer.model" "${prompts[@]}"
  --max-new-tokens 10 --output jsonl --logprobs --threads 1)
greedy=()
sampled=(--temperature 0.9 --top-p 0.95 --seed 11)
"${g[@]}" "${greedy[@]}" >"$tmp/ref_greedy.jsonl" 2>"$tmp/ref_greedy.err" || exit 1
"${g[@]}" "${sampled[@]}" --batch-size 1 >"$tmp/ref_sampled.jsonl" 2>"$tmp/ref_sampled.err" || exit 1
# The log-probs' bound: the float64 log-probabilities of the one-process runs' tokens (the double
# model on the saved weights), 10 x max(d, K u scale) with d their distance from the printed ones;
# it exits 1 unless a half-vocabulary sum and a 0.9 temperature each move them > 100 bounds.
logprob_tol=1e-5
if [ -n "$reftool" ]; then
  if out=$("$reftool" "$tmp/model" "$tmp/data/tokenizer.model" "$tmp/ref_greedy.jsonl" "$tmp/ref_sampled.jsonl" 2>&1); then
    logprob_tol=${out##* }
    echo "     bound: $out"
  else
    echo "FAIL bound: $out"
    failures=$((failures + 1))
  fi
fi

# layout NAME RANKS DP TP PP CP [FLAGS...]: greedy and sampled runs against the one-process ones.
layout() {
  local name=$1 np=$2 dp=$3 tp=$4 pp=$5 cp=$6 mode
  shift 6
  for mode in greedy sampled; do
    local -n extra=$mode
    if ! timeout 120 "${mpi[@]}" -np "$np" "${g[@]}" "${extra[@]}" --dp "$dp" --tp "$tp" --pp "$pp" --cp "$cp" "$@" \
      >"$tmp/$name.$mode.jsonl" 2>"$tmp/$name.$mode.err"; then
      echo "FAIL $name $mode: $(head -c 600 "$tmp/$name.$mode.err")"
      failures=$((failures + 1))
      continue
    fi
    if out=$(/usr/bin/python3 - "$tmp" "$name" "$mode" "$np" "$dp" "$tp" "$pp" "$cp" "$*" "$logprob_tol" 2>&1 <<'PY'
import json, math, re, sys
tmp, name, mode = sys.argv[1:4]
np_, dp, tp, pp, cp = map(int, sys.argv[4:9])
flags = sys.argv[9]
tol = float(sys.argv[10])
worst_all = 0.0
ref = [json.loads(l) for l in open(f"{tmp}/ref_{mode}.jsonl")]
got = [json.loads(l) for l in open(f"{tmp}/{name}.{mode}.jsonl")]
assert [x["index"] for x in got] == [0, 1, 2], got
for r, x in zip(ref, got):
    assert x["tokens"] == r["tokens"] and x["stop"] == r["stop"], (r, x)
    assert len(r["tokens"]) > 0
    worst = max([abs(a - b) for a, b in zip(r["logprobs"], x["logprobs"])] + [0])
    assert worst <= tol, ("logprobs differ by", worst, "bound", tol)
    worst_all = max(worst_all, worst)
# Each prompt's cache capacity alone (the one-process sampled run is batch size 1).
cap = [int(c) for c in re.findall(r"capacity (\d+) tokens", open(f"{tmp}/ref_sampled.err").read())]
assert len(cap) == 3, cap
layers, kv_heads, head_dim = 2, 2, 32 // 4
lines = re.findall(r"generate: rank (\d+) \(dp (\d+), tp (\d+), pp (\d+), cp (\d+)\): prompts (\d+)\.\.(\d+): "
                   r"kv cache f32 (\d+) bytes, tracked (\d+)", open(f"{tmp}/{name}.{mode}.err").read())
ranks = set()
for rank, d, t, p, c, a, b, n, tracked in (map(int, l) for l in lines):
    ranks.add(rank)
    batch, capacity = b - a + 1, max(cap[a:b + 1])
    want = 2 * (layers // pp) * math.ceil(capacity / cp) * max(1, kv_heads // tp) * head_dim * 4 * batch
    assert n == want, (f"rank {rank}: {n} bytes, analytic {want}")
    assert tracked == n, (f"rank {rank}: the allocator's kv_cache holds {tracked} bytes, the model {n}")
assert len(ranks) == np_, ("ranks reporting a KV cache", ranks)
calls = re.findall(r"prefill over cp (\d+): (\d+) sends, (\d+) all-gathers", open(f"{tmp}/{name}.{mode}.err").read())
assert len(calls) == (np_ if cp > 1 else 0), calls
L = layers // pp
for c, sends, gathers in (map(int, x) for x in calls):
    if "allgather" in flags:  # every prefill step: q|k|v and the partial outputs per layer, the hidden state
        assert sends == 0 and gathers > 0 and gathers % (2 * L + 1) == 0, (sends, gathers)
        continue
    ring_steps = sends // (L * (cp - 1))  # a chunk of one token per sequence all-gathers instead
    assert sends > 0 and sends % (L * (cp - 1)) == 0 and (gathers - ring_steps) % (2 * L + 1) == 0, (sends, gathers)
    if "--prefill-chunk" not in flags:
        assert gathers == ring_steps, ("an all-gather of q|k|v in a whole-prompt ring prefill", sends, gathers)
if calls:
    print(f"cp calls {calls[0][1]} sends, {calls[0][2]} all-gathers on cp rank 0;", end=" ")
print(f"log-probs within {worst_all:.2e} (bound {tol:.2e}); {len(lines)} kv cache lines = analytic = tracked")
PY
    ); then
      echo "ok   $name $mode: continuations = one process; $out"
    else
      echo "FAIL $name $mode: $out"
      failures=$((failures + 1))
    fi
  done
}
layout tp2 2 1 2 1 1
layout tp4 4 1 4 1 1
layout pp2 2 1 1 2 1
layout dp2 2 2 1 1 1
layout cp2 2 1 1 1 2 --prefill-chunk 3  # chunks against the position-sharded cache, by the ring
layout cp2_allgather 2 1 1 1 2 --prefill-chunk 3 --cp-impl allgather
layout tp2_pp2 4 1 2 2 1
layout tp2_cp2 4 1 2 1 2  # the cp row blocks with tp inside each

# The KV cache's tracked bytes (MemKind::kv_cache) against the model (generation_kv_bytes) in one process
# and under tp 2, f32 and int8 (one byte an element and a float scale per token and kv head): each line's
# "N bytes, tracked M" has N = M = the count derived here.
kv_check() {
  /usr/bin/python3 - "$tmp" "$@" <<'PY'
import math, re, sys
tmp, err, dtype, tp = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
cap = [int(c) for c in re.findall(r"capacity (\d+) tokens", open(f"{tmp}/ref_sampled.err").read())]
lines = re.findall(r"prompts (\d+)\.\.(\d+): kv cache (\w+) (\d+) bytes, tracked (\d+)", open(err).read())
assert lines and len(lines) % tp == 0, lines
for a, b, got_dtype, n, tracked in lines:
    a, b, n, tracked = int(a), int(b), int(n), int(tracked)
    per = 8 * 4 if dtype == "f32" else 8 + 4  # head_dim 8
    want = 2 * 2 * max(cap[a:b + 1]) * (2 // tp) * per * (b - a + 1)
    assert got_dtype == dtype and n == want and tracked == want, (got_dtype, n, tracked, want)
print(f"{dtype} tp {tp}: {lines[0][3]} bytes = tracked = analytic")
PY
}
"${g[@]}" --kv-cache int8 >/dev/null 2>"$tmp/int8_one.err" || echo "int8 one-process run failed" >>"$tmp/int8_one.err"
"${mpi[@]}" -np 2 "${g[@]}" --kv-cache int8 --tp 2 >/dev/null 2>"$tmp/int8_tp2.err" || echo "int8 tp2 run failed" >>"$tmp/int8_tp2.err"
for spec in "ref_greedy f32 1" "int8_one int8 1" "int8_tp2 int8 2"; do
  read -r name dtype tp <<<"$spec"
  if out=$(kv_check "$tmp/$name.err" "$dtype" "$tp" 2>&1); then
    echo "ok   kv cache tracked $name: $out"
  else
    echo "FAIL kv cache tracked $name: $out; $(head -c 400 "$tmp/$name.err")"
    failures=$((failures + 1))
  fi
done

# One prompt, text output: streamed by rank 0 alone, the one-process text.
one=("$bin" generate --model "$tmp/model" --tokenizer "$tmp/data/tokenizer.model" --prompt "fortune 7: the"
  --max-new-tokens 12 --threads 1)
"${one[@]}" >"$tmp/text1.txt" 2>/dev/null
if timeout 120 "${mpi[@]}" -np 4 "${one[@]}" --tp 2 --pp 2 >"$tmp/text4.txt" 2>"$tmp/text4.err" &&
  cmp -s "$tmp/text1.txt" "$tmp/text4.txt" && [ "$(wc -l <"$tmp/text4.txt")" -eq 1 ]; then
  echo "ok   streamed text: tp2 x pp2 prints the one-process line once"
else
  echo "FAIL streamed text: '$(cat "$tmp/text4.txt")' against '$(cat "$tmp/text1.txt")'; $(head -c 400 "$tmp/text4.err")"
  failures=$((failures + 1))
fi
# The same prompt under cp2: a decode step's one row leaves cp rank 1 an empty block of rows.
if timeout 120 "${mpi[@]}" -np 2 "${one[@]}" --cp 2 >"$tmp/text_cp.txt" 2>"$tmp/text_cp.err" &&
  cmp -s "$tmp/text1.txt" "$tmp/text_cp.txt"; then
  echo "ok   streamed text: cp2 prints the one-process line"
else
  echo "FAIL streamed text cp2: '$(cat "$tmp/text_cp.txt")' against '$(cat "$tmp/text1.txt")'; $(head -c 400 "$tmp/text_cp.err")"
  failures=$((failures + 1))
fi
# cp3, prefill chunks of 2 rows: blocks of one row, cp rank 2's empty, each chunk's ring over 3 ranks.
if timeout 120 "${mpi[@]}" -np 3 "${one[@]}" --cp 3 --prefill-chunk 2 >"$tmp/text_cp3.txt" 2>"$tmp/text_cp3.err" &&
  cmp -s "$tmp/text1.txt" "$tmp/text_cp3.txt" && grep "cp 2): prefill over cp 3: [1-9][0-9]* sends" "$tmp/text_cp3.err" >/dev/null; then
  echo "ok   streamed text: cp3 ring prefill in chunks of 2 prints the one-process line"
else
  echo "FAIL streamed text cp3: '$(cat "$tmp/text_cp3.txt")' against '$(cat "$tmp/text1.txt")'; $(head -c 600 "$tmp/text_cp3.err")"
  failures=$((failures + 1))
fi

# Tied embeddings: the LM head is the embedding, held by the first and the last stage; greedy tokens under
# pp2 and tp2 x pp2 equal the one-process ones.
"$bin" train "${tiny[@]}" --set model.tie_embeddings=true --save "$tmp/tied" >/dev/null
tied=("$bin" generate --model "$tmp/tied" --tokenizer "$tmp/data/tokenizer.model" "${prompts[@]}"
  --max-new-tokens 8 --output jsonl --threads 1)
"${tied[@]}" >"$tmp/tied1.jsonl" 2>/dev/null
for spec in "pp2 2 --pp 2" "tp2_pp2 4 --tp 2 --pp 2"; do
  read -r name np flags <<<"$spec"
  # shellcheck disable=SC2086
  if timeout 120 "${mpi[@]}" -np "$np" "${tied[@]}" $flags >"$tmp/tied_$name.jsonl" 2>/dev/null &&
    [ -s "$tmp/tied1.jsonl" ] && cmp -s "$tmp/tied1.jsonl" "$tmp/tied_$name.jsonl"; then
    echo "ok   tied $name: the one-process continuations"
  else
    echo "FAIL tied $name: $(head -c 300 "$tmp/tied_$name.jsonl") against $(head -c 300 "$tmp/tied1.jsonl")"
    failures=$((failures + 1))
  fi
done

# refused NAME PATTERN RANKS FLAGS...: PATTERN said once, non-zero exit.
refused() {
  local name=$1 pattern=$2 np=$3
  shift 3
  local out rc
  out=$(timeout 120 "${mpi[@]}" -np "$np" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$(grep -c -- "$pattern" <<<"$out")" -eq 1 ]; then
    echo "ok   $name: refused on $np ranks ($(grep -m1 -o -- "$pattern.*" <<<"$out" | cut -c1-100))"
  else
    echo "FAIL $name: exit $rc, expected '$pattern' once; got: $out"
    failures=$((failures + 1))
  fi
}
refused world "= 1 but the world has 2 ranks" 2 "${g[@]}"
refused heads "model.n_heads (4) must be divisible by parallel.tp (3)" 3 "${g[@]}" --tp 3
refused cp_impl "parallel.cp_impl ('striped') must be ring, allgather, ulysses or hybrid" 2 "${g[@]}" --cp 2 --cp-impl striped
refused cp_ulysses "--cp-impl ulysses: generation attends to the KV cache's position shards by ring or allgather" 2 \
  "${g[@]}" --cp 2 --cp-impl ulysses

if [ "$failures" -ne 0 ]; then
  echo "$failures generate layout check(s) failed"
  exit 1
fi
echo "all generate layout checks passed"
