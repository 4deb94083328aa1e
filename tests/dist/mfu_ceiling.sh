#!/usr/bin/env bash
# MFU never above 1 (src/cost/flops.h MfuCeiling): two busy loops hold the
# cores while the run measures its SGEMM ceiling at start-up, so the measured
# ceiling is low; every step's mfu in the metrics must still be <= 1, each line
# says which ceiling it used, and the log carries the time estimate and an eta.
# Then a bf16 run: its ceiling is the bf16 kernel's measured rate, named in
# the start-up line and in every step's mfu_ceiling, and its mfu is <= 1 too.
# Usage: mfu_ceiling.sh path/to/meshtrain
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
loops=()
trap 'kill "${loops[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data
for _ in 1 2; do
  timeout 3 sh -c 'while :; do :; done' &
  loops+=($!)
done
# Not --quiet (the last of tiny's flags): the log lines are checked too.
if ! out=$("${mpi[@]}" -np 2 "$bin" train "${tiny[@]:0:${#tiny[@]}-1}" --dp 2 --set train.microbatch_size=4 \
  --set train.log_every=1 --metrics "$tmp/m.jsonl" 2>&1); then
  echo "FAIL: the run failed: $out"
  exit 1
fi
if ! /usr/bin/python3 - "$tmp/m.jsonl" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"mfu"' in l]
assert len(steps) == 10, len(steps)
for s in steps:
    assert 0 < s["mfu"] <= 1.0, s
    assert s["mfu_ceiling"] in ("sgemm", "achieved"), s
    assert s["mfu_ceiling_gflops"] > 0, s
used = sorted({s["mfu_ceiling"] for s in steps})
print(f"ok   every step's mfu <= 1 (max {max(s['mfu'] for s in steps):.3f}; ceilings used: {', '.join(used)})")
PY
then
  echo "FAIL: metrics: $(head -c 600 "$tmp/m.jsonl")"
  exit 1
fi
if grep "^time estimate: .* more for the remaining 8 steps" <<<"$out" >/dev/null &&
  [ "$(grep -c '^step .*| eta [0-9]' <<<"$out")" -eq 10 ]; then
  echo "ok   the log estimates the run's time after step 1 and carries an eta on every step line"
else
  echo "FAIL: no time estimate or eta in the log: $out"
  exit 1
fi
if ! out=$("${mpi[@]}" -np 2 "$bin" train "${tiny[@]:0:${#tiny[@]}-1}" --dp 2 --set train.microbatch_size=4 \
  --set train.precision=bf16 --metrics "$tmp/b.jsonl" 2>&1); then
  echo "FAIL: the bf16 run failed: $out"
  exit 1
fi
# The kernel the start-up line names decides the ceiling's name.
if grep -q '^bf16 matmul: oneDNN' <<<"$out"; then name="bf16 onednn gemm"; else name="bf16 emulated gemm"; fi
if ! grep -q "MFU ceiling [0-9.]* GFLOP/s ($name)" <<<"$out"; then
  echo "FAIL: the bf16 run's start-up line does not name the $name ceiling: $out"
  exit 1
fi
if ! /usr/bin/python3 - "$tmp/b.jsonl" "$name" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"mfu"' in l]
assert len(steps) == 10, len(steps)
for s in steps:
    assert 0 < s["mfu"] <= 1.0, s
    assert s["mfu_ceiling"] in (sys.argv[2], "achieved"), s
print(f"ok   a bf16 run's mfu is against the {sys.argv[2]} rate and <= 1 (max {max(s['mfu'] for s in steps):.3f})")
PY
then
  echo "FAIL: bf16 metrics: $(head -c 600 "$tmp/b.jsonl")"
  exit 1
fi
