#!/usr/bin/env bash
# Crash safety from outside (docs/BENCHMARKS.md, "Checkpoint crash safety"):
# KILLS times, a tiny run saving a checkpoint after every step (one process,
# or two ranks under mpirun) is killed with SIGKILL at a random moment after
# its first checkpoint (uniform over the rest of an uninterrupted run) — the
# process, one rank, or mpirun itself. When every process of the run is gone,
# every step-N/ a reader can see must pass its checks (metadata.json's own
# CRC32C, every file's size and CRC32C: tests/dist/verify_checkpoints.py,
# independent of meshtrain), `latest` must name one of them, and a
# --resume auto run must complete with a model bitwise equal to the
# uninterrupted run's. Not part of `make test` (about 4 s a kill).
# Usage: bench/checkpoint_kill.sh path/to/meshtrain [KILLS (200)] [SEED (1)]
set -uo pipefail
bin=$1
kills=${2:-200}
RANDOM=${3:-1}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$here/../tests/dist/common.sh"
make_data
verify=(/usr/bin/python3 "$here/../tests/dist/verify_checkpoints.py")
flags=("${tiny[@]}" --set train.steps=12 --set train.checkpoint_every=1 --set train.keep_checkpoints=3
  --set train.checkpoint_dir="$tmp/ck")
two=(--dp 2 --zero 1 --set train.microbatch_size=4)

# start NP OUT: the run in the background; its pid in $run_pid.
start() {
  if [ "$1" -eq 1 ]; then
    "$bin" train "${flags[@]}" "${@:3}" --save "$2" >"$tmp/log" 2>&1 &
  else
    "${mpi[@]}" -np 2 "$bin" train "${flags[@]}" "${two[@]}" "${@:3}" --save "$2" >"$tmp/log" 2>&1 &
  fi
  run_pid=$!
}

# until_first_checkpoint: waits until the running run has committed a
# checkpoint (`latest` exists) or has ended.
until_first_checkpoint() {
  while [ ! -e "$tmp/ck/latest" ] && kill -0 "$run_pid" 2>/dev/null; do
    sleep 0.01
  done
}

# The uninterrupted runs: reference models, and the time from the first
# checkpoint to the end (ms): the window in which the kills land, so that each
# hits a run that is saving one checkpoint after another.
declare -A dur
for np in 1 2; do
  start "$np" "$tmp/ref$np"
  until_first_checkpoint
  t0=$(date +%s%N)
  wait "$run_pid" || { echo "the reference run on $np rank(s) failed"; exit 1; }
  dur[$np]=$((($(date +%s%N) - t0) / 1000000))
  rm -rf "$tmp/ck"
done
echo "uninterrupted runs (12 steps, a checkpoint after each): from the first checkpoint to the end" \
  "${dur[1]} ms on 1 process, ${dur[2]} ms on 2 ranks"

n=0 verified=0 checkpoints=0 resumed=0 bitwise=0 failures=0 finished=0 lingering=0
declare -A targets
while [ "$n" -lt "$kills" ]; do
  rm -rf "$tmp/ck" "$tmp/out"
  np=$((RANDOM % 2 + 1))
  start "$np" "$tmp/out"
  until_first_checkpoint
  sleep "$(awk -v r=$RANDOM -v d="${dur[$np]}" 'BEGIN { printf "%.3f", r / 32768 * d / 1000 }')"
  procs=("$run_pid" $(pgrep -P "$run_pid"))
  if [ "$np" -eq 1 ]; then
    target=$run_pid what=process
  else
    pick=$((RANDOM % 3))
    target=${procs[$pick]:-$run_pid}
    what=$([ "$pick" -eq 0 ] && echo mpirun || echo rank)
  fi
  if ! kill -9 "$target" 2>/dev/null; then
    finished=$((finished + 1))  # the run ended before the kill: not counted
    { wait "$run_pid"; } 2>/dev/null
    continue
  fi
  n=$((n + 1))
  targets[$what]=$((${targets[$what]:-0} + 1))
  # Every process of the run gone (ranks outliving a killed mpirun are ended after 20 s).
  for _ in $(seq 200); do
    alive=0
    for p in "${procs[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.1
  done
  if [ "$alive" -ne 0 ]; then
    lingering=$((lingering + 1))
    kill -9 "${procs[@]}" 2>/dev/null
  fi
  { wait "$run_pid"; } 2>/dev/null
  if ! seen=$("${verify[@]}" "$tmp/ck"); then
    failures=$((failures + 1))
    echo "FAIL kill $n ($what, $np rank(s)): $seen"
    cp -r "$tmp/ck" "$tmp/../checkpoint_kill_failure_$n" 2>/dev/null
    continue
  fi
  c=$(cut -d' ' -f1 <<<"$seen")
  checkpoints=$((checkpoints + c))
  [ "$c" -gt 0 ] && verified=$((verified + 1))
  rm -rf "$tmp/out"
  start "$np" "$tmp/out" --resume auto
  if wait "$run_pid"; then
    resumed=$((resumed + 1))
    if cmp -s "$tmp/out/model.safetensors" "$tmp/ref$np/model.safetensors"; then
      bitwise=$((bitwise + 1))
    else
      failures=$((failures + 1))
      echo "FAIL kill $n ($what, $np rank(s)): the resumed model differs from the uninterrupted run's"
    fi
  else
    failures=$((failures + 1))
    echo "FAIL kill $n ($what, $np rank(s)): the resumed run failed: $(head -c 2000 "$tmp/log")"
  fi
  [ $((n % 20)) -eq 0 ] && echo "... $n kills, $failures failures"
done
echo "kills: $n (process of a 1-process run ${targets[process]:-0}, rank ${targets[rank]:-0}, mpirun ${targets[mpirun]:-0});" \
  "runs that ended before their kill (not counted): $finished; ranks outliving a killed mpirun for 20 s: $lingering"
echo "kills after which at least one checkpoint existed and all passed their checksums: $verified" \
  "($checkpoints checkpoints verified in all)"
echo "resumes OK: $resumed (bitwise equal to the uninterrupted run: $bitwise)"
echo "failures: $failures"
[ "$failures" -eq 0 ]
