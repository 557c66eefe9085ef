"""MaxText 0.2.5's train step made from four of its knobs, as `irshard
search --factory make` takes a program factory:

    MAXTEXT_BASE="..." irshard search benchmarks/programs/maxtext_factory.py \\
        --factory make --knob ici_fsdp_parallelism=16,32,64 \\
        --knob ici_tensor_parallelism=1,2,4 --knob remat_policy=minimal,full \\
        --knob per_device_batch_size=4,8,16 --per per_device_batch_size \\
        --mesh own --target tpu-v5p:4x4x4

`MAXTEXT_BASE` holds the rest of the config (space separated `key=value`,
as `benchmarks/tpu_published.py` builds a published row's; default: the
small model of `maxtext_step.py`), its `compile_topology` among them.
`make(**knobs)` builds the step as `train_compile.py` does, on the
topology's mesh, and returns it with its shaped arguments and the context
it lowers in (the mesh and MaxText's logical axis rules). A combination
MaxText rejects (parallelism that does not multiply to the slice's chips)
raises, and the search lists it as invalid with MaxText's reason.

`python maxtext_factory.py --figures K=V ...` prints, as JSON, what
MaxText counts of the step made of those knobs without compiling it: its
parameters and shape, and its TFLOPs per device.
"""

from __future__ import annotations

import json
import os
import sys

import maxtext_step

KNOBS = ("ici_fsdp_parallelism", "ici_tensor_parallelism", "remat_policy",
         "per_device_batch_size")


def overrides(**knobs) -> tuple[str, ...]:
    """`MAXTEXT_BASE` with `knobs` in place of its own values."""
    base = os.environ.get("MAXTEXT_BASE", maxtext_step.DEFAULT_OVERRIDES).split()
    kept = [s for s in base if s.split("=", 1)[0] not in knobs]
    return tuple(kept + [f"{k}={v}" for k, v in knobs.items()])


def make(**knobs):
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        raise TypeError(f"unknown knobs {unknown}; the knobs: {', '.join(KNOBS)}")
    step, shaped_args, _, context, _, _ = maxtext_step.build(overrides(**knobs))
    return step, tuple(shaped_args), context


def figures(**knobs) -> dict:
    import jax
    from flax import nnx
    from maxtext.utils import maxtext_utils
    _, shaped_args, _, _, _, config = maxtext_step.build(overrides(**knobs))
    tflops, _, _ = maxtext_utils.calculate_tflops_training_per_device(config, log=False)
    params = sum(leaf.size for leaf in
                 jax.tree.leaves(shaped_args[0]["model"].filter(nnx.Param)))
    return {"params": int(params), "tflops_per_device": tflops,
            "shape": {"heads": config.num_query_heads,
                      "layers": config.num_decoder_layers,
                      "head_dim": config.head_dim,
                      "length": config.max_target_length,
                      "batch": config.per_device_batch_size}}


if __name__ == "__main__" and sys.argv[1:2] == ["--figures"]:
    given = {}
    for item in sys.argv[2:]:
        key, value = item.split("=", 1)
        given[key] = value
    print(json.dumps(figures(**given)))
