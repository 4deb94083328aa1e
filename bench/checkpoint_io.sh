#!/usr/bin/env bash
# Checkpoint I/O (docs/BENCHMARKS.md, "Checkpoint I/O"), side by side in one run:
#
#   bash bench/checkpoint_io.sh BUILD_DIR      (built with -DMESHTRAIN_BUILD_BENCH=ON)
#
# For 1 rank and for 2 ranks (dp 2, ZeRO 3: each rank writes half the state) of
# configs/bench.toml's model:
#   (a) meshtrain_checkpoint_bench: each rank's checkpoint write (its
#       safetensors file, fsync, rename, CRC32C) and read (load_checkpoint)
#       against a plain write + fsync and a plain read of the same bytes,
#       interleaved, REPEATS times; MB/s and ratios (plain time / checkpoint
#       time: 1 means as fast as the machine's own sequential I/O);
#   (b) STEPS training steps with a checkpoint every EVERY steps, once with
#       synchronous saves and once with train.async_checkpoint: the time
#       training was blocked per mid-run save (snapshot + finalize + any wait;
#       the metrics lines' blocked_s, rank 0) with async saves against the
#       synchronous save's, as a fraction (target <= 10%), and the steps'
#       median time in both runs (the writer thread shares the cores).
# Environment: BENCH_CKPT_CONFIG (configs/bench.toml), BENCH_CKPT_STEPS (7),
# BENCH_CKPT_EVERY (2), BENCH_CKPT_REPEATS (5), BENCH_CKPT_DATA (data/fortunes;
# prepared when missing), BENCH_CKPT_OUT (a temporary folder on the disk under test).
set -euo pipefail

BUILD=${1:-build}
CONFIG=${BENCH_CKPT_CONFIG:-configs/bench.toml}
STEPS=${BENCH_CKPT_STEPS:-7}
EVERY=${BENCH_CKPT_EVERY:-2}
DATA=${BENCH_CKPT_DATA:-data/fortunes}
REPEATS=${BENCH_CKPT_REPEATS:-5}
cd "$(dirname "$0")/.."
BIN="$BUILD/meshtrain"
IO_BIN="$BUILD/bench/meshtrain_checkpoint_bench"
[[ -x "$BIN" && -x "$IO_BIN" ]] || { echo "checkpoint_io.sh: build meshtrain and meshtrain_checkpoint_bench first" >&2; exit 1; }
OUT=${BENCH_CKPT_OUT:-$(mktemp -d /tmp/meshtrain-bench-ckpt.XXXXXX)}
mkdir -p "$OUT"
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --mca btl self,vader)
[[ -f "$DATA/train.bin" ]] || "$BIN" prepare --out "$DATA" --vocab-size 8192 >/dev/null

for np in 1 2; do
  layout=()
  [[ $np -eq 2 ]] && layout=(--set parallel.dp=2 --set parallel.zero=3 --set train.microbatch_size=4)
  echo "ranks $np:"
  "${MPIRUN[@]}" -np "$np" "$IO_BIN" --config "$CONFIG" "${layout[@]}" --set data.dir="$DATA" \
    --dir "$OUT/$np-io.ck" --repeats "$REPEATS" | sort
  common=(train --config "$CONFIG" "${layout[@]}" --set data.dir="$DATA" --set train.steps="$STEPS"
    --set train.checkpoint_every="$EVERY" --set train.eval_every=0)
  for mode in sync async; do
    rm -rf "$OUT/$np-$mode.ck"
    "${MPIRUN[@]}" -np "$np" "$BIN" "${common[@]}" --set train.checkpoint_dir="$OUT/$np-$mode.ck" \
      --set train.async_checkpoint=$([[ $mode == async ]] && echo true || echo false) \
      --metrics "$OUT/$np-$mode.jsonl" >"$OUT/$np-$mode.log"
  done
  /usr/bin/python3 - "$OUT" "$np" "$STEPS" <<'PY'
import json, os, statistics, sys
out, np, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def lines(mode):
    return [json.loads(l) for l in open(os.path.join(out, f"{np}-{mode}.jsonl"))]
def saves(mode):  # mid-run saves only: the last one waits for its write in both modes
    return [l for l in lines(mode) if "checkpoint_step" in l and l["checkpoint_step"] < steps]
def step_time(mode):
    return statistics.median(l["step_time_s"] for l in lines(mode) if "loss" in l and l["step"] > 0)
sync_b = statistics.median(s["blocked_s"] for s in saves("sync"))
async_b = statistics.median(s["blocked_s"] for s in saves("async"))
print(f"  blocked per save   sync {sync_b:.3f} s   async {async_b:.3f} s   fraction {async_b / sync_b:.3f} "
      f"(target <= 0.10)")
print(f"  median step time   sync {step_time('sync'):.3f} s   async {step_time('async'):.3f} s")
PY
done
echo "(runs and logs in $OUT)"
