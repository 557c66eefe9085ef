"""A GShard mixture-of-experts layer in flaxformer's style: top-1 routing
to a dispatch mask, tokens sent to their experts by reshapes, swapaxes and
sharding constraints (the all-to-alls), experts mapped with
`vmap(spmd_axis_name="expert")`, the way back the same. The layer computes
in bfloat16 (its dispatched activations are bf16), the router in f32."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

wsc = jax.lax.with_sharding_constraint

EXPERTS, CAPACITY = 4, 4


def expert_mlp(params, x):
    return jax.nn.gelu(x @ params["wi"]) @ params["wo"]


def route(router, tokens):
    """[G, T, E, C] dispatch mask and combine weights (top-1)."""
    logits = jnp.einsum("gtm,me->gte", tokens.astype(jnp.float32), router)
    probs = jax.nn.softmax(logits)
    mask = jax.nn.one_hot(jnp.argmax(probs, -1), EXPERTS)
    position = jnp.sum((jnp.cumsum(mask, axis=1) - 1) * mask, -1).astype(jnp.int32)
    dispatch = mask[..., None] * jax.nn.one_hot(position, CAPACITY)[..., None, :]
    return dispatch, dispatch * probs[..., None]


def moe_layer(params, tokens):
    groups, _, model = tokens.shape
    dispatch, combine = route(params["router"], tokens)
    x = jnp.einsum("gtm,gtec->gecm", tokens, dispatch.astype(tokens.dtype))
    x = wsc(x, P("expert", None, None, None))
    x = x.reshape(EXPERTS, groups // EXPERTS, EXPERTS, CAPACITY, model)
    x = jnp.swapaxes(x, 0, 2)
    x = wsc(x, P("expert", None, None, None, None))
    x = x.reshape(EXPERTS, groups * CAPACITY, model)
    y = jax.vmap(expert_mlp, spmd_axis_name="expert")(params["experts"], x)
    y = y.reshape(EXPERTS, groups // EXPERTS, EXPERTS, CAPACITY, model)
    y = jnp.swapaxes(y, 0, 2)
    y = wsc(y, P("expert", None, None, None, None))
    y = y.reshape(groups, EXPERTS, CAPACITY, model)
    y = wsc(y, P("expert", None, None, None))
    return jnp.einsum("gecm,gtec->gtm", y, combine.astype(y.dtype))


def args():
    bf16 = jnp.bfloat16
    return ({"router": jax.ShapeDtypeStruct((16, EXPERTS), jnp.float32),
             "experts": {"wi": jax.ShapeDtypeStruct((EXPERTS, 16, 32), bf16),
                         "wo": jax.ShapeDtypeStruct((EXPERTS, 32, 16), bf16)}},
            jax.ShapeDtypeStruct((8, 16, 16), bf16))
