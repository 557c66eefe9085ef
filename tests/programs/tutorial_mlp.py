"""The JAX tutorial's MLP ("Training a simple neural network"): parameters
a list of (W, b) tuples, a vmapped predict, a jitted update step."""
import jax
import jax.numpy as jnp
from jax import random
from jax.scipy.special import logsumexp

LAYER_SIZES = [784, 512, 512, 10]
STEP_SIZE = 0.01


def random_layer_params(m, n, key, scale=1e-2):
    w_key, b_key = random.split(key)
    return scale * random.normal(w_key, (n, m)), scale * random.normal(b_key, (n,))


def init_network_params(sizes, key):
    keys = random.split(key, len(sizes))
    return [random_layer_params(m, n, k) for m, n, k in zip(sizes[:-1], sizes[1:], keys)]


def predict(params, image):
    activations = image
    for w, b in params[:-1]:
        activations = jax.nn.relu(jnp.dot(w, activations) + b)
    final_w, final_b = params[-1]
    logits = jnp.dot(final_w, activations) + final_b
    return logits - logsumexp(logits)


batched_predict = jax.vmap(predict, in_axes=(None, 0))


def loss(params, images, targets):
    return -jnp.mean(batched_predict(params, images) * targets)


@jax.jit
def update(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return [(w - STEP_SIZE * dw, b - STEP_SIZE * db)
            for (w, b), (dw, db) in zip(params, grads)]


def args():
    params = jax.eval_shape(lambda: init_network_params(LAYER_SIZES, random.key(0)))
    return (params, jax.ShapeDtypeStruct((128, 784), jnp.float32),
            jax.ShapeDtypeStruct((128, 10), jnp.float32))
