#!/usr/bin/env bash
# HSDP (parallel.dp_shard; docs/PARALLELISM.md "HSDP"): dp 4 = 2 replicas x 2 shards.
#   - ZeRO 1, 2 and 3 in the default mode against one process within the bounds derived from its float64
#     run (common.sh `check`), and not bitwise it (so the bitwise checks below can fail);
#   - the same in the canonical mode bitwise one process (compare --rtol 0 --grad-norm-rtol 0, cmp of
#     model.safetensors), and with pp 2 (8 ranks, ZeRO 2);
#   - the ledger of step 0 at ZeRO 3 (--explain): the parameter all-gathers and gradient reduce-scatters
#     over the shard group only (dp_shard), the shards' all-reduce over the replicas (dp_replicas), each
#     of the analytic size (a unit's padded numel / 2);
#   - checkpoints reshard: saved on 2 x 2 ZeRO 3 at step 5 (only the first shard group writes), resumed
#     on flat dp 4 ZeRO 3 and on dp 2; that flat dp 4 run's step-7 checkpoint resumed on 2 x 2 ZeRO 1;
#     each ends bitwise the one-process run;
#   - bad dp_shard values refused by name at start-up, every rank exiting 1.
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/dist/common.sh
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set train.microbatch_size=1)
canon=(--set parallel.reduction=canonical)
hsdp=(--dp 4 --set parallel.dp_shard=2)

fail() {
  echo "FAIL $1"
  failures=$((failures + 1))
}
# bitwise NAME REF: losses, gradient norms and every tensor bit for bit, and the saved files equal.
bitwise() {
  if "$bin" compare --rtol 0 --grad-norm-rtol 0 "$tmp/$1.jsonl" "$tmp/$2.jsonl" --model-a "$tmp/$1" \
    --model-b "$tmp/$2" >"$tmp/$1.cmp" 2>&1 && cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors"; then
    echo "ok   $1: bitwise $2"
  else
    fail "$1: not bitwise $2: $(tail -3 "$tmp/$1.cmp" | tr '\n' ' ')"
  fi
}

# The default mode: within the derived bounds, not bitwise.
run ref 1
for z in 1 2 3; do
  run "hsdp_zero$z" 4 "${hsdp[@]}" --zero "$z"
  check "hsdp_zero$z" ref
done
if cmp -s "$tmp/hsdp_zero3/model.safetensors" "$tmp/ref/model.safetensors"; then
  fail "the default mode's HSDP ZeRO 3 is bitwise one process: the bitwise checks below could not fail"
else
  echo "ok   default mode: HSDP ZeRO 3 is not bitwise one process (the sums' order differs)"
fi

# The canonical mode: bitwise, the step-0 ledger of ZeRO 3, and its step-5 checkpoint.
run cref 1 "${canon[@]}"
run c_zero1 4 "${canon[@]}" "${hsdp[@]}" --zero 1
run c_zero2 4 "${canon[@]}" "${hsdp[@]}" --zero 2
run c_zero3 4 "${canon[@]}" "${hsdp[@]}" --zero 3 --explain --set train.checkpoint_dir="$tmp/ck" \
  --set train.checkpoint_every=5 >"$tmp/explain.txt"
run c_pp2_zero2 8 "${canon[@]}" "${hsdp[@]}" --pp 2 --zero 2
for name in c_zero1 c_zero2 c_zero3 c_pp2_zero2; do
  bitwise "$name" cref
done

# Step 0's ledger at ZeRO 3 (2 layers, untied head; units: embedding 9600, a layer 7744, final 9632
# elements, each sharded 2 ways; 2 microbatches a rank): per rank 7 all-gathers a microbatch over dp_shard
# (embedding forward, 2 per layer and per final unit) of a unit's shard, 4 reduce-scatters over dp_shard
# of a whole unit (the canonical store hands each unit's sum over the microbatches once), 4 all-reduces
# over dp_replicas of a unit's shard, the norm's sum over dp_shard, and over the whole dp group only
# the token count and the loss.
if python3 - "$tmp/explain.txt" <<'PY'; then
import re, sys
shard = {"embed": 4800, "layer 0": 3872, "layer 1": 3872, "final": 4816}
pat = re.compile(r"^rank (\d) \| (\S+) +\| (\S+) +\| .* \| (\d+) elements? \| (.*)$")
rows = {}
for line in open(sys.argv[1]):
    m = pat.match(line.strip())
    if m:
        rows.setdefault(int(m[1]), []).append((m[2], m[3], int(m[4]), m[5]))
