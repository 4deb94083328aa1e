#!/usr/bin/env python3
"""The float64 run of a one-process fp32 training run, and the parity bounds derived from it.

The distributed parity suites compare every layout with a one-process fp32 run.
Two fp32 runs that sum in different orders differ by rounding alone, and how much
depends on the host (vector width, the BLAS kernel). The bound is therefore
derived per run, on the host at hand, from the reference's own rounding error:
this script repeats the reference's steps in float64 from the same initial
weights and the same batches (meshtrain's Philox initialisation and sampler,
written again here from docs/MODEL.md's rules), measures the fp32 run's distance
d from it (per-step loss, per-step gradient norm, final tensors) — the worst of
two one-process runs in different summation orders when a twin is given, two
samples of one-process rounding error rather than one — and writes

    bound = MULTIPLE * max(d, FLOOR)

for each quantity. Why this covers any correct layout: a layout is the same
arithmetic in another summation order, so its own distance from float64 is of
the reference's size, and |layout - ref| <= d_layout + d_ref. MULTIPLE = 10
allows d_layout up to 9 d (d is the worst over all steps and both runs, so a
step or a run that happens to round close to the exact value does not set it;
with one run alone the layouts of parity_pp.sh reached 7.2 d under OpenBLAS's
Haswell kernel, with the twin 1.8 d). FLOOR is
the rounding bound of one sum over the batch's N = batch_size * seq_len tokens,
N u with u = 2^-24 (Higham's gamma_N, relative to the sum of magnitudes): the
loss and every gradient element are such sums, and a layout may split them in
other places, so below it a distance is one rounding's luck, not a measure.

The same script shows that the bounds still catch bugs: with --bugs it also
runs the float64 training with the faults a broken layout would have (one
sequence's gradient dropped, as a skipped data-parallel reduction of one
microbatch; one layer's weight gradients halved, as a tensor-parallel sum over
only one of two ranks; the loss scaled by the wrong token count) and requires
each to move the metrics or tensors by more than 100 bounds.

Covers the dense Llama of llama_reference.py with AdamW, SGD and LAMB,
gradient clipping, the warmup-cosine schedule, tied embeddings,
data.ignore_id, attention and hidden dropout and RoPE scaling; the mixture of
experts (train_moe.py: the router, capacity, the per-microbatch router losses,
the router bias), where it also requires REF and the twin to route as the
float64 run and the smallest top-k margin to exceed MULTIPLE times their error
on it (margin_guard), and adds a bound on the aux loss; train.precision = bf16
(train_bf16.py), whose runs part chaotically after the first step, so the
first step's loss and gradient norm get bounds of their own, which the bugs
must exceed. Refuses (exit 4) what it does not cover (bf16 with dropout, or
with seq_len over one attention tile), so a caller keeps its stated bound.

usage: train_reference.py METRICS.jsonl MODEL_DIR OUT.bounds [--bugs] [--init INIT_DIR]
                          [--twin TWIN.jsonl TWIN_DIR]
       train_reference.py --flags METRICS.jsonl
       train_reference.py --first-step METRICS.jsonl MODEL_DIR REF.bounds FP32.jsonl OUT.rule
  METRICS.jsonl: the fp32 reference's metrics (its header holds the config);
  MODEL_DIR: its saved model (--save); INIT_DIR: the model a run started from
  by --init-from (default: train.seed's initial weights); TWIN: a second
  one-process run of the same steps in another summation order (d is then the
  worst of the two runs' distances). Writes OUT.bounds: one line
  "loss_rtol grad_norm_rtol tensor_rtol aux_rtol loss0_rtol grad_norm0_rtol"
  (aux_rtol "-" for a dense model; the last two: the first step's). --flags
  prints the --set flags of the run's configuration, one per line. --first-step (bf16):
  the rounding's effect on the first step against an fp32 run of it, and its bound
  (first_step_rule).
Exit status 3 when torch is not installed (the caller skips).
"""
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from llama_reference import forward, read_safetensors
    from train_moe import MoeStep, RouterBias
    import train_bf16
