#!/usr/bin/env bash
# Checkpoints and --resume (ckpt/checkpoint.h, docs/FORMATS.md "Training checkpoints").
# Exact resume: for each layout, 10 uninterrupted steps against a run stopped
# at the start of step 5 (MESHTRAIN_FAULT=throw, after the step-5 checkpoint)
# and resumed with --resume auto: per-step losses and gradient norms, and the
# final model.safetensors, must be bitwise identical, and each metadata.json's
# slices must tile every tensor exactly once. Then keep_checkpoints pruning, a
# full disk during a save (nothing committed, the previous checkpoint intact),
# and the bad inputs: a corrupted byte, a missing shard file, another model's
# checkpoint, an unwritable checkpoint_dir; each refused at start-up by name.
# A flipped byte in a slice only rank 1 reads: refused by rank 1 by name, or
# --resume auto falls back with one warning; each tp2 rank reads about half
# of the checkpoint's tensor bytes.
# (Another layout or world size is not refused: checkpoint_reshard.sh resumes
# under other layouts.)
# Usage: checkpoint.sh path/to/meshtrain
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data

# tiles METADATA: every element of every tensor is in exactly one listed slice.
tiles() {
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
meta = json.load(open(sys.argv[1]))
count = {}
for name, t in meta["tensors"].items():
    n = 1
    for d in t["shape"]:
        n *= d
    count[name] = [0] * n
for f in meta["files"]:
    for s in f.get("slices", []):
        shape = meta["tensors"][s["tensor"]]["shape"]
        o, e = s["offsets"], s["shape"]
        rows = [[]]
        for d in range(len(shape)):
            rows = [r + [o[d] + i] for r in rows for i in range(e[d])]
        for idx in rows:
            flat = 0
            for d in range(len(shape)):
                flat = flat * shape[d] + idx[d]
            count[s["tensor"]][flat] += 1
bad = [n for n, c in count.items() if any(x != 1 for x in c)]
sys.exit(1 if bad else 0)
PY
}

# exact NAME RANKS FLAGS...: the full run, the interrupted run, the resumed run.
exact() {
  local name=$1 np=$2
  shift 2
  run "${name}_full" "$np" "$@" >/dev/null
  local ck=(--set train.checkpoint_dir="$tmp/$name.ck" --set train.checkpoint_every=5)
  MESHTRAIN_FAULT=throw:0:5 "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" "${ck[@]}" \
    --metrics "$tmp/${name}_cut.jsonl" >/dev/null 2>&1
  if [ ! -f "$tmp/$name.ck/step-00000005/metadata.json" ] || [ -e "$tmp/$name.ck/step-00000010" ]; then
    echo "FAIL $name: the interrupted run did not leave exactly the step-5 checkpoint"
    failures=$((failures + 1))
    return
  fi
  if ! tiles "$tmp/$name.ck/step-00000005/metadata.json"; then
    echo "FAIL $name: metadata.json's slices do not tile every tensor exactly once"
    failures=$((failures + 1))
  fi
  "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" "${ck[@]}" --resume auto \
    --metrics "$tmp/${name}_resumed.jsonl" --save "$tmp/${name}_resumed" >/dev/null
  local a=$tmp/${name}_full.jsonl b=$tmp/${name}_resumed.jsonl
  if cmp -s "$tmp/${name}_full/model.safetensors" "$tmp/${name}_resumed/model.safetensors" &&
    [ "$(grep -c '"loss"' "$b")" -eq 10 ] &&
    diff <(grep -o '"loss":[^,]*\|"grad_norm":[^,]*' "$a") <(grep -o '"loss":[^,]*\|"grad_norm":[^,]*' "$b") \
      >/dev/null; then
    echo "ok   $name: 10 steps = 5 + resume + 5, bitwise"
  else
    echo "FAIL $name: the resumed run differs from the uninterrupted one"
    failures=$((failures + 1))
  fi
}

exact one 1
exact dp2_zero1 2 --dp 2 --zero 1 --set train.microbatch_size=4
exact dp2_zero3 2 --dp 2 --zero 3 --set train.microbatch_size=4
exact tp2_sp 2 --tp 2 --set parallel.sp=true --set model.vocab_size=301
exact pp2_1f1b_tied 2 --pp 2 --set parallel.schedule=1f1b --set model.tie_embeddings=true \
  --set train.microbatch_size=2
exact cp2_ring 2 --cp 2 --set parallel.cp_impl=ring --set train.microbatch_size=4
exact dp2_tp2_pp2_zero1 8 --dp 2 --tp 2 --pp 2 --zero 1 --set train.microbatch_size=2

