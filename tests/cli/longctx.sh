#!/usr/bin/env bash
# The long-context study's pieces (bench/longctx/, docs/BENCHMARKS.md "Long context"):
# the pass-key generator's format, and meshtrain eval --position-buckets (bucket
# boundaries and counts, the count-weighted bucket means equal to the loss, refusals).
set -euo pipefail
bin=$1
src=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The generator: its own format check, then a corpus and probes from a tiny fortune folder.
out=$("$py" "$src/bench/longctx/passkey.py" check)
test "$out" = "passkey.py check: ok"
mkdir -p "$tmp/fortunes"
for i in $(seq 1 400); do
  printf 'the cat sat on the mat number %d\nand the dog sat on the log\n%%\n' "$i"
done >"$tmp/fortunes/f"
"$py" "$src/bench/longctx/passkey.py" corpus --fortunes "$tmp/fortunes" --out "$tmp/corpus.txt" --share 0.3 \
  2>/dev/null
# 400 fortunes plus pass-key documents, one '%' line between documents; every 20th document a fortune.
"$py" - "$tmp/corpus.txt" <<'PY'
import re, sys
docs = open(sys.argv[1]).read().rstrip("\n").split("\n%\n")
fortunes = [d for d in docs if d.startswith("the cat")]
keyed = [d for d in docs if not d.startswith("the cat")]
assert len(fortunes) == 400 and len(keyed) > 20, (len(fortunes), len(keyed))
assert all(docs[i].startswith("the cat") for i in range(19, len(docs), 20))
for d in keyed:
    m = re.search(r"The pass key is (\d{5})\. Remember it\. \1 is the pass key\..*"
                  r"What is the pass key\? The pass key is (\d{5})\.$", d)
    assert m and m.group(1) == m.group(2), d
PY
"$py" "$src/bench/longctx/passkey.py" probe --out "$tmp/p.txt" --keys "$tmp/k.txt" --sentences 20 --depth 0.5 \
  --trials 3
test "$(wc -l <"$tmp/p.txt")" -eq 3
test "$(wc -l <"$tmp/k.txt")" -eq 3
key=$(head -n1 "$tmp/k.txt")
first=$(head -n1 "$tmp/p.txt")
case "$first" in *"The pass key is $key. Remember it."*"What is the pass key? The pass key is") ;; *) exit 1 ;; esac

# eval --position-buckets on a tiny trained model.
"$bin" prepare --text "$tmp/fortunes" --out "$tmp/data" --vocab-size 300 >/dev/null
"$bin" train --config /dev/null --set data.dir="$tmp/data" --set model.vocab_size=300 --set model.d_model=32 \
  --set model.n_layers=2 --set model.n_heads=2 --set model.n_kv_heads=2 --set model.ffn_hidden=64 \
  --set model.max_seq_len=32 --set train.seq_len=32 --set train.batch_size=4 --set train.microbatch_size=4 \
  --set train.steps=5 --set train.eval_every=0 --set train.lr=1e-2 --quiet --save "$tmp/model"
"$bin" eval --model "$tmp/model" --data "$tmp/data/train.bin" --seq-len 32 --max-windows 9 \
  --position-buckets 4 >"$tmp/b.txt"
plain=$("$bin" eval --model "$tmp/model" --data "$tmp/data/train.bin" --seq-len 32 --max-windows 9)
"$py" - "$tmp/b.txt" "$plain" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
loss = float(lines[0].split()[1])
assert lines[0] == sys.argv[2], (lines[0], sys.argv[2])  # the loss line is unchanged by the option
rows = [l.split() for l in lines[1:] if l]
assert [r[0] for r in rows] == ["bucket"] * 4, rows
# Buckets of 8 positions, 9 windows each: 72 tokens per bucket.
assert [(int(r[1]), int(r[2]), int(r[3])) for r in rows] == [(0, 7, 72), (8, 15, 72), (16, 23, 72), (24, 31, 72)]
counts, means = [int(r[3]) for r in rows], [float(r[4]) for r in rows]
weighted = sum(c * m for c, m in zip(counts, means)) / sum(counts)
# A bound from the arithmetic: one process computes each token's loss once, by the same fp32 kernel
# on the same logits for the loss and the buckets (Llama::forward's head, cross_entropy_forward),
# and sums those fp32 values in double, so the two sums part by double rounding (N u64 of the
# loss, 3e-14 for N = 288); each line is printed to 6 decimals (5e-7 each; the count-weighted
# mean of the buckets' roundings is at most 5e-7).
bound = 5e-7 + 5e-7 + 288 * 2.0 ** -53 * loss
assert abs(weighted - loss) <= bound, (weighted, loss, bound)
# A bucket counted one token short (a wrong count) moves the weighted mean by far more.
short = sum(c * m for c, m in zip(counts, means)) / (sum(counts) - 1)
assert abs(short - loss) > 100 * bound, (short, loss, bound)
print("bucket means: |weighted - loss| %.2e of a bound %.2e; one token short moves it %.0f bounds"
      % (abs(weighted - loss), bound, abs(short - loss) / bound))
assert len({r[4] for r in rows}) > 1, rows  # the positions do differ
PY

# Refusals: a bucket count that does not divide the window, a negative one, a layout.
for n in 3 -1 64; do
  if "$bin" eval --model "$tmp/model" --data "$tmp/data/val.bin" --seq-len 32 --position-buckets "$n" \
    2>"$tmp/e"; then exit 1; fi
  grep "position-buckets ($n) must" "$tmp/e" >/dev/null
done
if mpirun -np 2 --oversubscribe --allow-run-as-root "$bin" eval --model "$tmp/model" --data "$tmp/data/val.bin" \
  --seq-len 32 --max-windows 2 --dp 2 --position-buckets 4 >"$tmp/e" 2>&1; then exit 1; fi
grep "position-buckets (4) runs in one process only" "$tmp/e" >/dev/null
echo "longctx: ok"
