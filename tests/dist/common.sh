# Shared set-up of the distributed tests: a small corpus, its token files and
# the flags of a tiny model. Sourced; expects $bin and $tmp.
export OMP_NUM_THREADS=1
mpi=(mpirun --oversubscribe --allow-run-as-root --mca btl self,vader)

make_data() {
  mkdir -p "$tmp/corpus"
  for i in $(seq 1 600); do
    echo "fortune $i: the quick brown fox number $((i * 7 % 13)) jumps over $((i % 5)) lazy dogs"
    [ $((i % 3)) -eq 0 ] && echo "short"
    echo "%"
  done >"$tmp/corpus/fortunes"
  "$bin" prepare --text "$tmp/corpus" --out "$tmp/data" --vocab-size 300 >/dev/null
}

# A tiny Llama with grouped-query attention; EOS targets (id 2) are ignored, so
# the valid-token counts differ between data-parallel ranks.
# adam_eps = 1e-6: Adam's update g / (|g| + eps) amplifies a gradient's rounding
# error δg by up to δg / eps where |g| is near zero. With eps = 1e-8 one such
# element of a 32×32 tensor moves the tensor by ~3e-5 (relative L2) after one
# step even between two ONE-process runs that only differ in microbatching, so
# the check would measure Adam's conditioning rather than the layout.
tiny=(--config /dev/null --set data.dir="$tmp/data" --set data.ignore_id=2
  --set model.vocab_size=300 --set model.d_model=32 --set model.n_layers=2 --set model.n_heads=4
  --set model.n_kv_heads=2 --set model.ffn_hidden=48 --set model.max_seq_len=16
  --set train.seq_len=16 --set train.batch_size=8 --set train.steps=10 --set train.lr=1e-2
  --set train.warmup_steps=2 --set train.adam_eps=1e-6 --set train.eval_every=0 --set train.threads=1 --quiet)

