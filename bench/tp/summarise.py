#!/usr/bin/env python3
"""Helper of scripts/bench_tp.sh: reads the config and the runs' metrics (one JSON
object per step, written by rank 0) and prints the tables. Standard library only
(Python >= 3.11 for tomllib).

  summarise.py data-dir CONFIG            the config's data.dir
  summarise.py tp-check CONFIG P SP       exit 0 if the model and seq_len allow tp = P (SP: 0/1),
                                          else print why and exit 1
  summarise.py run-line METRICS SKIP SECS one line about a finished run
  summarise.py report OUT CONFIG SKIP     the tables

The analytic activation count mirrors the buffers of src/model/llama.cpp (LayerActs
and Buffers: every Tensor of MemKind::activation, all allocated once in Llama's
constructor) and the per-rank widths of src/model/params.cpp tp_dims.
"""
import glob
import math
import os
import statistics
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from summarise_common import MiB, load_steps, main, read_config, run_name, timed_steps  # noqa: E402





# ---- model shape under tp (src/model/params.cpp tp_dims) ------------------------------


def tp_problems(model, T, P, sp):
    """Why tp = P cannot run this model (the checks of tp_dims and Llama's constructor); [] if it can."""
    H, KV, F = model["n_heads"], model.get("n_kv_heads", model["n_heads"]), model["ffn_hidden"]
    out = []
    if H % P:
        out.append(f"n_heads ({H}) must be divisible by tp ({P})")
    if F % P:
        out.append(f"ffn_hidden ({F}) must be divisible by tp ({P})")
    if KV % P and P % KV:
        out.append(f"n_kv_heads ({KV}) and tp ({P}): one must divide the other")
    if sp and T % P:
        out.append(f"seq_len ({T}) must be divisible by tp ({P}) with sp")
    return out


def tp_dims(model, P):
    """This rank's widths: query heads Hl, kv heads KVl, ffn Fl, vocab rows Vl."""
    H, KV = model["n_heads"], model.get("n_kv_heads", model["n_heads"])
    return {
        "Hl": H // P,
        "KVl": KV // P if KV >= P else 1,  # replicated: one kv head per rank
        "Fl": model["ffn_hidden"] // P,
        "Vl": math.ceil(model["vocab_size"] / P),  # the last rank's padding rows included
    }


# ---- activations (src/model/llama.cpp) -----------------------------------------------


def activation_terms(model, train, P, sp):
    """Elements (fp32) of every activation buffer of one rank: [(name, elements)].

    N = B·T tokens of a microbatch; Nl = N / P under sequence parallelism (the
    residual stream and the norms' inputs are sharded by token), else N; the
    attention and MLP widths are this rank's. One set of layer activations per
    layer, or one shared set with train.recompute = full (true); a selective
    choice is not counted here (the buffer plan is: docs/MODEL.md).
    """
    B, T = train.get("microbatch_size", train["batch_size"]), train["seq_len"]
    C, L = model["d_model"], model["n_layers"]
    D = C // model["n_heads"]
    d = tp_dims(model, P)
    Hl, KVl, Fl, Vl = d["Hl"], d["KVl"], d["Fl"], d["Vl"]
    tp_on, sp_on = P > 1, bool(sp) and P > 1
    N = B * T
    Nl = N // P if sp_on else N
    S = 1 if train.get("recompute", False) in (True, "true", "full") else L
    QKV = (Hl + 2 * KVl) * D
    layer = [
        ("ln1 (gathered under sp) [N, C]", N * C),
        ("rstd1 [Nl]", Nl),
        ("qkv [N, (Hl+2KVl)·D]", N * QKV),
        ("att [N, Hl·D]", N * Hl * D),
        ("lse [B, Hl, T]", N * Hl),
        ("mid [Nl, C]", Nl * C),
        ("ln2 (gathered under sp) [N, C]", N * C),
        ("rstd2 [Nl]", Nl),
        ("gu [N, 2Fl]", 2 * N * Fl),
        ("h [N, Fl]", N * Fl),
    ]
    terms = [(f"{S} x {name}", S * n) for name, n in layer]
    terms += [
        (f"resid {L + 1} x [Nl, C]", (L + 1) * Nl * C),
        ("lnf [Nl, C]", Nl * C),
        ("rstdf [Nl]", Nl),
        ("logits [N, Vl]", N * Vl),
        ("losses, lse_ce 2 x [N]", 2 * N),
        ("dres, dtmp 2 x [Nl, C]", 2 * Nl * C),
        ("dmid [N, max(C, Fl, Hl·D)]", N * max(C, Fl, Hl * D)),
        ("dqkv [N, (Hl+2KVl)·D]", N * QKV),
        ("dgu [N, 2Fl]", 2 * N * Fl),
    ]
    if tp_on:
        terms.append(("part [N, C]", N * C))
    if sp_on:
        terms += [("lnf_full [N, C]", N * C), ("dfull [N, C]", N * C), ("dln [Nl, C]", Nl * C)]
    return terms


