#!/usr/bin/env bash
# Preemption and asynchronous checkpoints (docs/PARALLELISM.md, "Preemption and
# asynchronous checkpoints"; train/preempt.h, ckpt/checkpoint_async.h).
# Preemption: SIGTERM to the one process of a run, SIGTERM to all 4 ranks of a
# dp2 × tp2 run, SIGUSR1 to `mpirun` of a 2-rank run, each sent mid-run, and a
# SIGTERM that reaches one rank of four alone (MESHTRAIN_FAULT=sigterm) while an
# async save is in flight: exit 0, one message from rank 0 naming the signal
# and the checkpoint, the checkpoint at the agreed step, and resuming it to the
# end gives losses, gradient norms and final model bitwise those of the
# uninterrupted run. Async: a run's checkpoint files are byte-equal to a
# synchronous run's, a resumed async run is bitwise, and a full disk during an
# async write is a clean error that leaves the previous checkpoint intact.
# Usage: checkpoint_signals.sh path/to/meshtrain
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
source "$(dirname "$0")/common.sh"
make_data
long=200  # steps of the runs signalled from outside: still going when the signal comes

fail() {
  echo "FAIL $1"
  failures=$((failures + 1))
}

# same_run A B WHAT: $tmp/A and $tmp/B hold bitwise equal losses, gradient norms and models.
same_run() {
  local a=$tmp/$1.jsonl b=$tmp/$2.jsonl
  if cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors" &&
    [ "$(grep -c '"loss"' "$a")" -eq "$(grep -c '"loss"' "$b")" ] &&
    diff <(grep -o '"loss":[^,]*\|"grad_norm":[^,]*' "$a") <(grep -o '"loss":[^,]*\|"grad_norm":[^,]*' "$b") \
      >/dev/null; then
    echo "ok   $3"
  else
    fail "$3: the resumed run differs from the uninterrupted one"
  fi
}

# wait_steps FILE N: until FILE shows N steps (at most 60 s).
wait_steps() {
  for _ in $(seq 600); do
    local n
    n=$(grep -c '"loss"' "$1" 2>/dev/null)
    [ "${n:-0}" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

# stopped NAME RC SIGNAL: the cut run NAME exited 0 with one stop message naming
# SIGNAL and the checkpoint of the step its metrics end at, which `latest` names.
stopped() {
  local name=$1 rc=$2 sig=$3 ck=$tmp/$1.ck
  local k
  k=$(grep -c '"loss"' "$tmp/${name}_cut.jsonl")
  local want
  want=$(printf 'step-%08d' "$k")
  if [ "$rc" -eq 0 ] && [ "$(grep -c 'meshtrain: .* received by' "$tmp/$name.err")" -eq 1 ] &&
    grep -q "$sig received by .* stopped after $k of .* saved checkpoint $ck/$want" "$tmp/$name.err" &&
    [ "$(cat "$ck/latest" 2>/dev/null)" = "$want" ] && [ -f "$ck/$want/metadata.json" ]; then
    echo "ok   $name: exit 0, $(grep -o "$sig received by [0-9]* of [0-9]*" "$tmp/$name.err") rank(s), $want"
    return 0
  fi
  fail "$name: exit $rc, checkpoints $(ls "$ck" 2>/dev/null | tr '\n' ' '), stderr: $(head -c 600 "$tmp/$name.err")"
  return 1
}

# resume NAME RANKS FLAGS...: continues NAME's checkpoint to the end.
resume() {
  local name=$1 np=$2
  shift 2
  "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" --set train.checkpoint_dir="$tmp/$name.ck" --resume auto \
    --metrics "$tmp/${name}_resumed.jsonl" --save "$tmp/${name}_resumed" >/dev/null 2>&1
}

# The pids of the ranks mpirun PID started (its children running meshtrain).
ranks_of() {
  for c in $(pgrep -P "$1"); do
    [ "$(readlink "/proc/$c/exe")" = "$(readlink -f "$bin")" ] && echo "$c"
  done
}

# preempt NAME RANKS HOW FLAGS...: the uninterrupted run, a run signalled mid-run
# (HOW: term_one, the one process without mpirun; term_ranks, SIGTERM to every
# rank; usr1_mpirun, SIGUSR1 to mpirun), its resumption; checked.
preempt() {
  local name=$1 np=$2 how=$3
  shift 3
  local steps=(--set train.steps=$long)
  run "${name}_full" "$np" "${steps[@]}" "$@" >/dev/null
  local ck=(--set train.checkpoint_dir="$tmp/$name.ck")
  # Each step of the signalled run sleeps 20 ms (the numbers are unchanged):
  # its 200 steps take at least 4 s, so the signal surely comes mid-run.
  export MESHTRAIN_FAULT=slow_steps:0:0:20
  if [ "$how" = term_one ]; then
    "$bin" train "${tiny[@]}" "${steps[@]}" "$@" "${ck[@]}" --metrics "$tmp/${name}_cut.jsonl" 2>"$tmp/$name.err" &
  else
    "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "${steps[@]}" "$@" "${ck[@]}" \
      --metrics "$tmp/${name}_cut.jsonl" 2>"$tmp/$name.err" &
  fi
  local pid=$!
  unset MESHTRAIN_FAULT
  pids+=("$pid")
  wait_steps "$tmp/${name}_cut.jsonl" 5
  case $how in
    term_one) kill -TERM "$pid" ;;
    term_ranks) kill -TERM $(ranks_of "$pid") ;;
    usr1_mpirun) kill -USR1 "$pid" ;;
  esac
  wait "$pid"
  local rc=$? sig=SIGTERM
  [ "$how" = usr1_mpirun ] && sig=SIGUSR1
  if [ "$(grep -c '"loss"' "$tmp/${name}_cut.jsonl")" -ge $long ]; then
    fail "$name: the run had finished before the signal came (use more steps)"
    return
  fi
  stopped "$name" "$rc" "$sig" || return
  resume "$name" "$np" "${steps[@]}" "$@"
  same_run "${name}_full" "${name}_resumed" "$name: resumed from the stop, bitwise"
}

