#!/usr/bin/env python3
"""Helper of scripts/bench_dist.sh: reads the config and the runs' metrics (one JSON
object per step, written by rank 0) and prints the tables. Standard library only.

  summarise.py data-dir CONFIG            the config's data.dir
  summarise.py batch CONFIG               the config's train.batch_size
  summarise.py run-line METRICS SKIP SECS one line about a finished run
  summarise.py report OUT CONFIG SKIP     the tables

The analytic memory model mirrors src/model/params.cpp (parameter shapes, units)
and src/parallel/shard.h (per-parameter dim-0 shards: ceil(rows / P) rows each).
"""
import glob
import math
import os
import statistics
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from summarise_common import MiB, load_steps, main, read_config, run_name, timed_steps  # noqa: E402





# ---- model shape (src/model/params.cpp) -------------------------------------------


def param_units(model):
    """[(unit name, [(param name, rows, row_size)])] in the order of make_units."""
    V, C, F = model["vocab_size"], model["d_model"], model["ffn_hidden"]
    H = model["n_heads"]
    KV = model.get("n_kv_heads", H)
    hd = C // H
    q, kv = H * hd, KV * hd
    units = [("embed", [("embed_tokens", V, C)])]
    for l in range(model["n_layers"]):
        units.append(
            (
                f"layer {l}",
                [
                    ("input_layernorm", C, 1),
                    ("q_proj", q, C),
                    ("k_proj", kv, C),
                    ("v_proj", kv, C),
                    ("o_proj", C, q),
                    ("post_attention_layernorm", C, 1),
                    ("gate_proj", F, C),
                    ("up_proj", F, C),
                    ("down_proj", C, F),
                ],
            )
        )
    final = [("norm", C, 1)]
    if not model.get("tie_embeddings", False):
        final.append(("lm_head", V, C))
    units.append(("final", final))
    return units


def analytic(model, P):
    """Expected peak bytes of rank 0 per ZeRO stage: {zero: {kind: bytes}}, and the inputs."""
    units = param_units(model)
    unit_numel = [sum(r * k for _, r, k in ps) for _, ps in units]
    unit_shard = [sum(math.ceil(r / P) * k for _, r, k in ps) for _, ps in units]
    N = sum(unit_numel)
    S = sum(unit_shard)  # this rank's shard of every parameter, padding included
    tied = model.get("tie_embeddings", False)
    # Full-size buffers of one unit at a time: the model acquires a unit, uses it and
    # releases it before the next one (src/model/llama.cpp); with tied embeddings the
    # head holds the embedding and the final unit together.
    inflight = max(unit_numel)
    if tied:
        inflight = max(inflight, unit_numel[0] + unit_numel[-1])
    f = 4  # float32
    exp = {
        0: {"param": f * N, "grad": f * N, "optim": 2 * f * N},
        1: {"param": f * N, "grad": f * N, "optim": 2 * f * S},
        2: {"param": f * N, "grad": f * S + f * inflight, "optim": 2 * f * S},
        3: {"param": f * S + f * inflight, "grad": f * S + f * inflight, "optim": 2 * f * S},
    }
    largest = units[unit_numel.index(max(unit_numel))][0]
    return exp, {"N": N, "S": S, "inflight": inflight, "largest": largest, "units": len(units),
                 "layer": unit_numel[1] if len(units) > 2 else 0,
                 "max_unit_shard": max(unit_shard)}


# ---- metrics ---------------------------------------------------------------------------




def summary(path, skip):
    steps = load_steps(path)
    timed = timed_steps(steps, skip)
    times = [s["step_time_s"] for s in timed]
    med = statistics.median(times)
    return {
        "name": run_name(path),
        "steps": steps,
        "timed": timed,
        "median_s": med,
        "min_s": min(times),
        "tokens_per_step": timed[0]["tokens_per_s"] * timed[0]["step_time_s"],
        "overlap": statistics.median(s["overlap_hidden"] for s in timed),
        "mfu": statistics.median(s["mfu"] for s in timed),
    }


def run_line(path, skip, secs):
    s = summary(path, skip)
    times = " ".join(f"{x['step_time_s']:.2f}" for x in s["steps"])
    print(f"   steps (s): {times} | median {s['median_s']:.3f} s, {s['tokens_per_step'] / s['median_s']:.0f} tok/s,"
          f" MFU {s['mfu']:.2f}, overlap {100 * s['overlap']:.0f}%, peak {s['steps'][-1]['mem_peak_bytes'] / MiB:.1f}"
          f" MiB | {secs} s wall")


def runs(out, prefix, skip):
    return [summary(p, skip) for p in sorted(glob.glob(os.path.join(out, prefix + "_r*.jsonl")))]


ORDER = {"single": 0, "dp2_z0": 1, "dp2_z3": 2}


def run_order(r):  # the order the script ran them: round by round
    kind, rnd = r["name"].rsplit("_r", 1)
    return (int(rnd), ORDER.get(kind, 9))


def best(rs):
    return min(rs, key=lambda r: r["median_s"])