except ImportError:
    sys.exit(3)

MULTIPLE = 10.0
UNIT_ROUNDOFF = 2.0 ** -24
BUG_FACTOR = 100.0

M32 = 0xFFFFFFFF


def philox4x32(c, k):
    """meshtrain's core/philox.cpp, on numpy uint64 arrays holding 32-bit words."""
    c = [np.asarray(x, dtype=np.uint64) for x in c]
    k0, k1 = np.uint64(k[0]), np.uint64(k[1])
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & np.uint64(M32)
        hi1, lo1 = p1 >> np.uint64(32), p1 & np.uint64(M32)
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        k0 = (k0 + np.uint64(0x9E3779B9)) & np.uint64(M32)
        k1 = (k1 + np.uint64(0xBB67AE85)) & np.uint64(M32)
    return c


def philox_key(seed, name):
    h = 0xCBF29CE484222325
    for ch in name.encode():
        h = ((h ^ ch) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    c = philox4x32([h & M32, h >> 32, 0x6D657368, 0x74726169], [seed & M32, seed >> 32])
    return int(c[0]), int(c[1])


def to_unit(hi, lo):
    bits = ((hi << np.uint64(21)) ^ (lo >> np.uint64(11))) & np.uint64((1 << 53) - 1)
    return bits.astype(np.float64) * (1.0 / 9007199254740992.0)


def philox_uniform(key, index):
    index = np.asarray(index, dtype=np.uint64)
    c = philox4x32([index & np.uint64(M32), index >> np.uint64(32), np.zeros_like(index), np.zeros_like(index)],
                   key)
    return to_unit(c[0], c[1])


def philox_normal(key, index):
    index = np.asarray(index, dtype=np.uint64)
    ones = np.ones_like(index)
    c = philox4x32([index & np.uint64(M32), index >> np.uint64(32), ones, np.zeros_like(index)], key)
    u1 = 1.0 - to_unit(c[0], c[1])
    u2 = to_unit(c[2], c[3])
    # One element at a time through Python's math (the C library's log, sqrt and
    # cos, as core/philox.cpp calls them): numpy's vectorised versions may round
    # differently in the last place.
    return np.array([math.sqrt(-2.0 * math.log(a)) * math.cos(2.0 * math.pi * b) for a, b in zip(u1, u2)])


def initial_params(cfg, mcfg, names, shapes):
    """model/params.cpp's init_param_slice: norms 1, others N(0, init_std) from
    Philox keyed by (seed, name) at the global element index; o_proj,
    down_proj and the experts' w2 scaled by 1/sqrt(2 n_layers). Rounded to fp32 as meshtrain holds them."""
    seed = int(cfg["train"]["seed"])
    std = float(cfg["model"]["init_std"])
    residual = std * (1.0 / math.sqrt(2.0 * float(mcfg["num_hidden_layers"])))
    out = {}
    for name in names:
        n = int(np.prod(shapes[name]))
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            v = np.ones(n, dtype=np.float32)
        else:
            s = residual if name.endswith(("o_proj.weight", "down_proj.weight", "w2.weight")) else std
            s32 = float(np.float32(s))
            v = (s32 * philox_normal(philox_key(seed, name), np.arange(n, dtype=np.uint64))).astype(np.float32)
        out[name] = torch.tensor(v.astype(np.float64).reshape(shapes[name]), requires_grad=True)
    return out


def read_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    magic, version, dtype, vocab, _, count = struct.unpack("<8sIIIIQ", raw[:32])
    assert magic == b"MTTOKENS" and version == 1, (magic, version)
    return np.frombuffer(raw[32:], dtype="<u2" if dtype == 1 else "<u4")[:count].astype(np.int64)


def batch(tokens, seed, step, rows, T):
    """data/sampler.cpp's sample_offset: row i of step s starts at floor(u * (n - T))."""
    n_starts = len(tokens) - T
    u = philox_uniform(philox_key(seed, "data.sampler"), np.arange(rows, dtype=np.uint64) + np.uint64(step * rows))
    starts = np.minimum(np.floor(u * n_starts).astype(np.int64), n_starts - 1)
    inputs = np.stack([tokens[o:o + T] for o in starts])
    targets = np.stack([tokens[o + 1:o + 1 + T] for o in starts])
    return torch.tensor(inputs), torch.tensor(targets)


def dropout_masks(cfg, step):
    """ops/dropout.cpp's masks: the key names (seed, step, layer, site); an element's global
    coordinates are the counter — (query pos, key pos, head, sequence) for the attention
    probabilities, (pos, channel, sequence, 0) for a hidden state; it is dropped when the
    counter's first word is below round(p 2^32), else multiplied by the fp32 1 / (1 - p)."""
    m, seed = cfg["model"], int(cfg["train"]["seed"])
    rates = {"attn": m["attention_dropout"], "o_proj": m["hidden_dropout"], "down_proj": m["hidden_dropout"]}

    def drop(layer, site, x):
        p = rates[site]
        if p == 0:
            return x
        key = philox_key(seed, "dropout/step %d/layer %d/%s" % (step, layer, site))
        grid = np.indices(x.shape, dtype=np.uint64).reshape(len(x.shape), -1)
        if site == "attn":  # x [B, H, Tq, Tk]
            counter = [grid[2], grid[3], grid[1], grid[0]]
        else:  # x [B, T, C]
            counter = [grid[1], grid[2], grid[0], np.zeros_like(grid[0])]
        threshold = min(round(p * 4294967296.0), 4294967295)
        scale = float(np.float32(1.0 / (1.0 - p)))
        keep = philox4x32(counter, key)[0] >= np.uint64(threshold)
        return x * torch.tensor(np.where(keep, scale, 0.0).reshape(x.shape))

    return drop if any(r > 0 for r in rates.values()) else None


def lr_at(t, s):
    lr, min_lr, warmup, total = t["lr"], t["min_lr"], t["warmup_steps"], t["steps"]
    if s < warmup:
        return lr * (s + 1) / warmup
    decay = total - warmup - 1
    if decay <= 0:
        return lr
    p = min(max((s - warmup) / decay, 0.0), 1.0)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * p))


