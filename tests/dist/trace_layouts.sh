#!/usr/bin/env bash
# --trace on every kind of layout (dp2, tp2, pp2, zero3 with checkpoints, one
# process): the merged Chrome-trace file passes check_trace.py, --trace-steps
# chooses the steps, and the metrics' header and rank lines pass
# check_metrics.py (their exposed communication equal to the trace's waits).
# Usage: trace_layouts.sh path/to/meshtrain
set -uo pipefail
bin=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$here/common.sh"
make_data
small=(--set train.steps=4)
traced() {  # traced NAME RANKS STEPS FLAGS...: runs the layout with --trace and checks the file
  local name=$1 np=$2 steps=$3
  shift 3
  if ! run "$name" "$np" "${small[@]}" "$@" --trace "$tmp/$name.trace.json"; then
    echo "FAIL $name: the run failed"
    failures=$((failures + 1))
    return
  fi
  # shellcheck disable=SC2086
  if ! /usr/bin/python3 "$here/check_trace.py" "$tmp/$name.trace.json" "$np" $steps ||
    ! /usr/bin/python3 "$here/check_metrics.py" "$tmp/$name.jsonl" "$np" "$tmp/$name.trace.json"; then
    failures=$((failures + 1))
  fi
}
traced dp2 2 "1 2" --dp 2 --set train.microbatch_size=2 --trace-steps 1-2
traced tp2 2 "3" --tp 2 --set parallel.sp=true
traced pp2 2 "0 3" --pp 2 --set train.microbatch_size=2 --trace-steps 0,3
traced zero3 2 "3" --dp 2 --zero 3 --set train.microbatch_size=2 --set train.checkpoint_dir="$tmp/ck" --set train.checkpoint_every=2
if "$bin" train "${tiny[@]}" "${small[@]}" --trace "$tmp/one.trace.json" --trace-steps 2 --metrics "$tmp/one.jsonl" &&
  /usr/bin/python3 "$here/check_trace.py" "$tmp/one.trace.json" 1 2 &&
  /usr/bin/python3 "$here/check_metrics.py" "$tmp/one.jsonl" 1 "$tmp/one.trace.json"; then :; else
  failures=$((failures + 1))
fi
# The traced ranks compute what untraced ones do: the same losses, bitwise.
run dp2_plain 2 "${small[@]}" --dp 2 --set train.microbatch_size=2
check_bitwise dp2 dp2_plain "dp2 with and without --trace"
[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all trace checks passed"
