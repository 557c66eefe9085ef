"""irshard: see, test and run how a program gets sharded.

The library's entry points are `irshard.program.load_program` (what to
compile), `irshard.stages.trace` (the staged pipeline) and the reports they
produce. Importing this package does not import JAX.
"""

__version__ = "0.1.0"

# The pipeline's stages, in order, and those the collective report can read.
STAGES = ("stablehlo", "propagated", "partitioned", "optimized")
REPORT_STAGES = ("partitioned", "optimized")
