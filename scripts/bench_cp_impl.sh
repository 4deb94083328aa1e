#!/usr/bin/env bash
# `make bench-cp-impl`: the four context-parallel attentions side by side —
# ring, all-gather, Ulysses and the hybrid (pairs, ring across) — on the same
# model and sequence: bytes per rank from the comm ledger against the analytic
# count, and step time (docs/BENCHMARKS.md, "Context parallel: ring, all-gather,
# Ulysses, hybrid").
#
#   bash scripts/bench_cp_impl.sh BUILD_DIR
#
# Model: bench/cp/cp.toml (d_model 256, 2 layers, 4 heads of 64, ffn 688, vocab
# 8192), one sequence of T tokens per step, with 2 kv heads (GQA) and with 4
# (MHA, --set model.n_kv_heads=4). For T in TS, cp in CPS and each attention
# (the hybrid at cp 4 only: pairs, a ring of two), STEPS steps, median of the
# steps after SKIP, ROUNDS interleaved rounds (every variant once per round);
# 1 thread per rank, so cp 4 time-shares the 2 cores. The ledger's bytes are
# rank 0's per step on the cp axes (cp, cp_a2a, cp_ring; the gradient
# all-reduce over dp+cp is not attention's), held to the count by hand in
# bench/cp/impl_summary.py; the wire bytes (what leaves a rank) are the
# planner's view of the same messages.
# Environment: BENCH_CP_IMPL_TS ("1024 4096"), BENCH_CP_IMPL_CPS ("2 4"),
# BENCH_CP_IMPL_KVS ("2 4"), BENCH_CP_IMPL_STEPS (6), BENCH_CP_IMPL_SKIP (2),
# BENCH_CP_IMPL_ROUNDS (2), BENCH_CP_IMPL_OUT (a temporary folder).
set -euo pipefail

BUILD=${1:-build}
CONFIG=bench/cp/cp.toml
TS=${BENCH_CP_IMPL_TS:-1024 4096}
CPS=${BENCH_CP_IMPL_CPS:-2 4}
KVS=${BENCH_CP_IMPL_KVS:-2 4}
STEPS=${BENCH_CP_IMPL_STEPS:-6}
SKIP=${BENCH_CP_IMPL_SKIP:-2}
ROUNDS=${BENCH_CP_IMPL_ROUNDS:-2}

cd "$(dirname "$0")/.."
BIN="$BUILD/meshtrain"
[[ -x "$BIN" ]] || { echo "bench_cp_impl.sh: $BIN not found: build first (make build)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "bench_cp_impl.sh: mpirun not found (Open MPI)" >&2; exit 1; }
PY=$(command -v python3) || { echo "bench_cp_impl.sh: python3 not found" >&2; exit 1; }
SUM=bench/cp/impl_summary.py
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --mca btl self,vader)
OUT=${BENCH_CP_IMPL_OUT:-$(mktemp -d /tmp/meshtrain-bench-cp-impl.XXXXXX)}
mkdir -p "$OUT"
DATA_DIR=$("$PY" bench/cp/summarise.py data-dir "$CONFIG")
[[ -f "$DATA_DIR/train.bin" ]] || "$BIN" prepare --out "$DATA_DIR"

echo "== meshtrain bench-cp-impl: $CONFIG; T in {$TS} x cp in {$CPS} x kv heads in {$KVS};" \
  "ring, allgather, ulysses, hybrid (cp 4); $STEPS steps, $ROUNDS rounds; results in $OUT"
echo "load before: $(uptime)"
START=$(date +%s)

# $1 name, $2 cp, $3 T, $4 kv heads, $5 attention (ring | allgather | ulysses | hybrid).
train() {
  local name=$1 cp=$2 T=$3 kv=$4 impl=$5
  local cmd=("${MPIRUN[@]}" -np "$cp" "$BIN" train --config "$CONFIG" --metrics "$OUT/$name.jsonl"
    --set model.max_seq_len="$T" --set train.seq_len="$T" --set model.n_kv_heads="$kv"
    --set train.steps="$STEPS" --set train.threads=1 --cp "$cp" --set parallel.cp_impl="$impl")
  [[ $impl == hybrid ]] && cmd+=(--set parallel.cp_ulysses=2)
  echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) -- $name" | tee "$OUT/$name.log"
  echo "${cmd[*]}" >>"$OUT/$name.log"
  "${cmd[@]}" >>"$OUT/$name.log" 2>&1 || { echo "bench_cp_impl.sh: $name failed:" >&2; tail -20 "$OUT/$name.log" >&2; exit 1; }
}

for r in $(seq 1 "$ROUNDS"); do
  for T in $TS; do
    for cp in $CPS; do
      for kv in $KVS; do
        impls="ring allgather ulysses"
        [[ $cp == 4 ]] && impls+=" hybrid"
        for impl in $impls; do
          train "T${T}_cp${cp}_kv${kv}_${impl}_r$r" "$cp" "$T" "$kv" "$impl"
        done
      done
    done
  done
done

echo "load after:  $(uptime)"
echo "elapsed: $(($(date +%s) - START)) s"
"$PY" "$SUM" "$OUT" "$CONFIG" "$SKIP"
