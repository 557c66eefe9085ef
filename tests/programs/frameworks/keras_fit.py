"""A Keras 3 model trained with `fit` on JAX, sharded as Keras' distribution
guide shards one: a `ModelParallel` distribution whose `LayoutMap` splits the
dense kernels over `model` and the batch over `batch`."""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402

mesh = keras.distribution.DeviceMesh(
    (2, 2), ("batch", "model"), keras.distribution.list_devices()[:4])
layouts = keras.distribution.LayoutMap(mesh)
layouts[".*up/kernel"] = (None, "model")
layouts[".*down/kernel"] = ("model", None)
keras.distribution.set_distribution(keras.distribution.ModelParallel(
    layout_map=layouts, batch_dim_name="batch"))

model = keras.Sequential([
    keras.Input((32,)),
    keras.layers.Dense(128, activation="relu", name="up"),
    keras.layers.Dense(8, name="down"),
])
model.compile(optimizer="adam", loss="mse")


def batch():
    return (np.ones((16, 32), np.float32), np.ones((16, 8), np.float32))
