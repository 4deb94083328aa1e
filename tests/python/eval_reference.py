#!/usr/bin/env python3
"""The float64 `meshtrain eval` loss of a saved model, and the layouts' bound derived from it.

meshtrain eval's loss (src/train/evaluate.cpp) is the mean next-token
cross-entropy over the first WINDOWS windows of the token file, window w being
tokens [w T, w T + T) with their successors as targets. This script computes
it in float64 (llama_reference.py's model on the saved weights), measures the
one-process fp32 value's relative distance d from it (as printed, 6 decimals:
its rounding, at most 5e-7, is below the floor), and prints the bound of a
layout's printed loss against the one-process one, as the training parity
suites do (docs/PARALLELISM.md "How the bounds are derived"):
10 * max(d, N u), N = WINDOWS * T tokens in the mean, u = 2^-24.

usage: eval_reference.py MODEL_DIR TOKENS.bin SEQ_LEN WINDOWS FP32_LOSS
  Prints one line "float64 loss ..., fp32 distance ..., bound B"; B is its last word.
  Exit 1 when an injected bug (the last window dropped, the count one window
  short) would move the loss by no more than 100 bounds.
Exit status 3 when torch is not installed (the caller skips).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    import torch.nn.functional as F
    from llama_reference import forward, read_safetensors
    from train_reference import read_tokens
except ImportError:
    sys.exit(3)

MULTIPLE = 10.0
BUG_FACTOR = 100.0
UNIT_ROUNDOFF = 2.0 ** -24


def main():
    model_dir, tokens_path, T, W, fp32 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    with open(os.path.join(model_dir, "config.json")) as f:
        mcfg = json.load(f)
    if mcfg.get("num_local_experts", 0) > 1:
        print("eval_reference.py: not covered: a mixture of experts")
        sys.exit(4)
    _, p = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    tokens = read_tokens(tokens_path)
    W = min(W, (len(tokens) - 1) // T) if W > 0 else (len(tokens) - 1) // T
    inputs = torch.tensor(tokens[:W * T].reshape(W, T))
    targets = torch.tensor(tokens[1:W * T + 1].reshape(W, T))
    torch.set_num_threads(1)
    with torch.no_grad():
        logits = forward(mcfg, p, inputs)
        ce = F.cross_entropy(logits.reshape(W * T, -1), targets.reshape(-1), reduction="none").view(W, T)
    loss = ce.mean().item()
    d = abs(fp32 - loss) / abs(loss)
    bound = MULTIPLE * max(d, W * T * UNIT_ROUNDOFF)
    # The bugs a layout could have: the last window's sum dropped (a missing reduction), and
    # the sum divided by one window too few (a wrong count); each must move the loss by > 100 bounds.
    moved = [abs(ce[:-1].sum().item() / (W * T) - loss) / loss / bound,
             abs(ce.sum().item() / ((W - 1) * T) - loss) / loss / bound]
    print("float64 loss %.9f, fp32 distance %.3e; a dropped window moves it %.3g bounds, a wrong count %.3g; "
          "bound %.6e" % (loss, d, *moved, bound))
    if min(moved) <= BUG_FACTOR:
        sys.exit(1)


if __name__ == "__main__":
    main()
