#!/usr/bin/env python3
"""Helper of scripts/bench_cp.sh: reads the runs' metrics (one JSON object per step,
written by rank 0) and prints the tables. Standard library only (Python >= 3.11 for
tomllib).

  summarise.py data-dir CONFIG            the config's data.dir
  summarise.py run-line METRICS SKIP SECS one line about a finished run
  summarise.py report OUT CONFIG SKIP     the tables

Run names: mem_T{T}_cp{P} (part 1), speed_T{T}_cp{P}_{ring|allgather}_r{round} (part 2).

The activation count mirrors src/model/llama.cpp at pp = tp = 1 (one Slot, the
Buffers): under context parallelism a rank's model holds N = B·T/cp tokens of each
sequence and every activation buffer is sized by N (lse [B, H, T/cp] too), so the
count, and the measurement, should scale as 1/cp exactly.
"""
import glob
import os
import re
import statistics
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from summarise_common import MiB, load_steps, main, read_config, run_name, timed_steps  # noqa: E402







def summary(path, skip):
    steps = load_steps(path)
    timed = timed_steps(steps, skip)
    peak = lambda kind: max(s["mem_peak_by_kind"][kind] for s in steps)
    return {
        "name": run_name(path),
        "steps": steps,
        "median_s": statistics.median(s["step_time_s"] for s in timed),
        "min_s": min(s["step_time_s"] for s in timed),
        "activation": peak("activation"),
        "comm": peak("comm"),
        "scratch": peak("scratch"),
        "total": max(s["mem_peak_bytes"] for s in steps),
    }


def run_line(path, skip, secs):
    s = summary(path, skip)
    times = " ".join(f"{x['step_time_s']:.2f}" for x in s["steps"])
    print(f"   steps (s): {times} | median {s['median_s']:.3f} s | activation {s['activation'] / MiB:.2f} MiB,"
          f" comm {s['comm'] / MiB:.2f} MiB | {secs} s wall")


def activation_elements(model, N, B):
    """Every MemKind::activation buffer of one rank holding N tokens (B sequences), recompute off."""
    C, F, H, L, V = model["d_model"], model["ffn_hidden"], model["n_heads"], model["n_layers"], model["vocab_size"]
    KV = model.get("n_kv_heads", H)
    D = C // H
    T = N // B
    layer = (N * C + N + N * (H + 2 * KV) * D + N * H * D + B * H * T  # ln1, rstd1, qkv, att, lse
             + N * C + N * C + N + 2 * N * F + N * F)  # mid, ln2, rstd2, gu, h
    terms = {
        "layers": L * layer,
        "residual stream": (L + 1) * N * C,
        "final norm": N * C + N,
        "logits": N * V,
        "loss stats": 2 * N,
        "backward scratch": 2 * N * C + N * max(C, F, H * D) + N * (H + 2 * KV) * D + 2 * N * F,
    }
    return terms


def report(out, config, skip):
    model = read_config(config)["model"]
    # -- 1. memory ---------------------------------------------------------------------------
    mem = {}
    for p in glob.glob(os.path.join(out, "mem_T*_cp*.jsonl")):
        m = re.search(r"mem_T(\d+)_cp(\d+)\.jsonl$", p)
        mem[(int(m[1]), int(m[2]))] = summary(p, 0)
    if mem:
        print()
        print("== 1. Activation memory per rank (rank 0's peak, max over the steps; ring attention), batch 1")
        print(f"{'T':>5} {'cp':>3} {'tokens/rank':>11} {'measured MiB':>13} {'count MiB':>10} {'÷ cp 1':>7}"
              f" {'expected':>8} {'logits MiB':>10} {'comm MiB':>9} {'total MiB':>10}")
        for (T, P), s in sorted(mem.items()):
            N = T // P
            terms = activation_elements(model, N, 1)
            count = 4 * sum(terms.values())
            base = mem.get((T, 1))
            ratio = f"{s['activation'] / base['activation']:.4f}" if base else "-"
            print(f"{T:>5} {P:>3} {N:>11} {s['activation'] / MiB:>13.2f} {count / MiB:>10.2f} {ratio:>7}"
                  f" {1 / P:>8.4f} {4 * terms['logits'] / MiB:>10.2f} {s['comm'] / MiB:>9.2f} {s['total'] / MiB:>10.2f}")
        T0 = max(T for T, _ in mem)
        terms = activation_elements(model, T0, 1)
        tot = sum(terms.values())
        print(f"shares of the count at T = {T0}, cp = 1: "
              + ", ".join(f"{k} {100 * v / tot:.1f}%" for k, v in terms.items()))
    # -- 2. speed ----------------------------------------------------------------------------
    speed = {}
    for p in sorted(glob.glob(os.path.join(out, "speed_*.jsonl"))):
        m = re.search(r"speed_T(\d+)_cp(\d+)_(ring|allgather)_r(\d+)\.jsonl$", p)
        speed.setdefault((int(m[1]), int(m[2])), {}).setdefault(m[3], []).append((int(m[4]), summary(p, skip)))
    if not speed:
        return
    print()
    print(f"== 2. Step time, ring vs all-gather attention (1 thread per rank; median of steps {skip}.. of each run)")
    print(f"{'T':>5} {'cp':>3} {'ring medians s':>22} {'allgather medians s':>22} {'best ring':>9} {'best ag':>8}"
          f" {'ring/ag':>8} {'per round':>16} {'comm MiB ring/ag':>17}")
    for (T, P), d in sorted(speed.items()):
        ring, ag = sorted(d.get("ring", [])), sorted(d.get("allgather", []))
        if not ring or not ag:
            continue
        br, ba = min(s["median_s"] for _, s in ring), min(s["median_s"] for _, s in ag)
        rounds = ", ".join(f"{a['median_s'] / b['median_s']:.3f}" for (_, a), (_, b) in zip(ring, ag))
        meds = lambda runs: ", ".join(f"{s['median_s']:.3f}" for _, s in runs)
        print(f"{T:>5} {P:>3} {meds(ring):>22} {meds(ag):>22} {br:>9.3f} {ba:>8.3f} {br / ba:>8.3f}"
              f" {rounds:>16} {ring[0][1]['comm'] / MiB:>8.2f}/{ag[0][1]['comm'] / MiB:.2f}")


if __name__ == "__main__":
    main(run_line, report)