start=$SECONDS
preempt term_one 1 term_one
preempt term_dp2_tp2 4 term_ranks --dp 2 --tp 2 --set train.microbatch_size=4
preempt usr1_dp2 2 usr1_mpirun --dp 2 --zero 1 --set train.microbatch_size=4

# A SIGTERM that reaches rank 1 alone, at the start of step 5, while the async
# save of step 4 may still be writing: every rank stops after step 5 (the
# signal rides step 5's reductions), step-6 is saved, and resuming it is bitwise.
layout=(--dp 2 --tp 2 --set train.microbatch_size=4)
async=(--set train.async_checkpoint=true --set train.checkpoint_every=2)
run one_rank_full 4 "${layout[@]}" >/dev/null
MESHTRAIN_FAULT=sigterm:1:5 "${mpi[@]}" -np 4 "$bin" train "${tiny[@]}" "${layout[@]}" "${async[@]}" \
  --set train.checkpoint_dir="$tmp/one_rank.ck" --metrics "$tmp/one_rank_cut.jsonl" 2>"$tmp/one_rank.err"
rc=$?
if stopped one_rank "$rc" SIGTERM && grep -q "received by 1 of 4 rank(s): stopped after 6 of 10" "$tmp/one_rank.err" &&
  [ -f "$tmp/one_rank.ck/step-00000004/metadata.json" ]; then
  resume one_rank 4 "${layout[@]}" "${async[@]}"
  same_run one_rank_full one_rank_resumed "one_rank: all 4 ranks stopped after step 6, resumed bitwise"
else
  fail "one_rank: not stopped after step 6 with step-4 committed: $(ls "$tmp/one_rank.ck" | tr '\n' ' ')"
fi

