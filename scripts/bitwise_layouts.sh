#!/usr/bin/env bash
# Evidence that a change kept behaviour bit for bit (docs/ARCHITECTURE.md
# "Showing that behaviour stayed the same"). Records, with one binary, and
# checks, with another, on the same host:
#   - the per-step losses, gradient norms, token counts and router metrics and
#     the saved model of each training layout below (meshtrain compare with
#     every tolerance 0, and cmp of model.safetensors);
#   - the data files of `meshtrain prepare`;
#   - the greedy continuations, with log-probs, of `meshtrain generate` under
#     five layouts, from the recording binary's model, byte for byte (and that
#     model, trained again, byte for byte);
#   - training checkpoints written by the recording binary (stopped at step 5
#     by MESHTRAIN_FAULT) resumed by the checking one: the losses and the final
#     model of the recording binary's uninterrupted run.
# Each item prints `ok` or `DIFFERENT`; any difference exits 1.
#
#   scripts/bitwise_layouts.sh record  DIR [BUILD]   # before the change
#   scripts/bitwise_layouts.sh check   DIR [BUILD]   # after it
#   scripts/bitwise_layouts.sh against BASE [BUILD]  # both: BASE (a commit) built here, checked with BUILD
#
# `against` builds BASE in a temporary git worktree with BUILD's compiler,
# build type and MESHTRAIN_* options (CUDA, tests and benchmarks off; ccache
# when on PATH), records with it, checks with BUILD/meshtrain and removes the
# worktree (BITWISE_KEEP=1 keeps it and the recording, and says where).
# Compiler flags and vector width change summation order, so a recording made
# by another build or on another host proves nothing. BUILD defaults to build.
# The model is the parity tests' tiny Llama (tests/dist/common.sh) with 4
# layers; every run uses one thread per rank.
set -euo pipefail
# bf16 products run the emulated kernel in both binaries (docs/MODEL.md
# "Precision"): it is the reference, bitwise what the base computes; a base
# without the variable ignores it. The oneDNN kernel sums in another order.
export MESHTRAIN_BF16_MATMUL=emulated
repo=$(cd "$(dirname "$0")/.." && pwd)
usage() {
  sed -n '/^#   scripts/p' "$0" >&2
  exit 2
}
[ $# -ge 2 ] || usage

# name ranks flags...: the training layouts.
kv4="--set model.n_kv_heads=4"  # 2-D grids with R > 1 split every kv head over the grid
moe="--set model.n_experts=4 --set model.expert_ffn_hidden=24 --set model.router_aux_loss_coef=0.05"
moe+=" --set model.router_z_loss_coef=0.001"
layouts=(
  "one 1 --set train.microbatch_size=4"
  "dp2_zero1 2 --dp 2 --zero 1 --set train.microbatch_size=2"
  "dp4_zero3 4 --dp 4 --zero 3 --set train.microbatch_size=1"
  "tp2_sp 2 --tp 2 --set parallel.sp=true --set train.microbatch_size=4"
  "tp2_overlap 2 --tp 2 --set parallel.tp_overlap=true --set train.microbatch_size=4"
  "tp2_sp_overlap 2 --tp 2 --set parallel.sp=true --set parallel.tp_overlap=true --set train.microbatch_size=4"
  "tp4_kvrep 4 --tp 4 --set train.microbatch_size=4"
  "tp2d_2x2 4 --tp 4 --set parallel.tp2d=2,2 $kv4 --set train.microbatch_size=8"
  "dp2_tp2d_2x2_zero3 8 --dp 2 --tp 4 --zero 3 --set parallel.tp2d=2,2 $kv4 --set train.microbatch_size=2"
  "dp2_tp2_zero3 4 --dp 2 --tp 2 --zero 3 --set train.microbatch_size=2"
  "pp2_1f1b 2 --pp 2 --set parallel.schedule=1f1b --set train.microbatch_size=2"
  "pp2_interleaved 2 --pp 2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.microbatch_size=1"
  "cp2_ring 2 --cp 2 --set parallel.cp_impl=ring --set train.microbatch_size=4"
  "cp2_allgather 2 --cp 2 --set parallel.cp_impl=allgather --set train.microbatch_size=4"
  "ep2_moe 2 --dp 2 --set parallel.ep=2 $moe --set train.microbatch_size=2"
  "dp2_tp2_pp2 8 --dp 2 --tp 2 --pp 2 --zero 1 --set train.microbatch_size=2"
  "tp2_dropout 2 --tp 2 --set model.attention_dropout=0.1 --set model.hidden_dropout=0.1 --set train.microbatch_size=4"
  "tp2_bf16 2 --tp 2 --set train.precision=bf16 --set train.microbatch_size=4"
)
# name ranks flags...: the layouts of `generate` (greedy).
gen_layouts=(
  "one 1"
  "tp2 2 --tp 2"
  "pp2 2 --pp 2"
  "cp2 2 --cp 2"
  "cp2_chunked 2 --cp 2 --prefill-chunk 3"
  "tp2_pp2 4 --tp 2 --pp 2"
)
# name ranks flags...: training checkpoints saved at step 5 by the recording binary, resumed by the checking one.
ckpt_layouts=(
  "one 1 --set train.microbatch_size=4"
  "dp2_tp2_zero1 4 --dp 2 --tp 2 --zero 1 --set train.microbatch_size=2"
  "pp2_interleaved 2 --pp 2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.microbatch_size=1"
)

setup() {  # setup BIN DIR: the tiny model's flags (common.sh) with its data under DIR
  bin=$1
  tmp=$2  # common.sh writes its corpus and token files under $tmp
  # shellcheck source=tests/dist/common.sh
  source "$repo/tests/dist/common.sh"
  tiny+=(--set model.n_layers=4 --set train.adam_eps=1e-5)
  # generate: a vocabulary of 301 leaves the tp shards padding rows; prompts longer than a training window;
  # 150 steps, so that the continuations are text rather than one token repeated.
  gen_train=(--set data.dir="$tmp/gen_data" --set model.vocab_size=301 --set model.max_seq_len=64
    --set train.seq_len=32 --set train.microbatch_size=4 --set train.steps=150)
}
generate() {  # generate MODEL TOKENIZER NAME OUT RANKS FLAGS...
  local model=$1 tok=$2 out=$4 np=$5
  shift 5
  timeout 300 "${mpi[@]}" -np "$np" "$bin" generate --model "$model" --tokenizer "$tok" --threads 1 \
    --prompt "fortune 12: the quick" --prompt "short" --prompt "fortune 3: the quick brown fox number 8 jumps" \
    --max-new-tokens 16 --temperature 0 --output jsonl --logprobs "$@" >"$out"
}

record_all() {  # record_all BIN DIR
  setup "$1" "$2"
  local name np flags failed=0
  mkdir -p "$tmp"
  make_data
  "$bin" prepare --text "$tmp/corpus" --out "$tmp/gen_data" --vocab-size 301 >/dev/null
  for spec in "${layouts[@]}"; do
    read -r name np flags <<<"$spec"
    # shellcheck disable=SC2086
    run "$name" "$np" $flags >/dev/null || { echo "FAILED to record $name" && failed=1; }
  done
  "$bin" train "${tiny[@]}" "${gen_train[@]}" --save "$tmp/gen_model" >/dev/null
  for spec in "${gen_layouts[@]}"; do
    read -r name np flags <<<"$spec"
    # shellcheck disable=SC2086
    generate "$tmp/gen_model" "$tmp/gen_data/tokenizer.model" "$name" "$tmp/gen_$name.jsonl" "$np" $flags \
      2>/dev/null || { echo "FAILED to record generate $name" && failed=1; }
  done
  for spec in "${ckpt_layouts[@]}"; do
    read -r name np flags <<<"$spec"
    # shellcheck disable=SC2086
    run "ckpt_$name" "$np" $flags >/dev/null || failed=1
    # shellcheck disable=SC2086
    MESHTRAIN_FAULT=throw:0:5 "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" $flags \
      --set train.checkpoint_dir="$tmp/ckpt_$name.ck" --set train.checkpoint_every=5 >/dev/null 2>&1 || true
    [ -f "$tmp/ckpt_$name.ck/step-00000005/metadata.json" ] ||
      { echo "FAILED to record checkpoint $name: no step-5 checkpoint" && failed=1; }
  done
  echo "recorded ${#layouts[@]} training layouts, ${#gen_layouts[@]} generate layouts and" \
    "${#ckpt_layouts[@]} checkpoints under $tmp with $bin"
  return $failed
}

items=0 different=()
verdict() {  # verdict NAME DETAIL: DETAIL empty means ok
  items=$((items + 1))
  if [ -z "$2" ]; then
    echo "ok        $1"
  else
    echo "DIFFERENT $1: $2"
    different+=("$1")
  fi
}
steps() {  # steps METRICS: each step's deterministic fields, as written
  python3 -c '
import json, sys
keep = ("step", "loss", "grad_norm", "lr", "tokens", "skipped", "val_loss")
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "loss" in j:
        print({k: v for k, v in j.items() if k in keep or k.startswith("moe_")})' "$1"
}
same_run() {  # same_run NEW OLD: empty when run NEW equals run OLD bit for bit, else what differs
  local out
  if [ ! -s "$1.jsonl" ]; then echo "the run failed or wrote no metrics"; return; fi
  if [ ! -s "$2.jsonl" ]; then echo "nothing recorded"; return; fi
  out=$("$bin" compare "$1.jsonl" "$2.jsonl" --model-a "$1" --model-b "$2" --rtol 0 --grad-norm-rtol 0 \
    --tensor-rtol 0 2>&1) || { tr '\n' ' ' <<<"$out"; return; }
  cmp -s "$1/model.safetensors" "$2/model.safetensors" || { echo "model.safetensors differs"; return; }
  diff -q <(steps "$1.jsonl") <(steps "$2.jsonl") >/dev/null || echo "per-step metrics differ"
}

check_all() {  # check_all BIN DIR
  setup "$1" "$2"
  local name np flags new=$tmp/new f
  rm -rf "$new" && mkdir -p "$new"
  "$bin" prepare --text "$tmp/corpus" --out "$new/data" --vocab-size 300 >/dev/null 2>&1 || true
  local bad=""
  for f in train.bin val.bin tokenizer.model; do
    cmp -s "$new/data/$f" "$tmp/data/$f" || bad+="$f "
  done
  verdict prepare "${bad:+${bad}differs}"
  for spec in "${layouts[@]}"; do
    read -r name np flags <<<"$spec"
    # shellcheck disable=SC2086
    "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" $flags --metrics "$new/$name.jsonl" --save "$new/$name" \
      >/dev/null 2>"$new/$name.err" || true
    verdict "train $name" "$(same_run "$new/$name" "$tmp/$name")"
  done
  "$bin" train "${tiny[@]}" "${gen_train[@]}" --save "$new/gen_model" >/dev/null 2>&1 || true
  if cmp -s "$new/gen_model/model.safetensors" "$tmp/gen_model/model.safetensors"; then
    verdict "train generate's model" ""
  else
    verdict "train generate's model" "model.safetensors differs"
  fi
  for spec in "${gen_layouts[@]}"; do
    read -r name np flags <<<"$spec"
    # shellcheck disable=SC2086
    generate "$tmp/gen_model" "$tmp/gen_data/tokenizer.model" "$name" "$new/gen_$name.jsonl" "$np" $flags \
      2>"$new/gen_$name.err" || true
    if [ -s "$new/gen_$name.jsonl" ] && cmp -s "$new/gen_$name.jsonl" "$tmp/gen_$name.jsonl"; then
      verdict "generate $name" ""
    else
      verdict "generate $name" "tokens or log-probs differ ($(cmp "$new/gen_$name.jsonl" "$tmp/gen_$name.jsonl" 2>&1 | head -c 200))"
    fi
  done
  for spec in "${ckpt_layouts[@]}"; do
    read -r name np flags <<<"$spec"
    # shellcheck disable=SC2086
    "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" $flags --set train.checkpoint_dir="$new/ckpt_$name.ck" \
      --resume "$tmp/ckpt_$name.ck/step-00000005" --metrics "$new/ckpt_$name.jsonl" --save "$new/ckpt_$name" \
      >/dev/null 2>"$new/ckpt_$name.err" || true
    verdict "resume checkpoint $name" "$(same_run "$new/ckpt_$name" "$tmp/ckpt_$name")"
  done
  if [ ${#different[@]} -ne 0 ]; then
    echo "bitwise: ${#different[@]} of $items items DIFFERENT (${different[*]}); stderr of the runs under $new"
    [ "${in_against:-0}" = 1 ] && [ "${BITWISE_KEEP:-0}" != 1 ] && echo "(BITWISE_KEEP=1 keeps that folder)"
    return 1
  fi
  echo "bitwise: all $items items ok"
}

against() {  # against BASE BIN: build BASE beside BIN's build, record with it, check with BIN
  local base cache work wt opt val t0 rc=0
  base=$(git -C "$repo" rev-parse --verify "$1^{commit}")
  cache=$(dirname "$2")/CMakeCache.txt
  [ -f "$cache" ] || { echo "no $cache: BUILD must be a CMake build folder" >&2 && return 2; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/bitwise.XXXXXX")
  wt=$work/src
  # shellcheck disable=SC2064
  trap "cleanup '$work'" EXIT
  git -C "$repo" worktree add --detach "$wt" "$base" >/dev/null 2>&1
  get() { sed -n "s/^$1:[A-Z]*=//p" "$cache"; }
  local -a args=(-G "$(get CMAKE_GENERATOR)" -DCMAKE_BUILD_TYPE="$(get CMAKE_BUILD_TYPE)"
    -DCMAKE_CXX_COMPILER="$(get CMAKE_CXX_COMPILER)" -DCMAKE_CXX_FLAGS="$(get CMAKE_CXX_FLAGS)")
  [ -n "$(get CMAKE_C_COMPILER)" ] && args+=(-DCMAKE_C_COMPILER="$(get CMAKE_C_COMPILER)")
  # BUILD's MESHTRAIN_* choices (-march=native, the BLAS, sanitizers), where BASE has the option.
  while IFS= read -r opt; do
    case $opt in MESHTRAIN_WITH_CUDA | MESHTRAIN_BUILD_TESTS | MESHTRAIN_BUILD_BENCH) continue ;; esac
    val=$(get "$opt")
    grep -rqs --include=CMakeLists.txt --include='*.cmake' -- "$opt" "$wt" && args+=(-D"$opt=$val")
  done < <(grep -o '^MESHTRAIN_[A-Z0-9_]*:' "$cache" | tr -d : | sort -u)
  for opt in MESHTRAIN_WITH_CUDA MESHTRAIN_BUILD_TESTS MESHTRAIN_BUILD_BENCH; do
    grep -qs -- "option($opt " "$wt/CMakeLists.txt" && args+=(-D"$opt=OFF")
  done
  if command -v ccache >/dev/null; then
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
    export CCACHE_BASEDIR=$work  # paths relative to the temporary folder: a later run hits the cache
  fi
  echo "building base $(git -C "$repo" log -1 --format='%h %s' "$base") in $work/build"
  t0=$SECONDS
  if ! { cmake -S "$wt" -B "$work/build" "${args[@]}" && cmake --build "$work/build" -j "${BITWISE_JOBS:-2}" \
    --target meshtrain; } >"$work/build.log" 2>&1; then
    tail -30 "$work/build.log"
    echo "DIFFERENT base: $base did not build (log above)"
    return 1
  fi
  echo "built base in $((SECONDS - t0)) s; recording with it"
  items=0 different=()
  verdict "compiler flags of src/ops/gemm.cpp" "$(same_flags "$work/build" "$(dirname "$2")" ops/gemm.cpp)"
  t0=$SECONDS
  record_all "$work/build/meshtrain" "$work/rec" || rc=1
  echo "recorded in $((SECONDS - t0)) s; checking with $2 (this worktree's HEAD: $(git -C "$repo" log -1 --format=%h))"
  t0=$SECONDS
  in_against=1 check_all "$2" "$work/rec" || rc=1
  echo "checked in $((SECONDS - t0)) s"
  return $rc
}
same_flags() {  # same_flags BUILD_A BUILD_B FILE: empty when both compile src/FILE with the same flags
  python3 - "$@" <<'PY'
import json, os, shlex, sys
def flags(build):
    for e in json.load(open(os.path.join(build, "compile_commands.json"))):
        if e["file"].endswith("/src/" + sys.argv[3]):
            root = e["file"][: -len("src/" + sys.argv[3])]
            args = shlex.split(e["command"])
            drop = {i + 1 for i, a in enumerate(args) if a in ("-o", "-c", "-MF", "-MT")}
            return [a.replace(root, "ROOT/") for i, a in enumerate(args) if i not in drop and a not in ("-o", "-c")]
    return None
a, b = flags(sys.argv[1]), flags(sys.argv[2])
if a != b:
    print("base:", " ".join(a or ["(not compiled)"]), "| build:", " ".join(b or ["(not compiled)"]))
PY
}
cleanup() {  # cleanup WORK: the base's worktree and build, unless BITWISE_KEEP=1
  if [ "${BITWISE_KEEP:-0}" = 1 ]; then
    echo "kept $1 (base worktree src/, build/, recording rec/)"
    return
  fi
  git -C "$repo" worktree remove --force "$1/src" 2>/dev/null || true
  rm -rf "$1"
  git -C "$repo" worktree prune
}

mode=$1
build=${3:-build}
[ -x "$build/meshtrain" ] || { echo "no $build/meshtrain: build the meshtrain target first" >&2 && exit 2; }
binary=$(realpath "$build/meshtrain")
case $mode in
  record) record_all "$binary" "$(realpath -m "$2")" ;;
  check) check_all "$binary" "$(realpath -m "$2")" ;;
  against) against "$2" "$binary" ;;
  *) usage ;;
esac
