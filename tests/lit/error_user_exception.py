# An exception raised by the user's own function is reported as theirs: their
# file, line and function, and JAX's message.
# RUN: %exit 2 irshard compile %s --mesh x=2 2> %t.err
# RUN: filecheck %s < %t.err

import jax.numpy as jnp


def f(a: "f32[8@x]"):
    b = a.reshape(2, 4)
    return b @ b
    # CHECK: irshard: error: {{.*}}error_user_exception.py:[[# @LINE - 1]]: in f: TypeError: dot_general requires contracting dimensions to have the same shape, got (4,) and (2,).