def report(out, config, skip):
    cfg = read_config(config)
    tc = cfg["train"]
    B, T = tc["batch_size"], tc["seq_len"]
    single, z0, z3 = runs(out, "single", skip), runs(out, "dp2_z0", skip), runs(out, "dp2_z3", skip)
    print()
    print(f"== 1. Data-parallel scaling ({config}: global batch {B} x {T}; median step of steps {skip}.. of each run;"
          f" best median of each kind)")
    print(f"{'run':<12} {'threads':>8} {'median s':>9} {'min s':>7} {'tok/s':>7} {'MFU':>6} {'overlap':>8}")
    for r in sorted(single + z0, key=run_order):
        kind = "1 x 2" if r["name"].startswith("single") else "2 x 1"
        ov = f"{100 * r['overlap']:.0f}%" if r["name"].startswith("dp2") else "-"
        print(f"{r['name']:<12} {kind:>8} {r['median_s']:>9.3f} {r['min_s']:>7.3f} "
              f"{B * T / r['median_s']:>7.0f} {r['mfu']:>6.3f} {ov:>8}")
    bs, b0 = best(single), best(z0)
    ratio = bs["median_s"] / b0["median_s"]
    per_round = [s["median_s"] / d["median_s"] for s, d in zip(single, z0)]
    print(f"dp2 / single tokens/s (best medians): {ratio:.3f}  (target >= 0.90: {'met' if ratio >= 0.90 else 'NOT met'});"
          f" per round: {', '.join(f'{x:.3f}' for x in per_round)};"
          f" by min steps: {bs['min_s'] / b0['min_s']:.3f}")
    ov = [s["overlap_hidden"] for r in z0 for s in r["timed"]]
    print(f"overlap_hidden of dp2 zero-0 (share of the gradient all-reduce window hidden behind the backward):"
          f" {100 * b0['overlap']:.0f}% (best run's median); {100 * min(ov):.0f}-{100 * max(ov):.0f}% over all timed steps")

    print()
    print("== 2. ZeRO-3 vs ZeRO-0 at dp = 2 (1 thread per rank)")
    print(f"{'run':<12} {'median s':>9} {'min s':>7} {'tok/s':>7}  comm per step (MiB, rank 0's ledger)")
    for r in sorted(z0 + z3, key=run_order):
        comm = r["timed"][0]["comm_bytes"]
        cs = ", ".join(f"{k} {v / MiB:.1f}" for k, v in sorted(comm.items()) if v >= 1024)
        print(f"{r['name']:<12} {r['median_s']:>9.3f} {r['min_s']:>7.3f} {B * T / r['median_s']:>7.0f}  {cs}")
    b3 = best(z3)
    per_round = [c["median_s"] / a["median_s"] for a, c in zip(z0, z3)]
    print(f"zero-3 / zero-0 step time (best medians): {b3['median_s'] / b0['median_s']:.3f};"
          f" per round: {', '.join(f'{x:.3f}' for x in per_round)}; by min steps: {b3['min_s'] / b0['min_s']:.3f}")

    P = 4
    if not glob.glob(os.path.join(out, "dp4_z*.jsonl")):
        return
    print()
    exp, a = analytic(cfg["model"], P)
    print(f"== 3. Memory at dp = {P} (1 thread per rank, microbatch {B // P}): rank 0's peak bytes by kind"
          f" (max over the steps) vs analytic")
    print(f"N = {a['N']:,} parameters ({4 * a['N'] / MiB:.1f} MiB fp32); shard S = sum ceil(rows/{P})*row_size ="
          f" {a['S']:,} ({4 * a['S'] / MiB:.2f} MiB); largest unit ({a['largest']}) {a['inflight']:,}"
          f" ({4 * a['inflight'] / MiB:.2f} MiB); a layer {a['layer']:,} ({4 * a['layer'] / MiB:.2f} MiB)")
    print("expected: zero 0: param = grad = 4N, optim = 8N; zero 1: optim = 8S; zero 2: grad = 4S + 4*largest unit"
          " (its full-size gradient while its backward runs);")
    print("          zero 3: also param = 4S + 4*largest unit (one gathered unit at a time; the prefetched next"
          " unit arrives in a comm buffer)")
    print(f"{'zero':>4} {'kind':>6} {'measured MiB':>13} {'expected MiB':>13} {'ratio':>6}   "
          f"{'act MiB':>8} {'scratch MiB':>11} {'comm MiB':>9} {'total MiB':>10}")
    for z in range(4):
        path = os.path.join(out, f"dp4_z{z}.jsonl")
        if not os.path.exists(path):
            continue
        steps = load_steps(path)
        peak = {k: max(s["mem_peak_by_kind"][k] for s in steps) for k in steps[0]["mem_peak_by_kind"]}
        total = max(s["mem_peak_bytes"] for s in steps)
        for i, kind in enumerate(("param", "grad", "optim")):
            m, e = peak[kind], exp[z][kind]
            extra = (f"   {peak['activation'] / MiB:>8.1f} {peak['scratch'] / MiB:>11.1f} {peak['comm'] / MiB:>9.1f}"
                     f" {total / MiB:>10.1f}") if i == 0 else ""
            print(f"{z:>4} {kind:>6} {m / MiB:>13.2f} {e / MiB:>13.2f} {m / e:>6.3f}{extra}")
        if z == 1:
            d = peak["grad"] - exp[1]["grad"]
            print(f"     (zero 1 grad - 4N = {d / MiB:.2f} MiB; 4S = {4 * a['S'] / MiB:.2f} MiB)")
    print(f"Beyond the analytic model (src/parallel/data_parallel.cpp): zero 1 also keeps the reduced gradient's shard"
          f" (grad kind, 4S = {4 * a['S'] / MiB:.2f} MiB);")
    print(f"zero 1/2 copy the shard out for the update (scratch, 4S) and all-gather the updated shards unit by unit"
          f" (comm, at most 4*{P}*shard of the largest unit = {16 * a['max_unit_shard'] / MiB:.2f} MiB);")
    print("zero 2/3 send and receive each unit's reduce-scatter, zero 3 receives each gathered unit (comm).")


if __name__ == "__main__":
    main(run_line, report, {"batch": lambda config: print(read_config(config)["train"]["batch_size"])})
