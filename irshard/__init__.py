"""irshard: see, test and run how a program gets sharded.

The library's entry points are `irshard.program.load_program` (what to
compile), `irshard.stages.trace` (the staged pipeline) and the reports they
produce. Importing this package does not import JAX.
"""

__version__ = "0.1.0"
