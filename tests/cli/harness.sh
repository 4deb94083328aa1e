# The harness of the operator-level fault scripts (hardening*.sh): each case runs
# the real binary on the tiny model of tests/dist/common.sh and checks how the
# job ends and what it leaves. Sourced after `bin` and `case_name` are set;
# gives $tmp (removed on exit) with the corpus, and `fail`, which the caller
# exits with.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../dist/common.sh"
make_data
fail=0
check() {  # check "what" CONDITION...
  local what=$1
  shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
# job MAX_SECONDS command... : runs it under a timeout (120 s, a hang's limit);
# sets rc and ms; stdout in $tmp/out, stderr in $tmp/err (its first 3000 bytes
# printed).
job() {
  local max=$1
  shift
  local start_ms=$(($(date +%s%N) / 1000000))
  timeout -k 5 120 "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  ms=$(($(date +%s%N) / 1000000 - start_ms))
  echo "---- exit status $rc after $ms ms; stderr: ----"
  head -c 3000 "$tmp/err"
  echo "----"
  check "not killed by the timeout (status $rc)" test "$rc" -ne 124 -a "$rc" -ne 137
  check "ended within $max s ($ms ms)" test "$ms" -le $((max * 1000))
}
has() { grep -qF -- "$1" "$2"; }
count() { grep -cF -- "$1" "$2"; }
# nan_weights MODEL_DIR: every weight of its model.safetensors NaN (the trainer refuses to save such a model).
nan_weights() {
  /usr/bin/python3 - "$1/model.safetensors" <<'PY'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
for i in range(8 + n, len(b), 4):
    b[i:i + 4] = struct.pack("<f", float("nan"))
open(p, "wb").write(b)
PY
}
