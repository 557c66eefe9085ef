"""A 12-layer decoder-only transformer's training loss, layers scanned.

Weights are stacked along a leading layer axis and applied with
`jax.lax.scan`, as large models are written. Attention heads and the MLP's
hidden units are split over `tp` (Megatron style), the batch over `dp`:

    irshard compile benchmarks/transformer.py --mesh dp=2,tp=4 --grad
"""

import jax
import jax.numpy as jnp

LAYERS, D, HEADS, F, VOCAB = 12, 256, 8, 1024, 1024


def _layer_norm(x):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5)


def _block(x, weights, n_heads=HEADS):
    """One layer (attention, then the MLP) of `n_heads` heads; its model
    width is `x`'s last dimension."""
    wq, wk, wv, wo, w1, w2 = weights
    batch, seq, width = x.shape
    h = _layer_norm(x)
    heads = lambda t: t.reshape(batch, seq, n_heads, width // n_heads)
    q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(width // n_heads)
    mask = jnp.tril(jnp.ones((seq, seq), bool))
    scores = jnp.where(mask, scores, -1e9)
    attention = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores), v)
    x = x + attention.reshape(batch, seq, width) @ wo
    h = _layer_norm(x)
    x = x + jax.nn.gelu(h @ w1) @ w2
    return x, None


def loss(embed: "f32[1024,256]",
         wq: "f32[12,256,256@tp]", wk: "f32[12,256,256@tp]",
         wv: "f32[12,256,256@tp]", wo: "f32[12,256@tp,256]",
         w1: "f32[12,256,1024@tp]", w2: "f32[12,1024@tp,256]",
         tokens: "i32[16@dp,128]"):
    x = embed[tokens]
    x, _ = jax.lax.scan(_block, x, (wq, wk, wv, wo, w1, w2))
    logits = _layer_norm(x) @ embed.T
    targets = jax.nn.one_hot(jnp.roll(tokens, -1, axis=1), VOCAB)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * targets, axis=-1))
