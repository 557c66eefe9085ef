"""Reading a compiled module: its collectives and what they cost
(`analysis`, each timed by `irshard.timemodel.links`; the program's own
element types where the backend widened them, `owntypes`), where a device's
memory goes at its peak (`memory`), reports from HLO any frontend wrote
(`dumps`), the partitioner's warnings in user terms (`findings`) and why
each collective exists (`explain`).

May import the packages below it: core, backend, xla, timemodel, hardware,
reporting.
"""
