#!/usr/bin/env bash
# Checkpoint I/O (docs/BENCHMARKS.md, "Checkpoint I/O"), side by side in one run:
#
#   bash bench/checkpoint_io.sh BUILD_DIR
#
# For 1 rank and for 2 ranks (dp 2, ZeRO 3: each rank writes half the state),
# configs/bench.toml trains STEPS steps with a checkpoint every EVERY steps,
# once with synchronous saves and once with train.async_checkpoint; then a run
# resumes the synchronous run's step-EVERY·k checkpoint (its read time) and,
# right after, the same bytes as rank 0's shard file are written to a plain
# file (write + fsync) and read back, in this process's Python, as the
# machine's own sequential rate. Printed per rank count:
#   write: the checkpoint write (safetensors file, fsync, rename, CRC32C of it)
#          of rank 0's shard in MB/s, the plain write + fsync of its bytes, and
#          the ratio;
#   read:  the load of the checkpoint (every rank its own slices, then the ZeRO
#          gathers) against a plain read of rank 0's file (both from the page
#          cache when the machine has the memory), and the ratio;
#   blocked: the time training was blocked per mid-run save (snapshot +
#          finalize + any wait) with async saves, against the synchronous
#          save's, as a fraction (target <= 10%); and the steps' median time
#          with async saves against the synchronous run's (the writer thread
#          competes with training for the cores).
# Environment: BENCH_CKPT_CONFIG (configs/bench.toml), BENCH_CKPT_STEPS (7),
# BENCH_CKPT_EVERY (2), BENCH_CKPT_DATA (data/fortunes; prepared when missing),
# BENCH_CKPT_OUT (a temporary folder on the disk under test).
set -euo pipefail

BUILD=${1:-build}
CONFIG=${BENCH_CKPT_CONFIG:-configs/bench.toml}
STEPS=${BENCH_CKPT_STEPS:-7}
EVERY=${BENCH_CKPT_EVERY:-2}
DATA=${BENCH_CKPT_DATA:-data/fortunes}
cd "$(dirname "$0")/.."
BIN="$BUILD/meshtrain"
[[ -x "$BIN" ]] || { echo "checkpoint_io.sh: $BIN not found: build first" >&2; exit 1; }
OUT=${BENCH_CKPT_OUT:-$(mktemp -d /tmp/meshtrain-bench-ckpt.XXXXXX)}
mkdir -p "$OUT"
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --mca btl self,vader)
[[ -f "$DATA/train.bin" ]] || "$BIN" prepare --out "$DATA" --vocab-size 8192 >/dev/null
LAST_SAVE=$(((STEPS - 1) / EVERY * EVERY))  # the newest mid-run save

for np in 1 2; do
  layout=()
  [[ $np -eq 2 ]] && layout=(--dp 2 --zero 3)
  common=(train --config "$CONFIG" "${layout[@]}" --set data.dir="$DATA" --set train.steps="$STEPS"
    --set train.checkpoint_every="$EVERY" --set train.eval_every=0)
  for mode in sync async; do
    rm -rf "$OUT/$np-$mode.ck"
    "${MPIRUN[@]}" -np "$np" "$BIN" "${common[@]}" --set train.checkpoint_dir="$OUT/$np-$mode.ck" \
      --set train.async_checkpoint=$([[ $mode == async ]] && echo true || echo false) \
      --metrics "$OUT/$np-$mode.jsonl" >"$OUT/$np-$mode.log"
  done
  ck=$OUT/$np-sync.ck/$(printf 'step-%08d' "$LAST_SAVE")
  "${MPIRUN[@]}" -np "$np" "$BIN" "${common[@]}" --set train.checkpoint_dir="$OUT/$np-read.ck" --resume "$ck" \
    >"$OUT/$np-read.log"
  /usr/bin/python3 - "$OUT" "$np" "$ck" "$STEPS" <<'PY'
import json, os, re, statistics, sys, time
out, np, ck, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
shard = os.path.join(ck, "rank-00000.safetensors")
data = open(shard, "rb").read()
mb = len(data) / 1e6
plain = os.path.join(out, "plain.bin")
t = time.perf_counter()
with open(plain, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
plain_write = time.perf_counter() - t
t = time.perf_counter()
with open(plain, "rb") as f:
    back = f.read()
plain_read = time.perf_counter() - t
assert back == data
os.remove(plain)

def lines(mode):
    return [json.loads(l) for l in open(os.path.join(out, f"{np}-{mode}.jsonl"))]
def saves(mode):  # mid-run saves only: the last one waits for its write in both modes
    return [l for l in lines(mode) if "checkpoint_step" in l and l["checkpoint_step"] < steps]
def step_time(mode):
    return statistics.median(l["step_time_s"] for l in lines(mode) if "loss" in l and l["step"] > 0)
write_s = statistics.median(s["write_s"] for s in saves("sync"))
read_s = float(re.search(r"read in ([0-9.]+) s", open(os.path.join(out, f"{np}-read.log")).read()).group(1))
sync_b = statistics.median(s["blocked_s"] for s in saves("sync"))
async_b = statistics.median(s["blocked_s"] for s in saves("async"))
print(f"ranks {np}: rank 0 writes {mb:.0f} MB per save")
print(f"  write   checkpoint {mb / write_s:8.0f} MB/s   plain write+fsync {mb / plain_write:8.0f} MB/s   "
      f"ratio {plain_write / write_s:.2f}")
print(f"  read    checkpoint {mb / read_s:8.0f} MB/s   plain read        {mb / plain_read:8.0f} MB/s   "
      f"ratio {plain_read / read_s:.2f}")
print(f"  blocked per save   sync {sync_b:.3f} s   async {async_b:.3f} s   fraction {async_b / sync_b:.3f} "
      f"(target <= 0.10)")
print(f"  median step time   sync {step_time('sync'):.3f} s   async {step_time('async'):.3f} s")
PY
done
echo "(runs and logs in $OUT)"