def decays(name):
    """Weight decay applies to the matrices, not to norms or the input embedding (model/params.cpp)."""
    return not (name.endswith("norm.weight") or name == "model.embed_tokens.weight")


def train(cfg, mcfg, names, shapes, tokens, init, bug=None):
    """The run's steps in float64 from `init` (None: train.seed's weights). Returns per-step losses,
    gradient norms, the final parameters and, for a mixture of experts, per step the smallest
    top-k margin, the tokens routed to each expert of each MoE layer and the aux loss."""
    t, ignore = cfg["train"], int(cfg["data"]["ignore_id"])
    if init is None:
        p = initial_params(cfg, mcfg, names, shapes)
    else:
        p = {n: init[n].detach().clone().requires_grad_(True) for n in names}
    state = {n: [torch.zeros_like(p[n]), torch.zeros_like(p[n])] for n in names}
    is_moe = int(cfg["model"].get("n_experts", 0)) > 1
    products = {"mm": train_bf16.matmul, "core": train_bf16.core} if t.get("precision") == "bf16" else {}
    if bug == "unrounded_attention":  # bf16's rule without attention's products (first_step_rule)
        products.pop("core", None)
    if bug == "unrounded_dy":  # bf16's rule with the backward's dY unrounded (first_step_rule)
        products["mm"] = train_bf16.matmul_unrounded_dy
    bias = RouterBias(cfg, mcfg) if is_moe else None
    losses, norms, router = [], [], {"margin": [], "routed": [], "aux": []}
    for step in range(int(t["steps"])):
        inputs, targets = batch(tokens, int(t["seed"]), step, int(t["batch_size"]), int(t["seq_len"]))
        targets = torch.where(targets == ignore, torch.full_like(targets, -1), targets)
        if bug == "drop_sequence":  # one sequence's gradient never reaches the sum (its loss still counts)
            keep = torch.ones(targets.shape[0], dtype=torch.bool)
            keep[-1] = False
        valid = int((targets != -1).sum())
        moe = MoeStep(cfg, mcfg, p, bias.bias, *inputs.shape) if is_moe else None
        logits = forward(mcfg, p, inputs, drop=dropout_masks(cfg, step), moe=moe, **products)
        V = logits.shape[-1]
        ce = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1, reduction="none")
        ce = ce.view(targets.shape)
        count = valid - int((targets[-1] != -1).sum()) if bug == "wrong_count" else valid
        loss = ce.sum() / count
        objective = ce[keep].sum() / count if bug == "drop_sequence" else loss
        if moe is not None:
            extra, aux = moe.losses()
            objective = objective + extra
            router["margin"].append(moe.margin)
            router["routed"].append(moe.routed)
            router["aux"].append(aux)
            bias.update(moe.routed)
        for q in p.values():
            q.grad = None
        objective.backward()
        grads = {n: p[n].grad.detach().clone() if p[n].grad is not None else torch.zeros_like(p[n]) for n in names}
        if bug == "half_layer":  # layer 0's matrices summed over one of two tensor-parallel ranks
            for n in names:
                if n.startswith("model.layers.0.") and decays(n):
                    grads[n] *= 0.5
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        losses.append(loss.item())
        norms.append(norm)
        clip = t["grad_clip"]
        if clip > 0 and norm > clip:
            for g in grads.values():
                g *= clip / (norm + 1e-6)
        update(t, p, grads, state, step + 1, lr_at(t, step))
    return losses, norms, {n: p[n].detach() for n in names}, router


