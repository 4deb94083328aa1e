#!/usr/bin/python3
"""Synthetic pass-key text for the long-context study (docs/BENCHMARKS.md, "Long context").

Deterministic for a given --seed (Python's random.Random, no other source of randomness).

  passkey.py corpus --out FILE [--fortunes DIR] [--share S] [--seed N]
      One text in the fortune format ('%' lines between documents) that
      `meshtrain prepare --text FILE` reads: the fortunes of DIR, in the order
      prepare reads a folder, mixed with pass-key documents so that about S of
      the training tokens are pass-key text. prepare sends every 20th document
      to val (docs/FORMATS.md, "Prepared dataset"); those slots always hold a
      fortune, so val.bin is held-out fortunes only.
  passkey.py probe --out FILE --keys FILE --sentences N --depth D [--trials T] [--seed N]
      T probe prompts, one a line (`meshtrain generate --prompts FILE`): N filler
      sentences with the key statement after round(D * N) of them, ending in
      "What is the pass key? The pass key is"; FILE --keys gets the keys, one a line.
  passkey.py check
      A small run of both in memory that verifies the format; exit 1 on a mismatch.
"""

import argparse
import os
import random
import re
import sys

FILLER = ["The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.",
          "There and back again."]
QUESTION = "What is the pass key? The pass key is"
VAL_EVERY = 20  # prepare's default val_fraction 0.05: document d goes to val when (d + 1) % 20 == 0


def key_statement(key):
    return f"The pass key is {key}. Remember it. {key} is the pass key."


def filler(rng, n):
    start = rng.randrange(len(FILLER))
    return [FILLER[(start + i) % len(FILLER)] for i in range(n)]


def passkey_text(rng, n_sentences, depth, key):
    """Filler with the key statement after round(depth * n) sentences, then the question."""
    sentences = filler(rng, n_sentences)
    at = round(depth * n_sentences)
    return " ".join(sentences[:at] + [key_statement(key)] + sentences[at:] + [QUESTION])


def new_key(rng):
    return rng.randrange(10000, 100000)  # five digits


def training_document(rng):
    # 2..16 filler sentences (about 5 tokens each): the whole document fits a
    # 128-token training window, the key at any depth.
    key = new_key(rng)
    n = rng.randint(2, 16)
    return passkey_text(rng, n, rng.random(), key) + f" {key}."


def fortune_documents(folder):
    """The documents `meshtrain prepare` reads from a folder, in its order."""
    names = sorted(n for n in os.listdir(folder)
                   if not (n.endswith(".dat") or n.endswith(".u8") or n.startswith(".")))
    docs = []
    for name in names:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for doc in re.split(r"^%\r?$\n?", text, flags=re.M):
            doc = doc.rstrip("\r\n")
            if doc.strip():
                docs.append(doc)
    return docs


def mix(fortunes, share, rng):
    """Fortunes in order with pass-key documents between them; every VAL_EVERY-th slot a fortune."""
    fortune_chars = sum(len(d) for d in fortunes) * (VAL_EVERY - 1) / VAL_EVERY
    mean_passkey_chars = 9 * 17 + 80  # 9 filler sentences of about 17 characters, the key and question
    n_passkey = int(share / (1 - share) * fortune_chars / mean_passkey_chars)
    train_slots = len(fortunes) * (VAL_EVERY - 1) // VAL_EVERY + n_passkey
    p_passkey = n_passkey / max(1, train_slots)
    out, f, made = [], 0, 0
    while f < len(fortunes):
        if (len(out) + 1) % VAL_EVERY != 0 and made < n_passkey and rng.random() < p_passkey:
            out.append(training_document(rng))
            made += 1
        else:
            out.append(fortunes[f])
            f += 1
    return out


def write_corpus(docs, path):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n%\n".join(docs) + "\n")


def probes(sentences, depth, trials, rng):
    out = []
    for _ in range(trials):
        key = new_key(rng)
        out.append((passkey_text(rng, sentences, depth, key), key))
    return out


def check():
    rng = random.Random(7)
    ok = True

    def expect(cond, what):
        nonlocal ok
        if not cond:
            print(f"passkey.py check: FAILED: {what}", file=sys.stderr)
            ok = False

    fortunes = [f"fortune {i}\nsecond line" for i in range(200)]
    docs = mix(fortunes, 0.25, rng)
    expect([d for d in docs if d.startswith("fortune")] == fortunes, "fortunes kept, in order")
    expect(all(docs[i].startswith("fortune") for i in range(VAL_EVERY - 1, len(docs), VAL_EVERY)),
           "every 20th document (prepare's val) is a fortune")
    keyed = [d for d in docs if not d.startswith("fortune")]
    expect(len(keyed) > 0, "some pass-key documents")
    for d in keyed:
        m = re.fullmatch(r"(.*)The pass key is (\d{5})\. Remember it\. \2 is the pass key\.(.*)"
                         r"What is the pass key\? The pass key is \2\.", d)
        expect(m is not None and "\n" not in d and "%" not in d, f"document format: {d!r}")
    for depth in (0.0, 0.5, 1.0):
        for text, key in probes(10, depth, 3, rng):
            before = text.split(key_statement(key))[0]
            expect(before.count(".") == round(depth * 10), f"depth {depth}: {text!r}")
            expect(text.endswith(QUESTION) and "\n" not in text, f"probe ends in the question: {text!r}")
    again = mix(fortunes, 0.25, random.Random(7))
    expect(again == docs, "the same seed gives the same corpus")
    print("passkey.py check: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("--out", required=True)
    c.add_argument("--fortunes", default="/usr/share/games/fortunes")
    c.add_argument("--share", type=float, default=0.25)
    c.add_argument("--seed", type=int, default=1)
    q = sub.add_parser("probe")
    q.add_argument("--out", required=True)
    q.add_argument("--keys", required=True)
    q.add_argument("--sentences", type=int, required=True)
    q.add_argument("--depth", type=float, required=True)
    q.add_argument("--trials", type=int, default=10)
    q.add_argument("--seed", type=int, default=1)
    sub.add_parser("check")
    a = p.parse_args()
    if a.cmd == "check":
        return check()
    if a.cmd == "corpus":
        if not 0 < a.share < 1:
            p.error(f"--share ({a.share}) must be in (0, 1)")
        docs = mix(fortune_documents(a.fortunes), a.share, random.Random(a.seed))
        write_corpus(docs, a.out)
        print(f"wrote {a.out}: {len(docs)} documents", file=sys.stderr)
        return 0
    if not 0 <= a.depth <= 1 or a.sentences < 1 or a.trials < 1:
        p.error("--depth must be in [0, 1], --sentences and --trials >= 1")
    rows = probes(a.sentences, a.depth, a.trials, random.Random(a.seed))
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("".join(text + "\n" for text, _ in rows))
    with open(a.keys, "w", encoding="utf-8") as f:
        f.write("".join(f"{key}\n" for _, key in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
