#!/usr/bin/env python3
"""The benchmark model of meshtrain_bench in PyTorch float32: the same Llama
(configs/bench.toml), the same kind of fixed pseudo-random batch, the same
training step (zero grads, forward, backward, global-norm clip, AdamW).

It is written for speed within torch 1.13, with the semantics of
tests/python/llama_reference.py: fused q/k/v and gate/up weights (one GEMM
each, as in meshtrain), rotate-half RoPE with precomputed tables, causal
attention as one baddbmm with an additive mask, softmax, and bmm
(F.scaled_dot_product_attention does not exist in 1.13), AdamW with
foreach=True.

With --autocast bf16 the forward and the loss run under
torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's CPU mixed precision:
bf16 matmuls through oneDNN, fp32 master weights and optimizer), the side
meshtrain's train.precision = bf16 is measured against.

usage: torch_llama.py [--config configs/bench.toml] [--threads 2] [--steps 5]
                      [--warmup 2] [--autocast none|bf16] [--label NAME] [--json FILE]
Prints one JSON object (tokens/s, median step time, which BLAS was loaded).
Exit status 3 when torch is not installed.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch_llama.py: torch is not installed for " + sys.executable, file=sys.stderr)
    sys.exit(3)


def read_config(path):
    """The [model] and [train] keys of a meshtrain TOML config (flat key = value lines)."""
    if tomllib is not None:
        with open(path, "rb") as f:
            return tomllib.load(f)
    cfg, section = {}, None
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("["):
                section = cfg.setdefault(line.strip("[]").strip(), {})
                continue
            key, value = (s.strip() for s in line.split("=", 1))
            section[key] = json.loads(value.lower() if value in ("true", "false") else value)
    return cfg


class Llama(torch.nn.Module):
    def __init__(self, m, seq_len):
        super().__init__()
        C, H, KV = m["d_model"], m["n_heads"], m.get("n_kv_heads", m["n_heads"])
        D, Fh, V, L = C // H, m["ffn_hidden"], m["vocab_size"], m["n_layers"]
        self.C, self.H, self.KV, self.D, self.Fh, self.L = C, H, KV, D, Fh, L
        self.eps = m.get("norm_eps", 1e-5)
        std = m.get("init_std", 0.02)
        P = torch.nn.Parameter

        def normal(*shape, scale=1.0):
            return P(torch.randn(*shape) * std * scale)

        self.embed = normal(V, C)
        self.ln1 = torch.nn.ParameterList([P(torch.ones(C)) for _ in range(L)])
        self.qkv = torch.nn.ParameterList([normal((H + 2 * KV) * D, C) for _ in range(L)])
        self.o = torch.nn.ParameterList([normal(C, H * D, scale=1 / math.sqrt(2 * L)) for _ in range(L)])
        self.ln2 = torch.nn.ParameterList([P(torch.ones(C)) for _ in range(L)])
        self.gate_up = torch.nn.ParameterList([normal(2 * Fh, C) for _ in range(L)])
        self.down = torch.nn.ParameterList([normal(C, Fh, scale=1 / math.sqrt(2 * L)) for _ in range(L)])
        self.norm = P(torch.ones(C))
        self.tied = bool(m.get("tie_embeddings", False))
        self.lm_head = None if self.tied else normal(V, C)

        theta = m.get("rope_theta", 10000.0)
        inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
        freqs = torch.arange(seq_len, dtype=torch.float64)[:, None] * inv[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos", emb.cos().float())
        self.register_buffer("sin", emb.sin().float())
        self.register_buffer("mask", torch.full((seq_len, seq_len), float("-inf")).triu(1))

    def decay_groups(self, weight_decay):
        """Weight decay on the matrices, not on norms and the input embedding (as meshtrain)."""
        no_decay = [self.embed, self.norm, *self.ln1, *self.ln2]
        ids = {id(p) for p in no_decay}
        decay = [p for p in self.parameters() if id(p) not in ids]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    def rms_norm(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x):  # x [B, heads, T, D]
        T, half = x.shape[-2], self.D // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * self.cos[:T] + rot * self.sin[:T]

    def forward(self, inputs):
        B, T = inputs.shape
        H, KV, D, Fh = self.H, self.KV, self.D, self.Fh
        x = F.embedding(inputs, self.embed)
        for l in range(self.L):
            h = self.rms_norm(x, self.ln1[l])
            qkv = F.linear(h, self.qkv[l]).view(B, T, H + 2 * KV, D).transpose(1, 2)
            q, k, v = qkv.split([H, KV, KV], dim=1)
            q, k = self.rope(q), self.rope(k)
            if KV != H:
                k = k.repeat_interleave(H // KV, dim=1)
                v = v.repeat_interleave(H // KV, dim=1)
            q = q.reshape(B * H, T, D)
            k = k.reshape(B * H, T, D)
            v = v.reshape(B * H, T, D)
            s = torch.baddbmm(self.mask[:T, :T], q, k.transpose(1, 2), alpha=1.0 / math.sqrt(D))
            a = torch.bmm(s.softmax(-1), v).view(B, H, T, D).transpose(1, 2).reshape(B, T, H * D)
            x = x + F.linear(a, self.o[l])
            h = self.rms_norm(x, self.ln2[l])
            g, u = F.linear(h, self.gate_up[l]).split([Fh, Fh], dim=-1)
            x = x + F.linear(F.silu(g) * u, self.down[l])
        x = self.rms_norm(x, self.norm)
        return F.linear(x, self.embed if self.tied else self.lm_head)


def loaded_blas():
    """The BLAS shared objects this process has mapped (which build actually runs the GEMMs)."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if "blas" in path or "lapack" in path:
                libs.add(os.path.realpath(path))
    return sorted(libs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/bench.toml")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none")
    ap.add_argument("--label", default="torch")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    cfg = read_config(args.config)
    m, t = cfg["model"], cfg["train"]
    B, T, mb = t["batch_size"], t["seq_len"], t.get("microbatch_size", t["batch_size"])
    torch.set_num_threads(args.threads)
    torch.manual_seed(t.get("seed", 1234))

    model = Llama(m, T)
    opt = torch.optim.AdamW(model.decay_groups(t.get("weight_decay", 0.1)), lr=t.get("lr", 3e-4),
                            betas=(t.get("beta1", 0.9), t.get("beta2", 0.95)), eps=t.get("adam_eps", 1e-8),
                            foreach=True)
    gen = torch.Generator().manual_seed(20240601)
    tokens = torch.randint(0, m["vocab_size"], (B, T + 1), generator=gen)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    clip = t.get("grad_clip", 1.0)
    params = list(model.parameters())

    autocast = args.autocast == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for r in range(0, B, mb):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = model(inputs[r:r + mb])
                loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets[r:r + mb].reshape(-1),
                                       reduction="sum") / (B * T)
            loss.backward()
            loss_sum += loss.item()
        torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        return loss_sum

    losses, times = [], []
    for _ in range(args.warmup):
        losses.append(step())
    for _ in range(args.steps):
        t0 = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    out = {
        "impl": "pytorch", "label": args.label, "autocast": args.autocast, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "blas": loaded_blas(), "batch": B, "seq_len": T, "step_seconds": times, "median_step_s": med, "min_step_s": min(times),
        "tokens_per_s": B * T / med, "losses": losses,
    }
    text = json.dumps(out)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
