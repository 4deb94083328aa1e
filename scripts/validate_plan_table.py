"""The table of scripts/validate_plan.sh: measured against predicted per-rank
peak memory and step time, one row per layout; gates memory within 10% (every
layout) and time within 25% (layouts of at most 2 ranks).

    validate_plan_table.py ROWS.tsv MACHINE.json DOCS.md|- [memory,time] [PASSES]

A row names each run's metrics as a prefix: PREFIX.1.jsonl … PREFIX.PASSES.jsonl,
the same layout trained in each pass; its step time is the faster pass's.
"""
import json
import os
import statistics
import sys

MEM_TOL, TIME_TOL = 0.10, 0.25
BEGIN, END = "<!-- validate_plan: begin -->", "<!-- validate_plan: end -->"


def measured_peak_mib(out_path):
    """The largest rank's tracked total of the run's 'peak memory per rank' table:
    the column headed 'total' (the process's resident memory, 'rss' and
    'rss_peak', follows it and is not what the memory model predicts)."""
    lines = open(out_path).read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("peak memory per rank"))
    column = lines[start + 1].split().index("total")
    totals = []
    for line in lines[start + 2:]:
        parts = line.split()
        if not parts or not parts[0].isdigit():
            break
        totals.append(float(parts[column]))
    return max(totals)


def measured_step_s(metrics_prefix, passes):
    """The median step after the first, of the faster pass."""
    medians = []
    for p in range(1, passes + 1):
        steps = [json.loads(l) for l in open(f"{metrics_prefix}.{p}.jsonl") if '"step_time_s"' in l]
        medians.append(statistics.median(s["step_time_s"] for s in steps if s["step"] >= 1))
    return min(medians)


def layer_gemm_rates(machine):
    """The range of the model's layer GEMM rates per rank (calibrate --config),
    for each number of ranks on the node that calibrate measured."""
    parts = []
    for ranks in sorted({g.get("ranks", 0) for g in machine["gemm"]}):
        rates = [g["flops_per_s"] / max(1, ranks) / 1e9 for g in machine["gemm"]
                 if g.get("ranks", 0) == ranks and not g["m"] == g["n"] == g["k"]]
        if rates:
            threads = next(g.get("threads", 0) for g in machine["gemm"] if g.get("ranks", 0) == ranks)
            parts.append(f"{ranks} rank(s) of {threads} thread(s): layer GEMMs {min(rates):.0f}-{max(rates):.0f} "
                         f"GFLOP/s per rank")
    return "; ".join(parts) if parts else "no layer GEMMs measured"


def main():
    rows_path, machine_path, docs = sys.argv[1:4]
    gates = (sys.argv[4] if len(sys.argv) > 4 else "memory,time").split(",")
    passes = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    machine = json.load(open(machine_path))
    table = ["| layout | ranks | peak MiB measured | predicted | error | step s measured | predicted | error | gated |",
             "|---|---|---|---|---|---|---|---|---|"]
    failures = []
    for line in open(rows_path):
        name, np_, layout, out, metrics, plan = line.rstrip("\n").split("\t")
        p = json.load(open(plan))
        mem_m, mem_p = measured_peak_mib(out), p["memory_total_bytes"] / 2**20
        t_m, t_p = measured_step_s(metrics, passes), p["step_s"]
        mem_err, t_err = mem_p / mem_m - 1, t_p / t_m - 1
        gate_time = int(np_) <= 2 and "time" in gates
        if abs(mem_err) > MEM_TOL:
            failures.append(f"{name}: memory {mem_err:+.1%}")
        if gate_time and abs(t_err) > TIME_TOL:
            failures.append(f"{name}: time {t_err:+.1%}")
        table.append(f"| `{layout}` | {np_} | {mem_m:.2f} | {mem_p:.2f} | {mem_err:+.1%} | {t_m:.4f} | {t_p:.4f} "
                     f"| {t_err:+.1%} | memory{', time' if gate_time else ''} |")
    load = os.getloadavg()[0]
    note = (f"Machine file: {machine['description']}; best GEMM rate {machine['peak_flops'] / 1e9:.1f} GFLOP/s, "
            f"memory {machine['memory_bytes_per_s'] / 1e9:.1f} GB/s; {layer_gemm_rates(machine)}; load average "
            f"at the end {load:.1f} on {os.cpu_count()} cores.")
    text = "\n".join(table) + "\n\n" + note + "\n"
    print(text)
    print("FAIL: " + "; ".join(failures) if failures else "all gates pass")
    if docs != "-":
        doc = open(docs).read()
        block = BEGIN + "\n" + text + END
        if BEGIN in doc:
            doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):]
        else:
            doc += ("\n## Planner validation (issue: observability and planning)\n\n"
                    "`scripts/validate_plan.sh` (docs/PLANNER.md, \"Validation here\"): each layout trained for 10 "
                    "steps of `configs/plan/validate.toml`, against `meshtrain plan --layout` with this machine's "
                    "calibrated description.\n\n" + block + "\n")
        open(docs, "w").write(doc)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
