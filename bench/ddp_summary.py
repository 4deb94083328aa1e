#!/usr/bin/env python3
"""Helper of scripts/bench_ddp.sh: the table of its interleaved rounds and the median
per-round ratio of tokens/s. Standard library only.

  ddp_summary.py OUT WARMUP ROUNDS

A_r<i>.jsonl: meshtrain's metrics (rank 0's step lines); B_r<i>.json: bench/torch_ddp.py's
output; C_r<i>.jsonl (optional): meshtrain unpinned (mpirun --bind-to none), or BENCH_DDP_OTHER's binary.
"""
import json
import os
import statistics
import sys



def ours(path, warmup):
    """(median step s, min step s, median exposed comm s of rank 0, median CPU s per step over ranks)."""
    lines = [json.loads(x) for x in open(path)]
    steps = [j for j in lines if "step_time_s" in j][warmup:]
    kept = {s["step"] for s in steps}
    times = [s["step_time_s"] for s in steps]
    ranks = [j for j in lines if "rank" in j and "time_s" in j and j["step"] in kept]
    exposed = [sum(j["time_s"]["comm_exposed"].values()) for j in ranks if j["rank"] == 0]
    cpu = {}
    for j in ranks:
        cpu[j["step"]] = cpu.get(j["step"], 0.0) + j.get("cpu_s", float("nan"))
    return (statistics.median(times), min(times), statistics.median(exposed) if exposed else float("nan"),
            statistics.median(cpu.values()) if cpu else float("nan"))


def load_of(log):
    first = open(log).readline()
    return first.split(" load ")[1].split(" -- ")[0] if " load " in first else "?"


def main():
    out, warmup, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ratios, ratios_c, cpu_ratios, cpu_ratios_c = [], [], [], []
    print(f"{'run':<8} {'load 1/5/15 min':<16} {'median step s':>13} {'min step s':>10} {'exposed comm s':>14} "
          f"{'CPU s/step':>10}")
    for r in range(1, rounds + 1):
        a = ours(os.path.join(out, f"A_r{r}.jsonl"), warmup)
        b = json.load(open(os.path.join(out, f"B_r{r}.json")))
        b_cpu = b.get("median_cpu_s", float("nan"))
        print(f"A_r{r:<6} {load_of(os.path.join(out, f'A_r{r}.log')):<16} {a[0]:>13.3f} {a[1]:>10.3f} {a[2]:>14.3f} "
              f"{a[3]:>10.3f}")
        print(f"B_r{r:<6} {load_of(os.path.join(out, f'B_r{r}.log')):<16} {b['median_step_s']:>13.3f} "
              f"{b['min_step_s']:>10.3f} {'':>14} {b_cpu:>10.3f}")
        ratios.append(b["median_step_s"] / a[0])
        cpu_ratios.append(b_cpu / a[3])
        c_path = os.path.join(out, f"C_r{r}.jsonl")
        if os.path.exists(c_path):
            c = ours(c_path, warmup)
            print(f"C_r{r:<6} {load_of(os.path.join(out, f'C_r{r}.log')):<16} {c[0]:>13.3f} {c[1]:>10.3f} "
                  f"{c[2]:>14.3f} {c[3]:>10.3f}")
            ratios_c.append(b["median_step_s"] / c[0])
            cpu_ratios_c.append(b_cpu / c[3])
    print("A: meshtrain --dp 2 (2 processes x 1 thread, mpirun's default binding: a core each); B: PyTorch DDP (gloo, 2 x 1 thread)"
          + ("; C: BENCH_DDP_OTHER's meshtrain, or A unpinned (--bind-to none)" if ratios_c else ""))
    print("meshtrain dp2 / PyTorch DDP tokens/s per round: " + ", ".join(f"{x:.3f}" for x in ratios)
          + f"; median {statistics.median(ratios):.3f}x")
    if ratios_c:
        print("C / PyTorch DDP tokens/s per round: " + ", ".join(f"{x:.3f}" for x in ratios_c)
              + f"; median {statistics.median(ratios_c):.3f}x")
    print("PyTorch DDP / meshtrain dp2 CPU seconds per step (both ranks, all threads; load-independent): "
          + ", ".join(f"{x:.3f}" for x in cpu_ratios) + f"; median {statistics.median(cpu_ratios):.3f}x"
          + (f" (C: median {statistics.median(cpu_ratios_c):.3f}x)" if cpu_ratios_c else ""))


if __name__ == "__main__":
    main()
