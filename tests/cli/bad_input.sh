#!/usr/bin/env bash
# Every bad input gets a clear message naming the value and the rule, and a
# non-zero exit (1), never a crash (which would exit 2 or by a signal).
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect_error "what" "expected text in stderr" command...
expect_error() {
  local what=$1 want=$2
  shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne 1 ]; then
    echo "FAIL [$what]: exit status $rc (want 1); stderr: $err"
    failures=$((failures + 1))
  elif ! grep -qF -- "$want" <<<"$err"; then
    echo "FAIL [$what]: stderr lacks '$want': $err"
    failures=$((failures + 1))
  else
    echo "ok   [$what]: $err"
  fi
}

# expect_error_mpi NP "what" "expected text in stderr" train-args... : the same
# under `mpirun -np NP` (every rank validates; rank 0 alone reports), bounded by
# a timeout so that a rank waiting for the others fails the case instead of hanging it.
mpi=(mpirun --oversubscribe --allow-run-as-root --mca btl self,vader)
expect_error_mpi() {
  local np=$1 what=$2 want=$3
  shift 3
  local err rc
  err=$(OMP_NUM_THREADS=1 timeout -k 5 60 "${mpi[@]}" -np "$np" "$bin" train --config "$cfg" --quiet "$@" 2>&1 >/dev/null)
  rc=$?
  local copies
  copies=$(grep -cF -- "$want" <<<"$err")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "FAIL [$what]: hung (killed by the 60 s timeout); stderr: $err"
    failures=$((failures + 1))
  elif [ "$rc" -eq 0 ]; then
    echo "FAIL [$what]: exit status 0 (want non-zero); stderr: $err"
    failures=$((failures + 1))
  elif [ "$copies" -ne 1 ]; then
    echo "FAIL [$what]: '$want' on $copies lines of stderr (want 1): $err"
    failures=$((failures + 1))
  else
    echo "ok   [$what, $np ranks, exit $rc]: $err"
  fi
}

# A valid little data set, so that only the value under test is wrong.
mkdir -p "$tmp/corpus" "$tmp/data"
for i in $(seq 1 400); do
  echo "fortune number $i says the quick brown fox jumps over the lazy dog $((i * 7))"
  echo "%"
done >"$tmp/corpus/fortunes"
"$bin" prepare --text "$tmp/corpus" --out "$tmp/data" --vocab-size 300 >/dev/null || { echo "prepare failed"; exit 1; }
cfg="$tmp/tiny.toml"
cat >"$cfg" <<TOML
[model]
vocab_size = 300
d_model = 16
n_layers = 1
n_heads = 2
n_kv_heads = 1
ffn_hidden = 24
max_seq_len = 16
[train]
steps = 1
batch_size = 2
microbatch_size = 2
seq_len = 16
eval_every = 0
[data]
dir = "$tmp/data"
TOML
train() { "$bin" train --config "$cfg" --quiet "$@"; }

# Sanity: the config itself is fine.
if ! train >/dev/null 2>&1; then echo "FAIL: the base config does not train"; exit 1; fi

expect_error "unknown key" "unknown config key 'train.stpes'" train --set train.stpes=3
expect_error "unknown section" "unknown config key 'trian.steps'" train --set trian.steps=3
expect_error "malformed integer" "train.steps: '3x' is not an integer" train --set train.steps=3x
expect_error "malformed float" "train.lr: 'fast' is not a finite number" train --set train.lr=fast
expect_error "malformed bool" "model.tie_embeddings: 'yes' is not a boolean" train --set model.tie_embeddings=yes
expect_error "override syntax" "must have the form section.key=value" train --set train.steps
expect_error "seq_len > max_seq_len" "train.seq_len (32) must not exceed model.max_seq_len (16)" train --set train.seq_len=32
expect_error "d_model % n_heads" "model.d_model (16) must be divisible by model.n_heads (3)" train --set model.n_heads=3 --set model.n_kv_heads=1
expect_error "n_heads % n_kv_heads" "model.n_heads (2) must be divisible by model.n_kv_heads (3)" train --set model.n_kv_heads=3
expect_error "odd head_dim" "head_dim = d_model / n_heads = 18 / 2 = 9 must be even" train --set model.d_model=18
expect_error "batch % (dp x microbatch)" "train.batch_size (3) must be divisible by parallel.dp (1) x train.microbatch_size (2)" train --set train.batch_size=3
expect_error "world size != mesh" "dp (2) = 2 but the world has 1 rank" train --dp 2 --set train.microbatch_size=1
expect_error "world size != mesh (tp)" "tp (2) = 2 but the world has 1 rank" train --tp 2
expect_error "seq_len % 2cp" "train.seq_len (16) must be divisible by 2 x parallel.cp (3) = 6" train --cp 3
expect_error "zero out of range" "parallel.zero (4) must be 0, 1, 2 or 3" train --zero 4
expect_error "vocab too small for data" "written for a 300-token vocabulary but model.vocab_size is 100" train --set model.vocab_size=100

