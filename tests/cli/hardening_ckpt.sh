#!/usr/bin/env bash
# The checkpoint and input-file faults of issue 24, each a case of the real
# binary on the tiny model of tests/dist/common.sh: how the job ends, what it
# says, and what it leaves in the checkpoint directory.
#   hardening_ckpt.sh MESHTRAIN CASE
# CASE: rollback | lock | nonregular | config_tensors | overflow | metadata
set -u
bin=$1
case_name=$2
source "$(dirname "$0")/harness.sh"
refused() {  # refused WHAT TEXT: the last job exited 1 and its stderr says TEXT, with no internal error
  check "$1: exit status 1 (status $rc)" test "$rc" -eq 1
  check "$1: stderr says '$2'" has "$2" "$tmp/err"
  check "$1: no internal error" bash -c "! grep -q 'internal error' '$tmp/err'"
}
# forge DIR PYTHON: edits DIR/metadata.json (`m`, parsed) and reseals it: its
# metadata_crc32c recomputed (as tests/dist/verify_checkpoints.py checks it),
# so that the edit passes the checksum.
forge() {
  /usr/bin/python3 - "$1" "$2" "$(dirname "$0")/../dist" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[3])
from verify_checkpoints import crc32c
path = sys.argv[1] + "/metadata.json"
m = json.load(open(path))
exec(sys.argv[2])
m.pop("metadata_crc32c", None)
dump = json.dumps(m, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
m["metadata_crc32c"] = "%08x" % crc32c(dump)
open(path, "w").write(json.dumps(m, indent=1) + "\n")
PY
}
# ck1: one process, 8 steps, a checkpoint every 2 (step-2 … step-8, latest step-8).
ck_run=("$bin" train "${tiny[@]}" --set train.steps=8 --set train.checkpoint_every=2)
make_ck1() { "${ck_run[@]}" --set train.checkpoint_dir="$tmp/ck1" >/dev/null || fail=1; }

