#!/usr/bin/env python3
"""An independent Llama in PyTorch (float64), the oracle of meshtrain's model tests.

Written from Hugging Face LlamaForCausalLM's semantics: RMSNorm, rotate-half
RoPE, grouped-query attention (kv head g serves query heads g*r .. g*r+r-1),
SwiGLU MLP, optional tied embeddings, cross-entropy mean over the tokens whose
target is not -1.

usage: llama_reference.py MODEL_DIR TOKENS_FILE B T OUT_DIR [bf16]
  TOKENS_FILE holds int32 inputs [B, T] then int32 targets [B, T].
  Writes OUT_DIR/loss.f64 (1 value), OUT_DIR/logits.f64 ([B, T, V]) and
  OUT_DIR/grads.f64 (every parameter's gradient, in the file order of
  model.safetensors, flattened and concatenated), and loss32.f64,
  logits32.f64 and grads32.f64: the same from the model in float32.
  With bf16, the forward only (loss and logits) under docs/MODEL.md's
  "Precision" rule: every matrix product's two operands rounded to bf16
  (through float32, as the C++ side holds them, then torch's round-to-nearest-
  even cast), the product and everything else in float64; attention's
  probabilities rounded unnormalised, exp(s - rowmax), then divided by the sum
  of the unrounded ones (as a blockwise kernel with one key tile does).
Exit status 3 when torch is not installed (the caller skips).
"""
import json
import math
import os
import struct
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(3)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    tensors = {}
    order = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    for name in order:
        meta = header[name]
        assert meta["dtype"] == "F32", meta
        b, e = meta["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype="<f4").reshape(meta["shape"])
        tensors[name] = torch.tensor(arr.astype(np.float64), requires_grad=True)
    return order, tensors


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_frequencies(cfg, T, D):
    """Inverse frequencies and the cos/sin factor under config.json's rope_scaling
    (Hugging Face semantics, docs/MODEL.md), for a sequence of T tokens."""
    theta = cfg.get("rope_theta", 10000.0)
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    exponents = torch.arange(0, D, 2, dtype=torch.float64) / D
    inv = 1.0 / (theta ** exponents)
    L0 = rs.get("original_max_position_embeddings", cfg["max_position_embeddings"])
    if kind == "default":
        return inv, 1.0
    f = rs["factor"]
    if kind == "linear":
        return inv / f, 1.0
    if kind == "dynamic":
        if T <= L0:
            return inv, 1.0
        base = theta * ((f * T / L0) - (f - 1)) ** (D / (D - 2))
        return 1.0 / (base ** exponents), 1.0
    if kind == "yarn":
        def turns_dim(r):  # the pair index whose frequency turns r times over L0 positions
            return (D * math.log(L0 / (r * 2 * math.pi))) / (2 * math.log(theta))
        low = max(math.floor(turns_dim(rs.get("beta_fast", 32))), 0)
        high = min(math.ceil(turns_dim(rs.get("beta_slow", 1))), D - 1)
        if low == high:
            high += 0.001
        interp = ((torch.arange(D // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        scale = rs.get("attention_factor") or (0.1 * math.log(f) + 1.0 if f > 1 else 1.0)
        return (inv / f) * interp + inv * (1 - interp), scale
    if kind == "llama3":
        lo, hi = rs["low_freq_factor"], rs["high_freq_factor"]
        L0 = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        out = torch.where(wavelen > L0 / lo, inv / f, inv)
        smooth = (L0 / wavelen - lo) / (hi - lo)
        mid = ~(wavelen < L0 / hi) & ~(wavelen > L0 / lo)
        return torch.where(mid, (1 - smooth) * out / f + smooth * out, out), 1.0
    raise SystemExit(f"unknown rope_scaling type {kind}")


def rope(x, inv, scale):
    # x [B, heads, T, D]; positions 0..T-1
    T, D = x.shape[-2], x.shape[-1]
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = (emb.cos() * scale).to(x.dtype), (emb.sin() * scale).to(x.dtype)  # tables in float64, as ours
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def to_bf16(x):
    return x.to(torch.float32).to(torch.bfloat16).to(torch.float64)


def matmul64(a, b):
    return a @ b


def matmul_bf16(a, b):
    return to_bf16(a) @ to_bf16(b)


def attend64(s, v, mm):
    return mm(s.softmax(-1), v)


def attend_bf16(s, v, mm):
    e = (s - s.amax(-1, keepdim=True)).exp()
    return mm(e, v) / e.sum(-1, keepdim=True)


def forward(cfg, p, inputs, mm=matmul64, attend=attend64, drop=None, moe=None, core=None):
    """Logits [B, T, V]. drop(layer, site, x), where given, is training dropout:
    of the attention probabilities ("attn", [B, H, T, T]) and of the o_proj and
    down_proj outputs before they join the residual stream ([B, T, C]).
    moe(layer, h, mm), where given, is the mixture of experts in place of the
    MLP ([B, T, C], no dropout on it), None for a dense layer (train_moe.py).
    core(q, k, v), where given, is the causal attention from q and k after RoPE
    and the repeated kv heads ([B, H, T, D], train_bf16.py)."""
    B, T = inputs.shape
    C = cfg["hidden_size"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    D = C // H
    eps = cfg["rms_norm_eps"]
    inv, scale = rope_frequencies(cfg, T, D)
    x = p["model.embed_tokens.weight"][inputs]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for layer in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{layer}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        q = mm(h, p[pre + "self_attn.q_proj.weight"].T).view(B, T, H, D).transpose(1, 2)
        k = mm(h, p[pre + "self_attn.k_proj.weight"].T).view(B, T, KV, D).transpose(1, 2)
        v = mm(h, p[pre + "self_attn.v_proj.weight"].T).view(B, T, KV, D).transpose(1, 2)
        q, k = rope(q, inv, scale), rope(k, inv, scale)
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        if core is not None:
            a = core(q, k, v)
        else:
            s = mm(q, k.transpose(-1, -2)) / (D ** 0.5)
            s = s.masked_fill(~mask, float("-inf"))
            a = attend(s, v, mm) if drop is None else mm(drop(layer, "attn", s.softmax(-1)), v)
        a = a.transpose(1, 2).reshape(B, T, H * D)
        o = mm(a, p[pre + "self_attn.o_proj.weight"].T)
        x = x + (o if drop is None else drop(layer, "o_proj", o))
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        y = moe(layer, h, mm) if moe is not None else None
        if y is not None:
            x = x + y
            continue
        g = mm(h, p[pre + "mlp.gate_proj.weight"].T)
        u = mm(h, p[pre + "mlp.up_proj.weight"].T)
        y = mm(F.silu(g) * u, p[pre + "mlp.down_proj.weight"].T)
        x = x + (y if drop is None else drop(layer, "down_proj", y))
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else p["lm_head.weight"]
    return mm(x, head.T)


def loss_and_logits(cfg, params, inputs, targets, mm=matmul64, attend=attend64):
    logits = forward(cfg, params, inputs, mm, attend)
    V = logits.shape[-1]
    valid = int((targets != -1).sum())
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1, reduction="sum") / valid
    return loss, logits


def write_f64(out_dir, name, values):
    np.asarray(values, dtype="<f8").tofile(os.path.join(out_dir, name))


def main():
    model_dir, tokens_path, B, T, out_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    order, params = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    tok = np.fromfile(tokens_path, dtype="<i4")
    inputs = torch.tensor(tok[: B * T].reshape(B, T), dtype=torch.long)
    targets = torch.tensor(tok[B * T: 2 * B * T].reshape(B, T), dtype=torch.long)
    bf16 = len(sys.argv) > 6 and sys.argv[6] == "bf16"
    loss, logits = loss_and_logits(cfg, params, inputs, targets, *((matmul_bf16, attend_bf16) if bf16 else ()))
    os.makedirs(out_dir, exist_ok=True)
    write_f64(out_dir, "loss.f64", [loss.item()])
    write_f64(out_dir, "logits.f64", logits.detach().numpy())
    if bf16:
        return
    loss.backward()
    write_f64(out_dir, "grads.f64", np.concatenate([params[n].grad.numpy().reshape(-1) for n in order]))
    # The same model in float32, PyTorch's own kernels: its distance from the
    # float64 run is the problem's rounding error at fp32, from which the
    # caller derives its bounds (an fp32 implementation of the same math).
    p32 = {n: params[n].detach().to(torch.float32).requires_grad_(True) for n in order}
    loss32, logits32 = loss_and_logits(cfg, p32, inputs, targets)
    loss32.backward()
    write_f64(out_dir, "loss32.f64", [loss32.item()])
    write_f64(out_dir, "logits32.f64", logits32.detach().numpy())
    write_f64(out_dir, "grads32.f64", np.concatenate([p32[n].grad.numpy().reshape(-1) for n in order]))


if __name__ == "__main__":
    main()
