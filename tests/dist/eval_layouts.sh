#!/usr/bin/env bash
# meshtrain eval under mpirun on any layout (src/cli/eval_command.cpp): the
# loss of one saved model over the same windows is the one-process loss
# (within a bound derived from the one-process loss's distance from a float64
# evaluation, tests/python/eval_reference.py: 10 x max(d, N u); 1e-5 relative
# without torch) under tp, pp, dp, cp and tp × pp; a layout that does not fit the world
# or the model is refused at start-up with the numbers: every rank checks it,
# the ranks agree, one message, a non-zero exit (as train does).
# Usage: eval_layouts.sh path/to/meshtrain
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set model.vocab_size=301 --set model.n_layers=4)
"$bin" train "${tiny[@]}" --save "$tmp/model" >/dev/null
ev=("$bin" eval --model "$tmp/model" --data "$tmp/data/val.bin" --max-windows 8)
ref=$("${ev[@]}" | sed -n 's/^loss //p')
rtol=1e-5
rc=0
out=$(/usr/bin/python3 "$(dirname "$0")/../python/eval_reference.py" "$tmp/model" "$tmp/data/val.bin" 16 8 "$ref") ||
  rc=$?
echo "     bound: $out"
case $rc in
  0) rtol=${out##* } ;;
  3) if [ "${CI:-}" = true ]; then
       echo "FAIL bound: torch is missing: /usr/bin/python3 cannot import torch"
       failures=$((failures + 1))
     fi ;;
  *) echo "FAIL bound: the float64 evaluation failed (exit $rc)"
     failures=$((failures + 1)) ;;
esac

# layout NAME RANKS FLAGS...: the layout's loss against the one-process one.
layout() {
  local name=$1 np=$2
  shift 2
  local got
  got=$(timeout 120 "${mpi[@]}" -np "$np" "${ev[@]}" "$@" 2>"$tmp/$name.err" | sed -n 's/^loss //p')
  if [ "$(wc -l <<<"$got")" -eq 1 ] && [ -n "$got" ] &&
    /usr/bin/python3 -c "import sys; a, b, r = map(float, sys.argv[1:]); sys.exit(abs(a - b) > r * abs(a))" \
      "$ref" "$got" "$rtol"; then
    echo "ok   $name: loss $got (one process: $ref; rtol $rtol), printed once"
  else
    echo "FAIL $name: loss '$got' against $ref; $(head -c 400 "$tmp/$name.err")"
    failures=$((failures + 1))
  fi
}
layout tp2 2 --tp 2
layout pp2 2 --pp 2
layout dp2 2 --dp 2
layout cp2 2 --cp 2
layout tp2_pp2 4 --tp 2 --pp 2

# refused NAME PATTERN RANKS FLAGS...: PATTERN said once, non-zero exit.
refused() {
  local name=$1 pattern=$2 np=$3
  shift 3
  local out rc
  out=$(timeout 120 "${mpi[@]}" -np "$np" "${ev[@]}" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$(grep -c -- "$pattern" <<<"$out")" -eq 1 ]; then
    echo "ok   $name: refused on $np ranks ($(grep -m1 -o -- "$pattern.*" <<<"$out" | cut -c1-100))"
  else
    echo "FAIL $name: exit $rc, expected '$pattern' once; got: $out"
    failures=$((failures + 1))
  fi
}
refused world "= 1 but the world has 2 ranks" 2
refused heads "model.n_heads (4) must be divisible by parallel.tp (3)" 3 --tp 3

if [ "$failures" -ne 0 ]; then
  echo "$failures eval layout check(s) failed"
  exit 1
fi
echo "all eval layout checks passed"