case $case_name in
  rollback)  # fault 1: a rollback supersedes the newer steps; pruning never deletes the commit
    make_ck1
    cp -r "$tmp/ck1" "$tmp/ckk"
    MESHTRAIN_FAULT=throw:0:7 job 30 "${ck_run[@]}" --set train.checkpoint_dir="$tmp/ckk" \
      --set train.keep_checkpoints=1 --set train.lr=0.002 --set train.resume_allow=lr \
      --resume "$tmp/ckk/step-00000004"
    check "the rollback names the superseded steps" has "the newer checkpoint(s) step-00000006, step-00000008" "$tmp/err"
    check "step-6, the commit, is kept and the old run's step-8 is gone ($(ls "$tmp/ckk" | tr '\n' ' '))" \
      test "$(ls "$tmp/ckk" | tr '\n' ' ')" = "latest step-00000006 "
    check "latest names step-6 ($(cat "$tmp/ckk/latest"))" test "$(cat "$tmp/ckk/latest")" = step-00000006
    loud=()
    for a in "${ck_run[@]}"; do [ "$a" = --quiet ] || loud+=("$a"); done
    job 30 "${loud[@]}" --set train.checkpoint_dir="$tmp/ckk" --set train.lr=0.002 --set train.resume_allow=lr \
      --resume auto
    check "--resume auto continues (status $rc)" test "$rc" -eq 0
    check "--resume auto takes this run's step-6, not the old run's step-8" has "resumed from $tmp/ckk/step-00000006" "$tmp/out"
    check "no warning" bash -c "! grep -q warning '$tmp/err'"
    # A rollback that dies before its first checkpoint: `latest` already names the step it resumed.
    cp -r "$tmp/ck1" "$tmp/ckd"
    MESHTRAIN_FAULT=throw:0:4 job 30 "${ck_run[@]}" --set train.checkpoint_dir="$tmp/ckd" \
      --resume "$tmp/ckd/step-00000004"
    check "latest names step-4 after the cut rollback ($(cat "$tmp/ckd/latest"))" \
      test "$(cat "$tmp/ckd/latest")" = step-00000004
    job 30 "${loud[@]}" --set train.checkpoint_dir="$tmp/ckd" --resume auto
    check "then --resume auto takes step-4, not the superseded step-8" has "resumed from $tmp/ckd/step-00000004" "$tmp/out"
    # A fresh run into a directory holding another run's checkpoints is refused by name.
    job 30 "${ck_run[@]}" --set train.checkpoint_dir="$tmp/ck1" --set train.keep_checkpoints=2
    refused "a fresh run into ck1" "train.checkpoint_dir '$tmp/ck1' already holds checkpoints (step-00000002"
    check "ck1 is untouched" test "$(ls "$tmp/ck1" | tr '\n' ' ')" = \
      "latest step-00000002 step-00000004 step-00000006 step-00000008 "
    ;;
  lock)  # fault 3: one run per checkpoint_dir; the lock goes with its holder, however it ends
    slow=("$bin" train "${tiny[@]}" --set train.steps=30 --set train.checkpoint_every=1 --set train.keep_checkpoints=3
      --set train.checkpoint_dir="$tmp/ckc")
    MESHTRAIN_FAULT=slow_steps:0:0:100 "${slow[@]}" >/dev/null 2>"$tmp/first.err" &
    first=$!
    for _ in $(seq 100); do [ -e "$tmp/ckc/latest" ] && break; sleep 0.1; done
    job 10 "${slow[@]}" --resume auto
    refused "a second run into ckc" "is locked by pid $first on host $(hostname)"
    wait "$first"
    st=$?
    check "the first run completes (status $st; $(tr '\n' ' ' <"$tmp/first.err"))" test "$st" -eq 0
    check "its last three checkpoints remain ($(ls "$tmp/ckc" | tr '\n' ' '))" \
      test "$(ls "$tmp/ckc" | tr '\n' ' ')" = "latest step-00000028 step-00000029 step-00000030 "
    # A holder killed outright leaves its lock file behind, unheld: the next run takes it.
    MESHTRAIN_FAULT=slow_steps:0:0:100 "${slow[@]}" --set train.steps=60 --resume auto >/dev/null 2>&1 &
    killed=$!
    for _ in $(seq 100); do [ -e "$tmp/ckc/step-00000031" ] && break; sleep 0.1; done
    kill -9 "$killed"
    wait "$killed" 2>/dev/null
    check "the killed run's lock record is there" has "pid $killed" "$tmp/ckc/.lock"
    job 30 "${slow[@]}" --set train.steps=32 --set train.resume_allow=steps --resume auto
    check "a later run resumes past the dead holder's lock (status $rc)" test "$rc" -eq 0
    ;;
  nonregular)  # faults 9 and 11: devices, FIFOs and directories are refused at once, by name
    make_ck1
    mkfifo "$tmp/fifo"
    cp -r "$tmp/ck1" "$tmp/z"
    ln -sf /dev/zero "$tmp/z/latest"
    job 20 "$bin" train "${tiny[@]}" --set train.steps=8 --set train.checkpoint_dir="$tmp/z" --resume auto
    check "latest -> /dev/zero: passed over, the run resumes (status $rc)" test "$rc" -eq 0
    check "the warning names it" has "checkpoint pointer '$tmp/z/latest' is not a regular file (a character device)" "$tmp/err"
    for target in /dev/zero /dev/urandom "$tmp/fifo"; do
      cp -r "$tmp/ck1/step-00000008" "$tmp/x"
      ln -sf "$target" "$tmp/x/metadata.json"
      job 10 "$bin" export --checkpoint "$tmp/x" --out "$tmp/x.out"
      refused "export, metadata.json -> $target" "metadata.json '$tmp/x/metadata.json' is not a regular file"
      rm -rf "$tmp/x"
    done
    for target in /dev/zero "$tmp/fifo" "$tmp"; do
      job 10 "$bin" train --config "$target" --set train.steps=1
      refused "--config $target" "config file '$target' is not a regular file"
    done
    "$bin" train "${tiny[@]}" --set train.steps=2 --save "$tmp/gm" >/dev/null || fail=1
    job 10 "$bin" generate --model "$tmp/gm" --tokenizer /dev/zero --prompt x --max-new-tokens 2
    refused "generate --tokenizer /dev/zero" "tokenizer model '/dev/zero' is not a regular file (a character device)"
    job 10 "$bin" generate --model "$tmp/gm" --tokenizer "$tmp/data/tokenizer.model" --prompts "$tmp/fifo" \
      --max-new-tokens 2
    refused "generate --prompts FIFO" "--prompts file '$tmp/fifo' is not a regular file (a FIFO)"
    ln -sf /dev/zero "$tmp/gm/config.json"
    job 10 "$bin" eval --model "$tmp/gm" --data "$tmp/data/val.bin" --seq-len 16
    refused "eval, config.json -> /dev/zero" "config.json '$tmp/gm/config.json' is not a regular file"
    shard=$tmp/ck1/step-00000008/rank-00000.safetensors
    for what in dir fifo zero; do
      rm -rf "$shard"
      case $what in dir) mkdir "$shard" ;; fifo) mkfifo "$shard" ;; zero) ln -s /dev/zero "$shard" ;; esac
      job 10 "$bin" export --checkpoint "$tmp/ck1/step-00000008" --out "$tmp/e.out"
      refused "a shard that is a $what" "checkpoint file '$shard' is not a regular file"
      check "a shard that is a $what: no 2^64 - 1 byte count" bash -c "! grep -q 18446744073709551615 '$tmp/err'"
    done
    ;;
  config_tensors)  # fault 4: a config.json that disagrees with its safetensors is refused, naming the tensors
    "$bin" train "${tiny[@]}" --set train.steps=2 --save "$tmp/gm" >/dev/null || fail=1
    edit() {  # edit NAME PYTHON: a copy of gm with its config.json edited (`c`)
      cp -r "$tmp/gm" "$tmp/$1"
      /usr/bin/python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); $2; json.dump(c, open(p,'w'))" \
        "$tmp/$1/config.json"
    }
    edit one_layer 'c["num_hidden_layers"] = 1'
    edit tied 'c["tie_word_embeddings"] = True'
    for case in "one_layer|model.layers.1." "tied|lm_head.weight"; do
      m=${case%%|*}
      job 20 "$bin" eval --model "$tmp/$m" --data "$tmp/data/val.bin" --seq-len 16
      refused "eval of $m" "does not account for: ${case#*|}"
      job 20 "$bin" generate --model "$tmp/$m" --tokenizer "$tmp/data/tokenizer.model" --prompt x --max-new-tokens 2
      refused "generate of $m" "does not account for: ${case#*|}"
    done
    job 20 "$bin" train "${tiny[@]}" --set train.steps=1 --set model.n_layers=1 --init-from "$tmp/one_layer"
    refused "--init-from one_layer" "does not account for"
    edit three_layers 'c["num_hidden_layers"] = 3'
    job 20 "$bin" eval --model "$tmp/three_layers" --data "$tmp/data/val.bin" --seq-len 16
    refused "eval of three_layers" "tensor(s) its config.json's model needs: model.layers.2."
    job 20 "$bin" eval --model "$tmp/gm" --data "$tmp/data/val.bin" --seq-len 16
    check "the unedited model still evaluates (status $rc)" test "$rc" -eq 0
    ;;
  overflow)  # fault 5: sizes computed from a file are checked, never wrapped
    make_ck1
    for vocab in '(1 << 58) + 512' '1 << 40'; do  # the first wraps to 512 x d_model in 64 bits
      cp -r "$tmp/ck1/step-00000008" "$tmp/v"
      forge "$tmp/v" "
