"""train.precision = bf16 in a float64 training step, for train_reference.py.

docs/MODEL.md "Precision": every matrix product rounds each element of its two
operands to bf16 (through float32, as meshtrain holds them, then round to
nearest even), forward and backward: Y = X·Wᵀ, dX = dY·W and dW += dYᵀ·X each
round both of their operands; everything else (norms, softmax statistics,
SwiGLU, the loss, the optimizer) is unrounded, here float64. The products are
exact in float64 (a bf16 × bf16 product has 16 significant bits, a sum of 64 of
them keeps every bit meshtrain's fp32 sum can hold and more), so what remains
between this run and meshtrain's is the fp32 accumulation and the operands
that fp32's own rounding moves across a bf16 rounding boundary (docs/PARALLELISM.md
"How the bounds are derived").

Attention (one 64 × 64 tile: seq_len <= 64), as the blockwise kernel does it:
forward O = bf16(P̃)·bf16(V) / l with P̃ = exp(scale·bf16(Q)·bf16(K)ᵀ − m), m the
row maximum and l the row sum of the unrounded P̃; backward with P = exp(scale·S −
lse) normalised: dP = bf16(dO)·bf16(V)ᵀ, dV = bf16(P)ᵀ·bf16(dO), dS = P∘(dP −
rowsum(dO∘O))·scale, dQ = bf16(dS)·bf16(K), dK = bf16(dS)ᵀ·bf16(Q).
"""
import torch

TILE = 64


def to_bf16(x):
    return x.to(torch.float32).to(torch.bfloat16).to(torch.float64)


def _sum_to(g, shape):
    """g summed over the leading dimensions that broadcasting added (a weight under a batch)."""
    while g.dim() > len(shape):
        g = g.sum(0)
    return g


class MatmulBf16(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return to_bf16(a) @ to_bf16(b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ra, rb, rg = to_bf16(a), to_bf16(b), to_bf16(g)
        return _sum_to(rg @ rb.transpose(-1, -2), a.shape), _sum_to(ra.transpose(-1, -2) @ rg, b.shape)


def matmul(a, b):
    return MatmulBf16.apply(a, b)


def matmul_unrounded_dy(a, b):
    """A bug for train_reference.py --first-step: the operands rounded, but the backward's dY
    used unrounded (a straight-through rounding: autograd's products of the rounded operands)."""
    ra = a + (to_bf16(a) - a).detach()
    rb = b + (to_bf16(b) - b).detach()
    return ra @ rb


class AttentionBf16(torch.autograd.Function):
    """q, k, v [B, H, T, D] (after RoPE, kv heads repeated); causal; returns O [B, H, T, D]."""

    @staticmethod
    def forward(ctx, q, k, v):
        T, D = q.shape[-2], q.shape[-1]
        scale = 1.0 / D ** 0.5
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        s = (to_bf16(q) @ to_bf16(k).transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))
        m = s.amax(-1, keepdim=True)
        e = (s - m).exp()
        l = e.sum(-1, keepdim=True)
        o = (to_bf16(e) @ to_bf16(v)) / l
        ctx.save_for_backward(q, k, v, o, m + l.log())
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        T, D = q.shape[-2], q.shape[-1]
        scale = 1.0 / D ** 0.5
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        s = (to_bf16(q) @ to_bf16(k).transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))
        p = (s - lse).exp()
        rdo = to_bf16(do)
        dp = rdo @ to_bf16(v).transpose(-1, -2)
        dv = to_bf16(p).transpose(-1, -2) @ rdo
        ds = to_bf16(p * (dp - (do * o).sum(-1, keepdim=True)) * scale)
        return ds @ to_bf16(k), ds.transpose(-1, -2) @ to_bf16(q), dv


def core(q, k, v):
    """llama_reference.forward's attention core."""
    return AttentionBf16.apply(q, k, v)