def update(t, p, grads, state, n_step, lr):
    kind, wd = t["optimizer"], t["weight_decay"]
    b1, b2, eps = t["beta1"], t["beta2"], t["adam_eps"]
    with torch.no_grad():
        for n, g in grads.items():
            w, (m, v) = p[n], state[n]
            decay = wd if decays(n) else 0.0
            if kind == "sgd":
                d = g + decay * w
                if t["momentum"] != 0:
                    m.mul_(t["momentum"]).add_(d)
                    d = d + t["momentum"] * m if t["nesterov"] else m.clone()
                w -= lr * d
                continue
            m.mul_(b1).add_((1 - b1) * g)
            v.mul_(b2).add_((1 - b2) * g * g)
            direction = (m / (1 - b1 ** n_step)) / ((v / (1 - b2 ** n_step)).sqrt() + eps)
            if kind == "adamw":
                w -= lr * decay * w + lr * direction
            else:  # lamb: the trust ratio per tensor
                r = direction + decay * w
                wn, rn = float(w.norm()), float(r.norm())
                w -= lr * (wn / rn if wn > 0 and rn > 0 else 1.0) * r


def read_metrics(path):
    header, steps = None, {}
    for line in open(path):
        j = json.loads(line)
        if "header" in j:
            header = j["header"]
        elif "loss" in j and "step" in j and not j.get("skipped"):
            steps[j["step"]] = j
    return header, [steps[s] for s in sorted(steps)]


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def distances(losses, norms, params, run_steps, fp32):
    d_loss = max(rel(s["loss"], l) for s, l in zip(run_steps, losses))
    d_norm = max(rel(s["grad_norm"], g) for s, g in zip(run_steps, norms))
    d_tensor = max(float((fp32[n] - params[n]).norm() / max(float(params[n].norm()), 1e-30)) for n in params)
    return d_loss, d_norm, d_tensor


