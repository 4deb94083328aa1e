#!/usr/bin/env python3
"""Helpers of the cluster benches (bench/cluster_placement.sh, cluster_cp.sh, cluster_dp.sh).

  describe NODE LINK                   the two calibrations' link fits, one line (bench/cluster_cp.sh)
  machine NODE LINK RATE DPN OUT       NODE's calibration as a cluster of DPN-rank nodes whose
                                       inter-node link has LINK's latency and the shaped RATE (tc units)
  nodes MACHINE DPN OUT                MACHINE (calibrated across the cluster) with DPN devices per node
  table ROWS STEPS                     the Markdown table of the runs
  table_dp ROWS STEPS                  bench/cluster_dp.sh's table: the ledger by link
  table_axes ROWS STEPS                bench/cluster_inner.sh's table: the ledger by axis and link
"""
import json
import statistics
import sys


def tc_rate_bytes(rate):
    for unit, mult in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * mult / 8
    raise SystemExit("unknown rate %r (bit, kbit, mbit, gbit)" % rate)


def describe(node_path, link_path):
    node, link = json.load(open(node_path)), json.load(open(link_path))
    print("calibrate: the link (1 rank per node): alpha %.1f us, %.3g B/s; inside a node (4 ranks): "
          "alpha %.1f us, %.3g B/s" % (link["intra"]["alpha_s"] * 1e6, link["intra"]["bytes_per_s"],
                                       node["intra"]["alpha_s"] * 1e6, node["intra"]["bytes_per_s"]))


def machine(node_path, link_path, rate, devices_per_node, out):
    node, link = json.load(open(node_path)), json.load(open(link_path))
    node["name"] = "emulated-2x4"
    node["devices_per_node"] = int(devices_per_node)
    # Calibrated with one rank per node, the "intra" fit is the only link it had: the inter-node one.
    node["inter"] = {"alpha_s": link["intra"]["alpha_s"], "bytes_per_s": tc_rate_bytes(rate)}
    node["shared_link"] = True  # the node's one veth: its ranks' flows across share it
    json.dump(node, open(out, "w"), indent=1)


def nodes(machine_path, devices_per_node, out):
    """A calibrated machine with another number of devices per node (a layout launched across the nodes)."""
    m = json.load(open(machine_path))
    m["devices_per_node"] = int(devices_per_node)
    json.dump(m, open(out, "w"), indent=1)


def runs(rows_path):
    """Per row of the bench: name, link, rank 0's step lines, its median step after the first, the plan, tc bytes."""
    for line in open(rows_path):
        name, bw, metrics, plan, link = line.rstrip("\n").split("\t")
        recs = [json.loads(l) for l in open(metrics)]
        r0 = [r for r in recs if r.get("rank") == 0 and "time_s" in r]
        median = statistics.median([r["time_s"]["step"] for r in r0][1:])
        yield name, bw, r0, median, json.load(open(plan)), int(link)


def table(rows_path, steps):
    print("| run | link | step (measured, median) | step (planner) | ledger bytes/step, rank 0: tp / pp / dp "
          "| by link: node / across | link bytes (tc, %s steps, both ways) | planner: axes over the link |" % steps)
    print("|---|---|---|---|---|---|---|---|")
    for name, bw, r0, median, p, link in runs(rows_path):
        by_axis, by_link = r0[-1]["comm_bytes_by_axis"], r0[-1]["comm_bytes_by_link"]
        crosses = ", ".join(c["axis"] for c in p["comm"] if c["crosses_nodes"]) or "none"
        print("| %s | %s | %.3f s | %.3f s | %s / %s / %s | %s / %s | %.1f MB | %s |" % (
            name, bw, median, p["step_s"], by_axis.get("tp", 0), by_axis.get("pp", 0),
            by_axis.get("dp", 0), by_link.get("node", 0), by_link.get("across", 0), link / 1e6, crosses))


def table_dp(rows_path, steps):
    print("| run | link | step (measured, median) | step (planner) | planner's dp term | ledger bytes/step, "
          "rank 0: inside the node / across | link bytes (tc, %s steps, both ways) |" % steps)
    print("|---|---|---|---|---|---|---|")
    for name, bw, r0, median, p, link in runs(rows_path):
        by_link = r0[-1]["comm_bytes_by_link"]
        dp = [c for c in p["comm"] if c["axis"] == "dp"]
        print("| %s | %s | %.3f s | %.3f s | %s | %.2f / %.2f MB | %.1f MB |" % (
            name, bw, median, p["step_s"], dp[0]["what"] if dp else "-",
            by_link.get("node", 0) / 1e6, by_link.get("across", 0) / 1e6, link / 1e6))


def table_axes(rows_path, steps):
    print("| run | link | step (measured, median) | step (planner) | ledger bytes/step, rank 0, by axis "
          "| by link: node / across | link bytes (tc, %s steps, both ways) | planner: axes over the link |" % steps)
    print("|---|---|---|---|---|---|---|---|")
    for name, bw, r0, median, p, link in runs(rows_path):
        by_axis, by_link = r0[-1]["comm_bytes_by_axis"], r0[-1]["comm_bytes_by_link"]
        crosses = ", ".join(c["axis"] for c in p["comm"] if c["crosses_nodes"]) or "none"
        axes = ", ".join("%s %.2f MB" % (a, b / 1e6) for a, b in sorted(by_axis.items()))
        print("| %s | %s | %.3f s | %.3f s | %s | %.2f / %.2f MB | %.1f MB | %s |" % (
            name, bw, median, p["step_s"], axes, by_link.get("node", 0) / 1e6, by_link.get("across", 0) / 1e6,
            link / 1e6, crosses))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"describe": describe, "machine": machine, "nodes": nodes, "table": table, "table_dp": table_dp, "table_axes": table_axes}[cmd](*args)