# The layout checks of the parity scripts. `failures` counts what differs.
failures=0
# The bounds of a check against REF are derived, on this host, from REF's own
# rounding error: tests/python/train_reference.py repeats REF's steps in float64
# from the same initial weights and batches and writes $tmp/REF.bounds, each
# bound 10 × the fp32 run's distance from float64 (per-step loss, per-step
# gradient norm, final tensors; for a mixture of experts also the per-step
# load-balancing loss), at least 10 × the rounding bound of a sum over the
# batch's tokens; it also checks that three injected bugs (a dropped sequence
# gradient, a half-summed layer, a wrong token count) move the run by more than
# 100 bounds, and for a mixture of experts that REF routes every token as the
# float64 run and that the smallest top-k margin exceeds 10 × the fp32 runs'
# error on it; bf16 adds the first step's bounds (parity_bf16.sh). Where that
# script does not apply (no torch) the stated bounds stay: 1e-5 relative, the
# gradient norms $grad_norm_rtol, which a script sets only with its reason. A
# reference that started from another model (--init-from DIR) names it first:
# `derive_bounds REF DIR`.
grad_norm_rtol=1e-5
# twin_core REF: the OpenBLAS kernel of REF's twin, or nothing for this one. A
# dense model's twin changes the microbatching; a mixture of experts pools its
# router losses per microbatch, so its twin keeps REF's microbatches and takes
# another sgemm kernel (Haswell; where that is already this one, SkylakeX on an
# AVX-512 host, else Sandybridge): the same training, other blockings of every
# product's sums.
twin_core() {
  grep -q '"n_experts":\([2-9]\|[1-9][0-9]\)' <(head -1 "$tmp/$1.jsonl") || return 0
  local avx512=false
  grep -q avx512f /proc/cpuinfo && avx512=true
  if [ "${OPENBLAS_CORETYPE:-}" = Haswell ] || { [ -z "${OPENBLAS_CORETYPE:-}" ] && ! $avx512; }; then
    $avx512 && echo SkylakeX || echo Sandybridge
  else
    echo Haswell
  fi
}
derive_bounds() {  # derive_bounds REF [INIT_DIR]: writes $tmp/REF.bounds, or nothing where the script does not apply
  [ -e "$tmp/$1.bounds" ] || [ -e "$tmp/$1.nobounds" ] && return 0
  local rc=0 out init=() flags=() script mb core env=()
  script="$(dirname "${BASH_SOURCE[0]}")/../python/train_reference.py"
  [ $# -ge 2 ] && init=(--init "$2")
  # The twin: REF's configuration again in one process, its batch as one microbatch or as
  # batch_size microbatches of one sequence, whichever REF did not do; a mixture of
  # experts with REF's microbatches under another kernel (twin_core).
  out=$(/usr/bin/python3 "$script" --flags "$tmp/$1.jsonl") || rc=$?
  mapfile -t flags <<<"$out"
  mb=$(grep -o '"batch_size":[0-9]*' <(head -1 "$tmp/$1.jsonl") | cut -d: -f2)
  grep -q '"microbatch_size":'"$mb"'[,}]' <(head -1 "$tmp/$1.jsonl") && mb=1
  core=$(twin_core "$1")
  if [ -n "$core" ]; then
    env=(OPENBLAS_CORETYPE="$core")
    mb=$(grep -o '"microbatch_size":[0-9]*' <(head -1 "$tmp/$1.jsonl") | cut -d: -f2)
  fi
  if [ "$rc" -eq 0 ]; then
    env "${env[@]}" "$bin" train --config /dev/null "${flags[@]}" --set train.microbatch_size="$mb" --quiet \
      ${2:+--init-from "$2"} --metrics "$tmp/$1.twin.jsonl" --save "$tmp/$1.twin" 2>/dev/null
    out=$(/usr/bin/python3 "$script" "$tmp/$1.jsonl" "$tmp/$1" "$tmp/$1.bounds" --bugs "${init[@]}" \
      --twin "$tmp/$1.twin.jsonl" "$tmp/$1.twin" 2>&1) || rc=$?
  fi
  echo "     bounds of $1: $(tr '\n' ' ' <<<"$out")"
  case $rc in
    0) ;;
    3)  # no torch: a skip on a developer's machine, a failure under CI (install-deps.sh installs it)
      if [ "${CI:-}" = true ]; then
        echo "FAIL bounds of $1: torch is missing: /usr/bin/python3 cannot import torch"
        failures=$((failures + 1))
      fi
      touch "$tmp/$1.nobounds"
      ;;
    4) touch "$tmp/$1.nobounds" ;;
    *)
      echo "FAIL bounds of $1: the float64 run failed (exit $rc)"
      failures=$((failures + 1))
      touch "$tmp/$1.nobounds"
      ;;
  esac
}
# check NAME REF: run NAME's per-step losses, gradient norms and saved model against REF's.
check() {
  local out loss_rtol=1e-5 norm_rtol=$grad_norm_rtol tensor_rtol=1e-5
  derive_bounds "$2"
  [ -e "$tmp/$2.bounds" ] && read -r loss_rtol norm_rtol tensor_rtol _ <"$tmp/$2.bounds"
  if out=$("$bin" compare "$tmp/$1.jsonl" "$tmp/$2.jsonl" --model-a "$tmp/$1" --model-b "$tmp/$2" \
    --rtol "$loss_rtol" --grad-norm-rtol "$norm_rtol" --tensor-rtol "$tensor_rtol"); then
    echo "ok   $1: $(tr '\n' ' ' <<<"$out")"
  else
    echo "FAIL $1: $out"
    failures=$((failures + 1))
  fi
}
# run NAME RANKS FLAGS...: trains the tiny model under mpirun, metrics and model under $tmp/NAME.
run() {
  local name=$1 np=$2
  shift 2
  "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" --metrics "$tmp/$name.jsonl" --save "$tmp/$name"
}
# check_bitwise A B WHAT: runs A and B have bitwise identical losses and parameters.
check_bitwise() {
  if cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors" &&
    diff <(grep -o '"loss":[^,]*' "$tmp/$1.jsonl") <(grep -o '"loss":[^,]*' "$tmp/$2.jsonl") >/dev/null; then
    echo "ok   $3: bitwise identical"
  else
    echo "FAIL $3: not bitwise identical"
    failures=$((failures + 1))
  fi
}
# finish WHAT: the verdict line and the exit status.
finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$failures layout(s) differ from the one-process run"
    exit 1
  fi
  echo "all $1 layouts match the one-process run"
}

