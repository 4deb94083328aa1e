#!/usr/bin/env bash
# train --fingerprint and `meshtrain compare` of two fingerprints
# (docs/FINGERPRINT.md), on the tiny model, 2 steps:
# - a run compared with itself is bitwise equal (compare --rtol 0 exits 0);
# - fingerprinting reads and never writes: tp 2 with and without --fingerprint
#   have bitwise the same losses, gradient norms and model;
# - one process against dp 2, tp 2 + SP, tp 4 (kv heads replicated), pp 2
#   and cp 2, and a mixture of experts against ep 2: every tensor within its
#   bound and recorded at the same coordinates (exit 0); dp 2 and tp 2 + SP
#   also not bitwise (so the check compares something);
# - an injected fault, MESHTRAIN_FAULT skip_reduce:1:0:layer 1 attn o (tp rank
#   1 keeps its partial sum of layer 1's o-projection in step 0): compare
#   names step 0, layer 1, the o-projection's output (mid) and rank 1, both
#   against the fault-free tp 2 run and against one process, and exits 1;
# - 2-D tensor parallelism on a 2 x 2 grid against one process: within the
#   bound, not bitwise.
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set train.steps=2)

fp_run() {  # fp_run NAME NP ARGS…: a run with its fingerprint in $tmp/NAME.fp
  local name=$1 np=$2
  shift 2
  "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" --metrics "$tmp/$name.jsonl" --save "$tmp/$name" \
    --fingerprint "$tmp/$name.fp"
}
# expect CODE NAME A B [compare flags…]: compare A B exits CODE; its report in $tmp/NAME.txt
expect() {
  local code=$1 name=$2 a=$3 b=$4 rc=0
  shift 4
  "$bin" compare "$tmp/$a.fp" "$tmp/$b.fp" "$@" >"$tmp/$name.txt" || rc=$?
  if [ "$rc" = "$code" ]; then
    echo "ok   $name: compare exits $rc"
  else
    echo "FAIL $name: compare exits $rc, expected $code"
    cat "$tmp/$name.txt"
    failures=$((failures + 1))
  fi
}
# has NAME TEXT: the report of NAME contains TEXT (a fixed string)
has() {
  if grep -qF -- "$2" "$tmp/$1.txt"; then
    echo "ok   $1: '$2'"
  else
    echo "FAIL $1: no '$2' in"
    cat "$tmp/$1.txt"
    failures=$((failures + 1))
  fi
}

fp_run one 1
fp_run dp2 2 --dp 2 --set train.microbatch_size=4
fp_run tp2 2 --tp 2
fp_run tp2sp 2 --tp 2 --set parallel.sp=true
fp_run tp4 4 --tp 4
fp_run pp2 2 --pp 2 --set train.microbatch_size=4
fp_run cp2 2 --cp 2
moe=(--set model.n_experts=4 --set model.expert_ffn_hidden=24 --set model.router_aux_loss_coef=0.05
  --set train.microbatch_size=2)
fp_run moe 1 "${moe[@]}"
fp_run ep2 2 "${moe[@]}" --dp 2 --set parallel.ep=2
MESHTRAIN_FAULT='skip_reduce:1:0:layer 1 attn o' fp_run tp2_fault 2 --tp 2
run tp2_plain 2 --tp 2

expect 0 self one one --rtol 0
has self "first bitwise difference: none"
check_bitwise tp2 tp2_plain "tp2 with --fingerprint = tp2 without"
expect 0 dp2 dp2 one
expect 1 dp2_bits dp2 one --rtol 0
expect 0 tp2sp tp2sp one
expect 1 tp2sp_bits tp2sp one --rtol 0
for layout in tp4 pp2 cp2; do
  expect 0 "$layout" "$layout" one
done
expect 0 ep2 ep2 moe
expect 1 fault tp2_fault tp2
has fault "first bitwise difference: step 0, forward, layer 1, tensor mid,"
has fault "first difference beyond its bound: step 0, forward, layer 1, tensor mid,"
has fault "the pieces that differ: A rank(s) 1, B rank(s) -"
expect 1 fault_one tp2_fault one
has fault_one "first difference beyond its bound: step 0, forward, layer 1, tensor mid,"
has fault_one "replicas of one piece disagree in run A"

# 2-D tp on a 2 x 2 grid (every kv head on one rank: 4 of them) against one process of the same model
fp_run one_kv4 1 --set model.n_kv_heads=4
fp_run grid 4 --set model.n_kv_heads=4 --tp 4 --set parallel.tp2d=2,2
expect 0 grid grid one_kv4
expect 1 grid_bits grid one_kv4 --rtol 0

if [ "$failures" -ne 0 ]; then
  echo "$failures fingerprint check(s) failed"
  exit 1
fi
echo "all fingerprint checks passed"