def router_distance(router, run_steps, what):
    """A mixture of experts: the fp32 run must route every step as the float64 run
    (exit 1 otherwise: the distances would measure a discrete flip, not rounding);
    returns the worst |fp32 - float64| of a step's smallest top-k margin."""
    for s, (mine, theirs) in enumerate(zip(router["routed"], run_steps)):
        got = {int(l): v for l, v in theirs["moe_tokens_per_expert"].items()}
        if got != mine:
            print("train_reference.py: %s routes step %d otherwise than the float64 run (tokens per expert %s vs %s; "
                  "smallest top-k margin %.3e vs %.3e): a top-k choice flipped" % (what, s, got, mine,
                                                                                 theirs["moe_min_topk_margin"],
                                                                                 router["margin"][s]))
            sys.exit(1)
    return max((abs(st["moe_min_topk_margin"] - m) for st, m in zip(run_steps, router["margin"])
                if st["moe_min_topk_margin"] is not None), default=0.0)  # None: top_k = n_experts, no choice


def margin_guard(router, dm):
    """The top-k choice is discrete: a layout's score gap moves by its rounding, of the fp32
    runs' size dm, so no correct layout flips a choice while the smallest margin exceeds
    MULTIPLE * dm (at least MULTIPLE u: one rounding of a score). Exit 1 otherwise."""
    m = min(router["margin"])
    guard = MULTIPLE * max(dm, UNIT_ROUNDOFF)
    print("router: smallest top-k margin %.3e (step %d), fp32 margin error %.3e, margin / guard %.3g" % (
        m, router["margin"].index(m), dm, m / guard))
    if m <= guard:
        print("train_reference.py: the smallest top-k margin %.3e is within %g x the fp32 runs' margin error "
              "%.3e: a correct layout may route otherwise" % (m, MULTIPLE, dm))
        sys.exit(1)


def option(name, count=1):
    if name not in sys.argv:
        return None
    i = sys.argv.index(name)
    return sys.argv[i + 1:i + 1 + count]


def require_covered(cfg):
    """Exit 4 for a configuration this float64 run does not reproduce."""
    m, t = cfg["model"], cfg["train"]
    bf16 = t.get("precision", "fp32") == "bf16"
    dropout = m.get("attention_dropout", 0) > 0 or m.get("hidden_dropout", 0) > 0
    unsupported = [k for k, ok in [("train.precision = bf16 with dropout", not (bf16 and dropout)),
                                   ("train.precision = bf16 with seq_len > %d (one attention tile)"
                                    % train_bf16.TILE, not (bf16 and t["seq_len"] > train_bf16.TILE))] if not ok]
    if unsupported:
        print("train_reference.py: not covered: " + ", ".join(unsupported))
        sys.exit(4)


def print_flags(metrics_path):
    """--flags: the --set flags that train REF's configuration again (one per line, for a bash array)."""
    header, _ = read_metrics(metrics_path)
    require_covered(header["config"])
    for section, keys in header["config"].items():
        for k, v in keys.items():
            print("--set")
            print("%s.%s=%s" % (section, k, ("true" if v else "false") if isinstance(v, bool) else v))


