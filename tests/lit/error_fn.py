# Choosing the function: unknown names list the candidates; several public
# functions need --fn.
# RUN: %exit 2 irshard compile %s --mesh x=2 2> %t.err
# RUN: filecheck %s --check-prefix=SEVERAL < %t.err
# RUN: %exit 2 irshard compile %s --mesh x=2 --fn h 2> %t.err
# RUN: filecheck %s --check-prefix=UNKNOWN < %t.err

# SEVERAL: irshard: error: {{.*}}error_fn.py defines 2 public functions (f, g); choose one with --fn NAME
# UNKNOWN: irshard: error: no function 'h' in {{.*}}error_fn.py; candidates: f, g


def f(a: "f32[4]"):
    return a


def g(a: "f32[4]"):
    return a


def _helper(a):
    return a
