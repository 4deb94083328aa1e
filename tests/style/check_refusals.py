#!/usr/bin/env python3
"""One home per refusal (docs/ARCHITECTURE.md, "Where each parallel rule lives").

Fails naming each refusal text written at two places in src/: the string
literals of an MT_REQUIRE or MT_THROW message, joined and normalised (case,
spaces), at two or more call sites. A rule that two places need is one
function both call; a second copy of its text drifts from the first.
Messages with fewer than 16 letters of their own ("(", ") must be positive"
with the key passed in) are too generic to be a rule's text and are skipped.
"""
import pathlib
import re
import sys

MIN_LETTERS = 16
# Known copies not merged yet, each with its reason; remove an entry when its
# copies become one function (the test then keeps them one).
KNOWN = {
    # src/cuda links core only, so the CUDA RoPE kernel cannot call ops/rope.cpp's checks.
    "head_dim () must be positive and even for rotary embeddings",
    "rope theta () must be positive",
}
CALL = re.compile(r"\b(MT_REQUIRE|MT_THROW)\s*\(")
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def call_args(text, start):
    """The top-level arguments of the call whose '(' is at text[start - 1]."""
    args, depth, i, begin = [], 1, start, start
    while i < len(text) and depth > 0:
        ch = text[i]
        if ch == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch == "'":
            i += 1
            while i < len(text) and text[i] != "'":
                i += 2 if text[i] == "\\" else 1
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[begin:i])
        elif ch == "," and depth == 1:
            args.append(text[begin:i])
            begin = i + 1
        i += 1
    return args


def strip_comments(text):
    # Line comments only outside string literals; keeps offsets (same length).
    out, i = [], 0
    while i < len(text):
        if text[i] == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = len(text) if j < 0 else j
            out.append(" " * (j - i))
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def refusals(path):
    text = strip_comments(path.read_text(encoding="utf-8", errors="replace"))
    for m in CALL.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if text[line_start : m.start()].lstrip().startswith("#define"):
            continue
        args = call_args(text, m.end())
        message = args[2:] if m.group(1) == "MT_REQUIRE" else args[1:]
        literal = "".join(s for a in message for s in LITERAL.findall(a))
        normal = " ".join(literal.lower().split())
        if sum(c.isalpha() for c in normal) < MIN_LETTERS:
            continue
        yield normal, text.count("\n", 0, m.start()) + 1


def main(root):
    seen = {}
    for path in sorted((pathlib.Path(root) / "src").rglob("*")):
        if path.suffix not in (".cpp", ".h", ".cu", ".cuh"):
            continue
        for normal, line in refusals(path):
            seen.setdefault(normal, []).append(f"{path.relative_to(root)}:{line}")
    bad = {t: w for t, w in seen.items() if len(w) > 1 and t not in KNOWN}
    for text, where in sorted(bad.items()):
        print(f'refusal written {len(where)} times: "{text}"\n  ' + "\n  ".join(where))
    if bad:
        print(f"{len(bad)} refusal text(s) written twice: make each rule one function that every place calls")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
