"""MLIR modules: the Shardy annotation irshard attaches (`annotation`), other
exporters' shardings as Shardy's (`gspmd`), pass pipelines of irshard's and
Shardy's passes (`pipeline`) and `irshard opt` (`opt`, its diagnostics
and their verification in `diagnostics`). irshard's own passes
live in `irshard.passes` and are reached through its registry.

May import core, backend, xla, timemodel, hardware, reporting, collectives.
"""
