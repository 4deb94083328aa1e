#!/usr/bin/env python3
"""Helper of scripts/bench_pp.sh: reads the runs' metrics (one JSON object per step,
written by rank 0), logs (the per-rank peak memory table, the stage map), traces
(--trace: each rank's spans of the last step) and `meshtrain schedule` grids, and
prints the tables. Standard library only (Python >= 3.11 for tomllib).

  summarise.py data-dir CONFIG            the config's data.dir
  summarise.py microbatch CONFIG          the config's train.microbatch_size
  summarise.py run-line METRICS SKIP SECS one line about a finished run
  summarise.py report OUT CONFIG SKIP     the tables

Run names: pp{P}_{gpipe|1f1b|interleaved}_m{M}[_r{round}].

The activation count mirrors src/model/llama.cpp (every MemKind::activation Tensor:
a Slot per microbatch in flight, allocated on first use and kept, slot 0 in the
constructor; Buffers, the backward's scratch, once per model chunk) and the slot
bookkeeping of src/train/pipeline.cpp (a slot is taken at a microbatch's
recv_act/forward and given back after its backward).
"""
import glob
import json
import os
import re
import statistics
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from summarise_common import MiB, load_steps, main, read_config, run_name, timed_steps  # noqa: E402





def parse_name(name):
    m = re.fullmatch(r"pp(\d+)_(gpipe|1f1b|interleaved)_m(\d+)(?:_r(\d+))?", name)
    if not m:
        return None
    return {"pp": int(m[1]), "kind": m[2], "m": int(m[3]), "round": int(m[4] or 0),
            "v": 2 if m[2] == "interleaved" else 1}


# ---- metrics, logs, traces ---------------------------------------------------------------




def summary(path, skip):
    steps = load_steps(path)
    timed = timed_steps(steps, skip)
    P = len(timed[0]["pp_idle"])
    return {
        "name": run_name(path),
        "steps": steps,
        "median_s": statistics.median(s["step_time_s"] for s in timed),
        "idle": [statistics.median(s["pp_idle"][r] for s in timed) for r in range(P)],
        "idle_range": [(min(s["pp_idle"][r] for s in timed), max(s["pp_idle"][r] for s in timed))
                       for r in range(P)],
    }


def run_line(path, skip, secs):
    s = summary(path, skip)
    times = " ".join(f"{x['step_time_s']:.2f}" for x in s["steps"])
    idle = ", ".join(f"{100 * x:.1f}%" for x in s["idle"])
    print(f"   steps (s): {times} | median {s['median_s']:.3f} s | idle per stage {idle} | {secs} s wall")


def memory_table(log):
    """{rank: {kind: MiB}} from the 'peak memory per rank (MiB):' table at the end of the log."""
    lines = open(log).read().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("peak memory per rank (MiB):"):
            kinds = lines[i + 1].split()[1:]
            out = {}
            for row in lines[i + 2:]:
                f = row.split()
                if len(f) != len(kinds) + 1 or not f[0].isdigit():
                    break
                out[int(f[0])] = dict(zip(kinds, map(float, f[1:])))
            return out
    raise SystemExit(f"summarise.py: no peak memory table in {log}")


def stage_map(log):
    """[(virtual stage, pp rank, chunk, layers, embed, head)] from the log's stage lines."""
    pat = re.compile(r"^\s*stage (\d+) \(pp rank (\d+), chunk (\d+)\): (embedding \+ )?(\d+) layers \d+-\d+( \+ final norm, LM head, loss)?$")
    out = []
    for line in open(log):
        m = pat.match(line.rstrip())
        if m:
            out.append((int(m[1]), int(m[2]), int(m[3]), int(m[5]), bool(m[4]), bool(m[6])))
    return out


def trace_durations(path):
    """{(rank, chunk, 'F'|'B'): median ms} of the last step's compute spans."""
    if not os.path.exists(path):
        return {}
    ev = json.load(open(path))["traceEvents"]
    pp = 1 + max(e["pid"] for e in ev)
    d = {}
    for e in ev:
        if e.get("cat") == "compute":
            chunk = e["args"]["virtual_stage"] // pp
            d.setdefault((e["pid"], chunk, e["name"][0]), []).append(e["dur"] / 1e3)
    return {k: statistics.median(v) for k, v in d.items()}


