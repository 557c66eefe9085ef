"""A program: a Python file loaded as a module (`loader`), a function's
inputs as pytree leaves bound to types and shardings (`program`), and the
data fed to a run (`data`).

May import `irshard.core` and `irshard.backend`.
"""