# check_router A B: the mixture-of-experts metrics of every step of run A against
# B's: moe_aux_loss within B's derived aux-loss bound (the fourth of
# $tmp/B.bounds; 1e-5 relative where none is derived), moe_tokens_per_expert
# and moe_dropped_tokens exactly (a difference shows the smallest top-k margin,
# where a routing flip would start).
check_router() {
  local aux_rtol=1e-5
  derive_bounds "$2"
  [ -e "$tmp/$2.bounds" ] && read -r _ _ _ aux_rtol _ <"$tmp/$2.bounds"
  if python3 - "$tmp/$1.jsonl" "$tmp/$2.jsonl" "$aux_rtol" <<'PY'; then
import json, sys
def steps(p):
    return [j for j in map(json.loads, open(p)) if "moe_aux_loss" in j]
a, b, rtol = steps(sys.argv[1]), steps(sys.argv[2]), float(sys.argv[3])
assert len(a) == len(b) == 10, (len(a), len(b))
for x, y in zip(a, b):
    assert abs(x["moe_aux_loss"] - y["moe_aux_loss"]) <= rtol * abs(y["moe_aux_loss"]), (x["step"], x["moe_aux_loss"], y["moe_aux_loss"], rtol)
    assert x["moe_tokens_per_expert"] == y["moe_tokens_per_expert"], ("routing differs at step", x["step"], "smallest top-k margin", x["moe_min_topk_margin"], y["moe_min_topk_margin"])
    assert x["moe_dropped_tokens"] == y["moe_dropped_tokens"], ("capacity dropped", x["moe_dropped_tokens"], "vs", y["moe_dropped_tokens"], "at step", x["step"])
    assert x.get("moe_max_load_over_mean", 1.0) >= 1.0, x  # the busiest ep rank's load over the mean
PY
    echo "ok   $1: router aux loss (rtol $aux_rtol) and tokens per expert"
  else
    echo "FAIL $1: router metrics differ"
    failures=$((failures + 1))
  fi
}

# The canonical suites' (tests/dist/canonical*.sh) shared checks; each script sets tmp, bin and failures.
fail() {
  echo "FAIL $1"
  failures=$((failures + 1))
}

# refused NAME RANKS 'TEXT' FLAGS...: a non-zero exit whose message contains TEXT.
refused() {
  local name=$1 np=$2 text=$3
  shift 3
  if timeout 60 "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" >"$tmp/$name.out" 2>&1; then
    fail "$name: ran; the canonical mode should refuse it"
  elif grep -qF -- "$text" "$tmp/$name.out"; then
    echo "ok   $name refused: $(grep -m1 -F -- "$text" "$tmp/$name.out" | cut -c1-150)"
  else
    fail "$name: failed without naming '$text': $(tail -2 "$tmp/$name.out")"
  fi
}

# cluster_up ARGS...: scripts/cluster.sh up ARGS (expects $cluster and $tmp),
# or the test's exit: 77 (CTest: skipped) with the reason where the machine
# does not allow network namespaces, 1 when the cluster cannot be built.
cluster_up() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: network namespaces need root (uid $(id -u))"
    exit 77
  fi
  command -v ip >/dev/null && command -v tc >/dev/null || {
    echo "SKIP: ip and tc (iproute2) are missing: scripts/install-deps.sh installs them"
    exit 77
  }
  local rc=0
  bash "$cluster" up "$@" >"$tmp/up.log" 2>&1 || rc=$?
  if [ "$rc" -eq 77 ]; then
    echo "SKIP: $(tail -1 "$tmp/up.log")"
    exit 77
  elif [ "$rc" -ne 0 ]; then
    echo "FAIL cluster up: $(tail -3 "$tmp/up.log")"
    exit 1
  fi
}
