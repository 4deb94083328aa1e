#!/usr/bin/env bash
# The operator-level faults of the hardening work, each a case of the real
# binary: the job must end as stated, and what it leaves on disk must be whole.
#   hardening.sh MESHTRAIN CASE
# CASE: enospc_save | nonfinite | bad_alloc | bad_alloc_ulimit | save_dir | fault_grammar | single_banner |
#       init_from | io_timeout | sizes
set -u
bin=$1
case_name=$2
source "$(dirname "$0")/harness.sh"
eval_loss() { "$bin" eval --model "$1" --data "$tmp/data/val.bin" --seq-len 16 --threads 1 2>&1; }
one=("$bin" train "${tiny[@]}" --set train.steps=2)

case $case_name in
  enospc_save)  # the disk fills while the second save writes its weights
    "${one[@]}" --save "$tmp/m" || fail=1
    before=$(eval_loss "$tmp/m")
    MESHTRAIN_FAULT=enospc:0:0:20000 job 30 "${one[@]}" --set model.n_layers=3 --save "$tmp/m"
    check "exit status 1 (status $rc)" test "$rc" -eq 1
    check "stderr names ENOSPC" has "No space left on device" "$tmp/err"
    after=$(eval_loss "$tmp/m")
    check "the first model still loads, unchanged ('$before' / '$after')" test "$before" = "$after"
    check "no temporary left beside it ($(ls "$tmp" | tr '\n' ' '))" test -z "$(ls "$tmp" | grep -F 'm.')"
    check "no temporary left inside it" test "$(ls "$tmp/m" | tr '\n' ' ')" = "config.json model.safetensors "
    job 30 "${one[@]}" --set model.n_layers=3 --save "$tmp/m"
    check "a later save replaces it (status $rc)" test "$rc" -eq 0
    check "the three-layer model is there" grep -q '"num_hidden_layers": 3' "$tmp/m/config.json"
    ;;
  nonfinite)  # lr 1e30: the weights blow up and the validation loss is NaN
    "${one[@]}" --save "$tmp/x" || fail=1
    cp "$tmp/x/model.safetensors" "$tmp/before.safetensors"
    job 60 "$bin" train "${tiny[@]}" --set train.lr=1e30 --set train.steps=4 --set train.eval_every=4 \
      --save "$tmp/x"
    check "exit status non-zero (status $rc)" test "$rc" -ne 0
    check "stderr says the run diverged" has "the run diverged" "$tmp/err"
    check "the saved model was not overwritten" cmp -s "$tmp/x/model.safetensors" "$tmp/before.safetensors"
    # A model whose weights are NaN (written here, since the trainer refuses to save one): eval refuses it.
    cp -r "$tmp/x" "$tmp/y"
    nan_weights "$tmp/y"
    out=$(eval_loss "$tmp/y")
    erc=$?
    check "eval of a non-finite model exits non-zero ($erc: $out)" test "$erc" -ne 0
    ;;
  bad_alloc)  # std::bad_alloc on rank 1 of 2: both end within seconds, rank 1's message once
    MESHTRAIN_FAULT=bad_alloc:1:1 job 20 "${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" --dp 2 \
      --set train.microbatch_size=2 --set train.steps=4 --set parallel.timeout_s=60
    check "exit status non-zero (status $rc)" test "$rc" -ne 0
    check "rank 1's message printed once" test "$(count "meshtrain: error (rank 1 of 2): out of memory (std::bad_alloc" "$tmp/err")" -eq 1
    check "no watchdog" test "$(count watchdog "$tmp/err")" -eq 0
    ;;
  bad_alloc_ulimit)  # the issue's reproducer: rank 1 has too little address space for its model
    big=(train "${tiny[@]}" --dp 2 --set train.microbatch_size=2 --set train.steps=2 --set model.d_model=1024
      --set model.n_layers=6 --set model.n_heads=8 --set model.n_kv_heads=8 --set model.ffn_hidden=2816
      --set parallel.timeout_s=60)
    job 30 "${mpi[@]}" -np 1 "$bin" "${big[@]}" : -np 1 bash -c "ulimit -v 1200000; exec $bin ${big[*]}"
    check "exit status non-zero (status $rc)" test "$rc" -ne 0
    check "rank 1's message printed once" test "$(count "meshtrain: error (rank 1 of 2): out of memory" "$tmp/err")" -eq 1
    check "no watchdog" test "$(count watchdog "$tmp/err")" -eq 0
    ;;
  save_dir)  # a --save that cannot be written is refused before the first step, on one or two ranks
    touch "$tmp/file"
    for np in 1 2; do
      job 20 "${mpi[@]}" -np $np "$bin" train "${tiny[@]}" --dp $np --set train.microbatch_size=2 \
        --metrics "$tmp/metrics.jsonl" --save "$tmp/file/m"
      check "exit status 1 (status $rc)" test "$rc" -eq 1
      check "one message naming the path" test "$(count "$tmp/file" "$tmp/err")" -eq 1
      check "no step was run" test ! -s "$tmp/metrics.jsonl"
      rm -f "$tmp/metrics.jsonl"
    done
    job 20 "${one[@]}" --save "$tmp/file"
    check "a file as --save is refused (status $rc)" has "exists and is not a directory" "$tmp/err"
    job 20 "${one[@]}" --save /proc/meshtrain-model
    check "an unwritable place is refused (status $rc)" test "$rc" -eq 1
    ;;
  fault_grammar)  # a malformed MESHTRAIN_FAULT is refused at start-up with the grammar
    for bad in "explode:0:1" "throw:0:1junk" "throw:0" "skip_reduce:0:0:attn o"; do
      MESHTRAIN_FAULT=$bad job 20 "${one[@]}"
      check "'$bad' refused (status $rc)" test "$rc" -eq 1
      check "'$bad' message shows the grammar" has "KIND:RANK:STEP[:ARG]" "$tmp/err"
    done
    ;;
  single_banner)  # one process: our message alone, no MPI_ABORT banner
    MESHTRAIN_FAULT=throw:0:1 job 20 "${one[@]}"
    check "exit status 1 (status $rc)" test "$rc" -eq 1
    check "one line of stderr ($(wc -l <"$tmp/err"))" test "$(wc -l <"$tmp/err")" -eq 1
    check "it is ours" has "meshtrain: error: injected fault (MESHTRAIN_FAULT) at step 1" "$tmp/err"
    check "no MPI_ABORT banner" test "$(cat "$tmp/out" "$tmp/err" | grep -c MPI_ABORT)" -eq 0
    ;;
  init_from)  # a saved rope_theta of 500000 must not be silently replaced by the run's 10000
    "${one[@]}" --set model.rope_theta=500000 --save "$tmp/m" || fail=1
    job 30 "${one[@]}" --init-from "$tmp/m" --save "$tmp/m2"
    check "a different rope_theta is refused (status $rc)" test "$rc" -eq 1
    check "naming the field and both values" has "model.rope_theta is 500000 in $tmp/m/config.json but 10000" "$tmp/err"
    check "nothing saved" test ! -e "$tmp/m2"
    job 30 "${one[@]}" --init-from "$tmp/m" --set train.init_allow=rope_theta,max_seq_len --save "$tmp/m2"
    check "listed in train.init_allow it is accepted (status $rc)" test "$rc" -eq 0
    check "with a notice" has "meshtrain: notice: --init-from: model.rope_theta is 500000" "$tmp/err"
    job 30 "${one[@]}" --init-from "$tmp/m" --set train.init_allow=d_model
    check "a field that shapes a tensor cannot be allowed (status $rc)" has "train.init_allow names 'd_model'" "$tmp/err"
    # transformers 5 spelling: rope_theta inside rope_parameters
    /usr/bin/python3 - "$tmp/m/config.json" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["rope_parameters"] = {"rope_theta": c.pop("rope_theta"), "rope_type": "default"}
