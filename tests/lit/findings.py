# A constraint moves `a + b` from its operands' sharding (y,_,x) to
# (_,x+y,_): XLA's partitioner cannot get there by an all-to-all and
# replicates the whole tensor. The warning it logs becomes a finding at the
# user's line, in mesh axes; `--budget remat==0` fails on it.
# RUN: irshard compile %s --mesh x=4,y=2 | filecheck %s
# RUN: %exit 1 irshard compile %s --mesh x=4,y=2 --budget remat==0 | filecheck %s --check-prefix=BUDGET
# RUN: irshard compile %s --mesh x=4,y=2 --explain | filecheck %s --check-prefix=WHY
# RUN: irshard compile %s --mesh x=4,y=2 --format json | filecheck %s --check-prefix=JSON

# CHECK: all-gather  all-gather{{(\.[0-9]+)?}}  f32[4,16,8]
# CHECK: findings: 1
# CHECK-NEXT: involuntary-remat  add at findings.py:34 (f): from y,_,x to _,x+y,_ by replicating the whole tensor

# BUDGET: budgets
# BUDGET: remat==0   1  EXCEEDED

# WHY: reads add at findings.py:34 (f) sharded y,_,x; all-gather{{(\.[0-9]+)?}} at findings.py:34 (f) gets it y,_,_
# WHY-NEXT: x from input a
# WHY-NEXT: XLA could not reshard add from y,_,x to _,x+y,_ directly and replicates the whole tensor (an involuntary full rematerialization, see findings)

# JSON: "findings": [
# JSON-NEXT: {
# JSON-NEXT: "kind": "involuntary-remat",
# JSON-NEXT: "from": "y,_,x",
# JSON-NEXT: "to": "_,x+y,_",
# JSON-NEXT: "op": "add",

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def f(a: "f32[8@y,16,8@x]", b: "f32[8@y,16,8@x]"):
    c = jax.lax.with_sharding_constraint(a + b, P(None, ("x", "y"), None))
    return jnp.tanh(c) * 2