v = $vocab
m['config']['model.vocab_size'] = str(v)
for t in ('model.embed_tokens.weight', 'lm_head.weight'):
    m['tensors'][t]['shape'][0] = v
open(sys.argv[1] + '/elements', 'w').write(str(v * m['tensors'][t]['shape'][1]))"
      job 10 "$bin" export --checkpoint "$tmp/v" --out "$tmp/v.out"
      check "export of vocab $vocab: exit status 1 (status $rc)" test "$rc" -eq 1
      check "export of vocab $vocab: no model written" test ! -e "$tmp/v.out"
      check "export of vocab $vocab: no internal error" bash -c "! grep -q 'internal error' '$tmp/err'"
      elements=$(cat "$tmp/v/elements")
      [ "$vocab" = '1 << 40' ] || check "vocab $vocab: refused as not fitting in 64 bits" has "does not fit in 64 bits" "$tmp/err"
      rm -rf "$tmp/v"
    done
    check "2^40: the element count is not wrapped (names $elements)" has "of its $elements elements" "$tmp/err"
    ;;
  metadata)  # faults 10, 13, 14: fields a checksum cannot vouch for; resume_allow's names
    make_ck1
    cp -r "$tmp/ck1" "$tmp/nc"
    forge "$tmp/nc/step-00000008" "del m['config']"
    job 10 "$bin" export --checkpoint "$tmp/nc/step-00000008" --out "$tmp/nc.out"
    refused "export without config" "metadata.json has no \"config\" object"
    loud=()
    for a in "${ck_run[@]}"; do [ "$a" = --quiet ] || loud+=("$a"); done
    job 30 "${loud[@]}" --set train.checkpoint_dir="$tmp/nc" --resume auto
    check "--resume auto passes over it (status $rc)" test "$rc" -eq 0
    check "... with a warning naming it" has "checkpoint $tmp/nc/step-00000008 is not usable" "$tmp/err"
    check "... and resumes step-6" has "resumed from $tmp/nc/step-00000006" "$tmp/out"
    forged=("m['adam_steps'] = -3|adam_steps (-3) must lie in [0, step]"
      "m['step'] = 4|step (4) is not the step its folder is named after (8)"
      "m['step'] = -5|step (-5) must be at least 0"
      "del m['config']['train.lr']|the checkpoint's config has no train.lr")
    for case in "${forged[@]}"; do
      rm -rf "$tmp/f" && cp -r "$tmp/ck1" "$tmp/f"
      forge "$tmp/f/step-00000008" "${case%%|*}"
      job 20 "${ck_run[@]}" --set train.checkpoint_dir="$tmp/f" --resume "$tmp/f/step-00000008"
      refused "--resume of a checkpoint with ${case%%|*}" "$tmp/f/step-00000008"
      check "... naming the field: '${case#*|}'" has "${case#*|}" "$tmp/err"
    done
    # resume_allow takes the short name the refusal's key has (model.max_seq_len as max_seq_len).
    job 20 "${ck_run[@]}" --set model.max_seq_len=32 --set train.checkpoint_dir="$tmp/ck1" --resume auto
    refused "a changed model.max_seq_len" "model.max_seq_len is 16 in the checkpoint but 32"
    for name in max_seq_len model.max_seq_len; do
      rm -rf "$tmp/m" && cp -r "$tmp/ck1" "$tmp/m"
      job 30 "${ck_run[@]}" --set model.max_seq_len=32 --set train.checkpoint_dir="$tmp/m" \
        --set train.resume_allow=$name --resume auto
      check "resume_allow = $name is accepted (status $rc)" test "$rc" -eq 0
    done
    job 10 "${ck_run[@]}" --set train.checkpoint_dir="$tmp/m" --set train.resume_allow=threads --resume auto
    refused "resume_allow = threads" "train.resume_allow names 'threads', which is not a model, optimizer or data key"
    ;;
  *)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
exit $fail
