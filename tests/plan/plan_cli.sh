#!/usr/bin/env bash
# meshtrain plan and calibrate through the binary: the ranking with why each
# runner-up lost, one layout in detail, the scaling table and JSON, a
# calibrated machine file read back, and each bad input refused by name.
set -euo pipefail
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cfg=$src/configs/plan/gpt-175b.toml

# ZeRO pinned to 1: the ranking's output is what is checked here (the search's coverage is plan_tests'),
# and the whole space of gpt-175b over 64 devices with every node order takes 48 s alone (13 s with zero1).
out=$("$bin" plan --config "$cfg" --machine h100-8x-ib --devices 64 --global-batch 256 --top 3 --layout zero1 \
  --json "$tmp/p.json")
grep "^#1 layout" <<<"$out" >/dev/null
grep "why it lost to #1: +" <<<"$out" >/dev/null
grep "communication per step" <<<"$out" >/dev/null
grep "memory assumes bf16 mixed precision" <<<"$out" >/dev/null
/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert len(j['best'])==3 and j['best'][0]['step_s']<=j['best'][1]['step_s']" "$tmp/p.json"

# One layout in detail; tp 16 crosses the 8-GPU node.
out=$("$bin" plan --config "$cfg" --machine h100-8x-ib --devices 64 --global-batch 256 \
  --layout "dp1,tp16,pp4,cp1,zero1,mbs1,sp,recompute=full")
grep "tp .*over 16 ranks (crosses nodes)" <<<"$out" >/dev/null

# The node order pinned: inner=dp fills a node with 8 dp ranks, so tp 8 crosses and dp stays inside.
out=$("$bin" plan --config "$cfg" --machine h100-8x-ib --devices 64 --global-batch 256 \
  --layout "dp8,tp8,pp1,cp1,zero1,mbs1,sp,recompute=full,inner=dp")
grep "^layout dp8,tp8,.*,inner=dp " <<<"$out" >/dev/null
grep "filled dp, tp, cp, pp innermost first (--placement nodes:dp); groups across nodes: tp$" <<<"$out" >/dev/null
grep "tp .*over 8 ranks (crosses nodes)" <<<"$out" >/dev/null

# cp's attention pinned: the hybrid's all-to-alls (exposed) and its ring across the groups.
out=$("$bin" plan --config "$cfg" --machine h100-8x-ib --devices 64 --global-batch 256 \
  --layout "dp2,tp8,pp1,cp4,hybrid2,zero1,mbs1,sp,recompute=full")
grep "^layout dp2,tp8,pp1,cp4,hybrid2," <<<"$out" >/dev/null
grep "cp .*all-to-alls of q, k, v, out .* over 2 ranks (crosses nodes)" <<<"$out" >/dev/null
grep "cp .*ring passes across the all-to-all groups of k, v, pos" <<<"$out" >/dev/null

# The hierarchical dp all-reduce pinned: tp 4 leaves 2 of the 16 dp ranks on each of 8 nodes.
out=$("$bin" plan --config "$cfg" --machine h100-8x-ib --devices 64 --global-batch 256 \
  --layout "dp16,tp4,pp1,cp1,zero1,mbs1,sp,recompute=full,hier")
grep "^layout dp16,tp4,.*,hier " <<<"$out" >/dev/null
grep "dp .*hierarchical grad all-reduce .* over 2 ranks in the node, .* over 8 nodes (crosses nodes" <<<"$out" >/dev/null

# A layout that does not fit says by how much.
out=$("$bin" plan --config "$cfg" --machine a100-8x-ib --devices 8 --global-batch 8 --layout "dp8,tp1,pp1,cp1,zero0,mbs1")
grep "does not fit: .* GiB > 74.5 GiB" <<<"$out" >/dev/null