# A flipped byte in a slice only rank 1 reads (its tp shard of layer 0's
# q_proj, in the step-10 checkpoint of the tp2 + SP run above): --resume PATH
# is refused with one message naming the file and the tensor; --resume auto
# falls back to step-5 with one warning and ends bitwise equal to the
# uninterrupted run; each rank read about half of the checkpoint's tensor
# bytes (its shards, whole, for their checksums, and the replicated norms).
tp2=(--tp 2 --set parallel.sp=true --set model.vocab_size=301)
ck=$tmp/flip.ck
cp -r "$tmp/tp2_sp.ck" "$ck"
/usr/bin/python3 - "$ck/step-00000010/rank-00001.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
(n,) = struct.unpack("<Q", data[:8])
begin = json.loads(data[8 : 8 + n])["model.layers.0.self_attn.q_proj.weight"]["data_offsets"][0]
data[8 + n + begin + 5] ^= 0x55
open(path, "wb").write(data)
PY
q="rank-00001.safetensors: CRC32C mismatch in 'model.layers.0.self_attn.q_proj.weight'"
out=$("${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" "${tp2[@]}" --set train.checkpoint_dir="$ck" \
  --resume "$ck/step-00000010" 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && [ "$(grep -c "meshtrain: error: .*$q" <<<"$out")" -eq 1 ] &&
  [ "$(grep -c "meshtrain: error" <<<"$out")" -eq 1 ]; then
  echo "ok   flip_rank1_path: refused, one message ($(grep -o "$q" <<<"$out"))"
else
  echo "FAIL flip_rank1_path: exit $rc, expected one error with \"$q\"; got: $out"
  failures=$((failures + 1))
fi
loud=()  # not --quiet: the "resumed from" line gives each rank's bytes read
for a in "${tiny[@]}"; do [ "$a" = --quiet ] || loud+=("$a"); done
out=$("${mpi[@]}" -np 2 "$bin" train "${loud[@]}" "${tp2[@]}" --set train.checkpoint_dir="$ck" \
  --set train.checkpoint_every=5 --resume auto --save "$tmp/flip_resumed" 2>&1)
rc=$?
read -r r0 r1 total < <(sed -n 's/.*tensor bytes read per rank: \([0-9]*\) \([0-9]*\) of the checkpoint.s \([0-9]*\)$/\1 \2 \3/p' <<<"$out")
if [ "$rc" -eq 0 ] && [ "$(grep -c "meshtrain: warning" <<<"$out")" -eq 1 ] &&
  grep "warning: --resume auto: checkpoint .*step-00000010 is not usable: .*$q.*(found by rank 1); falling back" \
    <<<"$out" >/dev/null && grep "resumed from .*step-00000005" <<<"$out" >/dev/null &&
  cmp -s "$tmp/tp2_sp_full/model.safetensors" "$tmp/flip_resumed/model.safetensors"; then
  echo "ok   flip_rank1_auto: one warning, fell back to step-5, bitwise equal to the uninterrupted run"
else
  echo "FAIL flip_rank1_auto: exit $rc; got: $out"
  failures=$((failures + 1))
fi
# Each rank between 40% and 60% of the whole (tp2: half, plus the norms both read).
if [ -n "${total:-}" ] && [ $((r0 * 10)) -gt $((total * 4)) ] && [ $((r0 * 10)) -lt $((total * 6)) ] &&
  [ $((r1 * 10)) -gt $((total * 4)) ] && [ $((r1 * 10)) -lt $((total * 6)) ]; then
  echo "ok   tp2_bytes_read: ranks read $r0 and $r1 of the checkpoint's $total tensor bytes"
else
  echo "FAIL tp2_bytes_read: expected each rank to read about half; got '${r0:-} ${r1:-} of ${total:-}'"
  failures=$((failures + 1))
fi

# Pruning: with checkpoint_every 2 and keep_checkpoints 2 only step-8 and step-10
# remain, `latest` names step-10, and a leftover .tmp- folder is ignored by
# --resume auto (the run starts fresh) and removed.
keep=$tmp/keep.ck
mkdir -p "$keep/step-00000003.tmp-999"
"$bin" train "${tiny[@]}" --set train.checkpoint_dir="$keep" --set train.checkpoint_every=2 \
  --set train.keep_checkpoints=2 --resume auto >/dev/null  # nothing complete there: starts fresh
if [ "$(ls "$keep" | tr '\n' ' ')" = "latest step-00000008 step-00000010 " ] &&
  [ "$(cat "$keep/latest")" = step-00000010 ]; then
  echo "ok   keep_checkpoints: step-8, step-10 and latest remain"
else
  echo "FAIL keep_checkpoints: $keep holds $(ls "$keep" | tr '\n' ' ')"
  failures=$((failures + 1))
fi

# refused NAME PATTERN RANKS FLAGS...: the run fails at start-up and says PATTERN.
refused() {
  local name=$1 pattern=$2 np=$3
  shift 3
  local out
  out=$("${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" 2>&1)
  local rc=$?
  if [ "$rc" -ne 0 ] && grep -q -- "$pattern" <<<"$out"; then
    echo "ok   $name: refused ($(grep -m1 -o -- "$pattern.*" <<<"$out" | cut -c1-150))"
  else
    echo "FAIL $name: exit $rc, expected a message with '$pattern'; got: $out"
    failures=$((failures + 1))
  fi
}

# A full disk on rank 1 during the step-4 save: every rank stops with the
# reason, nothing is committed, step-2 and `latest` stay as they were, and
# --resume auto continues from step-2 past the half-written folder.
full=$tmp/full.ck
flags=(--dp 2 --zero 1 --set train.microbatch_size=4 --set train.checkpoint_dir="$full" --set train.checkpoint_every=2)
MESHTRAIN_FAULT=enospc:1:3:0 refused full_disk "rank 1 could not write its files" 2 "${flags[@]}"
if [ "$(cat "$full/latest")" = step-00000002 ] && [ ! -e "$full/step-00000004" ] &&
  "${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" "${flags[@]}" --resume auto >/dev/null 2>&1 &&
  [ "$(cat "$full/latest")" = step-00000010 ]; then
  echo "ok   full_disk: step-2 intact, resumed from it"
else
  echo "FAIL full_disk: $full holds $(ls "$full" | tr '\n' ' ')"
  failures=$((failures + 1))
fi

src=$tmp/dp2_zero1.ck
bad=$tmp/bad.ck
fresh() { rm -rf "$bad" && cp -r "$src" "$bad"; }
dp2=(--dp 2 --zero 1 --set train.microbatch_size=4 --set train.checkpoint_dir="$bad" --resume "$bad/step-00000005")

fresh
f=$bad/step-00000005/rank-00001.safetensors
printf '\x55' | dd of="$f" bs=1 seek=$(($(stat -c %s "$f") - 7)) conv=notrunc status=none
refused corrupted_byte "rank-00001.safetensors: CRC32C mismatch" 2 "${dp2[@]}"
fresh
rm "$bad/step-00000005/rank-00000.safetensors"
refused missing_file "checkpoint file .*rank-00000.safetensors is missing" 2 "${dp2[@]}"
fresh
refused foreign_model "tensor 'model.embed_tokens.weight' has shape \[300, 32\] in the checkpoint but \[300, 64\]" \
  2 "${dp2[@]}" --set model.d_model=64
fresh
refused other_lr "train.lr is 0.01.* in the checkpoint but 0.02.* in this run" 2 "${dp2[@]}" --set train.lr=0.02
refused bad_allow "train.resume_allow names 'threads'" 2 "${dp2[@]}" --set train.resume_allow=threads
# An allowed difference continues with this run's value (the optimizer's lr here).
if "${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" "${dp2[@]}" --set train.lr=0.02 --set train.resume_allow=lr \
  --metrics "$tmp/allowed.jsonl" >/dev/null 2>&1 &&
  python3 - "$tmp/allowed.jsonl" "$tmp/dp2_zero1_full.jsonl" <<'PY'; then
import json, sys
def lr_at(path, step):  # the schedule's lr of `step`, between train.min_lr and train.lr
    return next(r["lr"] for r in map(json.loads, open(path)) if r.get("step") == step and "lr" in r)
# Doubling the peak lr nearly doubles step 5's (min_lr stays): well above 1.5x the uninterrupted run's.
sys.exit(0 if lr_at(sys.argv[1], 5) > 1.5 * lr_at(sys.argv[2], 5) else 1)
PY
  echo "ok   allowed_lr: resumed with train.lr = 0.02 (train.resume_allow=lr)"
else
  echo "FAIL allowed_lr: the run with train.resume_allow=lr did not resume with lr 0.02"
  failures=$((failures + 1))
fi
touch "$tmp/a_file"
refused unwritable_dir "cannot create directory .*a_file/ck" 2 --dp 2 --set train.microbatch_size=4 --set train.checkpoint_dir="$tmp/a_file/ck"

if [ "$failures" -ne 0 ]; then
  echo "$failures checkpoint check(s) failed"
  exit 1
fi
echo "all checkpoint checks passed"