def activation_bytes(model, train, P, sp):
    return 4 * sum(n for _, n in activation_terms(model, train, P, sp))


# ---- metrics --------------------------------------------------------------------------




def summary(path, skip):
    """Median step time of the steps after the first `skip` (the last step if there are no more)."""
    steps = load_steps(path)
    timed = timed_steps(steps, skip)
    times = [s["step_time_s"] for s in timed]
    return {
        "name": run_name(path),
        "steps": steps,
        "timed": timed,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "tokens_per_step": timed[0]["tokens_per_s"] * timed[0]["step_time_s"],
        "activation": max(s["mem_peak_by_kind"]["activation"] for s in steps),
        "total": max(s["mem_peak_bytes"] for s in steps),
    }


def run_line(path, skip, secs):
    s = summary(path, skip)
    times = " ".join(f"{x['step_time_s']:.2f}" for x in s["steps"])
    print(f"   steps (s): {times} | median {s['median_s']:.3f} s, {s['tokens_per_step'] / s['median_s']:.0f} tok/s,"
          f" activations {s['activation'] / MiB:.1f} MiB, peak {s['total'] / MiB:.1f} MiB | {secs} s wall")


KINDS = ("single", "tp2", "tp2ov", "tp2sp", "tp2spov")  # the order of a round (ov: parallel.tp_overlap)
LABELS = (("tp2", "tp2"), ("tp2ov", "tp2 overlap"), ("tp2sp", "tp2+sp"), ("tp2spov", "tp2+sp overlap"))


def hidden(r, out):
    """The run's 'tp communication ... NN% hidden' line (src/train/report.cpp), as 'NN% of X s'."""
    try:
        with open(os.path.join(out, r["name"] + ".log")) as f:
            for line in f:
                if line.startswith("tp communication (rank 0):"):
                    total = line.split(" calls, ")[1].split(" s,")[0]
                    return line.rsplit(": ", 1)[1].split("%")[0] + f"% of {total} s"
    except OSError:
        pass
    return ""


def runs(out, kind, skip):
    """The runs of one kind, round 1 first."""
    paths = glob.glob(os.path.join(out, kind + "_r*.jsonl"))
    return [summary(p, skip) for p in sorted(paths, key=lambda p: int(p.rsplit("_r", 1)[1][: -len(".jsonl")]))]


def best(rs):
    return min(rs, key=lambda r: r["median_s"])


def comm_per_step(r):
    comm = r["timed"][0]["comm_bytes"]
    return ", ".join(f"{k} {v / MiB:.1f}" for k, v in sorted(comm.items()) if v >= 1024) or "-"


