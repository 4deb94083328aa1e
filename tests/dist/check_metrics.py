"""Checks the header and rank lines of a metrics file (docs/FORMATS.md, "Metrics file").

check_metrics.py METRICS RANKS [TRACE]

- the first line is the header: the config (parallel.dp x tp x pp x cp = RANKS) and the analytic memory
  model (per-rank parts summing to its total);
- every step line is followed by RANKS rank lines of that step, ranks 0..RANKS-1 in order, with
  coordinates, a time split whose exposed communication, pipeline idle and optimizer fit in the
  step time (so that compute, the rest, is not negative), a positive cpu_s, and memory peaks by kind;
- with TRACE: per rank and traced step, the wait spans of the trace (those outside the pipeline's own
  transfers) sum to the rank line's comm_exposed, per axis, within 1 us per call (both come from the
  comm ledger's wait times, printed to 1 ns).
"""
import json
import sys


def fail(msg):
    print("FAIL metrics:", msg)
    sys.exit(1)


def main():
    lines = [json.loads(l) for l in open(sys.argv[1])]
    ranks = int(sys.argv[2])
    head = lines[0].get("header")
    if head is None:
        fail("the first line is not the header")
    p = head["config"]["parallel"]
    if p["dp"] * p["tp"] * p["pp"] * p["cp"] != ranks or head["world_size"] != ranks:
        fail(f"header layout {p} / world {head['world_size']} is not {ranks} ranks")
    model = head["memory_model"]
    if sum(model["per_rank"].values()) != model["total"] or model["total"] <= 0:
        fail(f"memory model parts do not sum to its total: {model}")
    if any("header" in l for l in lines[1:]):
        fail("more than one header line")
    by_step = {}
    for i, l in enumerate(lines):
        if "loss" not in l:
            continue
        got = lines[i + 1 : i + 1 + ranks]
        if [g.get("rank") for g in got] != list(range(ranks)) or any(g["step"] != l["step"] for g in got):
            fail(f"step {l['step']}: not followed by its {ranks} rank lines")
        for g in got:
            t = g["time_s"]
            spent = sum(t["comm_exposed"].values()) + t["pipeline_idle"] + t["optimizer"]
            if spent > t["step"] * (1 + 1e-9) or t["compute"] < 0:
                fail(f"step {l['step']} rank {g['rank']}: parts {t} exceed the step time")
            if not g.get("cpu_s", -1) > 0:
                fail(f"step {l['step']} rank {g['rank']}: no positive cpu_s")
            if set(g["coords"]) != {"dp", "pp", "cp", "tp"} or g["mem_peak_by_kind"]["param"] <= 0:
                fail(f"rank line without coordinates or memory: {g}")
        by_step[l["step"]] = got
    if len(sys.argv) > 3:
        events = json.load(open(sys.argv[3]))["traceEvents"]
        windows = [e for e in events if e.get("cat") == "step"]
        for w in windows:
            line = by_step[w["args"]["step"]][w["pid"]]
            t0, t1 = w["ts"], w["ts"] + w["dur"]
            waits, calls = {}, {}
            for e in events:
                if e.get("cat") == "wait" and e["pid"] == w["pid"] and t0 <= e["ts"] + e["dur"] <= t1 + 0.01:
                    a = e["args"]
                    if a["axis"] == "pp" and a["op"] in ("send", "recv"):
                        continue  # the pipeline's transfers: its idle time
                    waits[a["axis"]] = waits.get(a["axis"], 0.0) + e["dur"]
                    calls[a["axis"]] = calls.get(a["axis"], 0) + 1
            for axis in set(waits) | set(line["time_s"]["comm_exposed"]):
                got = line["time_s"]["comm_exposed"].get(axis, 0.0) * 1e6
                if abs(got - waits.get(axis, 0.0)) > 1.0 * max(1, calls.get(axis, 0)):
                    fail(f"rank {w['pid']} step {w['args']['step']} axis {axis}: trace waits "
                         f"{waits.get(axis, 0.0):.3f} us, metrics {got:.3f} us")
    print(f"ok   metrics {sys.argv[1]}: header, {len(by_step)} steps x {ranks} rank lines"
          + (", exposed communication = the trace's waits" if len(sys.argv) > 3 else ""))


main()
