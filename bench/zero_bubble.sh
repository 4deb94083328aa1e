#!/usr/bin/env bash
# The zero-bubble H1 schedule against 1f1b and interleaved (docs/BENCHMARKS.md
# "Zero-bubble pipeline"): pp 2 on 2 processes × 1 thread, batch 16 as 4, 8
# and 16 microbatches, every (schedule, m) side by side in one run, each run's
# figure the median step time of its steps after the first. For each side also
# each stage's idle share (time_s.pipeline_idle / time_s.step, the median
# step's) beside the simulated bubble of `meshtrain schedule` (F = 1, B = 2
# for the fused kinds; F = B = W = 1 for zbh1), and each stage's peak
# activation bytes measured against the memory model (--explain-memory, exact).
# Stages are not equal here (the last holds the LM head), so the measured idle
# share is the bubble plus the imbalance.
#
#   bash bench/zero_bubble.sh BUILD_DIR
#
# Environment: BENCH_CONFIG (configs/bench.toml), BENCH_SET (extra --set
# flags, e.g. a smaller model), BENCH_DATA (the config's data.dir), BENCH_STEPS
# (4: the first is not counted), BENCH_OUT (a temporary folder).
set -euo pipefail
BUILD=${1:-build}
CONFIG=${BENCH_CONFIG:-configs/bench.toml}
STEPS=${BENCH_STEPS:-4}
BIN="$BUILD/meshtrain"
cd "$(dirname "$0")/.."
[[ -x "$BIN" ]] || { echo "zero_bubble.sh: $BIN not found: build first" >&2; exit 1; }
OUT=${BENCH_OUT:-$(mktemp -d /tmp/meshtrain-zero-bubble.XXXXXX)}
mkdir -p "$OUT"
DATA_DIR=${BENCH_DATA:-$(python3 bench/dist/summarise.py data-dir "$CONFIG")}
[[ -f "$DATA_DIR/train.bin" ]] || "$BIN" prepare --out "$DATA_DIR"
read -r -a extra <<<"${BENCH_SET:-}"
echo "== zero bubble: $CONFIG ${BENCH_SET:-}, pp 2, batch 16, $STEPS steps a run; results in $OUT"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; load at start $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-12s %3s %10s %14s %14s %22s\n' schedule m "step s" "idle r0/r1" "sim bubble" "act MB r0/r1 (model)"
for m in 4 8 16; do
  for sch in 1f1b interleaved zbh1; do
    v=1
    [[ $sch == interleaved ]] && v=2
    name="$sch.m$m"
    OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root --mca btl self,vader -np 2 "$BIN" train \
      --config "$CONFIG" --set data.dir="$DATA_DIR" "${extra[@]}" --set train.steps="$STEPS" --set train.threads=1 \
      --set train.batch_size=16 --set train.microbatch_size=$((16 / m)) --pp 2 --set parallel.schedule="$sch" \
      --set parallel.virtual_stages=$v --metrics "$OUT/$name.jsonl" --explain-memory >"$OUT/$name.txt" 2>&1
    "$BIN" schedule --kind "$sch" --pp 2 --v $v --microbatches "$m" >"$OUT/$name.sim"
    python3 - "$OUT/$name" "$sch" "$m" <<'PY'
import json, re, statistics, sys
base, sch, m = sys.argv[1:]
rows = [json.loads(l) for l in open(base + ".jsonl")]
by_rank = {}
for r in rows:
    if "time_s" in r and r.get("step", 0) >= 1:
        by_rank.setdefault(r.get("rank", 0), []).append(r["time_s"])
def median_step(ts):
    ts = sorted(ts, key=lambda t: t["step"])
    return ts[len(ts) // 2]
med = {k: median_step(v) for k, v in by_rank.items()}
step = med[0]["step"]
idle = "/".join(f"{med[k]['pipeline_idle'] / med[k]['step']:.3f}" for k in sorted(med))
sim = [float(x.split()[4]) for x in open(base + ".sim") if re.match(r"rank \d+ +\d", x)]
act = {}
for line in open(base + ".txt"):
    g = re.match(r"\s*rank\s+(\d+) activation\s+model\s+(\d+) exact\s+measured\s+(\d+) (\S+)", line)
    if g: act[int(g[1])] = (int(g[2]), int(g[3]), g[4])
acts = "/".join(f"{act[k][1] / 1e6:.1f}" for k in sorted(act))
model = "/".join(f"{act[k][0] / 1e6:.1f}" for k in sorted(act))
ok = all(a[2] == "ok" for a in act.values())
print(f"{sch:<12} {m:>3} {step:>10.3f} {idle:>14} {'/'.join(f'{s:.3f}' for s in sim):>14} "
      f"{acts:>10} ({model}{'' if ok else ' OUTSIDE'})")
PY
  done
done
echo "load at end $(cut -d' ' -f1-3 /proc/loadavg)"
