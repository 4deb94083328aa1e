#!/usr/bin/env bash
# `make bench`: meshtrain's training step against this machine's SGEMM rate and
# against PyTorch, side by side in one run (docs/BENCHMARKS.md).
#
#   bash scripts/bench.sh BUILD_DIR
#
# Runs interleaved — ours, PyTorch (best setting), ours, PyTorch (best), PyTorch
# (as installed) — so that load from other processes falls on both sides, keeps
# the best (lowest median step time) of each, and prints one table. Both MFUs are
# against the same ceiling: the highest SGEMM rate our runs measured.
# Then the data-parallel side-by-side: meshtrain --dp 2 against PyTorch DDP, 2 processes
# × 1 thread each, interleaved (scripts/bench_ddp.sh; BENCH_DDP_ROUNDS=0 skips it).
# Then the bf16 sides (scripts/bench_bf16.sh; BENCH_BF16=0 skips them).
# Environment: BENCH_CONFIG (configs/bench.toml), BENCH_THREADS (2), BENCH_STEPS (5),
# BENCH_WARMUP (2), BENCH_OUT (a temporary folder: keeps the JSON of every run).
set -euo pipefail

BUILD=${1:-build}
CONFIG=${BENCH_CONFIG:-configs/bench.toml}
THREADS=${BENCH_THREADS:-2}
STEPS=${BENCH_STEPS:-5}
WARMUP=${BENCH_WARMUP:-2}
BIN="$BUILD/bench/meshtrain_bench"
TORCH_PY=/usr/bin/python3
OPENMP_BLAS=/usr/lib/x86_64-linux-gnu/openblas-openmp

cd "$(dirname "$0")/.."
if [[ ! -x "$BIN" ]]; then
  echo "bench.sh: $BIN not found: build first (make bench, or cmake --build $BUILD --target meshtrain_bench)" >&2
  exit 1
fi
OUT=${BENCH_OUT:-$(mktemp -d /tmp/meshtrain-bench.XXXXXX)}
mkdir -p "$OUT"
# A summariser that needs only the standard library: any python3 will do.
SUM_PY=$(command -v python3 || echo "$TORCH_PY")

have_torch=1
if ! "$TORCH_PY" -c 'import torch' 2>/dev/null; then
  have_torch=0
  echo "bench.sh: $TORCH_PY has no torch (Debian: apt-get install python3-torch): only meshtrain is measured"
fi

echo "== meshtrain bench: $CONFIG, $THREADS threads, $STEPS timed steps after $WARMUP warm-up; results in $OUT"
echo "load before: $(uptime)"
START=$(date +%s)

ours() {  # $1: run number, $2: profiled steps
  echo "-- meshtrain run $1"
  "$BIN" --config "$CONFIG" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" \
    --profile-steps "$2" --json "$OUT/ours$1.json" | sed 's/^/   /'
}
torch_run() {  # $1: label, $2: run number, $3: LD_LIBRARY_PATH ('' for as installed)
  echo "-- pytorch $1 run $2"
  LD_LIBRARY_PATH="$3" OMP_NUM_THREADS="$THREADS" "$TORCH_PY" bench/torch_llama.py --config "$CONFIG" \
    --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" --label "$1" --json "$OUT/$1$2.json" \
    | sed 's/^/   /'
}

ours 1 2
if [[ $have_torch == 1 ]]; then torch_run torch-best 1 "$OPENMP_BLAS"; fi
ours 2 0
if [[ $have_torch == 1 ]]; then
  torch_run torch-best 2 "$OPENMP_BLAS"
  torch_run torch-installed 1 ""
fi

echo "load after:  $(uptime)"
echo "elapsed: $(($(date +%s) - START)) s"
"$SUM_PY" - "$OUT" <<'PYEOF'
import glob, json, os, sys

out = sys.argv[1]
def load(prefix):
    runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, prefix + "*.json")))]
    return runs, (min(runs, key=lambda r: r["median_step_s"]) if runs else None)

ours_runs, ours = load("ours")
_, best = load("torch-best")
_, inst = load("torch-installed")
ceiling = max(r["sgemm_max_gflops"] for r in ours_runs)
sq1024 = max(r["sgemm_1024_gflops"] for r in ours_runs)
flops = ours["flops_per_step"]

def row(name, r):
    if r is None:
        return
    ach = flops / r["median_step_s"] / 1e9
    print(f"{name:<28} {r['median_step_s']:>9.3f} {r['tokens_per_s']:>9.0f} {ach:>9.1f} {ach / ceiling:>7.3f} "
          f"{ach / sq1024:>9.3f} {r['min_step_s']:>9.3f} {flops / r['min_step_s'] / 1e9 / ceiling:>8.3f}")

print()
print(f"FLOPs per step {flops / 1e9:.1f} GFLOP ({ours['batch']}x{ours['seq_len']} tokens); SGEMM ceiling "
      f"{ceiling:.1f} GFLOP/s (best shape, best of before/after of {len(ours_runs)} runs; 1024^3: {sq1024:.1f})")
print("(median step; MFU against the ceiling; MFU 1024 against the 1024^3 rate; min step and its MFU: the least")
print(" disturbed step, for a loaded machine)")
print(f"{'':<28} {'step s':>9} {'tok/s':>9} {'GFLOP/s':>9} {'MFU':>7} {'MFU 1024':>9} {'min s':>9} {'MFU min':>8}")
row("meshtrain", ours)
row("pytorch best (openmp BLAS)", best)
row("pytorch as installed", inst)
if best is not None:
    print(f"meshtrain / pytorch best tokens/s: {ours['tokens_per_s'] / best['tokens_per_s']:.2f}x "
          f"(min steps: {best['min_step_s'] / ours['min_step_s']:.2f}x)")
if inst is not None:
    print(f"meshtrain / pytorch as installed tokens/s: {ours['tokens_per_s'] / inst['tokens_per_s']:.2f}x "
          f"(min steps: {inst['min_step_s'] / ours['min_step_s']:.2f}x)")
for name, r in (("pytorch best", best), ("pytorch as installed", inst)):
    if r is not None:
        print(f"{name} BLAS: {', '.join(os.path.basename(b) for b in r['blas'])}")
shares = next((r["kernel_shares"] for r in ours_runs if r["kernel_shares"]), {})
if shares:
    print("meshtrain share of step time (profiled pass): " +
          ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(shares.items(), key=lambda kv: -kv[1]) if v > 0.0005))
mem = ours["mem_peak_bytes"]
print("meshtrain peak memory: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in mem.items() if v))
PYEOF

if [[ ${BENCH_DDP_ROUNDS:-3} -gt 0 && $have_torch == 1 ]]; then
  echo
  BENCH_OUT="$OUT/ddp" bash scripts/bench_ddp.sh "$BUILD"
fi

if [[ ${BENCH_BF16:-1} != 0 ]]; then
  echo
  BENCH_OUT="$OUT/bf16" bash scripts/bench_bf16.sh "$BUILD"
fi
