#!/usr/bin/env bash
# meshtrain report: the page of a pp2 MoE run, a tp2 run and a plan's scaling table draws every chart
# in headless Chromium (no console error, an SVG with marks in each chart's
# element), fetches nothing, and bad input is refused with the reason.
# Exit 77 (ctest SKIP) when chromium is not installed.
# Usage: report.sh path/to/meshtrain
set -uo pipefail
bin=$(realpath "$1")
command -v chromium >/dev/null || { echo "SKIP: chromium is not installed (scripts/install-deps.sh)"; exit 77; }
here=$(dirname "$(realpath "$0")")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$here/../dist/common.sh"
make_data
run pp2moe 2 --pp 2 --set train.steps=4 --set train.microbatch_size=2 --set model.n_experts=4 \
  --set model.top_k=2 --set train.eval_every=2 || exit 1
run tp2 2 --tp 2 --set train.steps=4 --set train.eval_every=2 || exit 1

fail() { echo "FAIL $1"; failures=$((failures + 1)); }
# refused NAME WANT ARGS...: report exits 1 with WANT on stderr.
refused() {
  local name=$1 want=$2 err
  shift 2
  if err=$("$bin" report "$@" 2>&1 >/dev/null); then
    fail "$name: exit status 0"
  elif ! grep -F -- "$want" <<<"$err" >/dev/null; then
    fail "$name: '$want' not in: $err"
  else
    echo "ok   $name: $err"
  fi
}
printf '{"step": 0}\n' >"$tmp/nosteps.jsonl"
refused "not a metrics file" "holds no training step" "$tmp/nosteps.jsonl" --out "$tmp/x.html"
printf 'hello\n' >"$tmp/text.jsonl"
refused "not JSON" "text.jsonl:1: not a JSON object" "$tmp/text.jsonl" --out "$tmp/x.html"
refused "missing file" "cannot open metrics file '$tmp/none.jsonl'" "$tmp/none.jsonl" --out "$tmp/x.html"
refused "missing Vega" "Vega '$tmp/novega' is missing" "$tmp/tp2.jsonl" --vega "$tmp/novega" --out "$tmp/x.html"

src=$(realpath "$here/../..")
"$bin" plan --config "$src/configs/plan/gpt-1.7b.toml" --machine a100-8x-ib --devices 8 --global-batch 64 --top 1 \
  --scaling 8,16,32 --layout cp1,zero1 --json "$tmp/scaling.json" >/dev/null || exit 1
refused "not a plan" "is not a plan with a scaling table" "$tmp/tp2.jsonl" --plan "$tmp/tp2.jsonl" --out "$tmp/x.html"
refused "nothing to draw" "at least one metrics file or --plan file" --out "$tmp/x.html"

"$bin" report "$tmp/pp2moe.jsonl" "$tmp/tp2.jsonl" --plan "$tmp/scaling.json" --out "$tmp/report.html" || exit 1
if grep -E '<(script|link|img|iframe)[^>]* (src|href)=' "$tmp/report.html" >/dev/null; then fail "the page loads a resource"; fi
timeout 120 chromium --headless --disable-gpu --no-sandbox --virtual-time-budget=10000 --enable-logging=stderr \
  --v=0 --dump-dom "file://$tmp/report.html" >"$tmp/dom.html" 2>"$tmp/chromium.err"
if /usr/bin/python3 - "$tmp/dom.html" "$tmp/chromium.err" <<'PY'; then
import re, sys
dom, log = open(sys.argv[1]).read(), open(sys.argv[2]).read()
console = [l for l in log.splitlines() if "CONSOLE" in l]
assert not console, f"console messages: {console}"
errors = re.search(r'<pre id="errors">(.*?)</pre>', dom, re.S)
assert errors and errors.group(1).strip() == "", f"page errors: {errors.group(1) if errors else 'no #errors'}"
parts = re.split(r'<div class="chart" id="chart-(\d+)"', dom)[1:]
charts = dict(zip(parts[0::2], parts[1::2]))
# loss, breakdown, step time, comm time per axis, bytes, memory, bubble (pp2), expert load (MoE),
# planned scaling
assert len(charts) == 9, f"{len(charts)} charts"
for i, html in charts.items():
    html = html.split('<h2>')[0]
    assert "<svg" in html, f"chart {i}: no svg"
    marks = re.findall(r'<g class="mark-(?:line|symbol|rect)[^"]*role-mark[^"]*"[^>]*>(.*?)</g>', html, re.S)
    assert any("<path" in m for m in marks), f"chart {i}: no marks drawn"
print(f"ok   report: {len(charts)} charts drew, no console errors")
PY
  :
else
  fail "report page"
fi
[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "report ok"
