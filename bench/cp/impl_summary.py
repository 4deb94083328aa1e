#!/usr/bin/env python3
"""Helper of scripts/bench_cp_impl.sh: the table of the four context-parallel
attentions. Standard library only.

  impl_summary.py OUT CONFIG SKIP

Run names: T{T}_cp{P}_kv{KV}_{ring|allgather|ulysses|hybrid}_r{round}.

Per attention layer and microbatch (B sequences of Tl = T/P tokens on a rank,
H heads of D, KV kv heads, 4 bytes an element), by hand from the messages the
code sends (parallel/context_parallel.h, parallel/cp_ulysses.h):
  ring       m = 2·Tl·KV·D + Tl (k | v | pos), n_kv = Tl·KV·D
             ledger (send and recv both recorded): 2·(P−1)·(2m + 2·n_kv)
             wire (sent): (P−1)·(2m + 2·n_kv)
  allgather  ledger: all_gather m (forward) + m (backward), reduce_scatter P·2·n_kv
             wire: (P−1)·2m + (P−1)·2·n_kv
  ulysses    U = P, Hu = H/U, KVu = KV/U or 1, row = (Hu + 2·KVu)·D, w = Hu·D:
             ledger (all_to_all: the whole send buffer): U·Tl·((row+1) + (w+Hu) + (row+2w+Hu+1) + row)
             wire: (U−1)/U of it
  hybrid     U = 2 within pairs (as ulysses with those U), and the ring over R = P/U
             ranks for the pair's U·Tl tokens and KVu kv heads.
times B (1 here), layers and microbatches (1 here).
"""
import glob
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from summarise_common import load_steps, read_config, timed_steps  # noqa: E402

CP_AXES = ("cp", "cp_a2a", "cp_ring")


def ring(Tl, KV, D, P):
    m, nkv = 2 * Tl * KV * D + Tl, Tl * KV * D
    return 2 * (P - 1) * (2 * m + 2 * nkv), (P - 1) * (2 * m + 2 * nkv)


def allgather(Tl, KV, D, P):
    m, nkv = 2 * Tl * KV * D + Tl, Tl * KV * D
    return 2 * m + P * 2 * nkv, (P - 1) * 2 * m + (P - 1) * 2 * nkv


def ulysses(Tl, H, KV, D, U):
    Hu, KVu = H // U, (KV // U if KV >= U else 1)
    row, w = (Hu + 2 * KVu) * D, Hu * D
    ledger = U * Tl * ((row + 1) + (w + Hu) + (row + 2 * w + Hu + 1) + row)
    return ledger, ledger * (U - 1) / U


def elements(impl, T, P, H, KV, D):
    """(ledger elements, wire elements) of one layer and microbatch, B = 1."""
    Tl = T // P
    if impl == "ring":
        return ring(Tl, KV, D, P)
    if impl == "allgather":
        return allgather(Tl, KV, D, P)
    if impl == "ulysses":
        return ulysses(Tl, H, KV, D, P)
    U = 2
    a_led, a_wire = ulysses(Tl, H, KV, D, U)
    r_led, r_wire = ring(U * Tl, KV // U if KV >= U else 1, D, P // U)
    return a_led + r_led, a_wire + r_wire


def rank0_cp_bytes(path):
    """Rank 0's bytes on the cp axes in each step (the metrics' per-rank lines)."""
    import json

    out = []
    for j in map(json.loads, open(path)):
        if j.get("rank") == 0 and "comm_bytes_by_axis" in j:
            out.append(sum(v for k, v in j["comm_bytes_by_axis"].items() if k in CP_AXES))
    return out


def report(out, config, skip):
    model = read_config(config)["model"]
    H, L = model["n_heads"], model["n_layers"]
    D = model["d_model"] // H
    runs = {}
    for p in sorted(glob.glob(os.path.join(out, "T*_cp*_kv*_*_r*.jsonl"))):
        m = re.search(r"T(\d+)_cp(\d+)_kv(\d+)_(\w+?)_r(\d+)\.jsonl$", p)
        T, P, KV, impl = int(m[1]), int(m[2]), int(m[3]), m[4]
        med = statistics.median(s["step_time_s"] for s in timed_steps(load_steps(p), skip))
        runs.setdefault((T, P, KV), {}).setdefault(impl, []).append((med, rank0_cp_bytes(p)))
    order = ["ring", "allgather", "ulysses", "hybrid"]
    print(f"== Context-parallel attention side by side: {L} layers, {H} heads of {D}, batch 1, 1 thread a rank")
    print(f"{'T':>5} {'cp':>3} {'kv':>3} {'attention':>10} {'ledger MiB/step':>16} {'by hand':>8} {'wire MiB':>9}"
          f" {'median step s (rounds)':>24} {'best':>7} {'/ring':>6}")
    bad = 0
    for (T, P, KV), d in sorted(runs.items()):
        best_ring = min(t for t, _ in d["ring"]) if "ring" in d else None
        for impl in [i for i in order if i in d]:
            led, wire = elements(impl, T, P, H, KV, D)
            want = 4 * L * led
            got = d[impl][0][1]
            ok = bool(got) and all(b == want for b in got)
            bad += 0 if ok else 1
            meds = [t for t, _ in d[impl]]
            best = min(meds)
            ratio = f"{best / best_ring:6.3f}" if best_ring else "     -"
            print(f"{T:>5} {P:>3} {KV:>3} {impl:>10} {got[0] / 2**20 if got else 0:>16.3f}"
                  f" {'ok' if ok else 'DIFFERS':>8} {4 * L * wire / 2**20:>9.3f}"
                  f" {', '.join(f'{t:.3f}' for t in meds):>24} {best:>7.3f} {ratio}")
    print("ledger bytes: rank 0's per step on cp, cp_a2a and cp_ring; 'by hand': equal in every step to the count"
          " in this file's docstring")
    if bad:
        print(f"{bad} run(s) whose ledger differs from the count by hand")
        sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    report(sys.argv[1], sys.argv[2], int(sys.argv[3]))
