# A collective in a scanned layer runs once per layer.
# RUN: irshard compile %s --mesh tp=2 | filecheck %s

import jax


def layers(w: "f32[12,8,16@tp]", x: "f32[4,8]"):
    def layer(h, w):
        return jax.numpy.tanh(h @ w) @ w.T, None
        # CHECK: all-reduce  {{[a-z_.0-9-]+}}  f32[4,8]  128  128  tp  2  12  {{[a-z]+ +[0-9.]+ [nmu]?s}}  scan_trip_count.py:[[# @LINE - 1]] (layers.<locals>.layer)
    return jax.lax.scan(layer, x, w)[0]
