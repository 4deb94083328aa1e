#!/usr/bin/env bash
# `make bench-bf16` (and the end of `make bench`): bf16 training steps side by
# side in one run, interleaved (docs/BENCHMARKS.md, "bf16 through oneDNN"):
# each round runs meshtrain fp32, meshtrain bf16 with the emulated kernel,
# meshtrain bf16 with the oneDNN kernel (MESHTRAIN_BF16_MATMUL, docs/MODEL.md
# "Precision"), PyTorch fp32 and PyTorch bf16 autocast, one process with
# BENCH_THREADS threads each, on configs/bench.toml's model; then the GEMM
# rates of the model's shapes in fp32, bf16 emulated and bf16 oneDNN
# (meshtrain_gemm_bf16_bench, interleaved too). The first oneDNN run also
# profiles its step (--profile-steps). Prints the ISA, the cores and the load.
#
#   bash scripts/bench_bf16.sh BUILD_DIR
#
# Environment: BENCH_CONFIG (configs/bench.toml), BENCH_THREADS (2),
# BENCH_ROUNDS (3), BENCH_STEPS (3), BENCH_WARMUP (1), BENCH_OUT (a temporary
# folder: keeps the JSON of every run).
set -euo pipefail

BUILD=${1:-build}
CONFIG=${BENCH_CONFIG:-configs/bench.toml}
THREADS=${BENCH_THREADS:-2}
ROUNDS=${BENCH_ROUNDS:-3}
STEPS=${BENCH_STEPS:-3}
WARMUP=${BENCH_WARMUP:-1}
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

ours() {  # $1: side, $2: round, $3: precision, $4: kernel, $5: profiled steps
  MESHTRAIN_BF16_MATMUL=$4 "$BIN" --config "$CONFIG" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" \
    --precision "$3" --gemm-seconds 0.1 --profile-steps "$5" --json "$OUT/$1.$2.json" >"$OUT/$1.$2.txt"
}
torch_run() {  # $1: side, $2: round, $3: autocast
  LD_LIBRARY_PATH="$OPENMP_BLAS" OMP_NUM_THREADS="$THREADS" "$TORCH_PY" bench/torch_llama.py --config "$CONFIG" \
    --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" --autocast "$3" --label "$1" \
    --json "$OUT/$1.$2.json" >/dev/null
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
done
echo "load after: $(uptime)"
grep -h 'matrix products' "$OUT"/meshtrain_bf16_onednn.1.txt | sed 's/^ */meshtrain bf16 oneDNN: /'

python3 - "$OUT" "$ROUNDS" <<'PYEOF'
import json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
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
def ratio(a, b):
    if a in med and b in med:
        print(f"{a} / {b} tokens/s: {med[b] / med[a]:.2f}x")
ratio("meshtrain_bf16_onednn", "pytorch_bf16_autocast")
ratio("meshtrain_bf16_onednn", "meshtrain_bf16_emulated")
ratio("meshtrain_fp32", "pytorch_fp32")
prof = json.load(open(os.path.join(out, "meshtrain_bf16_onednn.1.json")))
shares = prof.get("kernel_shares", {})
if shares:
    print("meshtrain bf16 oneDNN, share of step time (profiled pass): " +
          ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(shares.items(), key=lambda kv: -kv[1]) if v > 0.0005))
PYEOF

echo
echo "== GEMM rates of the model's shapes (GFLOP/s, rounding of the operands included)"
OMP_NUM_THREADS="$THREADS" "$GEMM_BIN" --config "$CONFIG" --rounds "$ROUNDS" | tee "$OUT/gemm.txt"