# Scaling: a strong and a weak row per device count, and in the JSON.
out=$("$bin" plan --config "$cfg" --machine h200-8x-ib --devices 64 --global-batch 256 --top 1 --scaling 64,128 --layout cp1,zero1 \
  --json "$tmp/s.json")
test "$(grep -cE '^(strong|weak) ' <<<"$out")" -eq 4
/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert [r['kind'] for r in j['scaling']]==['strong','strong','weak','weak'] and j['scaling'][3]['global_batch']==512" "$tmp/s.json"

# calibrate (one process) writes a machine file plan reads: its rates measured
# for one rank on the node (ranks 1), its peak the best measured rate, so the
# predicted MFU is at most 1.
"$bin" calibrate --out "$tmp/m.json" --config "$src/configs/plan/validate.toml" --seconds 0.02 >/dev/null
"$bin" plan --config "$src/configs/plan/validate.toml" --machine "$tmp/m.json" --devices 1 --global-batch 8 \
  --layout "dp1,tp1,pp1,cp1,zero0,mbs2" --json "$tmp/one.json" | grep "fp32" >/dev/null
/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); m=json.load(open(sys.argv[2])); assert 0 < j['mfu'] <= 1, j['mfu']; k = m['kernels']; assert len(k) == 1 and k[0]['ranks'] == 1 and k[0]['attention_s'] > 0 and k[0]['optimizer_s'] > 0; assert all(g['ranks'] == 1 for g in m['gemm'])" "$tmp/one.json" "$tmp/m.json"

# Bad input, each refused with exit 1 and a message naming the value.
refuse() {  # refuse PATTERN ARGS...
  local pattern=$1 out rc
  shift
  set +e
  out=$("$bin" plan "$@" 2>&1)
  rc=$?
  set -e
  if [ "$rc" -ne 1 ] || ! grep -E -e "$pattern" <<<"$out" >/dev/null; then
    echo "expected exit 1 and /$pattern/, got $rc: $out"
    exit 1
  fi
}
base=(--config "$cfg" --devices 64 --global-batch 256)
refuse "--machine 'nope' is neither a built-in profile \(a100-8x-ib" "${base[@]}" --machine nope
refuse "dp \(3\) x tp \(1\) x pp \(1\) x cp \(1\) = 3 but --devices is 64" "${base[@]}" --machine h100-8x-ib \
  --layout dp3,tp1,pp1,cp1,zero0,mbs1
refuse "train.batch_size \(256\) .*" "${base[@]}" --machine h100-8x-ib --layout dp64,tp1,pp1,cp1,zero0,mbs8
refuse "--global-batch \(0\) must be at least 1" --config "$cfg" --devices 64 --global-batch 0 --machine h100-8x-ib
refuse "--layout field 'xx2'" "${base[@]}" --machine h100-8x-ib --layout dp2,xx2
refuse "parallel.cp_impl = ulysses \(cp 4, tp 16\).*\(n_heads / tp = 6\) divisible by 4" "${base[@]}" \
  --machine h100-8x-ib --layout dp1,tp16,pp1,cp4,ulysses,zero1,mbs1
refuse "tp \\(3\\) x pp \\(1\\) x cp \\(1\\) of --layout = 3 does not divide --devices \\(64\\)" "${base[@]}" \
  --machine h100-8x-ib --layout tp3,pp1,cp1
refuse "parallel.dp_allreduce = hierarchical cuts the ZeRO 0/1 all-reduce; parallel.zero \(2\)" "${base[@]}" \
  --machine h100-8x-ib --layout dp64,tp1,pp1,cp1,zero2,mbs1,hier
refuse "--layout field 'inner=cp\+cp': axis 'cp' is named twice" "${base[@]}" --machine h100-8x-ib \
  --layout dp64,tp1,pp1,cp1,zero0,mbs1,inner=cp+cp
refuse "no layout fits; the fastest would be" --config "$cfg" --devices 8 --global-batch 8 --machine a100-8x-ib
echo "plan_cli: ok"
