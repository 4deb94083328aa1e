#!/usr/bin/env python3
"""One model that the plan executes (docs/ARCHITECTURE.md, "The linear plan").

Fails naming each offence under src/model/:
  - a file that names tp2d, two_d or _2d (case-sensitive, comments included):
    2-D tensor parallelism is plan entries (src/parallel/linear_plan.h), not a
    second model;
  - a call of all_reduce or all_gather (any variant): the model reaches
    collectives only through src/parallel/;
  - in llama_layer.cpp, any use of `sp`, `sp_on` or `opts_.sp` in code
    (comments and string literals aside): sequence parallelism is a property
    of the plan, not a conditional in the layer.
The checks first run on known-bad snippets and must catch each one.

    tests/style/check_model_plan.py [ROOT]
"""
import pathlib
import re
import sys

NAMES = re.compile(r"tp2d|two_d|_2d")
COLLECTIVE = re.compile(r"\ball_(reduce|gather)\w*\s*\(")
SP = re.compile(r"(?<![\w.>])(sp|sp_on)\b(?!\s*::)|\bopts_\.sp\b")
CODE_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'', re.S)


def code_only(text):
    """The text with comments and string literals blanked (lines kept)."""
    return CODE_NOISE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def offences(name, text):
    found = []
    for i, line in enumerate(text.splitlines(), 1):
        if NAMES.search(line):
            found.append(f"{name}:{i}: names tp2d/two_d/_2d: {line.strip()}")
    code = code_only(text)
    for i, line in enumerate(code.splitlines(), 1):
        if COLLECTIVE.search(line):
            found.append(f"{name}:{i}: calls a collective itself: {line.strip()}")
        if name.endswith("llama_layer.cpp") and SP.search(line):
            found.append(f"{name}:{i}: an sp conditional in the layer: {line.strip()}")
    return found


def self_test():
    bad = [
        ("src/model/a.cpp", "void f() { layer_forward_2d(); }"),
        ("src/model/b.cpp", "// see llama_tp2d.cpp\n"),
        ("src/model/c.cpp", "if (two_d()) g();"),
        ("src/model/d.cpp", '  tp_->all_reduce(x, n, "label");'),
        ("src/model/e.cpp", "  group.all_gather(a, b, n, t, l);"),
        ("src/model/llama_layer.cpp", "  const bool sp = sp_on();"),
        ("src/model/llama_layer.cpp", "  float* x = opts_.sp ? a : b;"),
        ("src/model/llama_layer.cpp", "  if (sp) b.normg.zero();"),
    ]
    good = [
        ("src/model/llama_layer.cpp", '  p.finish("sp weight grads");  // under sp the sums\n  tp::SequenceParallel::on;'),
        ("src/model/f.cpp", "  sum_router_statistics(v, n, cp_, plan_.token_shards());"),
    ]
    ok = True
    for name, text in bad:
        if not offences(name, text):
            print(f"check_model_plan self-test: missed the offence in {text!r}")
            ok = False
    for name, text in good:
        if offences(name, text):
            print(f"check_model_plan self-test: flagged the clean snippet {text!r}")
            ok = False
    return ok


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    if not self_test():
        return 1
    found = []
    for path in sorted((root / "src" / "model").rglob("*")):
        if path.suffix in {".h", ".cpp"}:
            found += offences(str(path.relative_to(root)), path.read_text(encoding="utf-8"))
    for f in found:
        print(f)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
