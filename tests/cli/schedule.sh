#!/usr/bin/env bash
# meshtrain schedule: the grid of a small 1F1B schedule, exactly (derived by
# hand in tests/pipeline/test_schedule.cpp), and bad input as a one-line error
# with exit status 1.
set -u
bin=$1
failures=0

want='1f1b schedule: pp 2, v 1, 3 microbatches; F = forward (1 time unit), B = backward (2 units), . = idle
time    0  1  2  3  4  5  6  7  8  9  10 11
rank 0  F0 F1 .  .  B0 B0 F2 B1 B1 .  B2 B2
rank 1  .  F0 B0 B0 F1 B1 B1 F2 B2 B2 .  .

makespan 12 time units; bubble = idle / makespan, ideal = (pp-1)/(v*m+pp-1) = 0.2500
rank    busy  idle  bubble  ideal   peak activation sets in flight
rank 0  9     3     0.2500  0.2500  2
rank 1  9     3     0.2500  0.2500  1'
got=$("$bin" schedule --kind 1f1b --pp 2 --microbatches 3)
rc=$?
if [ "$rc" -ne 0 ] || [ "$got" != "$want" ]; then
  echo "FAIL [1f1b pp 2 m 3]: exit $rc, grid:"
  diff <(echo "$want") <(echo "$got")
  failures=$((failures + 1))
else
  echo "ok   [1f1b pp 2 m 3]"
fi

# expect_error "what" "expected stderr" args...
expect_error() {
  local what=$1 want_err=$2
  shift 2
  local err rc
  err=$("$bin" schedule "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne 1 ] || [ "$err" != "meshtrain: error: $want_err" ]; then
    echo "FAIL [$what]: exit $rc (want 1), stderr: $err"
    failures=$((failures + 1))
  else
    echo "ok   [$what]: $err"
  fi
}
expect_error "1f1b with microbatches < pp" \
  "the 1f1b schedule needs microbatches (3) >= pp (4): with fewer it never reaches its steady state (gpipe runs any number)" \
  --kind 1f1b --pp 4 --microbatches 3
expect_error "unknown kind" "unknown pipeline schedule 'zb': use gpipe, 1f1b, interleaved or zbh1" \
  --kind zb --pp 2 --microbatches 2

if ! "$bin" --help | grep -q "schedule"; then
  echo "FAIL: meshtrain --help does not list schedule"
  failures=$((failures + 1))
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures schedule case(s) failed"
  exit 1
fi
echo "meshtrain schedule: all cases pass"