def first_step_rule():
    """--first-step: what bf16's rounding does to the first step, against an fp32 run of it.

    In the first step both runs start from the same weights and batch, so bf16 - fp32 =
    (bf16 - its float64 rule) + (the rule's own effect, float64 rounded minus float64 unrounded) +
    (float64 - fp32). The middle term is float64 arithmetic on both sides, the same on every host;
    the outer two are each run's rounding, held to 10 max(d0, N u) as the step-0 bounds are (REF's
    from REF.bounds, the fp32 run's from its distance d0 from the unrounded float64 step). So the
    measured bf16 - fp32 must be the rule's effect within the sum of the two bounds, for the loss
    and the gradient norm. What the check can see is limited by the rule's own size (here 14 bounds
    in the gradient norm, 0.01 in the loss: the bounds sit at the floor 10 N u): the rule with the
    backward's dY unrounded (a dropped rounding) must move the effect by more than MULTIPLE bounds
    (15.5 here); the rule without attention's rounding moves it 0.4, below what one step resolves
    (test_llama_bf16.cpp holds attention's rounding in the forward). Writes OUT: "effect_loss
    effect_norm bound_loss bound_norm" (relative to the unrounded float64 values)."""
    ref_path, model_dir, bounds_path, fp32_path, out_path = sys.argv[2:7]
    header, run_steps = read_metrics(ref_path)
    cfg = json.loads(json.dumps(header["config"]))
    cfg["train"]["steps"] = 1
    require_covered(cfg)
    with open(os.path.join(model_dir, "config.json")) as f:
        mcfg = json.load(f)
    names, saved = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    shapes = {n: list(saved[n].shape) for n in names}
    tokens = read_tokens(os.path.join(cfg["data"]["dir"], "train.bin"))
    torch.set_num_threads(1)
    fp32_cfg = json.loads(json.dumps(cfg))
    fp32_cfg["train"]["precision"] = "fp32"
    (l16,), (n16,), _, _ = train(cfg, mcfg, names, shapes, tokens, None)
    (l64,), (n64,), _, _ = train(fp32_cfg, mcfg, names, shapes, tokens, None)
    bugs = {bug: train(cfg, mcfg, names, shapes, tokens, None, bug)[:2]
            for bug in ("unrounded_dy", "unrounded_attention")}
    f = read_metrics(fp32_path)[1][0]
    floor = cfg["train"]["batch_size"] * cfg["train"]["seq_len"] * UNIT_ROUNDOFF
    with open(bounds_path) as fb:
        ref0 = [float(x) for x in fb.read().split()[4:6]]
    fp0 = [MULTIPLE * max(rel(f["loss"], l64), floor), MULTIPLE * max(rel(f["grad_norm"], n64), floor)]
    bound = [a + b for a, b in zip(ref0, fp0)]
    effect = [(l16 - l64) / l64, (n16 - n64) / n64]
    moved = {bug: max(abs((lb - l16) / l64) / bound[0], abs((nb - n16) / n64) / bound[1])
             for bug, ((lb,), (nb,)) in bugs.items()}
    print("bf16's rule moves the first step's loss %.3e, gradient norm %.3e (relative; bounds %.3e %.3e: "
          "REF's %.3e %.3e + the fp32 run's %.3e %.3e); with dY unrounded in the backward it moves %.3g "
          "bounds from that, without attention's rounding %.3g" % (*effect, *bound, *ref0, *fp0,
                                                                  moved["unrounded_dy"],
                                                                  moved["unrounded_attention"]))
    with open(out_path, "w") as fo:
        fo.write("%.9e %.9e %.6e %.6e\n" % (*effect, *bound))
    if moved["unrounded_dy"] <= MULTIPLE:
        sys.exit(1)


