#!/usr/bin/env python3
"""Every axis on the mesh (docs/ARCHITECTURE.md, "Where each parallel rule lives").

Fails naming each call of split( in src/ outside the places that build
process groups: src/mesh/ (the mesh's axes and sub-axes, all built by the
DeviceMesh constructor), src/comm/ (Group::split itself) and
src/plan/calibrate.cpp (the calibration's own throw-away groups). Any other
group a run needs is an axis or sub-axis of the mesh (src/mesh/sub_axes.h),
taken from it. Comments are ignored; names that merely end in split
(backward_split) are not calls of split.
"""
import pathlib
import re
import sys

ALLOWED_DIRS = ("src/mesh/", "src/comm/")
ALLOWED_FILES = ("src/plan/calibrate.cpp",)
CALL = re.compile(r"(?<![A-Za-z0-9_])split\s*\(")


def code_lines(text):
    """Each line with its // comment removed (string literals kept)."""
    for number, line in enumerate(text.splitlines(), 1):
        out, i, quote = [], 0, None
        while i < len(line):
            ch = line[i]
            if quote:
                out.append(ch)
                if ch == "\\" and i + 1 < len(line):
                    out.append(line[i + 1])
                    i += 1
                elif ch == quote:
                    quote = None
            elif ch in "\"'":
                quote = ch
                out.append(ch)
            elif line.startswith("//", i):
                break
            else:
                out.append(ch)
            i += 1
        yield number, "".join(out)


def main(root):
    root = pathlib.Path(root)
    bad = []
    for path in sorted((root / "src").rglob("*")):
        if path.suffix not in (".cpp", ".h", ".cu", ".cuh"):
            continue
        rel = path.relative_to(root).as_posix()
        if rel.startswith(ALLOWED_DIRS) or rel in ALLOWED_FILES:
            continue
        for number, line in code_lines(path.read_text(encoding="utf-8", errors="replace")):
            if CALL.search(line):
                bad.append(f"{rel}:{number}: {line.strip()}")
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} split( call(s) outside src/mesh/, src/comm/ and src/plan/calibrate.cpp: "
              "make the group an axis or sub-axis of the mesh (src/mesh/sub_axes.h) and take it from there")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
