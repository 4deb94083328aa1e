#!/usr/bin/env bash
# Keys the user set that have no effect in the chosen layout are named once,
# by rank 0, on stderr ("meshtrain: note: ..."); keys left at their defaults
# never are. Runs under mpirun with 2 ranks, so a note printed by every rank
# would show twice.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
mpi=(mpirun --oversubscribe --allow-run-as-root --mca btl self,vader -np 2)

mkdir -p "$tmp/corpus"
for i in $(seq 1 300); do
  echo "fortune number $i says the quick brown fox jumps over the lazy dog $((i * 7))"
  echo "%"
done >"$tmp/corpus/fortunes"
"$bin" prepare --text "$tmp/corpus" --out "$tmp/data" --vocab-size 300 >/dev/null || { echo "prepare failed"; exit 1; }
cfg="$tmp/tiny.toml"
cat >"$cfg" <<TOML
[model]
vocab_size = 300
d_model = 16
n_layers = 2
n_heads = 2
n_kv_heads = 1
ffn_hidden = 24
max_seq_len = 16
[train]
steps = 1
batch_size = 2
microbatch_size = 1
seq_len = 16
eval_every = 0
[data]
dir = "$tmp/data"
TOML

# expect_notes "what" N "note text" train-args... : exactly N stderr lines are
# notes, each of them the given text; the run succeeds.
expect_notes() {
  local what=$1 want_count=$2 want=$3
  shift 3
  local err rc notes
  err=$(OMP_NUM_THREADS=1 timeout -k 5 120 "${mpi[@]}" "$bin" train --config "$cfg" --quiet "$@" 2>&1 >/dev/null)
  rc=$?
  notes=$(grep '^meshtrain: note: ' <<<"$err")
  local count
  count=$(grep -c '^meshtrain: note: ' <<<"$err")
  if [ "$rc" -ne 0 ]; then
    echo "FAIL [$what]: exit status $rc; stderr: $err"
    failures=$((failures + 1))
  elif [ "$count" -ne "$want_count" ]; then
    echo "FAIL [$what]: $count note lines (want $want_count): $err"
    failures=$((failures + 1))
  elif [ "$want_count" -gt 0 ] && [ "$(sort -u <<<"$notes")" != "$want" ]; then
    echo "FAIL [$what]: notes '$notes' (want '$want')"
    failures=$((failures + 1))
  else
    echo "ok   [$what]: $count note line(s) ${notes:+: $notes}"
  fi
}

expect_notes "bucket_mb set, zero 3" 1 "meshtrain: note: parallel.bucket_mb has no effect with parallel.zero = 3" \
  --dp 2 --zero 3 --set parallel.bucket_mb=4
expect_notes "bucket_mb default, zero 3" 0 "" --dp 2 --zero 3
expect_notes "bucket_mb set, zero 1" 0 "" --dp 2 --zero 1 --set parallel.bucket_mb=4
expect_notes "cp_impl set, cp 1" 1 "meshtrain: note: parallel.cp_impl has no effect with parallel.cp = 1" \
  --dp 2 --set parallel.cp_impl=allgather
expect_notes "schedule set, pp 1" 1 "meshtrain: note: parallel.schedule has no effect with parallel.pp = 1" \
  --dp 2 --set parallel.schedule=gpipe
expect_notes "schedule set, pp 2" 0 "" --pp 2 --set parallel.schedule=gpipe --set train.microbatch_size=1
# In the file rather than by --set: the same note.
printf '[parallel]\nbucket_mb = 8.0\n' >>"$cfg"
expect_notes "bucket_mb in the file, zero 2" 1 \
  "meshtrain: note: parallel.bucket_mb has no effect with parallel.zero = 2" --dp 2 --zero 2

if [ "$failures" -ne 0 ]; then
  echo "$failures note case(s) failed"
  exit 1
fi
echo "every ineffective key is noted once, and only when set"