# Tensor and sequence parallelism: the rules that tp and sp add, on real tp ranks.
expect_error "dropout range" "model.attention_dropout (1) must be in [0, 1)" train --set model.attention_dropout=1
expect_error "hidden dropout with experts" "model.hidden_dropout (0.1) with model.n_experts (2)" train \
  --set model.hidden_dropout=0.1 --set model.n_experts=2 --set model.top_k=1 --set model.expert_ffn_hidden=8
# A saved mixture of experts loaded into a run with another expert count (the Hugging Face directory's
# num_local_experts against model.n_experts).
moe=(--set model.top_k=1 --set model.expert_ffn_hidden=8)
train "${moe[@]}" --set model.n_experts=4 --save "$tmp/moe4" >/dev/null 2>&1 || echo "FAIL: the MoE model did not train"
expect_error "init-from expert count" "model.n_experts is 4 in $tmp/moe4/config.json but 2 in this run's" \
  train "${moe[@]}" --set model.n_experts=2 --init-from "$tmp/moe4"
expect_error "unknown optimizer" "train.optimizer 'adam' must be adamw, sgd or lamb" train --set train.optimizer=adam
expect_error "momentum range" "train.momentum (1) must be in [0, 1)" train --set train.optimizer=sgd --set train.momentum=1
expect_error "nesterov without momentum" "train.nesterov needs train.optimizer = sgd and train.momentum > 0" \
  train --set train.optimizer=sgd --set train.nesterov=true
expect_error "unknown precision" "train.precision (fp16) must be fp32 or bf16" train --set train.precision=fp16
expect_error_mpi 2 "unknown precision" "train.precision (bfloat16) must be fp32 or bf16" --dp 2 \
  --set train.microbatch_size=1 --set train.precision=bfloat16
expect_error_mpi 2 "lamb with ep" "parallel.ep (2) with train.optimizer = lamb" --dp 2 --set train.microbatch_size=1 \
  --set train.optimizer=lamb \
  --set model.n_experts=2 --set model.top_k=1 --set model.expert_ffn_hidden=8 --set parallel.ep=2
expect_error_mpi 2 "n_heads % tp" "model.n_heads (1) must be divisible by parallel.tp (2)" --tp 2 --set model.n_heads=1
expect_error_mpi 2 "ffn_hidden % tp" "model.ffn_hidden (25) must be divisible by parallel.tp (2)" --tp 2 --set model.ffn_hidden=25
expect_error_mpi 2 "n_kv_heads vs tp" "model.n_kv_heads (3) and parallel.tp (2): one must divide the other (kv heads are split" \
  --tp 2 --set model.d_model=24 --set model.n_heads=6 --set model.n_kv_heads=3
expect_error_mpi 2 "seq_len % tp with sp" "train.seq_len (15) must be divisible by parallel.tp (2) with parallel.sp = true" \
  --tp 2 --set parallel.sp=true --set train.seq_len=15
# Pipeline parallelism: the schedule's rules, on real pp ranks (the base model has 1 layer, 1 microbatch).
expect_error_mpi 2 "n_layers < pp x v" "n_layers (1) must be at least pp (2) x v (1) = 2" --pp 2
expect_error_mpi 2 "1f1b microbatches < pp" "the 1f1b schedule needs microbatches (1) >= pp (2)" \
  --pp 2 --set model.n_layers=2
expect_error_mpi 2 "interleaved microbatches % pp" "microbatches (3) must be a multiple of pp (2) for the interleaved schedule" \
  --pp 2 --set model.n_layers=4 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 \
  --set train.batch_size=3 --set train.microbatch_size=1
expect_error_mpi 2 "chunks without interleaving" "v (2) model chunks per rank needs the interleaved schedule" \
  --pp 2 --set model.n_layers=4 --set parallel.virtual_stages=2 --set train.batch_size=4 --set train.microbatch_size=1
