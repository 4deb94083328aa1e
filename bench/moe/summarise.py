#!/usr/bin/env python3
"""Helper of bench/moe/moe_bench.sh: the runs' metrics and the ledger of one ep 2
step into the tables of docs/BENCHMARKS.md ("Mixture of experts and expert
parallelism"). Standard library only.

  summarise.py data-dir CONFIG            the config's data.dir
  summarise.py run-line METRICS SKIP SECS one line about a finished run
  summarise.py report OUT CONFIG SKIP     the tables
"""
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from summarise_common import load_steps, main, read_config, run_name, timed_steps  # noqa: E402


def median_step(path, skip):
    return statistics.median(s["step_time_s"] for s in timed_steps(load_steps(path), skip))


def run_line(path, skip, _secs):
    steps = load_steps(path)
    print(f"  {run_name(path)}: median step {median_step(path, skip):.3f} s over {len(timed_steps(steps, skip))} steps")


def best(out, kind, skip):
    runs = sorted(glob.glob(os.path.join(out, f"{kind}_r*.jsonl")))
    return min(median_step(p, skip) for p in runs)


LINE = re.compile(
    r"^rank (\d+) \| ep \| all_to_allv +\| .* \| (\d+) elements? \| layer (\d+) moe (forward|backward): rows (to|from) experts$"
)


KERNEL = re.compile(r"^\s+(\w+)\s+([0-9.]+) s\s+[0-9.]+%$")


def kernel_seconds(log):
    """The forward + backward kernel time of a run (--profile's table, all steps)."""
    return sum(float(m[2]) for m in map(KERNEL.match, open(log)) if m)


def best_kernels(out, kind):
    return min(kernel_seconds(p) for p in sorted(glob.glob(os.path.join(out, f"{kind}_r*.log"))))


def ledger_table(out, config):
    C = read_config(config)["model"]["d_model"]
    line = [j for j in map(json.loads, open(os.path.join(out, "ledger.jsonl"))) if "moe_tokens_per_expert" in j][0]
    tpe = line["moe_tokens_per_expert"]
    seen = {}
    for text in open(os.path.join(out, "explain.txt")):
        m = LINE.match(text.strip())
        if m:
            key = (int(m[1]), m[3], m[4], m[5])
            seen[key] = seen.get(key, 0) + int(m[2])
    ep, E = 2, len(next(iter(tpe.values())))
    tokens = read_config(config)["train"]["batch_size"] // ep * read_config(config)["train"]["seq_len"]
    k = 2
    print("\n(c) all-to-all-v elements per call (ep 2, step 0): ledger against the routing counts")
    print("| rank | layer | direction | exchange | ledger elements | from the routing | equal |")
    print("|---:|---:|---|---|---:|---:|---|")
    bad = 0
    for (rank, layer, way, to), n in sorted(seen.items(), key=lambda kv: (int(kv[0][1]), kv[0][0], kv[0][2], kv[0][3])):
        local = range(rank * E // ep, (rank + 1) * E // ep)
        want = tokens * k * C if to == "to" else sum(tpe[layer][e] for e in local) * C
        bad += n != want
        print(f"| {rank} | {layer} | {way} | rows {to} experts | {n} | {want} | {'yes' if n == want else 'NO'} |")
    print(f"{len(seen)} calls, {bad} differ; bytes = elements × 4")


def report(out, config, skip):
    rest, dense, moe, ep2 = (best(out, k, skip) for k in ("rest", "dense", "moe", "ep2"))
    batch = read_config(config)["train"]
    tokens = batch["batch_size"] * batch["seq_len"]
    print("\n(a) MoE FFN (8 experts, top 2, 688 each) against a dense SwiGLU of 1376 (same active parameters)")
    print("| run | median step (s) | tokens/s | FFN s/step (step − rest) | FFN tokens/s |")
    print("|---|---:|---:|---:|---:|")
    print(f"| rest (ffn_hidden 8) | {rest:.3f} | {tokens / rest:.0f} | | |")
    for name, t in (("dense", dense), ("moe", moe)):
        print(f"| {name} | {t:.3f} | {tokens / t:.0f} | {t - rest:.3f} | {tokens / (t - rest):.0f} |")
    print(f"MoE / dense, FFN layer tokens/s from the steps: {(dense - rest) / (moe - rest):.3f}; "
          f"whole step: {dense / moe:.3f}")
    k_rest, k_dense, k_moe = (best_kernels(out, k) for k in ("rest", "dense", "moe"))
    print(f"forward + backward kernels only (--profile, all steps; no optimizer): rest {k_rest:.2f} s, "
          f"dense {k_dense:.2f} s, moe {k_moe:.2f} s")
    print(f"MoE / dense, FFN layer tokens/s from the kernels: {(k_dense - k_rest) / (k_moe - k_rest):.3f} "
          "(target >= 0.8)")
    print("\n(b) ep 2 (2 processes x 1 thread) against 1 process x 2 threads, MoE model")
    print(f"| 1 process x 2 threads | {moe:.3f} s | {tokens / moe:.0f} tokens/s |")
    print(f"| ep 2 | {ep2:.3f} s | {tokens / ep2:.0f} tokens/s |")
    print(f"ep 2 / one process tokens/s: {moe / ep2:.3f}")
    ledger_table(out, config)


if __name__ == "__main__":
    main(run_line, report)
