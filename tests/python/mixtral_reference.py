#!/usr/bin/env python3
"""An independent Mixtral in PyTorch (float64), the oracle of meshtrain's mixture-of-experts tests.

Written from the published definition of Hugging Face MixtralForCausalLM: the
Llama decoder (attention from llama_reference.py) with, in place of the MLP, a
router (softmax over the experts' logits, the top-k experts, their weights
renormalised to sum to 1) and SwiGLU experts whose outputs are summed with
those weights; the load-balancing loss of transformers' load_balancing_loss_func
(every MoE layer's router rows pooled: E * sum over slots and experts of the
share of rows whose slot picks the expert times its mean probability) and our
z-loss (mean over the same rows of logsumexp(logits)^2). config.json of
model_type "meshtrain_moe" adds dense layers: layer l is a mixture of experts
iff (l + 1) % moe_every == 0. With capacity_factor > 0 each expert keeps the
first ceil(cf * N * k / E) of its choices in choice order (token, then slot)
and drops the rest (docs/MODEL.md "Capacity").

usage: mixtral_reference.py MODEL_DIR TOKENS_FILE B T OUT_DIR
  Writes loss.f64 (the cross-entropy), router.f64 (aux loss, z-loss, each
  unscaled), logits.f64 and grads.f64 (the gradient of cross-entropy +
  router_aux_loss_coef * aux + router_z_loss_coef * z, in file order), and
  the same four with "32" (loss32.f64, ...) from the model in float32.
Exit status 3 when torch is not installed (the caller skips).
"""
import json
import math
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(3)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_reference import read_safetensors, rms_norm, rope, rope_frequencies  # noqa: E402


def attention(cfg, p, pre, h):
    B, T, C = h.shape
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    D = C // H
    q = (h @ p[pre + "self_attn.q_proj.weight"].T).view(B, T, H, D).transpose(1, 2)
    k = (h @ p[pre + "self_attn.k_proj.weight"].T).view(B, T, KV, D).transpose(1, 2)
    v = (h @ p[pre + "self_attn.v_proj.weight"].T).view(B, T, KV, D).transpose(1, 2)
    inv, scale = rope_frequencies(cfg, T, D)  # RoPE scaling too, when config.json has one
    q, k = rope(q, inv, scale), rope(k, inv, scale)
    k = k.repeat_interleave(H // KV, dim=1)
    v = v.repeat_interleave(H // KV, dim=1)
    s = (q @ k.transpose(-1, -2)) / (D ** 0.5)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * D)
    return a @ p[pre + "self_attn.o_proj.weight"].T


def top_k(probs, k):
    # The k largest, a tie going to the lower expert index (a stable sort of -p).
    return torch.sort(-probs.detach(), dim=-1, stable=True).indices[:, :k]


def moe(cfg, p, pre, x, router_logits):
    N, C = x.shape
    E, k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    logits = x @ p[pre + "block_sparse_moe.gate.weight"].T
    router_logits.append(logits)
    probs = logits.softmax(-1)
    sel = top_k(probs, k)
    w = probs.gather(1, sel)
    w = w / w.sum(-1, keepdim=True)
    keep = torch.ones(N * k, dtype=torch.bool)
    cf = cfg.get("capacity_factor", 0.0) or 0.0
    if cf > 0:
        cap = math.ceil(cf * N * k / E)
        flat = sel.reshape(-1)
        for e in range(E):
            keep[(flat == e).nonzero().flatten()[cap:]] = False
    keep = keep.view(N, k)
    out = torch.zeros_like(x)
    for e in range(E):
        ex = pre + f"block_sparse_moe.experts.{e}."
        rows, slots = ((sel == e) & keep).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        xe = x[rows]
        y = (F.silu(xe @ p[ex + "w1.weight"].T) * (xe @ p[ex + "w3.weight"].T)) @ p[ex + "w2.weight"].T
        out = out.index_add(0, rows, y * w[rows, slots].unsqueeze(-1))
    return out


def forward(cfg, p, inputs):
    B, T = inputs.shape
    eps = cfg["rms_norm_eps"]
    every = cfg.get("moe_every", 1)
    x = p["model.embed_tokens.weight"][inputs]
    router_logits = []
    for layer in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{layer}."
        x = x + attention(cfg, p, pre, rms_norm(x, p[pre + "input_layernorm.weight"], eps))
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        if (layer + 1) % every == 0:
            x = x + moe(cfg, p, pre, h.reshape(B * T, -1), router_logits).view(h.shape)
        else:
            g = h @ p[pre + "mlp.gate_proj.weight"].T
            u = h @ p[pre + "mlp.up_proj.weight"].T
            x = x + (F.silu(g) * u) @ p[pre + "mlp.down_proj.weight"].T
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else p["lm_head.weight"]
    return x @ head.T, router_logits


def router_losses(cfg, router_logits):
    E, k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    logits = torch.cat(router_logits, dim=0)
    probs = logits.softmax(-1)
    mask = F.one_hot(top_k(probs, k), E).to(probs.dtype)  # [rows, k, E]
    aux = E * (mask.mean(0) * probs.mean(0).unsqueeze(0)).sum()
    z = (torch.logsumexp(logits, dim=-1) ** 2).mean()
    return aux, z


def run(cfg, params, order, inputs, targets):
    """Cross-entropy, aux loss, z-loss, logits and the gradients of the total, in the params' dtype."""
    logits, router_logits = forward(cfg, params, inputs)
    V = logits.shape[-1]
    valid = int((targets != -1).sum())
    ce = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1, reduction="sum") / valid
    aux, z = router_losses(cfg, router_logits)
    total = ce + cfg.get("router_aux_loss_coef", 0.0) * aux + cfg.get("router_z_loss_coef", 0.0) * z
    total.backward()
    grads = [params[n].grad if params[n].grad is not None else torch.zeros_like(params[n]) for n in order]
    return ce, aux, z, logits, np.concatenate([g.detach().numpy().reshape(-1) for g in grads])


def main():
    model_dir, tokens_path, B, T, out_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    order, params = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    tok = np.fromfile(tokens_path, dtype="<i4")
    inputs = torch.tensor(tok[: B * T].reshape(B, T), dtype=torch.long)
    targets = torch.tensor(tok[B * T: 2 * B * T].reshape(B, T), dtype=torch.long)
    os.makedirs(out_dir, exist_ok=True)
    # The float64 run, then the same model in float32 with PyTorch's own
    # kernels (files with a 32): the caller derives its bounds from the
    # float32 run's distance from the float64 one.
    p32 = {n: params[n].detach().to(torch.float32).requires_grad_(True) for n in order}
    for suffix, p in (("", params), ("32", p32)):
        ce, aux, z, logits, grads = run(cfg, p, order, inputs, targets)
        np.array([ce.item()], dtype="<f8").tofile(os.path.join(out_dir, "loss%s.f64" % suffix))
        np.array([aux.item(), z.item()], dtype="<f8").tofile(os.path.join(out_dir, "router%s.f64" % suffix))
        logits.detach().numpy().astype("<f8").tofile(os.path.join(out_dir, "logits%s.f64" % suffix))
        grads.astype("<f8").tofile(os.path.join(out_dir, "grads%s.f64" % suffix))


if __name__ == "__main__":
    main()
