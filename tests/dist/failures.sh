#!/usr/bin/env bash
# Bad input and failures of the real binary under mpirun: every job must end
# non-zero, within a bound, with one clear message (never one per rank).
#   failures.sh MESHTRAIN CASE     CASE: world_size | batch | zero | moe | ep | throw | stall | lost
# Each job runs under `timeout 120`, so a hang fails the test instead of blocking it.
set -u
bin=$1
case_name=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data

fail=0
check() {  # check "what" CONDITION...
  local what=$1
  shift
  if "$@"; then
    echo "ok   $what"
  else
    echo "FAIL $what"
    fail=1
  fi
}
lines() { grep -cF -- "$1" "$2"; }  # lines of file $2 holding the fixed text $1

# run_job MAX_SECONDS mpirun-args... : runs the job, then checks its status and time.
run_job() {
  local max=$1
  shift
  local start_ms=$(($(date +%s%N) / 1000000))
  timeout -k 5 120 "${mpi[@]}" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  local ms=$(($(date +%s%N) / 1000000 - start_ms))
  cat "$tmp/out" "$tmp/err" >"$tmp/all"
  echo "---- job: exit status $rc after $((ms / 1000)).$(printf %03d $((ms % 1000))) s; stderr: ----"
  cat "$tmp/err"
  echo "----"
  # By the clock, not the status: mpirun passes on a rank's own 137 (killed by SIGKILL, the lost case).
  check "not killed by the 120 s timeout (status $rc)" test "$ms" -lt 120000
  check "exit status non-zero (status $rc)" test "$rc" -ne 0
  check "ended within $max s ($ms ms)" test "$ms" -le $((max * 1000))
}

# The text must be on exactly `want` lines of everything the job printed, and
# (unless want is 0) on stderr.
expect_lines() {
  local text=$1 want=$2
  [ "$want" -eq 0 ] || check "stderr has '$text'" grep -qF -- "$text" "$tmp/err"
  check "'$text' printed on $want line(s) (got $(lines "$text" "$tmp/all"))" test "$(lines "$text" "$tmp/all")" -eq "$want"
}

train=(train "${tiny[@]}" --set train.microbatch_size=2)

