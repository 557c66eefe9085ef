"""Reading a compiled module: its collectives and what they cost
(`analysis`), one step simulated (`schedule`, each instruction's work
from `costs`), reports from HLO any frontend wrote (`dumps`), the
partitioner's warnings in user terms (`findings`) and why each collective
exists (`explain`).

May import the packages below it: core, backend, xla, hardware, reporting.
"""
