"""The Flax lm1b training step's habits, without Flax: a train state of
parameters and optimizer moments, `jax.jit(train_step, static_argnums=2,
donate_argnums=0)` with a config object of ints and a callable as the
static argument (a NamedTuple: a pytree of ints and a function), and a
mesh of (data, model) axes."""

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp


def learning_rate(step):
    return 1e-3 / (1 + step)


class Config(NamedTuple):
    """Hashable (a static argument), and a pytree of ints and a callable."""
    vocab: int = 128
    embed: int = 64
    hidden: int = 256
    learning_rate_fn: Callable[[jax.Array], jax.Array] = learning_rate


def apply_model(params, tokens):
    x = params["embed"][tokens]
    x = x + jax.nn.relu(x @ params["mlp"]["wi"]) @ params["mlp"]["wo"]
    return x @ params["embed"].T


def loss_fn(params, batch):
    logits = apply_model(params, batch["inputs"])
    labels = jax.nn.one_hot(batch["targets"], logits.shape[-1])
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), -1))


def train_step(state, batch, config):
    grads = jax.grad(loss_fn)(state["params"], batch)
    lr = config.learning_rate_fn(state["step"])
    mu = jax.tree.map(lambda m, g: 0.9 * m + g, state["mu"], grads)
    params = jax.tree.map(lambda p, m: p - lr * m, state["params"], mu)
    return {"params": params, "mu": mu, "step": state["step"] + 1}


p_train_step = jax.jit(train_step, static_argnums=2, donate_argnums=0)


def args():
    config = Config()
    f32 = jnp.float32
    params = {"embed": jax.ShapeDtypeStruct((config.vocab, config.embed), f32),
              "mlp": {"wi": jax.ShapeDtypeStruct((config.embed, config.hidden), f32),
                      "wo": jax.ShapeDtypeStruct((config.hidden, config.embed), f32)}}
    state = {"params": params, "mu": params,
             "step": jax.ShapeDtypeStruct((), jnp.int32)}
    batch = {"inputs": jax.ShapeDtypeStruct((16, 32), jnp.int32),
             "targets": jax.ShapeDtypeStruct((16, 32), jnp.int32)}
    return state, batch, config
