#!/usr/bin/env bash
# `make bench-bf16` (and the end of `make bench`): bf16 training steps side by
# side in one run, interleaved (docs/BENCHMARKS.md, "bf16 through oneDNN"):
# each round runs meshtrain fp32, meshtrain bf16 with the emulated kernel,
# meshtrain bf16 with the oneDNN kernel (MESHTRAIN_BF16_MATMUL, docs/MODEL.md
# "Precision"), PyTorch fp32 and PyTorch bf16 autocast, one process with
# BENCH_THREADS threads each, on configs/bench.toml's model; then the GEMM
# rates of the model's shapes in fp32, bf16 emulated and bf16 oneDNN
# (meshtrain_gemm_bf16_bench, interleaved too). The first oneDNN run also
# profiles its step (--profile-steps). Each round also runs the dp2 sides (2
# processes x 1 thread): meshtrain --dp 2 with train.precision = bf16 (oneDNN)
# and PyTorch DDP (gloo) under bf16 autocast (bench/torch_ddp.py); BENCH_DP2=0
# skips them. Prints the ISA, the cores, the load before each run, the ratios
# of the medians and the bf16 step's MFU against the measured bf16 GEMM rate
# (meshtrain_bench's mfu_max: the best of the model's shapes and 1024^3 through
# the oneDNN kernel).
#
#   bash scripts/bench_bf16.sh BUILD_DIR
#
# Environment: BENCH_CONFIG (configs/bench.toml), BENCH_THREADS (2),
# BENCH_ROUNDS (3), BENCH_STEPS (3), BENCH_WARMUP (1), BENCH_DP2 (1),
# BENCH_OUT (a temporary folder: keeps the JSON of every run).
set -euo pipefail

BUILD=${1:-build}
CONFIG=${BENCH_CONFIG:-configs/bench.toml}
THREADS=${BENCH_THREADS:-2}
ROUNDS=${BENCH_ROUNDS:-3}
STEPS=${BENCH_STEPS:-3}
WARMUP=${BENCH_WARMUP:-1}
DP2=${BENCH_DP2:-1}
BIN="$BUILD/bench/meshtrain_bench"
GEMM_BIN="$BUILD/bench/meshtrain_gemm_bf16_bench"
TORCH_PY=/usr/bin/python3
OPENMP_BLAS=/usr/lib/x86_64-linux-gnu/openblas-openmp

cd "$(dirname "$0")/.."
for b in "$BIN" "$GEMM_BIN"; do
  [[ -x "$b" ]] || { echo "bench_bf16.sh: $b not found: build first (make bench-bf16)" >&2; exit 1; }
done
OUT=${BENCH_OUT:-$(mktemp -d /tmp/meshtrain-bench-bf16.XXXXXX)}
mkdir -p "$OUT"
have_torch=1
"$TORCH_PY" -c 'import torch' 2>/dev/null || { have_torch=0; echo "bench_bf16.sh: no torch: only meshtrain"; }

echo "== bf16 bench: $CONFIG, $THREADS threads, $ROUNDS rounds of $STEPS timed steps after $WARMUP warm-up"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores;" \
  "bf16 flags: $(grep -o -w 'avx512_bf16\|amx_bf16\|amx_tile' /proc/cpuinfo | sort -u | xargs)"
echo "results in $OUT; load before: $(uptime)"

load() { cut -d' ' -f1-3 /proc/loadavg; }
ours() {  # $1: side, $2: round, $3: precision, $4: kernel, $5: profiled steps
  echo "$(date +%T) load $(load) -- $1" >>"$OUT/loads.txt"
  MESHTRAIN_BF16_MATMUL=$4 "$BIN" --config "$CONFIG" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" \
    --precision "$3" --gemm-seconds 0.1 --profile-steps "$5" --json "$OUT/$1.$2.json" >"$OUT/$1.$2.txt"
}
torch_run() {  # $1: side, $2: round, $3: autocast
  echo "$(date +%T) load $(load) -- $1" >>"$OUT/loads.txt"
  LD_LIBRARY_PATH="$OPENMP_BLAS" OMP_NUM_THREADS="$THREADS" "$TORCH_PY" bench/torch_llama.py --config "$CONFIG" \
    --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" --autocast "$3" --label "$1" \
    --json "$OUT/$1.$2.json" >/dev/null
}
BATCH=$(python3 bench/dist/summarise.py batch "$CONFIG")
DATA_DIR=$(python3 bench/dist/summarise.py data-dir "$CONFIG")
if [[ $DP2 == 1 && ! -f "$DATA_DIR/train.bin" ]]; then "$BUILD/meshtrain" prepare --out "$DATA_DIR"; fi
dp2_ours() {  # $1: round: meshtrain --dp 2, 2 x 1 thread, bf16 through oneDNN; rank 0's metrics
  echo "$(date +%T) load $(load) -- meshtrain_dp2_bf16" >>"$OUT/loads.txt"
  MESHTRAIN_BF16_MATMUL=onednn OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root --mca btl self,vader \
    -np 2 "$BUILD/meshtrain" train --config "$CONFIG" --dp 2 --set train.precision=bf16 \
    --set train.steps=$((WARMUP + STEPS)) --set train.threads=1 --set train.microbatch_size=$((BATCH / 2)) \
    --metrics "$OUT/meshtrain_dp2_bf16.$1.jsonl" >"$OUT/meshtrain_dp2_bf16.$1.txt" 2>&1
}
dp2_torch() {  # $1: round: PyTorch DDP, gloo, 2 x 1 thread, bf16 autocast
  echo "$(date +%T) load $(load) -- pytorch_ddp_bf16_autocast" >>"$OUT/loads.txt"
  LD_LIBRARY_PATH="$OPENMP_BLAS" OMP_NUM_THREADS=1 "$TORCH_PY" bench/torch_ddp.py --config "$CONFIG" \
    --world 2 --threads 1 --steps "$STEPS" --warmup "$WARMUP" --autocast bf16 \
    --json "$OUT/pytorch_ddp_bf16_autocast.$1.json" >"$OUT/pytorch_ddp_bf16_autocast.$1.txt" 2>&1
}
for r in $(seq 1 "$ROUNDS"); do
  echo "-- round $r"
  ours meshtrain_fp32 "$r" fp32 emulated 0
  ours meshtrain_bf16_emulated "$r" bf16 emulated 0
  ours meshtrain_bf16_onednn "$r" bf16 onednn "$([[ $r == 1 ]] && echo 1 || echo 0)"
  if [[ $have_torch == 1 ]]; then
    torch_run pytorch_fp32 "$r" none
    torch_run pytorch_bf16_autocast "$r" bf16
  fi
  if [[ $DP2 == 1 ]]; then
    dp2_ours "$r"
    [[ $have_torch == 1 ]] && dp2_torch "$r"
  fi