# sync_async NAME RANKS FLAGS...: a synchronous and an asynchronous run with a
# checkpoint every 3 steps write the same checkpoints: shard files byte for
# byte; metadata.json equal but for train.async_checkpoint, checkpoint_dir and
# the entry of metrics.jsonl, whose lines hold times (steps', saves'): its losses and
# gradient norms equal.
sync_async() {
  local name=$1 np=$2
  shift 2
  local every=(--set train.checkpoint_every=3)
  run "${name}_sync" "$np" "$@" "${every[@]}" --set train.checkpoint_dir="$tmp/${name}_sync.ck" >/dev/null
  run "${name}_async" "$np" "$@" "${every[@]}" --set train.checkpoint_dir="$tmp/${name}_async.ck" \
    --set train.async_checkpoint=true >/dev/null
  local a=$tmp/${name}_sync.ck b=$tmp/${name}_async.ck ok=1
  for d in step-00000003 step-00000006 step-00000009 step-00000010; do
    for f in "$a/$d"/*; do
      local g
      g=$(basename "$f")
      if [ "$g" = metadata.json ]; then
        /usr/bin/python3 - "$f" "$b/$d/$g" <<'PY' || ok=0
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["config"].pop("train.async_checkpoint") == "false" and b["config"].pop("train.async_checkpoint") == "true"
for m in (a, b):
    m["config"].pop("train.checkpoint_dir")  # the two runs' own folders
    m.pop("metadata_crc32c")  # a checksum of what differs above
    m["files"] = [f for f in m["files"] if f["name"] != "metrics.jsonl"]
sys.exit(0 if a == b else 1)
PY
      elif [ "$g" = metrics.jsonl ]; then
        diff <(grep -o '"loss":[^,]*\|"grad_norm":[^,]*' "$f") <(grep -o '"loss":[^,]*\|"grad_norm":[^,]*' "$b/$d/$g") \
          >/dev/null || ok=0
      else
        cmp -s "$f" "$b/$d/$g" || ok=0
      fi
    done
  done
  [ "$(ls "$a" | wc -l)" -eq 5 ] || ok=0
  if [ "$ok" -eq 1 ] && [ "$(ls "$a")" = "$(ls "$b")" ]; then
    echo "ok   $name: async checkpoints byte-equal to sync ones ($(ls "$b" | tr '\n' ' '))"
  else
    fail "$name: async checkpoints differ from sync ones"
  fi
  same_run "${name}_sync" "${name}_async" "$name: async run = sync run, bitwise"
}
sync_async async_one 1
sync_async async_dp2 2 --dp 2 --zero 1 --set train.microbatch_size=4
# The async copy of the state is made by the writer during the next step's
# forward and backward, and the optimizer waits for it: with the copy held back
# 1 s (slow_copy) the next update would otherwise change the state under it,
# so the files must still equal the sync run's, and each save's blocked_s
# must include the wait.
MESHTRAIN_FAULT=slow_copy:0:0:1 sync_async async_slow_copy 1
if /usr/bin/python3 - "$tmp/async_slow_copy_async.jsonl" <<'PY'; then
import json, sys
blocked = [r["blocked_s"] for r in map(json.loads, open(sys.argv[1])) if "checkpoint_step" in r]
print(f"ok   async_slow_copy: the optimizer waited for the held-back copy (blocked_s {blocked})")
sys.exit(0 if len(blocked) == 4 and min(blocked) >= 0.95 else 1)
PY
  :
else
  fail "async_slow_copy: the saves' blocked_s do not include the wait for the copy"
fi

# Async saves are finalized through the votes as soon as every writer is done,
# not only when the next save needs it: with a save every 400 steps (a tiny
# step takes about a millisecond, the write tens of them; the margin is wide
# because another test may share the cores with the writer thread), step 400's
# metrics line comes before step 799, after which the next save would force it.
"$bin" train "${tiny[@]}" --set train.steps=800 --set train.checkpoint_every=400 --set train.async_checkpoint=true \
  --set train.checkpoint_dir="$tmp/votes.ck" --metrics "$tmp/votes.jsonl" >/dev/null
if /usr/bin/python3 - "$tmp/votes.jsonl" <<'PY'; then
import json, sys
step = -1  # the last step line seen
early = []
for r in map(json.loads, open(sys.argv[1])):
    if "loss" in r:
        step = r["step"]
    elif "checkpoint_step" in r and r["checkpoint_step"] < 800 and step < r["checkpoint_step"] + 399:
        early.append((r["checkpoint_step"], step))
print(f"ok   async_votes: saves finalized after steps {early} (checkpoint, last step), before the next save")
sys.exit(0 if early else 1)
PY
  :
else
  fail "async_votes: no async save was finalized before the next save forced it"
fi

# An async run stopped by an error at the start of step 7 (what was committed
# by then: step-3, and step-6 once every writer was done) resumes bitwise.
MESHTRAIN_FAULT=throw:0:7 "$bin" train "${tiny[@]}" --set train.async_checkpoint=true \
  --set train.checkpoint_every=3 --set train.checkpoint_dir="$tmp/async_cut.ck" >/dev/null 2>&1
latest=$(cat "$tmp/async_cut.ck/latest" 2>/dev/null)
if [ -f "$tmp/async_cut.ck/step-00000003/metadata.json" ] && [ ! -e "$tmp/async_cut.ck/step-00000009" ] &&
  { [ "$latest" = step-00000003 ] || [ "$latest" = step-00000006 ]; }; then
  resume async_cut 1 --set train.async_checkpoint=true --set train.checkpoint_every=3
  same_run async_one_sync async_cut_resumed "async_cut: stopped at step 7, resumed from $latest, bitwise"
else
  fail "async_cut: $(ls "$tmp/async_cut.ck" | tr '\n' ' ')"
fi

# A full disk on rank 1 from step 5 on, with async saves every 2 steps: every
# rank stops with the reason, the newest complete checkpoint is intact (step-4,
# or step-2 when step-4's write was still going at step 5) and resumes.
full=$tmp/full.ck
flags=(--dp 2 --zero 1 --set train.microbatch_size=4 --set train.checkpoint_dir="$full" "${async[@]}")
out=$(MESHTRAIN_FAULT=enospc:1:5:0 "${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" "${flags[@]}" 2>&1)
rc=$?
latest=$(cat "$full/latest" 2>/dev/null)
if [ "$rc" -ne 0 ] && grep -q "rank 1 could not write its files" <<<"$out" &&
  { [ "$latest" = step-00000004 ] || [ "$latest" = step-00000002 ]; } && [ ! -e "$full/step-00000006" ] &&
  "${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" "${flags[@]}" --resume auto >/dev/null 2>&1 &&
  [ "$(cat "$full/latest")" = step-00000010 ]; then
  echo "ok   async_full_disk: clean error ($(grep -m1 -o 'rank 1 could not write.*' <<<"$out" | cut -c1-80)), $latest intact and resumed"
else
  fail "async_full_disk: exit $rc, latest $latest, $full holds $(ls "$full" | tr '\n' ' '); $out"
fi

echo "($((SECONDS - start)) s)"
if [ "$failures" -ne 0 ]; then
  echo "$failures preemption/async check(s) failed"
  exit 1
fi
echo "all preemption and async checkpoint checks passed"
