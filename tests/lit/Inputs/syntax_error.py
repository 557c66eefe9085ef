# A file that does not parse (used by error_usage.py).

def f(a: "f32[4]"):
    return (a +