json.dump(c, open(p, "w"))
PY
    job 30 "${one[@]}" --init-from "$tmp/m"
    check "rope_parameters.rope_theta is read (status $rc)" has "model.rope_theta is 500000" "$tmp/err"
    job 30 "${one[@]}" --set model.rope_theta=500000 --init-from "$tmp/m"
    check "and matches when the run agrees (status $rc)" test "$rc" -eq 0
    ;;
  io_timeout)  # rank 0's save takes ~4 s; the collective watchdog is 1 s
    # Not quiet: the memory report after the save is a collective, the one the issue's run died in.
    slow=(train)
    for a in "${tiny[@]}"; do [ "$a" = --quiet ] || slow+=("$a"); done
    slow+=(--dp 2 --set train.microbatch_size=2 --set train.steps=2 --set parallel.timeout_s=1)
    MESHTRAIN_FAULT=slow_io:0:1:2 job 60 "${mpi[@]}" -np 2 "$bin" "${slow[@]}" --save "$tmp/m"
    check "a slow save within parallel.io_timeout_s completes (status $rc)" test "$rc" -eq 0
    check "no watchdog" test "$(count watchdog "$tmp/err")" -eq 0
    check "the model was saved" test -s "$tmp/m/model.safetensors"
    MESHTRAIN_FAULT=slow_io:0:1:2 job 60 "${mpi[@]}" -np 2 "$bin" "${slow[@]}" --save "$tmp/m3" \
      --set parallel.io_timeout_s=1
    check "beyond parallel.io_timeout_s the watchdog ends the job (status $rc)" test "$rc" -ne 0
    check "naming the wait" has "wait for the model's save (parallel.io_timeout_s)" "$tmp/err"
    ;;
  sizes)  # sizes that cannot fit (or overflow 64 bits) are refused before allocating, naming the numbers
    job 20 "${one[@]}" --set model.n_layers=1000000000
    check "10^9 layers refused (status $rc)" test "$rc" -eq 1
    check "naming estimate, available memory and the largest part" \
      grep -qE "needs about .* GiB .* only .* GiB is available .* the largest part is" "$tmp/err"
    job 20 "${one[@]}" --set model.d_model=1000000000000 --set model.n_heads=1 --set model.n_kv_heads=1
    check "d_model 10^12 refused (status $rc)" test "$rc" -eq 1
    check "as an overflow of 64 bits" has "does not fit in 64 bits" "$tmp/err"
    "${one[@]}" --save "$tmp/m" || fail=1
    for edit in "hidden_size=10**12;num_attention_heads=1;num_key_value_heads=1" "max_position_embeddings=10**12" \
      "num_hidden_layers=10**9"; do
      cp -r "$tmp/m" "$tmp/big"
      /usr/bin/python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); exec(';'.join('c[\"%s\"]=%s' % tuple(kv.split('=')) for kv in sys.argv[2].split(';'))); json.dump(c, open(p,'w'))" \
        "$tmp/big/config.json" "$edit"
      job 20 "$bin" eval --model "$tmp/big" --data "$tmp/data/val.bin" --threads 1
      check "config.json with $edit refused (status $rc)" test "$rc" -eq 1
      check "with the numbers" grep -qE "does not fit in 64 bits|needs about" "$tmp/err"
      rm -rf "$tmp/big"
    done
    ;;
  *)
    echo "hardening.sh: unknown case '$case_name'" >&2
    exit 2
    ;;
esac
[ "$fail" -eq 0 ] && echo "PASS $case_name" || echo "FAILED $case_name"
exit "$fail"
