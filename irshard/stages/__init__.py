"""The staged pipeline, modelled on JAX's `Traced -> Lowered -> Compiled`:
trace, lower, propagate, partition, compile (`staged`), the program as
every stage declares it (`declared`), a compiled stage's report read
(`reading`), a function the user jitted lowered as JAX lowers it
(`lowerings`), StableHLO from `.mlir` files
as programs (`irfile`), where each input and output of the executable lives
(`placing`), and what the commands take from the stages: the IR asked for,
the report of the stage read (`output`) and what the HTML page shows of
the program (`pageparts`).

May import every package below it: core, backend, xla, timemodel, hardware,
reporting, collectives, ir, loading.
"""
