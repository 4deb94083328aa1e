#!/usr/bin/env bash
# Losing a node (docs/CLUSTER.md, "Losing a node"): 2 nodes × 2 ranks
# (scripts/cluster.sh), the tiny model at dp 4 in the canonical mode with a
# checkpoint every 10 steps; once a checkpoint of step 20 or later is in,
# every process of node 1 (its Open MPI daemon and its two ranks) is
# SIGKILLed, as a machine that loses power.
#   - the job ends within 10 s of the kill, non-zero, each of the two
#     surviving ranks printing once that it lost world ranks 2 and 3, every
#     rank of node 1, named as MPI names it (comm/lifeline.h);
#   - every checkpoint a reader can see is complete and `latest` names one
#     (verify_checkpoints.py, a reader independent of meshtrain's);
#   - --resume auto on the one node left, 2 ranks at dp 2 (the same global
#     batch of 8: each rank twice the microbatches, which the canonical mode
#     allows), continues from the latest checkpoint; the losses of every step it
#     runs and its final model are bitwise those of the uninterrupted run in
#     one process.
# Exit 77 (CTest: skipped) where the machine does not allow network namespaces.
set -uo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../scripts/cluster.sh"
export MT_CLUSTER_PREFIX=mtcl  # not the prefix of another test or bench
tmp=$(mktemp -d)
trap 'bash "$cluster" down; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
# shellcheck source=tests/dist/common.sh
source "$here/common.sh"

cluster_up 2 --ranks-per-node 2 --link 1gbit
make_data
steps=1500
tiny+=(--set train.steps=$steps --set train.microbatch_size=1 --set parallel.reduction=canonical)
ck=$tmp/ck
saves=(--set train.checkpoint_dir="$ck" --set train.checkpoint_every=10 --set train.keep_checkpoints=3)
fail() {
  echo "FAIL $1"
  failures=$((failures + 1))
}

"$bin" train "${tiny[@]}" --metrics "$tmp/ref.jsonl" --save "$tmp/ref" >/dev/null 2>&1 ||
  fail "ref: the one-process run failed"

timeout 120 bash "$cluster" mpirun -np 4 "$bin" train "${tiny[@]}" "${saves[@]}" --dp 4 \
  --metrics "$tmp/lost.jsonl" >"$tmp/lost.out" 2>&1 &
job=$!
latest_step() { sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' "$ck/latest" 2>/dev/null; }
for _ in $(seq 1 600); do
  s=$(latest_step)
  [ -n "$s" ] && [ "$s" -ge 20 ] && break
  sleep 0.05
done
node1=$(bash "$cluster" exec 1 hostname)
pids=$(ip netns pids "$MT_CLUSTER_PREFIX-n1")
if [ -z "$(latest_step)" ] || [ -z "$pids" ]; then
  fail "no checkpoint of step 20 (latest: '$(latest_step)') or node 1 not running: $(tail -3 "$tmp/lost.out")"
else
  t0=$SECONDS
  # shellcheck disable=SC2086
  kill -9 $pids
  wait "$job"
  status=$?
  took=$((SECONDS - t0))
  if [ "$status" -ne 0 ] && [ "$took" -le 10 ]; then
    echo "ok   node 1 killed at step $(latest_step)+: the job ended in ${took} s, status $status"
  else
    fail "after the kill the job ended with status $status in ${took} s"
  fi
  for r in 0 1; do  # each survivor's own message (comm/lifeline.h), naming the lost ranks and their node
    said="meshtrain: rank $r of 4 lost world ranks 2, 3 on node $node1 (every rank of that node)"
    if [ "$(grep -cF -- "$said" "$tmp/lost.out")" -eq 1 ]; then
      echo "ok   rank $r said: $said"
    else
      fail "rank $r did not say once '$said': $(grep -F 'meshtrain:' "$tmp/lost.out" | head -5)"
    fi
  done
fi
if /usr/bin/python3 "$here/verify_checkpoints.py" "$ck" --require-latest >"$tmp/verify" 2>&1; then
  echo "ok   checkpoints after the loss: $(tail -1 "$tmp/verify")"
else
  fail "a checkpoint is broken after the loss: $(tail -2 "$tmp/verify")"
fi
from=$(latest_step)
bash "$cluster" down >/dev/null 2>&1
if timeout 120 "${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" "${saves[@]}" --dp 2 --resume auto \
  --metrics "$tmp/resumed.jsonl" --save "$tmp/resumed" >"$tmp/resumed.out" 2>&1; then
  if python3 - "$tmp/resumed.jsonl" "$tmp/ref.jsonl" "$from" "$steps" <<'PY'; then
import collections, json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ref = {l["step"]: l["loss"] for l in map(json.loads, open(sys.argv[2])) if "loss" in l and "rank" not in l}
start, steps = int(sys.argv[3]), int(sys.argv[4])
got = {l["step"]: l["loss"] for l in lines if "loss" in l and "rank" not in l}
# Steps before the checkpoint are the lost run's stored lines (4 rank lines a step), the rest the resumed
# run's own (2): the proof that it resumed rather than started fresh.
ranks = collections.Counter(l["step"] for l in lines if "rank" in l)
resumed = all(ranks[s] == (4 if s < start else 2) for s in range(steps))
differ = [s for s in range(steps) if got.get(s) != ref.get(s)]
print(f"steps 0..{start - 1} stored by the lost run, {start}..{steps - 1} run at dp 2: resumed {resumed}, "
      f"losses differing from one process: {differ[:3]}")
sys.exit(0 if resumed and not differ and sorted(got) == list(range(steps)) else 1)
PY
    if cmp -s "$tmp/resumed/model.safetensors" "$tmp/ref/model.safetensors"; then
      echo "ok   resumed from step $from on 1 node at dp 2: every loss and the model bitwise the uninterrupted run"
    else
      fail "the resumed run's model differs from the uninterrupted run's"
    fi
  else
    fail "the resumed run's losses are not the uninterrupted run's"
  fi
else
  fail "--resume auto on 1 node failed: $(tail -3 "$tmp/resumed.out")"
fi
finish "cluster loss"
