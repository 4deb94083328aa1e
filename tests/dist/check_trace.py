"""Checks a meshtrain --trace file (docs/FORMATS.md, "Trace").

check_trace.py TRACE RANKS STEPS...

- every rank 0..RANKS-1 is a process, named with its mesh coordinates;
- every span has a non-negative duration, and per (rank, thread) the spans nest
  properly: a span that starts inside another ends inside it;
- every communication span (cat comm, and the wait spans) carries axis, op
  and bytes, its time waited for (wait_us) within its time in flight, and at
  least one collective or transfer was recorded per rank unless RANKS is 1;
- memory counters (ph C, one series per kind) are present on every rank;
- each traced step in STEPS has a window (thread "steps") on every rank, and
  the union of the main thread's top-level spans that start inside the window
  covers between 95% and 105% of the measured step time (step_time_s): the
  step's phases (batch, the executor's actions and their idle gaps, finish
  grads, reduce, optimizer) account for its time, no more and no less.
"""
import json
import sys

EPS_US = 0.01  # timestamps are printed to 1 ns


def fail(msg):
    print("FAIL trace:", msg)
    sys.exit(1)


def check_nesting(spans, where):
    spans = sorted(spans, key=lambda e: (e["ts"], -e["dur"]))
    stack = []
    for e in spans:
        start, end = e["ts"], e["ts"] + e["dur"]
        while stack and start >= stack[-1][1] - EPS_US:
            stack.pop()
        if stack and end > stack[-1][1] + EPS_US:
            fail(f"{where}: span {e['name']} [{start}, {end}] overlaps the end of {stack[-1][2]} (ends {stack[-1][1]})")
        stack.append((start, end, e["name"]))


def top_level(spans):
    out, end = [], -1.0
    for e in sorted(spans, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= end - EPS_US:
            out.append(e)
            end = e["ts"] + e["dur"]
    return out


def union_us(spans):
    total, cur_start, cur_end = 0.0, None, None
    for e in sorted(spans, key=lambda e: e["ts"]):
        s, t = e["ts"], e["ts"] + e["dur"]
        if cur_end is None or s > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = s, t
        else:
            cur_end = max(cur_end, t)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def main():
    path, ranks, steps = sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3:]]
    events = json.load(open(path))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    if sorted(names) != list(range(ranks)):
        fail(f"processes {sorted(names)}, expected ranks 0-{ranks - 1}")
    for r, n in names.items():
        if not (n.startswith(f"rank {r} (") and all(a in n for a in ("dp ", "pp ", "cp ", "tp "))):
            fail(f"rank {r} is named {n!r}, without its mesh coordinates")
    spans = [e for e in events if e.get("ph") == "X"]
    for e in spans:
        if e["dur"] < 0 or e["ts"] < -EPS_US:
            fail(f"negative time in {e}")
        if e["cat"] in ("comm", "wait") and not all(k in e["args"] for k in ("axis", "op", "bytes")):
            fail(f"communication span without axis/op/bytes: {e}")
        if e["cat"] == "comm" and not 0 <= e["args"]["wait_us"] <= e["dur"] + EPS_US:
            fail(f"a call waited for longer than it was in flight: {e}")
    by_thread = {}
    for e in spans:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    for (pid, tid), mine in by_thread.items():
        check_nesting(mine, f"rank {pid} thread {tid}")
    for r in range(ranks):
        mine = [e for e in spans if e["pid"] == r]
        if ranks > 1 and not any(e["cat"] == "comm" for e in mine):
            fail(f"rank {r}: no communication spans")
        counters = [e for e in events if e.get("ph") == "C" and e["pid"] == r]
        if not counters or not all(k in counters[0]["args"] for k in ("param", "grad", "optim", "activation")):
            fail(f"rank {r}: no memory counters by kind")
        windows = {e["args"]["step"]: e for e in mine if e["cat"] == "step"}
        if sorted(windows) != sorted(steps):
            fail(f"rank {r}: traced steps {sorted(windows)}, expected {steps}")
        main_spans = [e for e in mine if e["tid"] == 0]
        for s, w in windows.items():
            t0, t1 = w["ts"], w["ts"] + w["dur"]
            inside = [e for e in top_level(main_spans) if t0 - EPS_US <= e["ts"] < t1]
            share = union_us(inside) / (w["args"]["step_time_s"] * 1e6)
            if not 0.95 <= share <= 1.05:
                fail(f"rank {r} step {s}: its top-level spans cover {share:.3f} of the step time")
            if not any(e["cat"] == "layer" for e in main_spans if t0 <= e["ts"] < t1):
                fail(f"rank {r} step {s}: no per-layer compute spans")
            if not any(e["name"] == "optimizer" for e in inside):
                fail(f"rank {r} step {s}: no optimizer span")
    print(f"ok   trace {path}: {ranks} ranks, steps {steps}, {len(spans)} spans nested, comm spans with "
          "axis/op/bytes, memory counters, top-level spans within 5% of each step time")


main()