def main():
    if sys.argv[1] == "--flags":
        print_flags(sys.argv[2])
        return
    if sys.argv[1] == "--first-step":
        first_step_rule()
        return
    metrics_path, model_dir, out_path = sys.argv[1:4]
    header, run_steps = read_metrics(metrics_path)
    cfg = header["config"]
    m, t = cfg["model"], cfg["train"]
    require_covered(cfg)
    assert len(run_steps) == t["steps"], (len(run_steps), t["steps"])
    with open(os.path.join(model_dir, "config.json")) as f:
        mcfg = json.load(f)
    names, saved = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    fp32 = {n: saved[n].detach() for n in names}
    shapes = {n: list(saved[n].shape) for n in names}
    tokens = read_tokens(os.path.join(cfg["data"]["dir"], "train.bin"))
    torch.set_num_threads(1)
    init = option("--init")
    if init is not None:
        init = read_safetensors(os.path.join(init[0], "model.safetensors"))[1]

    losses, norms, params, router = train(cfg, mcfg, names, shapes, tokens, init)
    runs = [("the fp32 reference", run_steps, fp32)]
    twin = option("--twin", 2)
    if twin is not None:  # a second sample of one-process rounding: the worst of the two
        runs.append(("the twin", read_metrics(twin[0])[1],
                     {n: v.detach() for n, v in read_safetensors(os.path.join(twin[1], "model.safetensors"))[1].items()}))
    moe = bool(router["margin"])
    d, d0, dm = [0.0] * (4 if moe else 3), [0.0, 0.0], 0.0
    for what, steps, tensors in runs:
        dr = distances(losses, norms, params, steps, tensors)
        if moe:  # the aux loss, and the routing: the same choices, the margins' error
            dr += (max(rel(s["moe_aux_loss"], a) for s, a in zip(steps, router["aux"])),)
            dm = max(dm, router_distance(router, steps, what))
        print("%s vs float64: loss %.3e, grad_norm %.3e, tensors %.3e%s; step 0: loss %.3e, grad_norm %.3e" % (
            what, *dr[:3], ", aux loss %.3e" % dr[3] if moe else "", rel(steps[0]["loss"], losses[0]),
            rel(steps[0]["grad_norm"], norms[0])))
        d = [max(a, b) for a, b in zip(d, dr)]
        d0 = [max(d0[0], rel(steps[0]["loss"], losses[0])), max(d0[1], rel(steps[0]["grad_norm"], norms[0]))]
    floor = t["batch_size"] * t["seq_len"] * UNIT_ROUNDOFF
    bounds = [MULTIPLE * max(x, floor) for x in d]
    bounds0 = [MULTIPLE * max(x, floor) for x in d0]
    print("bounds (loss, grad_norm, tensors%s; step 0: loss, grad_norm): %s" % (
        ", aux loss" if moe else "", " ".join("%.3e" % b for b in bounds + bounds0)))
    # The two runs are not the same training (a rule above has drifted): in the first step, and
    # in fp32 over every step (bf16's runs part by its boundary flips, see train_bf16.py).
    if d0[0] > 1e-3 or d0[1] > 1e-2 or (t.get("precision") != "bf16" and (d[0] > 1e-3 or d[1] > 1e-2)):
        print("train_reference.py: the float64 run does not follow the fp32 run: step losses %s vs %s"
              % (losses[:3], [s["loss"] for s in run_steps[:3]]))
        sys.exit(1)
    if moe:
        margin_guard(router, dm)
    with open(out_path, "w") as f:
        f.write(" ".join("%.6e" % b for b in bounds[:3]) + (" %.6e" % bounds[3] if moe else " -")
                + " %.6e %.6e\n" % tuple(bounds0))
    if "--bugs" in sys.argv:
        sys.exit(bugs(cfg, mcfg, names, shapes, tokens, init, (losses, norms, params), bounds, bounds0))


def bugs(cfg, mcfg, names, shapes, tokens, init, good, bounds, bounds0):
    """Each injected bug must move the run by more than BUG_FACTOR bounds: over the steps
    (bounds), or in the first step (bounds0; the check a bf16 run relies on, see the
    module's text). Returns the exit status."""
    losses, norms, params = good
    failed = False
    for bug in ("drop_sequence", "half_layer", "wrong_count"):
        bl, bn, bp, _ = train(cfg, mcfg, names, shapes, tokens, init, bug)
        # The buggy float64 run against the correct one: how far the bug moves each quantity, in bounds.
        moved = [max(rel(a, b) for a, b in zip(bl, losses)) / bounds[0],
                 max(rel(a, b) for a, b in zip(bn, norms)) / bounds[1],
                 max(float((bp[n] - params[n]).norm() / params[n].norm()) for n in names) / bounds[2]]
        moved0 = [rel(bl[0], losses[0]) / bounds0[0], rel(bn[0], norms[0]) / bounds0[1]]
        caught = max(moved + moved0) > BUG_FACTOR
        failed |= not caught
        print("%s %s: moves loss %.3g, grad_norm %.3g, tensors %.3g bounds; step 0: loss %.3g, grad_norm %.3g"
              % ("ok  " if caught else "FAIL", bug, *moved, *moved0))
    return 1 if failed else 0


if __name__ == "__main__":
    main()
