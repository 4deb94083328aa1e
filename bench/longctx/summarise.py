#!/usr/bin/python3
"""Tables of the long-context study (bench/longctx/run.sh).

  summarise.py probe-cell SCALING LEN TRIALS KEYS GEN.jsonl GEN.err
      One line per depth cell (TRIALS consecutive prompts, one generate batch):
      scaling, length, depth, correct, trials, mean prompt tokens (the batch's
      prefill tokens / trials, from generate's stderr), digits right (of the
      5 · TRIALS key digits, place by place: about 10% by chance).
  summarise.py report DIR
      Markdown tables (loss by position, pass-key accuracy) and an ASCII plot.
"""

import json
import os
import re
import sys

DEPTHS = ["0.1", "0.3", "0.5", "0.7", "0.9"]
SCALINGS = ["none", "linear", "dynamic", "yarn"]


def probe_cell(scaling, length, trials, keys_path, gen_path, err_path):
    trials = int(trials)
    keys = [line.strip() for line in open(keys_path)]
    gens = [json.loads(line) for line in open(gen_path)]
    prefill = [int(m) for m in re.findall(r"prefill (\d+) tokens", open(err_path).read())]
    if len(gens) != len(keys) or len(prefill) * trials != len(keys):
        sys.exit(f"summarise.py: {gen_path}: {len(gens)} continuations, {len(keys)} keys, "
                 f"{len(prefill)} batches of {trials}")
    for c, depth in enumerate(DEPTHS):
        ok = digits = 0
        for i in range(c * trials, (c + 1) * trials):
            m = re.search(r"\d+", gens[i]["text"])
            ok += m is not None and m.group(0) == keys[i]
            digits += sum(a == b for a, b in zip(m.group(0) if m else "", keys[i]))
        print(f"{scaling}\t{length}\t{depth}\t{ok}\t{trials}\t{prefill[c] / trials:.0f}\t{digits}")


def read_buckets(path):
    lines = open(path).read().split("\n")
    loss = float(lines[0].split()[1])
    buckets = [line.split()[1:] for line in lines if line.startswith("bucket ")]
    return loss, [(int(a), int(b), int(n), float(x)) for a, b, n, x in buckets]


def ascii_plot(series, width=8, height=12):
    """Rows = loss levels, columns = buckets; each scaling's letter at its mean loss."""
    values = [v for _, vs in series for v in vs]
    lo, hi = min(values), max(values)
    grid = [[" "] * (len(series[0][1]) * width) for _ in range(height)]
    for name, vs in series:
        for b, v in enumerate(vs):
            row = round((hi - v) / (hi - lo) * (height - 1)) if hi > lo else 0
            col = b * width + width // 2 + SCALINGS.index(name) - 2
            grid[row][col] = name[0]
    lines = [f"{hi - (hi - lo) * r / (height - 1):6.2f} |" + "".join(g) for r, g in enumerate(grid)]
    axis = "".join(f"{b * 128:<{width}d}" for b in range(len(series[0][1])))
    return "\n".join(lines + ["       +" + "-" * len(grid[0]), "        " + axis + " position",
                              "        n = none, l = linear, d = dynamic, y = yarn (factor 8)"])


def report(out):
    print("Mean loss by position, held-out fortunes, 1024-token windows (trained at 128):\n")
    loss128, _ = read_buckets(os.path.join(out, "loss-128.txt"))
    series, table = [], {}
    for s in SCALINGS:
        loss, buckets = read_buckets(os.path.join(out, f"loss-{s}.txt"))
        table[s] = (loss, buckets)
        series.append((s, [b[3] for b in buckets]))
    first = table[SCALINGS[0]][1]
    print("| positions | tokens | " + " | ".join(SCALINGS) + " |")
    print("|---|---|" + "---|" * len(SCALINGS))
    for i, (a, b, n, _) in enumerate(first):
        print(f"| {a}-{b} | {n} | " + " | ".join(f"{table[s][1][i][3]:.3f}" for s in SCALINGS) + " |")
    print("| all | | " + " | ".join(f"{table[s][0]:.3f}" for s in SCALINGS) + " |")
    print(f"\n(the same tokens in 128-token windows, the training length, no scaling: {loss128:.3f})\n")
    print("```\n" + ascii_plot(series) + "\n```\n")
    cells = [line.split("\t") for line in open(os.path.join(out, "probe.tsv")) if line.strip()]
    print("Pass-key retrieval (greedy), correct / trials by depth of the key:\n")
    print("| scaling | length (prompt tokens) | " + " | ".join(DEPTHS) + " | all | digits right |")
    print("|---|---|" + "---|" * (len(DEPTHS) + 2))
    for s in SCALINGS:
        for length in ["128", "256", "512", "1024"]:
            row = [c for c in cells if c[0] == s and c[1] == length]
            if not row:
                continue
            tokens = sum(float(c[5]) for c in row) / len(row)
            ok, n = sum(int(c[3]) for c in row), sum(int(c[4]) for c in row)
            digits = sum(int(c[6]) for c in row)
            print(f"| {s} | {length} ({tokens:.0f}) | " + " | ".join(f"{c[3]}/{c[4]}" for c in row) +
                  f" | {ok}/{n} | {100 * digits / (5 * n):.0f}% |")


def main():
    if len(sys.argv) == 8 and sys.argv[1] == "probe-cell":
        probe_cell(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        report(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