expect_error_mpi 2 "stage_layers sum" "parallel.stage_layers ('2,1') sums to 3 layers but model.n_layers is 2" \
  --pp 2 --set model.n_layers=2 --set parallel.stage_layers=2,1 --set train.batch_size=2 --set train.microbatch_size=1
# Context parallelism: zigzag needs 2 x cp chunks per sequence.
expect_error_mpi 2 "seq_len % 2cp on 2 ranks" "train.seq_len (6) must be divisible by 2 x parallel.cp (2) = 4" \
  --cp 2 --set train.seq_len=6
# --trace works on every layout (tests/dist/trace_layouts.sh); --trace-steps is checked at start-up.
expect_error_mpi 2 "--trace-steps out of range" "--trace-steps '0,3': step 3 is not one of the run's steps 0-0 (train.steps = 1)" \
  --dp 2 --set train.microbatch_size=1 --trace "$tmp/trace.json" --trace-steps 0,3
expect_error_mpi 2 "--trace-steps grammar" "--trace-steps '0-x': 'x' is not a step number (give steps and ranges such as 3, 2-4 or 2,5)" \
  --dp 2 --set train.microbatch_size=1 --trace "$tmp/trace.json" --trace-steps 0-x
expect_error_mpi 2 "--trace-steps without --trace" "--trace-steps '0' chooses the steps of a trace: it needs --trace FILE" \
  --dp 2 --set train.microbatch_size=1 --trace-steps 0
expect_error_mpi 2 "sp without tp" "parallel.sp = true needs tensor parallelism: parallel.tp (1) must be greater than 1" \
  --dp 2 --set train.microbatch_size=1 --set parallel.sp=true
expect_error_mpi 2 "tp_overlap without tp" "parallel.tp_overlap = true needs tensor parallelism: parallel.tp (1) must be greater than 1" \
  --dp 2 --set train.microbatch_size=1 --set parallel.tp_overlap=true

printf 'steps = [1, 2\n' >"$tmp/broken.toml"
expect_error "TOML syntax" "broken.toml:1:" "$bin" train --config "$tmp/broken.toml"
printf '[train]\nsteps = "ten"\n' >"$tmp/typed.toml"
expect_error "TOML type" "train.steps = ten must be of type int" "$bin" train --config "$tmp/typed.toml"
expect_error "missing config" "cannot open config file" "$bin" train --config "$tmp/nope.toml"

expect_error "missing corpus" "$tmp/missing" "$bin" prepare --text "$tmp/missing" --out "$tmp/out1"
mkdir -p "$tmp/empty"
expect_error "empty corpus" "empty" "$bin" prepare --text "$tmp/empty" --out "$tmp/out2"

printf 'NOTMAGIC0000000000000000000000000000' >"$tmp/bad.bin"
cp "$tmp/data/train.bin" "$tmp/data/train.good"
cp "$tmp/bad.bin" "$tmp/data/train.bin"
expect_error "wrong magic" "magic" train
head -c 100 "$tmp/data/train.good" >"$tmp/data/train.bin"
expect_error "truncated token file" "truncated" train
cp "$tmp/data/train.good" "$tmp/data/train.bin"
# A token id >= vocab_size: patch the first token (offset 32, uint16) to 65000.
printf '\xe8\xfd' | dd of="$tmp/data/train.bin" bs=1 seek=32 conv=notrunc status=none
expect_error "token id >= vocab" "65000" train
cp "$tmp/data/train.good" "$tmp/data/train.bin"

mkdir -p "$tmp/model"
"$bin" train --config "$cfg" --quiet --save "$tmp/model" >/dev/null
expect_error "eval seq too long" "--seq-len (64) must not exceed the model's max_seq_len (16)" "$bin" eval --model "$tmp/model" --data "$tmp/data/val.bin" --seq-len 64
expect_error "eval missing model" "config.json" "$bin" eval --model "$tmp/nomodel" --data "$tmp/data/val.bin"
expect_error "eval precision" "--precision (half) must be fp32 or bf16" "$bin" eval --model "$tmp/model" \
  --data "$tmp/data/val.bin" --precision half
expect_error "generate precision" "--precision (half) must be fp32 or bf16" "$bin" generate --model "$tmp/model" \
  --tokenizer "$tmp/data/tokenizer.model" --prompt hi --precision half

if [ "$failures" -ne 0 ]; then
  echo "$failures bad-input case(s) failed"
  exit 1
fi
echo "all bad-input cases give clear errors"