def speed_table(out, cfg, skip):
    tc = cfg["train"]
    B, T, mb = tc["batch_size"], tc["seq_len"], tc["microbatch_size"]
    by_kind = {k: runs(out, k, skip) for k in KINDS}
    if not by_kind["single"]:
        return
    print(f"== 1. Speed: tp = 2 (2 ranks x 1 thread) vs 1 process x 2 threads (global batch {B} x {T},"
          f" microbatch {mb}; median of steps {skip}.. of each run; best median of each kind)")
    print(f"{'run':<12} {'median s':>9} {'min s':>7} {'tok/s':>7}  {'tp comm hidden':<16}"
          f"  comm per step (MiB sent, rank 0's ledger)")
    for rnd in range(len(by_kind["single"])):
        for k in KINDS:
            if rnd < len(by_kind[k]):
                r = by_kind[k][rnd]
                print(f"{r['name']:<12} {r['median_s']:>9.3f} {r['min_s']:>7.3f} {B * T / r['median_s']:>7.0f}"
                      f"  {hidden(r, out):<16}  {comm_per_step(r) if k != 'single' else ''}")
    bs = best(by_kind["single"])
    for k, label in LABELS:
        if not by_kind[k]:
            continue
        per_round = [s["median_s"] / t["median_s"] for s, t in zip(by_kind["single"], by_kind[k])]
        bk = best(by_kind[k])
        print(f"{label} / single tokens/s (best medians): {bs['median_s'] / bk['median_s']:.3f};"
              f" per round: {', '.join(f'{x:.3f}' for x in per_round)};"
              f" by min steps: {bs['min_s'] / bk['min_s']:.3f}")


MEM_RUNS = (  # (label, P, sp, metrics files: the speed runs of that kind, or the memory-only run)
    ("tp 1", 1, False, "single_r*"),
    ("tp 2", 2, False, "tp2_r*"),
    ("tp 2 + sp", 2, True, "tp2sp_r*"),
    ("tp 4", 4, False, "mem_tp4"),
    ("tp 4 + sp", 4, True, "mem_tp4sp"),
)


def memory_table(out, cfg):
    model, tc = cfg["model"], dict(cfg["train"], recompute=False)  # the script runs them all without
    print()
    print(f"== 2. Activation memory per rank (rank 0's peak of kind 'activation', max over steps and runs;"
          f" recompute off, microbatch {tc['microbatch_size']} x {tc['seq_len']}) vs analytic (activation_terms)")
    print(f"{'run':<10} {'measured MiB':>13} {'analytic MiB':>13} {'ratio':>7} {'vs tp 1':>8} {'total peak MiB':>15}")
    base = None
    for label, P, sp, pattern in MEM_RUNS:
        paths = glob.glob(os.path.join(out, pattern + ".jsonl"))
        if not paths:
            continue
        steps = [s for p in paths for s in load_steps(p)]
        m = max(s["mem_peak_by_kind"]["activation"] for s in steps)
        total = max(s["mem_peak_bytes"] for s in steps)
        e = activation_bytes(model, tc, P, sp)
        base = m if P == 1 else base
        rel = f"{m / base:>8.3f}" if base else f"{'-':>8}"
        print(f"{label:<10} {m / MiB:>13.2f} {e / MiB:>13.2f} {m / e:>7.4f} {rel} {total / MiB:>15.1f}")
        if m != e:  # show the terms, to find the buffer the formula misses
            print(f"           measured - analytic = {m - e:+,} bytes ({(m - e) / 4:+,.0f} elements); analytic terms:")
            for name, n in activation_terms(model, tc, P, sp):
                print(f"           {name:<40} {n:>12,}  {4 * n / MiB:>8.2f} MiB")


def report(out, config, skip):
    cfg = read_config(config)
    print()
    speed_table(out, cfg, skip)
    memory_table(out, cfg)


def tp_check(config, P, sp):
    """Exit 1 with the reasons when the config cannot run at tp = P (sp "1" or "0")."""
    cfg = read_config(config)
    why = tp_problems(cfg["model"], cfg["train"]["seq_len"], int(P), sp == "1")
    if why:
        print("; ".join(why))
        sys.exit(1)


def activation_shape(config):
    """'N C': the tokens of a microbatch (microbatch_size x seq_len) and d_model, a row-parallel output."""
    cfg = read_config(config)
    print(cfg["train"]["microbatch_size"] * cfg["train"]["seq_len"], cfg["model"]["d_model"])


if __name__ == "__main__":
    main(run_line, report, {"tp-check": tp_check, "activation-shape": activation_shape})
