"""What the benchmark summarisers (bench/{dist,tp,pp,cp}/summarise.py) share: the
config, the per-step metrics of a run (one JSON object per step, written by rank
0), the steps a figure is taken from, and the command-line dispatch. Standard
library only.
"""
import json
import os
import re
import sys

MiB = 2.0**20


def read_config(path):
    try:
        import tomllib  # Python >= 3.11

        with open(path, "rb") as f:
            return tomllib.load(f)
    except ImportError:  # a minimal reader for our flat configs
        cfg, sec = {}, None
        for line in open(path):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.fullmatch(r"\[(\w+)\]", line)
            if m:
                sec = cfg.setdefault(m.group(1), {})
                continue
            k, v = (s.strip() for s in line.split("=", 1))
            v = v.strip('"') if v.startswith('"') else (v == "true" if v in ("true", "false") else float(v))
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            sec[k] = v
        return cfg


def load_steps(path):
    """The training steps of a metrics file (evaluation lines left out)."""
    return [j for j in map(json.loads, open(path)) if "step_time_s" in j]


def timed_steps(steps, skip):
    """The steps after the first `skip` (warm-up), or the last one if there are no more."""
    return steps[skip:] if len(steps) > skip else steps[-1:]


def run_name(path):
    return os.path.basename(path)[: -len(".jsonl")]


def data_dir(config):
    return read_config(config).get("data", {}).get("dir", "data/fortunes")


def main(run_line, report, extra=None):
    """The command line every summariser shares, plus its own `extra` commands:

      summarise.py data-dir CONFIG            the config's data.dir
      summarise.py run-line METRICS SKIP SECS one line about a finished run
      summarise.py report OUT CONFIG SKIP     the tables
    """
    commands = {
        "data-dir": lambda config: print(data_dir(config)),
        "run-line": lambda path, skip, secs: run_line(path, int(skip), secs),
        "report": lambda out, config, skip: report(out, config, int(skip)),
        **(extra or {}),
    }
    cmd = sys.argv[1]
    if cmd not in commands:
        sys.exit(f"summarise.py: unknown command {cmd}")
    commands[cmd](*sys.argv[2:])
