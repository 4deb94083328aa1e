#!/usr/bin/env bash
# A link that degrades mid-run (docs/CLUSTER.md, "A link that degrades"): 2
# nodes × 1 rank (scripts/cluster.sh) at 1 Gbit/s, the tiny model at dp 2.
#   - 60 steps; once rank 0 has logged step 20 the link is reshaped on the fly
#     to 20 Mbit/s. The run completes, and `meshtrain report` names axis dp as
#     slower from a step at or after the reshaping (cli/report.h slow_axes);
#     the same report of the steps before it says no axis slowed;
#   - 40 steps under parallel.timeout_s = 3; at step 20 the link is reshaped to
#     256 kbit/s, where one step's gradient all-reduce needs ~7 s. The job ends
#     non-zero; each rank's watchdog names the collective, axis dp, and the two
#     sides of the link (each node by name with its world rank); and no rank
#     reports the other "never arrived" bare: the roll call's word travels on
#     the lifeline's own connection (comm/lifeline.h), so each knows where the
#     other waits though the call's own data is stuck on the link.
# Exit 77 (CTest: skipped) where the machine does not allow network namespaces.
set -uo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../scripts/cluster.sh"
export MT_CLUSTER_PREFIX=mtcg # not the prefix of another test or bench
tmp=$(mktemp -d)
trap 'bash "$cluster" down; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
# shellcheck source=tests/dist/common.sh
source "$here/common.sh"

cluster_up 2 --ranks-per-node 1 --link 1gbit
make_data
tiny+=(--dp 2 --set train.microbatch_size=1)
fail() {
  echo "FAIL $1"
  failures=$((failures + 1))
}
# reshape_at NAME STEP BW: once NAME.jsonl holds rank 0's line of STEP, the link becomes BW.
reshape_at() {
  for _ in $(seq 1 3000); do
    grep -q "\"step\":$2,\"rank\":0\|\"rank\":0.*\"step\":$2[,}]" "$tmp/$1.jsonl" 2>/dev/null && break
    sleep 0.01
  done
  bash "$cluster" shape "$3"
}
node0=$(bash "$cluster" exec 0 hostname)
node1=$(bash "$cluster" exec 1 hostname)

# 1. The report's slower axis.
timeout 120 bash "$cluster" mpirun -np 2 "$bin" train "${tiny[@]}" --set train.steps=60 \
  --metrics "$tmp/slow.jsonl" >"$tmp/slow.out" 2>&1 &
job=$!
reshape_at slow 20 20mbit
if ! wait "$job"; then
  fail "the run on the degrading link failed: $(tail -3 "$tmp/slow.out")"
else
  "$bin" report "$tmp/slow.jsonl" --out "$tmp/slow.html" >/dev/null || fail "report failed"
  found=$(grep -o 'Slower axes: slow, axis dp: [0-9]* of steps [0-9]*-[0-9]*[^;<]* ms)' "$tmp/slow.html")
  first=$(grep -o 'axis dp: [0-9]* of steps [0-9]*' <<<"$found" | grep -o '[0-9]*$')
  if [ -n "$first" ] && [ "$first" -ge 20 ]; then
    echo "ok   the report: $found"
  else
    fail "the report does not name axis dp slower from step 20 on: '${found:-nothing}'"
  fi
  # The steps before the reshaping alone: nothing slowed.
  grep -v '"step":\(2[0-9]\|[3-9][0-9]\)[,}]' "$tmp/slow.jsonl" >"$tmp/before.jsonl"
  "$bin" report "$tmp/before.jsonl" --out "$tmp/before.html" >/dev/null || fail "report (before) failed"
  if grep -q 'No axis slowed' "$tmp/before.html"; then
    echo "ok   the report of steps 0-19 (before the reshaping): no axis slowed"
  else
    fail "the report of the steps before the reshaping names a slower axis: $(grep -o 'Slower axes[^<]*' "$tmp/before.html")"
  fi
fi
bash "$cluster" shape 1gbit

# 2. The watchdog on a link that all but stops.
t0=$SECONDS
timeout 120 bash "$cluster" mpirun -np 2 "$bin" train "${tiny[@]}" --set train.steps=40 \
  --set parallel.timeout_s=3 --metrics "$tmp/stall.jsonl" >"$tmp/stall.out" 2>&1 &
job=$!
reshape_at stall 20 256kbit
wait "$job"
status=$?
took=$((SECONDS - t0))
dog=$(grep -c "^meshtrain: watchdog (rank [01]): [a-z_]* on axis dp did not complete within 3 s" "$tmp/stall.out")
sides="the call crosses the link between node $node0 (world rank 0) and node $node1 (world rank 1)"
if [ "$status" -ne 0 ] && [ "$dog" -eq 2 ] && [ "$(grep -cF -- "$sides" "$tmp/stall.out")" -eq 2 ]; then
  echo "ok   the job ended with status $status after ${took} s; each rank's watchdog named the call, axis dp and $sides"
else
  fail "status $status, watchdog lines $dog, naming the sides $(grep -cF -- "$sides" "$tmp/stall.out"): $(grep meshtrain "$tmp/stall.out")"
fi
if grep -E "never arrived: world rank [01] \(dp rank [01]\);" "$tmp/stall.out"; then
  fail "a rank reported the other never arrived without saying where it was last heard"
else
  echo "ok   no rank reported the other never arrived bare: $(grep -o 'never arrived: [^;]*' "$tmp/stall.out" | tr '\n' '|')"
fi
[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "cluster degrade ok"