assert sorted(rows) == [0, 1, 2, 3], sorted(rows)
for rank, rs in rows.items():
    count = {}
    for axis, op, n, label in rs:
        unit = label.rsplit(" ", 2)[0] if label.endswith("grads replicas") else label.rsplit(" ", 1)[0]
        count[(axis, op)] = count.get((axis, op), 0) + 1
        if axis == "dp_shard" and op == "all_gather": assert n == shard[unit], (rank, label, n)
        if axis == "dp_shard" and op == "reduce_scatter": assert n == 2 * shard[unit], (rank, label, n)
        if axis == "dp_replicas": assert op == "all_reduce" and n == shard[unit], (rank, label, n)
        if axis == "dp": assert label in ("valid tokens", "loss"), (rank, label)  # scalars (exact sums' words)
    want = {("dp_shard", "all_gather"): 14, ("dp_shard", "reduce_scatter"): 4,
            ("dp_replicas", "all_reduce"): 4, ("dp", "all_reduce"): 2, ("dp_shard", "all_reduce"): 1}
    assert count == want, (rank, count)
print("per rank: all_gather 14 over dp_shard, reduce_scatter 4 over dp_shard, all_reduce 4 over dp_replicas")
PY
  echo "ok   ledger: ZeRO 3's gathers and scatters stay in the shard group; shards all-reduced over replicas"
else
  fail "ledger: the collectives per sub-axis differ from the analytic count"
fi

# Checkpoints reshard between HSDP and flat ZeRO.
files=$(find "$tmp/ck/step-00000005" -name 'rank-*' | wc -l)
if [ "$files" -eq 2 ]; then
  echo "ok   save: only the first shard group writes slices (2 files; the replicas hold the same pieces)"
else
  fail "save: $files slice files, want 2"
fi
cp -r "$tmp/ck" "$tmp/ck_dp2"
run r_flat4 4 "${canon[@]}" --dp 4 --zero 3 --set train.checkpoint_dir="$tmp/ck" \
  --set train.checkpoint_every=7 --resume "$tmp/ck/step-00000005"
run r_dp2 2 "${canon[@]}" --dp 2 --set train.checkpoint_dir="$tmp/ck_dp2" --resume "$tmp/ck_dp2/step-00000005"
run r_hsdp 4 "${canon[@]}" "${hsdp[@]}" --zero 1 --set train.checkpoint_dir="$tmp/ck" \
  --resume "$tmp/ck/step-00000007"
for name in r_flat4 r_dp2 r_hsdp; do
  bitwise "$name" cref
done

# refused NAME RANKS 'TEXT' FLAGS...: exit 1 on every rank (mpirun's status), the message naming the key.
refused() {
  local name=$1 np=$2 text=$3 rc=0
  shift 3
  timeout 60 "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" >"$tmp/$name.out" 2>&1 || rc=$?
  if [ "$rc" -eq 1 ] && grep -qF -- "$text" "$tmp/$name.out"; then
    echo "ok   $name refused: $(grep -m1 -F -- "$text" "$tmp/$name.out" | cut -c1-150)"
  else
    fail "$name: exit $rc, want 1 naming '$text': $(tail -2 "$tmp/$name.out")"
  fi
}
refused dp_shard_3 4 "parallel.dp_shard (3) must divide parallel.dp (4)" --dp 4 --zero 1 --set parallel.dp_shard=3
refused dp_shard_zero0 2 "parallel.dp_shard (1) < parallel.dp (2) shards ZeRO's state" --dp 2 \
  --set parallel.dp_shard=1

finish HSDP
