#!/usr/bin/env bash
# Crash safety of checkpoints (docs/FORMATS.md "Training checkpoints"; the
# fault kinds: docs/PARALLELISM.md "Failures").
# Kill during save: a process is SIGKILLed at each named point of a save
# (MESHTRAIN_FAULT=kill_save) and after seeded numbers of bytes of its files
# (kill_bytes), one process and two ranks (killing rank 0 or rank 1). After
# each kill: the run failed, every step-N/ a reader can see is complete (its
# files' sizes and header and per-slice CRC32Cs, checked by verify_checkpoints.py, not by
# meshtrain), `latest` names one, and a --resume auto run ends with a model
# bitwise equal to the uninterrupted run's.
# Fallback: a corrupt or truncated newest checkpoint → --resume auto warns and
# resumes from the previous one (bitwise equal); none usable → starts fresh
# with the warning. Bad storage: clear errors naming the path for damaged or
# foreign checkpoints; a full disk (injected, and a real one on a small tmpfs
# when the test may mount) and a directory made unwritable mid-run stop every
# rank non-zero, with the previous checkpoints intact and resumable.
# Usage: checkpoint_kill.sh path/to/meshtrain
set -uo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
cleanup() {
  chattr -i "$tmp/ro.ck" 2>/dev/null
  chmod -R u+w "$tmp" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
source "$here/common.sh"
make_data
start=$SECONDS
verify=(/usr/bin/python3 "$here/verify_checkpoints.py")

short=(--set train.steps=6 --set train.checkpoint_every=2)
two=(--dp 2 --zero 1 --set train.microbatch_size=4)  # both ranks write a shard

# launch NP ARGS...: meshtrain ARGS on NP ranks (one process: no mpirun), at most 120 s.
launch() {
  local np=$1
  shift
  if [ "$np" -eq 1 ]; then
    timeout 120 "$bin" "$@"
  else
    timeout 120 "${mpi[@]}" -np "$np" "$bin" "$@"
  fi
}
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}
# same_model A B: the saved models are bitwise identical.
same_model() { cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors"; }

# The uninterrupted runs (checkpoints every 2 steps: step-2, 4, 6): the
# reference models, the checkpoints the fallback tests damage, a shard's size.
launch 1 train "${tiny[@]}" "${short[@]}" --set train.checkpoint_dir="$tmp/one.ck" --save "$tmp/one.ref"
launch 2 train "${tiny[@]}" "${short[@]}" "${two[@]}" --set train.checkpoint_dir="$tmp/two.ck" --save "$tmp/two.ref"
shard_one=$(stat -c %s "$tmp/one.ck/step-00000004/rank-00000.safetensors")
shard_two=$(stat -c %s "$tmp/two.ck/step-00000004/rank-00001.safetensors")

# kill_trial NAME LAYOUT FAULT WHERE: LAYOUT (one|two) killed by FAULT, whose
# message must say WHERE; then the reader's view, then the resume.
kill_trial() {
  local name=$1 layout=$2 fault=$3 where=$4 np=1 flags
  flags=("${tiny[@]}" "${short[@]}" --set train.checkpoint_dir="$tmp/$name.ck" --set train.keep_checkpoints=1)
  [ "$layout" = two ] && np=2 && flags+=("${two[@]}")
  local out rc seen
  out=$(MESHTRAIN_FAULT=$fault launch "$np" train "${flags[@]}" 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ] || ! grep -q "MESHTRAIN_FAULT: killing process [0-9]* $where" <<<"$out"; then
    fail "$name ($fault): exit $rc, not killed $where: $out"
    return
  fi
  if ! seen=$("${verify[@]}" "$tmp/$name.ck" --require-latest); then
    fail "$name ($fault): after the kill, $seen"
    return
  fi
  if ! launch "$np" train "${flags[@]}" --resume auto --save "$tmp/$name.out" >"$tmp/$name.log" 2>&1; then
    fail "$name ($fault): the resumed run failed: $(cat "$tmp/$name.log")"
  elif ! same_model "$layout.ref" "$name.out"; then
    fail "$name ($fault): the resumed run's model differs from the uninterrupted run's"
  elif ! "${verify[@]}" "$tmp/$name.ck" --require-latest | grep "latest step-00000006, 0 leftover" >/dev/null; then
    fail "$name ($fault): after the resumed run $("${verify[@]}" "$tmp/$name.ck")"
  else
    echo "ok   $name ($fault): killed; $seen; resumed, bitwise equal"
  fi
  rm -rf "$tmp/$name.ck" "$tmp/$name.out"
}

# Every point on one process, the save after step 3 (step-4; step-2 is committed).
for point in file_fsync_before file_fsync_after shard_written dir_fsync_before dir_fsync_after rename_before \
  latest_before latest_after prune_before; do
  kill_trial "one_$point" one "kill_save:0:3:$point" "at kill point $point"
done
# Two ranks: rank 1 while it writes its shard, rank 0 while it commits.
for point in file_fsync_before file_fsync_after shard_written; do
  kill_trial "two_r1_$point" two "kill_save:1:3:$point" "at kill point $point"
done
for point in file_fsync_before dir_fsync_after rename_before latest_before latest_after; do
  kill_trial "two_r0_$point" two "kill_save:0:3:$point" "at kill point $point"
done
# Seeded byte offsets: inside the shard, and (rank 0, which writes metrics.jsonl
# and metadata.json after it) past its end.
RANDOM=1201
offset() { echo $(((RANDOM * 32768 + RANDOM) % $1)); }
for _ in 1 2 3; do
  b=$(offset "$shard_one")
  kill_trial "one_bytes_$b" one "kill_bytes:0:3:$b" "after the armed number of bytes"
done
for rank in 1 1 0; do
  b=$(offset "$shard_two")
  kill_trial "two_r${rank}_bytes_$b" two "kill_bytes:$rank:3:$b" "after the armed number of bytes"
done
b=$((shard_two + $(offset 8000)))
kill_trial "two_r0_bytes_$b" two "kill_bytes:0:3:$b" "after the armed number of bytes"
echo "kill trials done after $((SECONDS - start)) s"

# flip FILE: one byte changed in the middle; cut FILE: the last 100 bytes gone.
flip() { printf '\x5a' | dd of="$1" bs=1 seek=$(($(stat -c %s "$1") / 2)) conv=notrunc status=none; }
cut_file() { truncate -s -100 "$1"; }

# fallback NAME LAYOUT WARNINGS...: --resume auto on a damaged copy of LAYOUT's
# checkpoints (the damage done by the caller in $tmp/NAME.ck) ends bitwise
# equal to the uninterrupted run, and rank 0 printed each warning once.
fallback() {
  local name=$1 layout=$2 np=1 flags
  shift 2
  flags=("${tiny[@]}" "${short[@]}" --set train.checkpoint_dir="$tmp/$name.ck")
  [ "$layout" = two ] && np=2 && flags+=("${two[@]}")
  if ! launch "$np" train "${flags[@]}" --resume auto --save "$tmp/$name.out" >"$tmp/$name.log" 2>&1; then
    fail "$name: the run failed: $(cat "$tmp/$name.log")"
    return
  fi
  for w in "$@"; do
    if [ "$(grep -c -- "meshtrain: warning: .*$w" "$tmp/$name.log")" -ne 1 ]; then
      fail "$name: expected one warning matching '$w'; got: $(cat "$tmp/$name.log")"
      return
    fi
  done
  if same_model "$layout.ref" "$name.out"; then
    echo "ok   $name: $(grep -c 'meshtrain: warning' "$tmp/$name.log") warning(s), $(grep -m1 -o 'is not usable: .\{0,60\}' "$tmp/$name.log" || true)...; bitwise equal"
  else
    fail "$name: the model differs from the uninterrupted run's"
  fi
}
cp -r "$tmp/two.ck" "$tmp/fb_flip.ck"
flip "$tmp/fb_flip.ck/step-00000006/rank-00001.safetensors"
fallback fb_flip two "step-00000006 is not usable: .*rank-00001.safetensors: CRC32C mismatch.*falling back"
cp -r "$tmp/one.ck" "$tmp/fb_cut.ck"
cut_file "$tmp/fb_cut.ck/step-00000006/rank-00000.safetensors"
flip "$tmp/fb_cut.ck/step-00000004/rank-00000.safetensors"
fallback fb_cut one "step-00000006 is not usable: .*(truncated)" "step-00000004 is not usable: .*CRC32C mismatch"
cp -r "$tmp/one.ck" "$tmp/fb_none.ck"
cut_file "$tmp/fb_none.ck/step-00000006/rank-00000.safetensors"
flip "$tmp/fb_none.ck/step-00000004/metadata.json"
rm "$tmp/fb_none.ck/step-00000002/metadata.json"  # a folder that is not a checkpoint
fallback fb_none one "step-00000006 is not usable" "step-00000004 is not usable: .*metadata.json" \
  "step-00000002 is not usable: .*metadata.json is missing" "no usable checkpoint in .*; starting fresh"

# refused NAME PATTERN NP FLAGS...: the run fails (bounded in time) and says PATTERN.
refused() {
  local name=$1 pattern=$2 np=$3 out rc
  shift 3
  out=$(launch "$np" train "${tiny[@]}" "${short[@]}" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q -- "$pattern" <<<"$out" && ! grep -q "internal error" <<<"$out"; then
    echo "ok   $name: exit $rc ($(grep -m1 -o -- "$pattern.*" <<<"$out" | cut -c1-120))"
  else
    fail "$name: exit $rc, expected a message with '$pattern'; got: $out"
  fi
}
# intact NAME LAYOUT CKDIR: the previous checkpoints verify, `latest` is step-2,
# and resuming from them ends bitwise equal to the uninterrupted run.
intact() {
  local name=$1 layout=$2 np=1 flags seen
  flags=("${tiny[@]}" "${short[@]}" --set train.checkpoint_dir="$3")
  [ "$layout" = two ] && np=2 && flags+=("${two[@]}")
  if ! seen=$("${verify[@]}" "$3" --require-latest) || ! grep -q "latest step-00000002" <<<"$seen"; then
    fail "$name: the previous checkpoints are not intact: $seen"
  elif ! launch "$np" train "${flags[@]}" --resume auto --save "$tmp/$name.out" >/dev/null 2>&1 ||
    ! same_model "$layout.ref" "$name.out"; then
    fail "$name: resuming from the previous checkpoint did not reproduce the uninterrupted run"
  else
    echo "ok   $name: $seen; resumed, bitwise equal"
  fi
}

cp -r "$tmp/one.ck" "$tmp/bad.ck"
cut_file "$tmp/bad.ck/step-00000004/rank-00000.safetensors"
refused truncated_path "bad.ck/step-00000004/rank-00000.safetensors has .* bytes but metadata.json says .* (truncated)" \
  1 --resume "$tmp/bad.ck/step-00000004"
rm "$tmp/bad.ck/step-00000002/rank-00000.safetensors"
refused missing_shard_path "bad.ck/step-00000002/rank-00000.safetensors is missing" 1 \
  --resume "$tmp/bad.ck/step-00000002"
refused not_a_checkpoint "data: no metadata.json there (not a complete checkpoint)" 1 --resume "$tmp/data"
refused foreign_auto "tensor 'model.embed_tokens.weight'.*\[300, 32\].*\[300, 64\]" 1 --set model.d_model=64 \
  --set train.checkpoint_dir="$tmp/bad.ck" --resume auto

# A full disk (injected) on rank 0 while it commits the step-4 save, after its
# shard: every rank stops, the error names the file, step-2 stays.
MESHTRAIN_FAULT=enospc:0:3:$((shard_two + 100)) refused full_disk_commit \
  "cannot write '.*disk.ck/step-00000004.tmp-[0-9]*/.*No space left on device" 2 "${two[@]}" \
  --set train.checkpoint_dir="$tmp/disk.ck"
intact full_disk_commit two "$tmp/disk.ck"

# A real full disk: a tmpfs (in a private mount namespace) with room for two
# checkpoints of one process but not three; the step-6 save fails with the
# kernel's ENOSPC. The survivors are copied out before the namespace goes.
ck_bytes=$(du -sb "$tmp/one.ck/step-00000002" | cut -f1)
mkdir -p "$tmp/tmpfs.ck"
if unshare -m true 2>/dev/null; then
  out=$(unshare -m --propagation private bash -c '
    mount -t tmpfs -o size=$(('"$ck_bytes"' * 5 / 2)) tmpfs "$0" || exit 99
    "$@"; rc=$?
    cp -r "$0" "$0.copy"
    exit $rc' "$tmp/tmpfs.ck" timeout 120 "$bin" train "${tiny[@]}" "${short[@]}" \
    --set train.checkpoint_dir="$tmp/tmpfs.ck" 2>&1)
  rc=$?
  if [ "$rc" -eq 99 ]; then
    echo "skip real_full_disk: cannot mount a tmpfs here"
  elif [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "tmpfs.ck/step-00000006.tmp-.*No space left on device" <<<"$out"; then
    rm -rf "$tmp/tmpfs.ck.copy"/step-00000006.tmp-*
    echo "ok   real_full_disk: exit $rc ($(grep -m1 -o "tmpfs.ck/step-00000006.tmp-.*" <<<"$out" | cut -c1-100))"
    if seen=$("${verify[@]}" "$tmp/tmpfs.ck.copy" --require-latest) && grep -q "latest step-00000004" <<<"$seen" &&
      launch 1 train "${tiny[@]}" "${short[@]}" --set train.checkpoint_dir="$tmp/tmpfs.ck.copy" --resume auto \
        --save "$tmp/tmpfs.out" >/dev/null 2>&1 && same_model one.ref tmpfs.out; then
      echo "ok   real_full_disk: $seen; resumed, bitwise equal"
    else
      fail "real_full_disk: the previous checkpoints are not intact or do not resume: $seen"
    fi
  else
    fail "real_full_disk: exit $rc, expected ENOSPC naming the step-6 folder; got: $out"
  fi
else
  echo "skip real_full_disk: no private mount namespace here (unshare -m)"
fi

# The checkpoint directory made unwritable mid-run, after step-2 committed:
# chmod for a user that permissions bind, the immutable attribute for root
# (which permissions do not bind). slow_io holds rank 0's step-4 save (1 s per
# file) so that the change lands before that save's rename.
ro=$tmp/ro.ck
mkdir -p "$ro"
if [ "$(id -u)" -ne 0 ]; then
  lock=(chmod a-w "$ro") unlock=(chmod u+w "$ro") why="Permission denied"
else
  lock=(chattr +i "$ro") unlock=(chattr -i "$ro") why="Operation not permitted"
fi
if "${lock[@]}" 2>/dev/null && "${unlock[@]}"; then
  MESHTRAIN_FAULT=slow_io:0:2:1 launch 2 train "${tiny[@]}" "${short[@]}" "${two[@]}" \
    --set train.checkpoint_dir="$ro" >"$tmp/ro.log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [ "$(cat "$ro/latest" 2>/dev/null)" != step-00000002 ]; do
    sleep 0.02
  done
  "${lock[@]}"
  wait "$pid"
  rc=$?
  "${unlock[@]}"
  # Either the save's folder cannot be created or it cannot be renamed in, by timing.
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "ro.ck/step-00000004.*$why" "$tmp/ro.log" &&
    ! grep -q "internal error" "$tmp/ro.log"; then
    echo "ok   unwritable_dir: exit $rc ($(grep -m1 -o "ro.ck/step-00000004.*$why" "$tmp/ro.log" | cut -c1-110))"
    intact unwritable_dir two "$ro"
  else
    fail "unwritable_dir: exit $rc, expected '$why' naming the step-4 folder; got: $(cat "$tmp/ro.log")"
  fi
else
  echo "skip unwritable_dir: cannot make a directory unwritable here (${lock[0]})"
fi

echo "checkpoint_kill.sh took $((SECONDS - start)) s"
if [ "$failures" -ne 0 ]; then
  echo "$failures crash-safety check(s) failed"
  exit 1
fi
echo "all crash-safety checks passed"
