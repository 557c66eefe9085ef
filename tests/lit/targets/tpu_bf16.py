# REQUIRES: libtpu
# A bf16 MLP gradient compiled for a TPU v5e 2x2 slice, on a machine with no
# TPU: the TPU keeps bf16 collectives bf16 (no widening, no note), they cross
# ICI, and the report says whether the step fits in HBM. The all-reduce over
# tp (2 chips, no wraparound on a 2x2 slice): 2 x 1us x (2-1) + 32768 B /
# 4.5e10 B/s = 2.73 us.
# RUN: irshard compile %s --mesh dp=2,tp=2 --grad --target tpu-v5e:2x2 | filecheck %s
# RUN: irshard compile %s --mesh dp=2,tp=2 --grad --target tpu-v5e:2x2 --format json | filecheck %s --check-prefix=JSON

# CHECK: mesh dp=2,tp=2 (4 tpu devices)  target tpu-v5e:2x2  stage optimized
# CHECK: all-reduce {{.*}}bf16[32,512]  32768  32768  tp  2  1  ici  2.73 us  tpu_bf16.py:[[# @LINE + 24]] (loss)
# CHECK: time per run: {{[0-9.]+ us}}, from the tpu-v5e profile
# CHECK: step: {{.*}} simulated = compute {{.*}} + exposed communication
# CHECK: fits in 16.0 GiB HBM: {{[0-9.]+ MiB}}; the step is communication-bound
# CHECK-NOT: note: the

# JSON: "target": {
# JSON-NEXT: "name": "tpu-v5e:2x2",
# JSON-NEXT: "kind": "tpu",
# JSON-NEXT: "profile": "tpu-v5e",
# JSON-NEXT: "estimated": false,
# JSON-NEXT: "topology": [2, 2],
# JSON-NEXT: "slices": 1
# JSON: "link": "ici",
# JSON: "capacity_bytes": 17179869184
# JSON: "roofline": {
# JSON: "bound": "communication",

import jax
import jax.numpy as jnp


def loss(w1: "bf16[512,2048@tp]", w2: "bf16[2048@tp,512]",
         x: "bf16[64@dp,512]", y: "bf16[64@dp,512]"):
    hidden = jax.nn.relu(x @ w1)
    return jnp.mean((hidden @ w2 - y) ** 2)
