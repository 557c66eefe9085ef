"""Programs the CPU mesh's time model was never fitted to, for
`benchmarks/timemodel.py --heldout`: each a step as real models write it,
sized to run in milliseconds on a 2-core host, sharded as its comment says.
Their arguments are abstract (`jax.ShapeDtypeStruct`): `irshard run` draws
seeded values for them.

  mlp_grad       a 2-layer MLP's loss gradient, 64x512 batch, 512x2048
                 weights (FSDP: batch and weights over `dp`)
  attention      one attention layer's gradient, 8 heads of 64, 256 tokens
                 (heads over `tp`, batch over `dp`)
  conv_grad      a 3-layer CNN's gradient on 32x32x16 images (batch over `dp`)
  scan_blocks    4 residual MLP blocks under `lax.scan` with layer norm,
                 the gradient (batch over `dp`, hidden over `tp`)
  embed_xent     an embedding lookup and a softmax cross-entropy over a
                 vocabulary of 8192 (vocabulary over `tp`, batch over `dp`)
  gelu_stream    a chain of elementwise GELUs over 4M floats (over `dp`):
                 memory-bound
"""

import jax
import jax.numpy as jnp

f32 = jnp.float32


def _shape(*dims):
    return jax.ShapeDtypeStruct(dims, f32)


def mlp_grad(w1, w2, x, y):
    def loss(w1, w2):
        h = jax.nn.relu(x @ w1)
        return jnp.mean((h @ w2 - y) ** 2)
    return jax.grad(loss, argnums=(0, 1))(w1, w2)


def mlp_grad_args():
    return (_shape(512, 2048), _shape(2048, 512), _shape(64, 512), _shape(64, 512))


def attention(wq, wk, wv, wo, x):
    def loss(wq, wk, wv, wo):
        q = jnp.einsum("btd,dhk->bthk", x, wq)
        k = jnp.einsum("btd,dhk->bthk", x, wk)
        v = jnp.einsum("btd,dhk->bthk", x, wv)
        s = jnp.einsum("bthk,bshk->bhts", q, k) / 8.0
        p = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum("bhts,bshk->bthk", p, v)
        return jnp.mean(jnp.einsum("bthk,hkd->btd", o, wo) ** 2)
    return jax.grad(loss, argnums=(0, 1, 2, 3))(wq, wk, wv, wo)


def attention_args():
    return (_shape(512, 8, 64), _shape(512, 8, 64), _shape(512, 8, 64),
            _shape(8, 64, 512), _shape(8, 256, 512))


def conv_grad(k1, k2, k3, images):
    def conv(x, k):
        return jax.lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def loss(k1, k2, k3):
        h = jax.nn.relu(conv(images, k1))
        h = jax.nn.relu(conv(h, k2))
        return jnp.mean(conv(h, k3) ** 2)
    return jax.grad(loss, argnums=(0, 1, 2))(k1, k2, k3)


def conv_grad_args():
    return (_shape(3, 3, 16, 32), _shape(3, 3, 32, 32), _shape(3, 3, 32, 16),
            _shape(16, 32, 32, 16))


def scan_blocks(w_in, w_out, x):
    def block(h, ws):
        wi, wo = ws
        n = (h - h.mean(-1, keepdims=True)) / jnp.sqrt(h.var(-1, keepdims=True) + 1e-5)
        return h + jax.nn.gelu(n @ wi) @ wo, None

    def loss(w_in, w_out):
        h, _ = jax.lax.scan(block, x, (w_in, w_out))
        return jnp.mean(h ** 2)
    return jax.grad(loss, argnums=(0, 1))(w_in, w_out)


def scan_blocks_args():
    return (_shape(4, 256, 1024), _shape(4, 1024, 256), _shape(128, 256))


def embed_xent(table, ids, labels):
    def loss(table):
        h = table[ids]                                   # [b, d]
        logits = h @ table.T                             # [b, vocab]
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))
    return jax.grad(loss)(table)


def embed_xent_args():
    return (_shape(8192, 128), jax.ShapeDtypeStruct((64,), jnp.int32),
            jax.ShapeDtypeStruct((64,), jnp.int32))


def gelu_stream(x):
    for _ in range(4):
        x = jax.nn.gelu(x) * 1.01
    return x


def gelu_stream_args():
    return (_shape(4 * 1024 * 1024),)
