"""meshtrain's mixture of experts in a float64 training step, for train_reference.py.

Written from docs/MODEL.md "Mixture of experts" and the rules of
src/ops/router.cpp, src/model/llama_moe.cpp and src/model/llama_moe_tally.cpp:
- the router: logits = h · Wᵀ, probabilities p = softmax(logits), the score
  p + bias (the aux-loss-free bias, zero without router_bias_rate or
  router_skew), the k largest scores with a tie going to the lower expert
  index, their weights p / Σ p over the chosen (renormalised, the bias not in
  them);
- capacity (capacity_factor > 0): each expert keeps the first
  ceil(cf · N · k / E) of its choices in choice order (token, then slot) within
  the microbatch of N tokens, and drops the rest;
- each expert a SwiGLU, the outputs summed with the weights; no dropout on them;
- the router losses per microbatch (a "group": microbatch_size consecutive
  sequences of the batch, wherever the layout puts them), pooling the rows of
  every MoE layer: aux = E · Σ over slots s and experts e of count[s, e] / R ·
  psum[e] / R (the counts constant), z = Σ lse² / R; the loss the step
  differentiates adds router_aux_loss_coef and router_z_loss_coef times their
  mean over the groups of the step;
- after the step, each layer's bias moves by router_bias_rate · sign(mean load −
  the expert's load), the loads summed over the step, in float32 as meshtrain
  holds it.
The step's smallest top-k margin (the k-th score minus the (k+1)-th, over
every row and layer), and the tokens routed to each expert per layer (before
capacity), are what the caller holds against the fp32 run's.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F


def moe_layer(mcfg, layer):
    every = int(mcfg.get("moe_every", 1))
    return mcfg.get("num_local_experts", 0) > 1 and (layer + 1) % every == 0


class RouterBias:
    """Each MoE layer's bias, float32 values, and its update rule."""

    def __init__(self, cfg, mcfg):
        m = cfg["model"]
        self.rate = float(m.get("router_bias_rate", 0.0))
        E = int(m["n_experts"])
        on = self.rate > 0 or float(m.get("router_skew", 0.0)) > 0
        self.bias = {}
        for layer in range(int(mcfg["num_hidden_layers"])):
            if moe_layer(mcfg, layer):
                b = np.zeros(E, dtype=np.float32)
                b[0] = np.float32(m.get("router_skew", 0.0))
                self.bias[layer] = b if on else None

    def update(self, routed):
        if self.rate <= 0:
            return
        for layer, load in routed.items():
            mean = float(sum(load)) / len(load)
            step = np.array([self.rate * ((mean - x > 0) - (mean - x < 0)) for x in load], dtype=np.float64)
            self.bias[layer] = (self.bias[layer] + step.astype(np.float32)).astype(np.float32)


class MoeStep:
    """The MoE layers of one training step over a batch of B sequences of T tokens,
    called by llama_reference.forward as moe(layer, h, mm)."""

    def __init__(self, cfg, mcfg, p, bias, B, T):
        m, t = cfg["model"], cfg["train"]
        self.p, self.bias, self.B, self.T = p, bias, B, T
        self.E, self.k = int(m["n_experts"]), int(m["top_k"])
        self.cf = float(m.get("capacity_factor", 0.0))
        mb = int(t.get("microbatch_size", B)) or B
        self.mb = min(mb, B)
        self.G = B // self.mb
        self.mcfg = mcfg
        self.aux_coef = float(m.get("router_aux_loss_coef", 0.0))
        self.z_coef = float(m.get("router_z_loss_coef", 0.0))
        self.count = [np.zeros((self.k, self.E), dtype=np.int64) for _ in range(self.G)]
        self.psum = [0.0] * self.G
        self.zsum = [0.0] * self.G
        self.rows = [0] * self.G
        self.routed = {}
        self.margin = math.inf

    def __call__(self, layer, h, mm):
        if not moe_layer(self.mcfg, layer):
            return None
        B, T, C = h.shape
        E, k, G, n = self.E, self.k, self.G, self.mb * T  # n rows per group
        pre = "model.layers.%d.block_sparse_moe." % layer
        x = h.reshape(B * T, C)
        logits = mm(x, self.p[pre + "gate.weight"].T)
        probs = logits.softmax(-1)
        lse = torch.logsumexp(logits, -1)
        score = probs.detach().clone()
        if self.bias.get(layer) is not None:
            score = score + torch.tensor(self.bias[layer].astype(np.float64))
        order = torch.sort(-score, dim=-1, stable=True).indices  # ties: the lower index first
        sel = order[:, :k]
        if k < E:
            gap = score.gather(1, sel[:, k - 1:k]) - score.gather(1, order[:, k:k + 1])
            self.margin = min(self.margin, float(gap.min()))
        w = probs.gather(1, sel)
        w = w / w.sum(-1, keepdim=True)
        keep = torch.ones(B * T, k, dtype=torch.bool)
        sel_np = sel.numpy()
        if self.cf > 0:
            cap = math.ceil(self.cf * n * k / E)
            for g in range(G):
                flat = sel_np[g * n:(g + 1) * n].reshape(-1)
                kg = keep[g * n:(g + 1) * n].view(-1)
                for e in range(E):
                    kg[np.flatnonzero(flat == e)[cap:]] = False
        out = torch.zeros_like(x)
        for e in range(E):
            ex = pre + "experts.%d." % e
            rows, slots = ((sel == e) & keep).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            xe = x[rows]
            y = mm(F.silu(mm(xe, self.p[ex + "w1.weight"].T)) * mm(xe, self.p[ex + "w3.weight"].T),
                   self.p[ex + "w2.weight"].T)
            out = out.index_add(0, rows, y * w[rows, slots].unsqueeze(-1))
        self.routed[layer] = np.bincount(sel_np.reshape(-1), minlength=E).tolist()
        for g in range(G):
            s = sel_np[g * n:(g + 1) * n]
            for slot in range(k):
                self.count[g][slot] += np.bincount(s[:, slot], minlength=E)
            self.psum[g] = self.psum[g] + probs[g * n:(g + 1) * n].sum(0)
            self.zsum[g] = self.zsum[g] + (lse[g * n:(g + 1) * n] ** 2).sum()
            self.rows[g] += n
        return out.view(B, T, C)

    def losses(self):
        """The step's router terms of the loss: coefficients times the mean over the groups."""
        aux, z = 0.0, 0.0
        for g in range(self.G):
            R = float(self.rows[g])
            c = torch.tensor(self.count[g].astype(np.float64))  # [k, E]
            aux = aux + self.E * (c / R * (self.psum[g] / R).unsqueeze(0)).sum()
            z = z + self.zsum[g] / R
        return (self.aux_coef * aux + self.z_coef * z) / self.G, float(aux) / self.G