case $case_name in
  world_size)  # 3 ranks for a mesh of 2
    run_job 20 -np 3 "$bin" "${train[@]}" --dp 2
    expect_lines "meshtrain: error: dp (2) = 2 but the world has 3 ranks" 1
    expect_lines "meshtrain: error" 1
    ;;
  batch)  # 6 sequences cannot be split into dp 2 × microbatches of 2
    run_job 20 -np 2 "$bin" "${train[@]}" --dp 2 --set train.batch_size=6
    expect_lines \
      "meshtrain: error: train.batch_size (6) must be divisible by parallel.dp (2) x train.microbatch_size (2)" 1
    expect_lines "meshtrain: error" 1
    ;;
  zero)
    run_job 20 -np 2 "$bin" "${train[@]}" --dp 2 --zero 5
    expect_lines "meshtrain: error: parallel.zero (5) must be 0, 1, 2 or 3" 1
    expect_lines "meshtrain: error" 1
    ;;
  throw)  # rank 1 throws at the start of step 3; rank 0 is then inside step 3's collectives
    MESHTRAIN_FAULT=throw:1:3 run_job 10 -np 2 "$bin" "${train[@]}" --dp 2 --set train.steps=6 \
      --metrics "$tmp/metrics.jsonl"
    expect_lines "injected fault" 1
    expect_lines "meshtrain: error (rank 1 of 2): injected fault (MESHTRAIN_FAULT) at step 3" 1
    expect_lines "watchdog" 0
    # It failed mid-run: steps 0, 1 and 2 were completed and logged, step 3 was not.
    check "steps 0-2 logged before the fault" test "$(grep -c '"loss"' "$tmp/metrics.jsonl" 2>/dev/null)" -eq 3
    ;;
  stall)  # rank 1 sleeps at the start of step 2; rank 0's first collective of the step waits 5 s
    MESHTRAIN_FAULT=stall:1:2 run_job 15 -np 2 "$bin" "${train[@]}" --dp 2 --set train.steps=6 \
      --set parallel.timeout_s=5 --metrics "$tmp/metrics.jsonl"
    # The first collective of a step is the sum of the valid-token counts.
    expect_lines "meshtrain: watchdog (rank 0): all_reduce on axis dp did not complete within 5 s (step 2, call site \"valid tokens\"" 1
    expect_lines "meshtrain: watchdog" 1
    check "steps 0-1 logged before the stall" test "$(grep -c '"loss"' "$tmp/metrics.jsonl" 2>/dev/null)" -eq 2
    ;;
  lost)  # rank 2 of 3 SIGKILLs itself at the start of step 3: both survivors name it (comm/lifeline.h)
    MESHTRAIN_FAULT=sigkill:2:3 run_job 10 -np 3 "$bin" "${train[@]}" --dp 3 --set train.batch_size=6 \
      --set train.steps=6
    node=$(hostname)
    for r in 0 1; do
      expect_lines "meshtrain: rank $r of 3 lost world rank 2 on node $node: their connections closed without a goodbye" 1
    done
    expect_lines "lost world rank" 2
    expect_lines "watchdog" 0
    ;;
  moe)  # the router bias over a microbatch's tokens shared by cp ranks (not built yet), and top_k > n_experts
    run_job 20 -np 2 "$bin" "${train[@]}" --cp 2 --set model.n_experts=4 --set model.router_bias_rate=0.01
    expect_lines "meshtrain: error: model.router_bias_rate (0.01) with parallel.cp (2) or parallel.tp (1) with parallel.sp: the bias would move by each rank's share of the tokens, not the whole microbatch's (not built yet)" 1
    expect_lines "meshtrain: error" 1
    run_job 20 -np 1 "$bin" "${train[@]}" --set model.n_experts=4 --set model.top_k=5
    expect_lines "meshtrain: error: model.top_k (5) must be between 1 and model.n_experts (4)" 1
    ;;
  ep)  # parallel.ep's rules (docs/PARALLELISM.md "Expert parallelism"), refused at start-up with the numbers
    moe=(--set model.n_experts=4)
    run_job 20 -np 3 "$bin" "${train[@]}" "${moe[@]}" --dp 3 --set train.batch_size=12 --set parallel.ep=3
    expect_lines "meshtrain: error: model.n_experts (4) must be divisible by parallel.ep (3)" 1
    run_job 20 -np 2 "$bin" "${train[@]}" "${moe[@]}" --dp 2 --set parallel.ep=4
    expect_lines "meshtrain: error: parallel.ep (4) must divide parallel.dp (2) x parallel.cp (1) = 2" 1
    run_job 20 -np 2 "$bin" "${train[@]}" --dp 2 --set parallel.ep=2
    expect_lines "meshtrain: error: parallel.ep (2) needs a mixture of experts, but model.n_experts is 0 (a dense model)" 1
    run_job 20 -np 2 "$bin" "${train[@]}" "${moe[@]}" --dp 2 --set parallel.ep=2 --set model.capacity_factor=1.5
    expect_lines "meshtrain: error: parallel.ep (2) with model.capacity_factor (1.5): expert parallelism is dropless only so far" 1
    run_job 20 -np 2 "$bin" "${train[@]}" "${moe[@]}" --dp 2 --set parallel.ep=0
    expect_lines "meshtrain: error: parallel.ep (0) must be positive" 1
    ;;
  *)
    echo "failures.sh: unknown case '$case_name'" >&2
    exit 2
    ;;
esac

[ "$fail" -eq 0 ] && echo "PASS $case_name" || echo "FAILED $case_name"
exit "$fail"
