#!/usr/bin/env bash
# Issue 24's operator faults outside checkpoints, each a case of the real binary:
# the job must end as stated, naming the value and the rule, before any work
# it would lose.
#   hardening_ops.sh MESHTRAIN CASE
# CASE: output_paths | generate_nonfinite | val_vocab | threads | watchdog_names | signal_startup |
#       fault_fires | cli_details
set -u
bin=$1
case_name=$2
source "$(dirname "$0")/harness.sh"
one=("$bin" train "${tiny[@]}" --set train.steps=2)
two=("${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" --dp 2 --set train.microbatch_size=2 --set train.steps=2)
# write_tokens PATH DTYPE VOCAB IDS...: a token file whose header says VOCAB (docs/FORMATS.md "Token file").
write_tokens() {
  /usr/bin/python3 - "$@" <<'PY'
import struct, sys
path, dtype, vocab, ids = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(x) for x in sys.argv[4:]]
body = struct.pack("<%d%s" % (len(ids), "H" if dtype == 1 else "I"), *ids)
open(path, "wb").write(b"MTTOKENS" + struct.pack("<IIIIQ", 1, dtype, vocab, 0, len(ids)) + body)
PY
}

case $case_name in
  output_paths)  # fault 2: an output that cannot be written is refused before the first step
    for np in 1 2; do
      if [ $np -eq 1 ]; then run=("${one[@]}"); else run=("${two[@]}"); fi
      job 30 "${run[@]}" --set train.steps=30 --trace "$tmp/nonexistent/t.json" --metrics "$tmp/m.jsonl" \
        --save "$tmp/saved"
      check "$np rank(s): a bad --trace is refused (status $rc)" test "$rc" -eq 1
      check "$np rank(s): one message naming --trace and the path" \
        test "$(count "--trace '$tmp/nonexistent/t.json' cannot be written" "$tmp/err")" -eq 1
      check "$np rank(s): no step was run" test ! -s "$tmp/m.jsonl"
      rm -f "$tmp/m.jsonl"
    done
    mkdir "$tmp/adir"
    job 30 "${one[@]}" --trace "$tmp/adir"
    check "a directory as --trace is refused" has "--trace '$tmp/adir': it is a directory" "$tmp/err"
    job 30 "${one[@]}" --metrics "$tmp/nonexistent/m.jsonl"
    check "a bad --metrics is refused (status $rc)" has "--metrics '$tmp/nonexistent/m.jsonl' cannot be written" \
      "$tmp/err"
    job 30 "$bin" calibrate --out "$tmp/nonexistent/machine.json" --seconds 5
    check "calibrate: a bad --out is refused before measuring (status $rc, $ms ms)" \
      has "--out '$tmp/nonexistent/machine.json' cannot be written" "$tmp/err"
    check "within 5 s" test "$ms" -lt 5000
    touch "$tmp/file"
    job 30 "$bin" prepare --text "$tmp/corpus" --out "$tmp/file/data" --vocab-size 300
    check "prepare: an --out that cannot hold files is refused (status $rc)" test "$rc" -eq 1
    job 30 "${one[@]}" --trace "$tmp/t.json" --save "$tmp/saved"
    check "a good --trace is written (status $rc)" test "$rc" -eq 0 -a -s "$tmp/t.json" -a -s "$tmp/saved/config.json"
    check "and no probe is left beside it" test -z "$(ls "$tmp" | grep -F 't.json.tmp')"
    ;;
  generate_nonfinite)  # fault 6: a model whose logits are NaN ends generation with an error
    "${one[@]}" --save "$tmp/x" || fail=1
    nan_weights "$tmp/x"
    gen=(generate --model "$tmp/x" --tokenizer "$tmp/data/tokenizer.model" --prompt "the quick" --threads 1
      --max-new-tokens 3)
    job 30 "$bin" "${gen[@]}" --output jsonl --logprobs
    check "one process: exit status 1 (status $rc)" test "$rc" -eq 1
    check "naming the non-finite logits" has "are not finite" "$tmp/err"
    check "no generation printed" test ! -s "$tmp/out"
    job 30 "${mpi[@]}" -np 2 "$bin" "${gen[@]}" --tp 2
    check "tp 2: exit status non-zero (status $rc)" test "$rc" -ne 0
    check "tp 2: naming the non-finite logits" has "are not finite" "$tmp/err"
    ;;
  val_vocab)  # fault 7: val.bin is checked against model.vocab_size at start-up, as train.bin is
    write_tokens "$tmp/data/val.bin" 1 1000 $(seq 1 40) 700
    job 30 "${two[@]}" --set train.eval_every=1 --metrics "$tmp/m.jsonl"
    check "dp 2: a val.bin for 1000 tokens is refused (status $rc)" test "$rc" -eq 1
    check "once, naming both vocabularies" \
      test "$(count "val.bin was written for a 1000-token vocabulary but model.vocab_size is 300" "$tmp/err")" -eq 1
    check "before the first step" test ! -s "$tmp/m.jsonl"
    write_tokens "$tmp/data/val.bin" 2 2147483647 $(seq 1 40) 2147483646
    job 30 "${one[@]}" --set train.eval_every=1
    check "a uint32 val.bin for 2^31 - 1 tokens is refused (status $rc)" \
      has "val.bin was written for a 2147483647-token vocabulary" "$tmp/err"
    job 30 "${one[@]}" --set train.eval_every=0
    check "a run that never evaluates does not read it (status $rc)" test "$rc" -eq 0
    ;;
  threads)  # fault 8: thread counts above 4 x the cores, or negative, are refused naming the value
    bound=$((4 * $(getconf _NPROCESSORS_ONLN)))
    "${one[@]}" --save "$tmp/m" || fail=1
    job 30 "${one[@]}" --set train.threads=65536
    check "train.threads = 65536 refused (status $rc)" has "train.threads (65536) must be between 0" "$tmp/err"
    job 30 "${one[@]}" --set train.threads=$((bound + 1))
    check "train.threads = $((bound + 1)) refused, naming the bound $bound" \
      has "train.threads ($((bound + 1))) must be between 0 (the default: the cores over the ranks on this machine) and $bound" "$tmp/err"
    job 30 "${one[@]}" --set train.threads=$bound
    check "train.threads = $bound runs (status $rc)" test "$rc" -eq 0
    for t in 100000 -1; do
      job 30 "$bin" eval --model "$tmp/m" --data "$tmp/data/val.bin" --threads $t
      check "eval --threads $t refused (status $rc)" has "--threads ($t) must be between 0" "$tmp/err"
      job 30 "$bin" generate --model "$tmp/m" --tokenizer "$tmp/data/tokenizer.model" --prompt hi --threads $t
      check "generate --threads $t refused (status $rc)" has "--threads ($t) must be between 0" "$tmp/err"
      check "before printing anything" test ! -s "$tmp/out"
    done
    ;;
  watchdog_names)  # fault 12: the watchdog names the rank that never arrived
    MESHTRAIN_FAULT=stall:2:2 job 40 "${mpi[@]}" -np 4 "$bin" train "${tiny[@]}" --dp 4 \
      --set train.microbatch_size=2 --set train.steps=4 --set parallel.timeout_s=2
    check "exit status non-zero (status $rc)" test "$rc" -ne 0
    check "a watchdog line names rank 2 as never arrived" grep -qE \
      "watchdog \(rank [013]\): all_reduce on axis ([a-z+]+) .*never arrived: world rank 2 \(\1 rank 2\); waiting in it: world rank 0 \(\1 rank 0\), world rank 1 \(\1 rank 1\), world rank 3 \(\1 rank 3\)" \
      "$tmp/err"
    check "and no other rank as never arrived" test "$(grep -c "never arrived: world rank [013]" "$tmp/err")" -eq 0
    ;;
  signal_startup)  # fault 15: a SIGTERM during start-up stops a run with checkpoints cleanly
    # Rank 1 starts 4 s late, so rank 0 is still starting up (MPI, the start-up checks) when the signal comes.
    flags=(train "${tiny[@]}" --dp 2 --set train.microbatch_size=2 --set train.steps=6
      --set train.checkpoint_dir="$tmp/ck")
    "${mpi[@]}" -np 1 bash -c "echo \$\$ >$tmp/pid; exec $bin ${flags[*]}" : \
      -np 1 bash -c "sleep 4; exec $bin ${flags[*]}" >"$tmp/out" 2>"$tmp/err" &
    job_pid=$!
    for _ in $(seq 100); do  # until rank 0 runs meshtrain (bash has exec'd it)
      [ -s "$tmp/pid" ] && [ "$(cat /proc/"$(cat "$tmp/pid")"/comm 2>/dev/null)" = meshtrain ] && break
      sleep 0.02
    done
    sleep 0.3
    kill -TERM "$(cat "$tmp/pid")"
    wait $job_pid
    rc=$?
    cat "$tmp/err"
    check "exit status 0 (status $rc)" test "$rc" -eq 0
    check "rank 0 reports the stop" has "SIGTERM received by 1 of 2 rank(s): stopped after 1 of 6 steps" "$tmp/err"
    check "the step-1 checkpoint is there" test -s "$tmp/ck/step-00000001/metadata.json"
    # Without checkpoints the signal keeps its default effect: the process ends by SIGTERM.
    "$bin" train "${tiny[@]}" --set train.steps=2000 >/dev/null 2>&1 &
    p=$!
    sleep 0.5
    kill -TERM $p
    wait $p
    rc=$?
    check "without checkpoint_dir SIGTERM ends the run (status $rc, want 143)" test "$rc" -eq 143
    ;;
  fault_fires)  # fault 16: a MESHTRAIN_FAULT that cannot fire is refused at start-up
    MESHTRAIN_FAULT=throw:5:1 job 30 "${two[@]}"
    check "throw:5:1 on 2 ranks refused (status $rc)" test "$rc" -eq 1
    check "once, naming the rank and the world" \
      test "$(count "MESHTRAIN_FAULT names rank 5 but the world has 2 rank(s)" "$tmp/err")" -eq 1
    MESHTRAIN_FAULT=kill_save:0:1:shard_written job 30 "${one[@]}"
    check "kill_save without checkpoint_dir refused (status $rc)" has "set train.checkpoint_dir" "$tmp/err"
    MESHTRAIN_FAULT=throw:1:1 job 30 "${two[@]}"
    check "throw:1:1 on 2 ranks fires (status $rc)" has "injected fault (MESHTRAIN_FAULT) at step 1" "$tmp/err"
    ;;
  cli_details)  # item 17 (and 18's --help)
    "${one[@]}" --save "$tmp/m" || fail=1
    pp=(--pp 2 --set model.n_layers=2 --set train.microbatch_size=2)
    job 20 "${one[@]}" "${pp[@]}" --set parallel.stage_layers=99999999999999999999,1
    check "stage_layers overflow refused naming the entry" \
      has "'99999999999999999999' is not a layer count between 1 and model.n_layers (2)" "$tmp/err"
    job 20 "${one[@]}" "${pp[@]}" --set parallel.stage_layers=1,1,
    check "stage_layers trailing comma refused (status $rc)" has "'' is not a layer count" "$tmp/err"
    job 20 "$bin" prepare --text "$tmp/corpus" --out "$tmp/d2" --vocab-size 2147483648
    check "prepare --vocab-size 2147483648 named as given" has "--vocab-size (2147483648) must be between" "$tmp/err"
    ev=(eval --model "$tmp/m" --data "$tmp/data/val.bin" --threads 1)
    job 20 "$bin" "${ev[@]}" --seq-len -4
    check "eval --seq-len -4 refused" has "--seq-len (-4) must be positive" "$tmp/err"
    job 20 "$bin" "${ev[@]}" --max-windows -1
    check "eval --max-windows -1 refused" has "--max-windows (-1) must not be negative" "$tmp/err"
    job 20 "$bin" "${ev[@]}" --cp 3
    check "eval --cp 3 names --seq-len and --cp" has "--seq-len (16) must be divisible by 2 x --cp (3) = 6" "$tmp/err"
    gen=(generate --model "$tmp/m" --tokenizer "$tmp/data/tokenizer.model" --threads 1)
    job 20 "$bin" "${gen[@]}" --prompt "the quick" --max-new-tokens -5
    check "--max-new-tokens -5 refused (status $rc)" has "--max-new-tokens (-5) must not be negative" "$tmp/err"
    check "without printing the prompt" test ! -s "$tmp/out"
    printf 'the quick\r\nbrown fox\r\n' >"$tmp/crlf.txt"
    job 20 "$bin" "${gen[@]}" --prompts "$tmp/crlf.txt" --max-new-tokens 1 --output jsonl
    check "a CRLF prompts file: prompts without \\r" /usr/bin/python3 -c "
import json, sys
p = [json.loads(l)['prompt'] for l in open(sys.argv[1])]
sys.exit(p != ['the quick', 'brown fox'])" "$tmp/out"
    "$bin" train --help >"$tmp/help" 2>&1
    check "train --help: parallel.ep works with any ZeRO stage" grep -q "n_experts; any ZeRO stage (0-3)" "$tmp/help"
    ;;
  *)
    echo "hardening_ops.sh: unknown case '$case_name'" >&2
    exit 2
    ;;
esac
[ "$fail" -eq 0 ] && echo "PASS $case_name" || echo "FAILED $case_name"
exit "$fail"