done
echo "load after: $(uptime)"
echo "load before each run (1/5/15 min):"
cat "$OUT/loads.txt"
grep -h 'matrix products' "$OUT"/meshtrain_bf16_onednn.1.txt | sed 's/^ */meshtrain bf16 oneDNN: /'

python3 - "$OUT" "$ROUNDS" "$WARMUP" <<'PYEOF'
import json, os, statistics, sys
out, rounds, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sides = ["meshtrain_fp32", "meshtrain_bf16_emulated", "meshtrain_bf16_onednn", "pytorch_fp32",
         "pytorch_bf16_autocast"]
med = {}
print()
print(f"{'side':<26} {'median step s per round':<30} {'median s':>9} {'tok/s':>8}")
for s in sides:
    runs = [json.load(open(p)) for p in (os.path.join(out, f"{s}.{r}.json") for r in range(1, rounds + 1))
            if os.path.exists(p)]
    if not runs:
        continue
    steps = [r["median_step_s"] for r in runs]
    med[s] = statistics.median(steps)
    tokens = runs[0]["batch"] * runs[0]["seq_len"]
    print(f"{s:<26} {' / '.join(f'{x:.3f}' for x in steps):<30} {med[s]:>9.3f} {tokens / med[s]:>8.0f}")
def dp2_ours(r):  # rank 0's median step time after the warm-up steps
    p = os.path.join(out, f"meshtrain_dp2_bf16.{r}.jsonl")
    if not os.path.exists(p):
        return None
    steps = [json.loads(x) for x in open(p)]
    times = [j["step_time_s"] for j in steps if "step_time_s" in j][warmup:]
    return statistics.median(times) if times else None
def dp2_torch(r):
    p = os.path.join(out, f"pytorch_ddp_bf16_autocast.{r}.json")
    return json.load(open(p))["median_step_s"] if os.path.exists(p) else None
for s, get in (("meshtrain_dp2_bf16", dp2_ours), ("pytorch_ddp_bf16_autocast", dp2_torch)):
    steps = [x for x in (get(r) for r in range(1, rounds + 1)) if x is not None]
    if steps:
        med[s] = statistics.median(steps)
        print(f"{s:<26} {' / '.join(f'{x:.3f}' for x in steps):<30} {med[s]:>9.3f} {tokens / med[s]:>8.0f}")
def ratio(a, b):
    if a in med and b in med:
        print(f"{a} / {b} tokens/s: {med[b] / med[a]:.2f}x")
ratio("meshtrain_bf16_onednn", "pytorch_bf16_autocast")
ratio("meshtrain_bf16_onednn", "meshtrain_bf16_emulated")
ratio("meshtrain_fp32", "pytorch_fp32")
ratio("meshtrain_dp2_bf16", "pytorch_ddp_bf16_autocast")
one = [json.load(open(p)) for p in (os.path.join(out, f"meshtrain_bf16_onednn.{r}.json") for r in range(1, rounds + 1))
       if os.path.exists(p)]
if one:
    ceiling = max(r["sgemm_max_gflops"] for r in one)  # the best bf16 oneDNN rate any run measured
    flops = one[0]["flops_per_token"] * one[0]["batch"] * one[0]["seq_len"]
    print(f"meshtrain bf16 oneDNN step's MFU against the bf16 GEMM rate ({one[0].get('ceiling', '?')}, best of "
          f"1024^3 and the model's shapes, {ceiling:.1f} GFLOP/s): {flops / med['meshtrain_bf16_onednn'] / 1e9 / ceiling:.3f}"
          f" (median step); PyTorch bf16 autocast against the same rate: "
          + (f"{flops / med['pytorch_bf16_autocast'] / 1e9 / ceiling:.3f}" if "pytorch_bf16_autocast" in med else "-"))
prof = json.load(open(os.path.join(out, "meshtrain_bf16_onednn.1.json")))
shares = prof.get("kernel_shares", {})
if shares:
    print("meshtrain bf16 oneDNN, share of step time (profiled pass): " +
          ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(shares.items(), key=lambda kv: -kv[1]) if v > 0.0005))
PYEOF

echo
echo "== GEMM rates of the model's shapes (GFLOP/s, rounding of the operands included)"
OMP_NUM_THREADS="$THREADS" "$GEMM_BIN" --config "$CONFIG" --rounds "$ROUNDS" | tee "$OUT/gemm.txt"
