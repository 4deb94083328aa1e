#!/usr/bin/env bash
# Runs a job that must end in a known way and checks how it ended.
#   run_job.sh [--status nonzero|N] [--max-seconds S] [--count TEXT N]... [--at-least TEXT N]... -- command...
# --status       expected exit status (default: nonzero)
# --max-seconds  the job must end within S seconds (a hang is killed at 60 s)
# --count        TEXT (a fixed string) must appear on exactly N lines of stdout+stderr
# --at-least     TEXT must appear on N lines or more
set -u
status=nonzero
max=60
checks=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --status) status=$2; shift 2 ;;
    --max-seconds) max=$2; shift 2 ;;
    --count) checks+=("$2" "=$3"); shift 3 ;;
    --at-least) checks+=("$2" ">$3"); shift 3 ;;
    --) shift; break ;;
    *) echo "run_job.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start_ms=$(($(date +%s%N) / 1000000))
timeout -k 5 60 "$@" >"$log" 2>&1
rc=$?
elapsed_ms=$(($(date +%s%N) / 1000000 - start_ms))
elapsed=$((elapsed_ms / 1000)).$(printf %03d $((elapsed_ms % 1000)))
echo "---- job output (exit status $rc, $elapsed s) ----"
cat "$log"
echo "----"
fail=0
if [[ $rc -eq 124 || $rc -eq 137 ]]; then echo "FAIL: the job hung and was killed after 60 s"; fail=1; fi
if [[ $status == nonzero ]]; then
  [[ $rc -ne 0 ]] || { echo "FAIL: exit status 0, expected non-zero"; fail=1; }
elif [[ $rc -ne $status ]]; then
  echo "FAIL: exit status $rc, expected $status"; fail=1
fi
if ((elapsed_ms > max * 1000)); then echo "FAIL: took $elapsed s, bound $max s"; fail=1; fi
for ((i = 0; i < ${#checks[@]}; i += 2)); do
  text=${checks[i]}
  want=${checks[i + 1]:1}
  got=$(grep -cF -- "$text" "$log")
  if [[ ${checks[i + 1]:0:1} == "=" ]]; then
    [[ $got -eq $want ]] || { echo "FAIL: '$text' on $got lines, expected $want"; fail=1; }
  else
    [[ $got -ge $want ]] || { echo "FAIL: '$text' on $got lines, expected at least $want"; fail=1; }
  fi
done
[[ $fail -eq 0 ]] && echo "PASS"
exit $fail
