#!/usr/bin/env python3
"""Size limits of src/ (docs/ARCHITECTURE.md, "Size"): no file over MAX_FILE
lines, no function over MAX_FUNCTION lines. A function is found the way the
committed .clang-format lays it out: a line at column 0 (or inside a namespace
at column 0) that opens a body with '{' after a ')' and closes with a '}' at the
same indentation. Prints every offender and exits 1 if there is one.

    tests/style/check_sizes.py [ROOT]
"""
import pathlib
import re
import sys

MAX_FILE = 400
MAX_FUNCTION = 80
SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}
# A definition's first line: not a control statement, namespace, class or struct.
NOT_FUNCTION = re.compile(r"^\s*(namespace|class|struct|enum|union|if|for|while|switch|do|else|return)\b")


def functions(lines):
    """Yields (name, first line number, length) of each function body that
    starts at namespace or class level (indent 0 or 2) in a clang-formatted
    file; the signature may span lines and ends with '{'."""
    i = 0
    while i < len(lines):
        if not lines[i].rstrip().endswith("{"):
            i += 1
            continue
        # Walk back to the first line of this declaration.
        j = i
        while j > 0:
            prev = lines[j - 1].rstrip()
            if not prev or prev.endswith((";", "}", "{", ":")) or prev.lstrip().startswith(("//", "#")):
                break
            j -= 1
        first = lines[j]
        indent = len(first) - len(first.lstrip(" "))
        head = " ".join(l.strip() for l in lines[j : i + 1])
        if indent <= 2 and not NOT_FUNCTION.match(first) and "(" in head and ")" in head and "=" not in head.split("(")[0]:
            close = " " * indent + "}"
            k = i + 1
            while k < len(lines) and lines[k].rstrip() not in (close, close + ";"):
                k += 1
            yield head.split("(")[0][-60:], j + 1, k - j + 1
            i = k
        i += 1


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    bad = []
    for path in sorted((root / "src").rglob("*")):
        if path.suffix not in SUFFIXES:
            continue
        lines = path.read_text().splitlines()
        rel = path.relative_to(root)
        if len(lines) > MAX_FILE:
            bad.append(f"{rel}: {len(lines)} lines (limit {MAX_FILE})")
        for name, line, length in functions(lines):
            if length > MAX_FUNCTION:
                bad.append(f"{rel}:{line}: function {name.strip()} is {length} lines (limit {MAX_FUNCTION})")
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} size limit(s) exceeded")
        return 1
    print(f"sizes ok: every file under src/ within {MAX_FILE} lines, every function within {MAX_FUNCTION}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