# ---- schedules: `meshtrain schedule` grids -------------------------------------------------


def read_schedule(path):
    """(ops per rank [(op, microbatch, chunk)], ideal bubble, peak sets per rank) from the grid."""
    text = open(path).read()
    ops, peak = {}, {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 3 and f[0] == "rank" and f[1].isdigit():
            r = int(f[1])
            if r not in ops and all(re.fullmatch(r"\.|[FB]\d+[a-z]?", t) for t in f[2:]):
                seq, last = [], None
                for t in f[2:]:
                    if t != "." and t != last:  # a backward fills 2 cells
                        seq.append((t[0], int(re.sub(r"\D", "", t)), ord(t[-1]) - ord("a") if t[-1].isalpha() else 0))
                    last = t
                ops[r] = seq
            elif r in ops and len(f) >= 7:
                peak[r] = int(f[6])
    ideal = float(re.search(r"ideal = \S+ = ([0-9.]+)", text)[1])
    return [ops[r] for r in sorted(ops)], ideal, [peak[r] for r in sorted(peak)]


def simulate(ops, pp, v, dur):
    """Each rank's (busy, own window) when every action starts as soon as its rank is free
    and its input exists, with zero transfer time; dur(rank, chunk, 'F'|'B') gives the
    times. The window runs from 0 to the rank's last action, like the executor's wall
    time (it also waits for its last sends, which this ignores)."""
    K = pp * v
    done, nxt, free = {}, [0] * pp, [0.0] * pp
    busy = [0.0] * pp
    while any(nxt[r] < len(ops[r]) for r in range(pp)):
        progressed = False
        for r in range(pp):
            while nxt[r] < len(ops[r]):
                op, m, c = ops[r][nxt[r]]
                k = c * pp + r
                dep = (("F", m, k - 1) if k > 0 else None) if op == "F" else (("B", m, k + 1) if k < K - 1 else ("F", m, k))
                if dep is not None and dep not in done:
                    break
                start = max(free[r], done[dep] if dep else 0.0)
                t = dur(r, c, op)
                free[r] = start + t
                busy[r] += t
                done[(op, m, k)] = free[r]
                nxt[r] += 1
                progressed = True
        if not progressed:
            raise SystemExit("summarise.py: the schedule deadlocks in the simulation")
    return [(busy[r], free[r]) for r in range(pp)]


def slots_in_flight(ops, pp, v):
    """[rank][chunk] the most activation slots the executor holds: forwards done minus
    backwards done, at least 1 (slot 0 exists from the start)."""
    out = []
    for r in range(pp):
        cur, peak = [0] * v, [1] * v
        for op, _, c in ops[r]:
            cur[c] += 1 if op == "F" else -1
            peak[c] = max(peak[c], cur[c])
        out.append(peak)
    return out


# ---- activations (src/model/llama.cpp) -------------------------------------------------


def chunk_activation(model, train, layers, head):
    """(slot, shared) elements of one model chunk with `layers` layers (+ the head)."""
    B, T = train["microbatch_size"], train["seq_len"]
    N, C, F, H = B * T, model["d_model"], model["ffn_hidden"], model["n_heads"]
    KV = model.get("n_kv_heads", H)
    D = C // H
    V = model["vocab_size"]
    layer = (N * C + N + N * (H + 2 * KV) * D + N * H * D + N * H  # ln1, rstd1, qkv, att, lse
             + N * C + N * C + N + 2 * N * F + N * F)  # mid, ln2, rstd2, gu, h
    slot = (layers + 1) * N * C + layers * layer  # resid, layer activations
    if head:
        slot += N * C + N + N * V + 2 * N  # lnf, rstdf, logits, losses, lse_ce
    shared = 2 * N * C + N * max(C, F, H * D) + N * (H + 2 * KV) * D + 2 * N * F  # dres, dtmp, dmid, dqkv, dgu
    return slot, shared


def expected_activation(model, train, stages, slots):
    """{rank: (expected bytes, [(slot bytes, shared bytes, slots)] per chunk)}."""
    out = {}
    for k, r, c, layers, _, head in stages:
        slot, shared = chunk_activation(model, train, layers, head)
        out.setdefault(r, []).append((4 * slot, 4 * shared, slots[r][c]))
    return {r: (sum(s * n + sh for s, sh, n in ch), ch) for r, ch in out.items()}


# ---- report ------------------------------------------------------------------------------


def report(out, config, skip):
    cfg = read_config(config)
    model, train = cfg["model"], dict(cfg["train"])
    runs = []
    for p in sorted(glob.glob(os.path.join(out, "pp*.jsonl"))):
        name = os.path.basename(p)[: -len(".jsonl")]
        info = parse_name(name)
        if info:
            runs.append({**info, **summary(p, skip), "log": p[: -len(".jsonl")] + ".log",
                         "trace": p[: -len(".jsonl")] + ".trace.json"})
    kinds = ["gpipe", "1f1b", "interleaved"]
    order = lambda r: (r["pp"], r["m"], kinds.index(r["kind"]), r["round"])
    runs.sort(key=order)

    def sched(r):
        return read_schedule(os.path.join(out, f"schedule_{r['kind']}_pp{r['pp']}_m{r['m']}.txt"))

    # -- 1. idle ---------------------------------------------------------------------------
    pp2 = [r for r in runs if r["pp"] == 2]
    print()
    print(f"== 1. Idle share per stage, pp = 2 (1 thread per rank; median of pp_idle over steps {skip}..;"
          " idle = 1 - (forward + backward time) / the executor's phase, per rank)")
    print("theory: (p-1)/(v*m+p-1), F = 1, B = 2 on equal stages, over the common makespan;"
          " 'own window': the same grid, each rank's idle up to its own last action (how the executor measures);")
    print("'sim': that grid timed with the run's measured F and B per stage (last step's trace), no transfer time")
    print(f"{'run':<24} {'step s':>7} {'F0/B0 ms':>11} {'F1/B1 ms':>11} {'measured s0':>11} {'s1':>6}"
          f" {'theory':>7} {'own win s0':>10} {'s1':>6} {'sim s0':>7} {'s1':>6}")
    best = {}
    for r in pp2:
        ops, ideal, _ = sched(r)
        unit = simulate(ops, 2, r["v"], lambda rk, c, op: 1.0 if op == "F" else 2.0)
        dur = trace_durations(r["trace"])
        if dur:
            sim = simulate(ops, 2, r["v"], lambda rk, c, op: dur[(rk, c, op)])
            r["sim"] = [1 - b / w for b, w in sim]
            fb = [f"{sum(dur[(rk, c, 'F')] for c in range(r['v'])):.0f}/{sum(dur[(rk, c, 'B')] for c in range(r['v'])):.0f}"
                  for rk in range(2)]
        else:
            r["sim"], fb = [float("nan")] * 2, ["-", "-"]
        r["ideal"], r["own"] = ideal, [1 - b / w for b, w in unit]
        key = (r["kind"], r["m"])
        if key not in best or r["median_s"] < best[key]["median_s"]:
            best[key] = r
        pct = lambda x: f"{100 * x:.1f}%"
        print(f"{r['name']:<24} {r['median_s']:>7.3f} {fb[0]:>11} {fb[1]:>11} {pct(r['idle'][0]):>11}"
              f" {pct(r['idle'][1]):>6} {pct(ideal):>7} {pct(r['own'][0]):>10} {pct(r['own'][1]):>6}"
              f" {pct(r['sim'][0]):>7} {pct(r['sim'][1]):>6}")
    print("(F/B ms: the median forward and backward of one microbatch on that stage, summed over its chunks)")
    print("best run of each kind (lowest median step):")
    for key, r in sorted(best.items(), key=lambda kv: (kv[0][1], kinds.index(kv[0][0]))):
        print(f"  {r['kind']:<11} m {r['m']}: step {r['median_s']:.3f} s, idle s0 {100 * r['idle'][0]:.1f}%"
              f" s1 {100 * r['idle'][1]:.1f}% | theory {100 * r['ideal']:.1f}% (own window {100 * r['own'][0]:.1f}%,"
              f" {100 * r['own'][1]:.1f}%) | sim {100 * r['sim'][0]:.1f}%, {100 * r['sim'][1]:.1f}%")

    pp4 = [r for r in runs if r["pp"] == 4]
    if pp4:
        print("pp = 4 (4 processes on the machine's cores: oversubscribed if it has fewer than 4, and then the idle"
              " shares mostly measure the time-sharing):")
        for r in pp4:
            _, ideal, _ = sched(r)
            print(f"  {r['name']:<22} step {r['median_s']:.3f} s, idle per stage "
                  + ", ".join(f"{100 * x:.1f}%" for x in r["idle"]) + f" | theory {100 * ideal:.1f}%")

    # -- 2. activation memory --------------------------------------------------------------
    print()
    print("== 2. Peak activation memory per stage (MiB, the run's per-rank table) vs the count of llama.cpp's buffers")
    print("expected = sum over the rank's chunks of (shared backward buffers + slots x slot size);"
          " slots = the most microbatches in flight on the chunk in the schedule's grid (at least 1)")
    mem = {}
    for r in runs:
        if r["round"] > 1:
            continue  # memory is the same in every round
        ops, _, _ = sched(r)
        table = memory_table(r["log"])
        exp = expected_activation(model, {**train, "batch_size": r["m"] * train["microbatch_size"]},
                                  stage_map(r["log"]), slots_in_flight(ops, r["pp"], r["v"]))
        mem[(r["pp"], r["kind"], r["m"])] = (table, exp)
        for rank in sorted(table):
            e, chunks = exp[rank]
            desc = " + ".join(f"({sh / MiB:.2f} + {n} x {s / MiB:.2f})" for s, sh, n in chunks)
            print(f"{r['name']:<24} stage {rank}: measured {table[rank]['activation']:>8.2f}  expected"
                  f" {e / MiB:>8.2f} = {desc}   (total peak {table[rank]['total']:.1f})")
    print()
    print("GPipe / 1F1B activation per stage (same m): measured ratio, expected ratio of the totals,"
          " and m / min(p - s, m) (slots only)")
    for (pp, kind, m), (table, _) in sorted(mem.items()):
        if kind != "gpipe" or (pp, "1f1b", m) not in mem:
            continue
        t1, e1 = mem[(pp, "1f1b", m)]
        _, eg = mem[(pp, "gpipe", m)]
        for s in sorted(table):
            print(f"  pp {pp} m {m} stage {s}: {table[s]['activation']:.2f} / {t1[s]['activation']:.2f} MiB ="
                  f" {table[s]['activation'] / t1[s]['activation']:.3f}; expected {eg[s][0] / e1[s][0]:.3f};"
                  f" m / min(p - s, m) = {m / min(pp - s, m):.3f}")
    # The slot size by difference: GPipe at m = 8 minus m = 4, over 4 slots.
    if (2, "gpipe", 8) in mem and (2, "gpipe", 4) in mem:
        print()
        print("slot size by difference, (GPipe m 8 - GPipe m 4) / 4, against the count; shared = GPipe m 4 - 4 slots:")
        for s in sorted(mem[(2, "gpipe", 8)][0]):
            a8, a4 = mem[(2, "gpipe", 8)][0][s]["activation"], mem[(2, "gpipe", 4)][0][s]["activation"]
            slot = (a8 - a4) / 4
            _, chunks = mem[(2, "gpipe", 4)][1][s]
            print(f"  stage {s}: slot {slot:.2f} MiB (count {chunks[0][0] / MiB:.2f}); shared {a4 - 4 * slot:.2f} MiB"
                  f" (count {chunks[0][1] / MiB:.2f}); 1F1B slots implied per stage:"
                  f" m 4 {(mem[(2, '1f1b', 4)][0][s]['activation'] - (a4 - 4 * slot)) / slot:.2f},"
                  f" m 8 {(mem[(2, '1f1b', 8)][0][s]['activation'] - (a4 - 4 * slot)) / slot:.2f}"
                  if (2, "1f1b", 8) in mem and (2, "1f1b", 4) in mem else "")


if __name__ == "__main__":
    main(run_line, report, {"microbatch": lambda config: print(read_config(config)["train"]["microbatch_size"])})
