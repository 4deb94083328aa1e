#!/usr/bin/env bash
# The two bf16 kernels over a training run (docs/MODEL.md "Precision"): the
# parity tests' tiny Llama (tests/dist/common.sh), 10 steps in one process,
# with MESHTRAIN_BF16_MATMUL=emulated and =onednn. The same rounded operands
# in both, so the runs differ by the fp32 summation order and denormal
# flushing only: within bf16's layout tolerance of tests/dist/parity_bf16.sh
# (losses 2e-4, gradient norms and final tensors 1e-2), which fp32 against
# bf16 exceeds (checked here too, so that the tolerance can see the rule). The
# oneDNN run repeated at the same thread count is bitwise identical, at 1 and
# at 2 threads. The start-up line names the kernel. Exits 77 (skipped) where
# the oneDNN kernel cannot run, saying why.
# Usage: bf16_kernels_train.sh path/to/meshtrain
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/../dist/common.sh"
make_data

bf=(--set train.precision=bf16)
loud=()  # the tiny model's flags without --quiet, for the start-up lines
for a in "${tiny[@]}"; do [[ $a == --quiet ]] || loud+=("$a"); done
line=$(MESHTRAIN_BF16_MATMUL='' "$bin" train "${loud[@]}" "${bf[@]}" --set train.steps=1 | grep '^bf16 matmul:')
echo "$line"
if [[ "$line" != "bf16 matmul: oneDNN "* ]]; then
  echo "skipped: the oneDNN kernel does not run here ($line)"
  exit 77
fi
MESHTRAIN_BF16_MATMUL=emulated run emulated 1 "${bf[@]}" >/dev/null
MESHTRAIN_BF16_MATMUL=onednn run onednn 1 "${bf[@]}" >/dev/null
MESHTRAIN_BF16_MATMUL=onednn run onednn_again 1 "${bf[@]}" >/dev/null
MESHTRAIN_BF16_MATMUL=onednn run onednn_t2 1 "${bf[@]}" --set train.threads=2 >/dev/null
MESHTRAIN_BF16_MATMUL=onednn run onednn_t2_again 1 "${bf[@]}" --set train.threads=2 >/dev/null
run fp32 1 >/dev/null

within() {  # within A B: losses 2e-4, gradient norms and tensors 1e-2
  "$bin" compare "$tmp/$1.jsonl" "$tmp/$2.jsonl" --rtol 2e-4 --grad-norm-rtol 1e-2 >/dev/null &&
    "$bin" compare "$tmp/$1.jsonl" "$tmp/$2.jsonl" --model-a "$tmp/$1" --model-b "$tmp/$2" --rtol 1e-2
}
if out=$(within onednn emulated 2>&1); then
  echo "ok   onednn within bf16's tolerance of emulated: $(tr '\n' ' ' <<<"$out")"
else
  echo "FAIL onednn against emulated: $(tr '\n' ' ' <<<"$out")"
  failures=$((failures + 1))
fi
if within fp32 emulated >/dev/null 2>&1; then
  echo "FAIL fp32 is within bf16's tolerance of emulated: the check cannot see the rounding"
  failures=$((failures + 1))
else
  echo "ok   fp32 differs from emulated bf16 beyond the tolerance"
fi
check_bitwise onednn_again onednn "onednn rerun, 1 thread"
check_bitwise onednn_t2_again onednn_t2 "onednn rerun, 2 threads"
finish "bf16 kernel"
